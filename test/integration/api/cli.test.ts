import t from 'tap';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTestApi } from '../../helpers/api.ts';
import { main } from '../../../provisioner/cli/main.ts';
import { appendLog, appendLogAndNotify } from '../../../provisioner/store/operations.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { createKey } from '../../../provisioner/store/keys.ts';
import { getClusterByName, insertCluster } from '../../../provisioner/store/clusters.ts';
import { EVENTS_PATH, type EventBatch } from '../../../runtime/protocol/events.ts';
import { application, batch, deletion } from '../../helpers/events.ts';
import { until } from '../../../sandbox/until.ts';
import { finishOperations, setOperationState, settleTenantOperations } from '../../helpers/operations.ts';
import { setTenantStatus } from '../../helpers/tenants.ts';
import { auditRows } from '../../helpers/audit.ts';

const api = await createTestApi();
const url = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

async function cli(
  args: string[],
  token = api.adminKey,
  stdin?: string,
): Promise<{ code: number; out: string; err: string; lines: string[] }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['--url', url, '--token', token, ...args], {
    out: (s) => out.push(s),
    err: (s) => err.push(s),
    env: {},
    ...(stdin !== undefined ? { stdin: () => Promise.resolve(stdin) } : {}),
  });
  return { code, out: out.join('\n'), err: err.join('\n'), lines: out };
}

const [v1, v2] = catalog.versions.map((v) => v.version) as [string, string];

t.test('tenants list/get print tables; --json prints the API answer', async (t) => {
  const { tenantId, body } = await api.signup({ runtimeVersion: v1 });
  const list = await cli(['tenants', 'list']);
  t.equal(list.code, 0);
  t.match(list.lines[0], /^ID\s+ORGANIZATION\s+PHASE/);
  t.match(list.out, new RegExp(`${tenantId}\\s+${body.tenant.organization}\\s+Pending`));
  const get = await cli(['--json', 'tenants', 'get', tenantId]);
  t.equal(JSON.parse(get.out).id, tenantId);
  const human = await cli(['tenants', 'get', tenantId]);
  t.match(human.out, /conditions:\nTYPE\s+STATUS\s+REASON/);
});

t.test('upgrade through the CLI; a refused skip exits non-zero with the API code and the path', async (t) => {
  const { tenantId } = await api.signup({ runtimeVersion: v1 });
  await setTenantStatus(api.db.pool, tenantId, { actualRuntimeVersion: v1 });
  const ok = await cli(['tenants', 'upgrade', tenantId, v2], api.operatorKey);
  t.equal(ok.code, 0, ok.err);
  t.match(ok.out, /operations logs [0-9a-f-]+ --follow/);
  const target = catalog.versions
    .map((v) => v.version)
    .find((v) => !catalog.upgradePath(v2, v).allowed && catalog.upgradePath(v2, v).path.length > 1);
  if (!target)
    throw new Error(`precondition: the catalog has a version that ${v2} reaches only through stepping stones`);
  const path = catalog.upgradePath(v2, target).path;
  const refused = await cli(['tenants', 'upgrade', tenantId, target], api.operatorKey);
  t.equal(refused.code, 1, 'a refused upgrade exits 1');
  t.match(refused.err, /UPGRADE_PATH_REFUSED: .*cannot be reached/, 'the error names the code and says why');
  t.match(refused.err, path[0]!, `the error names the first step of the path to follow (${path.join(' → ')})`);
  const unknown = await cli(['tenants', 'get', '00000000-0000-4000-8000-000000000000']);
  t.equal(unknown.code, 1);
  t.match(unknown.err, /TENANT_NOT_FOUND/);
  const unauth = await cli(['tenants', 'list'], 'hrt_admin_' + 'x'.repeat(43));
  t.match(unauth.err, /INVALID_API_KEY/);
  const down = await main(['--url', 'http://127.0.0.1:1', 'tenants', 'list'], {
    out: () => {},
    err: () => {},
    env: {},
  });
  t.equal(down, 3, 'an unreachable API has its own exit code');
});

t.test('suspend, resume, retry, delete, and operations list', async (t) => {
  const { tenantId } = await api.signup();
  for (const verb of ['suspend', 'resume', 'retry', 'delete']) {
    // A retry is for a failing tenant (otherwise it answers the operation under way).
    if (verb === 'retry') await setTenantStatus(api.db.pool, tenantId, { consecutiveFailures: 2 });
    t.equal((await cli(['tenants', verb, tenantId])).code, 0, verb);
  }
  const ops = await cli(['operations', 'list', tenantId]);
  for (const kind of ['create', 'suspend', 'resume', 'retry', 'delete'])
    t.match(ops.out, new RegExp(`\\s${kind}\\s`), kind);
});

t.test('suspend --reason; a suspend, resume or retry that has nothing to do says so and exits 4', async (t) => {
  const { tenantId, operationId: createOp } = await api.signup();
  const opsBefore = async () =>
    (JSON.parse((await cli(['--json', 'operations', 'list', tenantId])).out) as { items: unknown[] }).items.length;

  const resume = await cli(['tenants', 'resume', tenantId]);
  t.equal(resume.code, 4, `resume of a tenant that is not suspended exits 4 (${resume.err})`);
  t.match(resume.out, new RegExp(`^nothing to do: tenant \\S+ \\(${tenantId}\\) is not suspended`), 'and says why');
  t.notMatch(resume.out, /resuming|follow it with/, 'it does not print as if an operation started');

  const retry = await cli(['tenants', 'retry', tenantId]);
  t.equal(retry.code, 4, `retry of a Pending tenant whose create is queued exits 4 (${retry.err})`);
  t.match(
    retry.out,
    new RegExp(
      `nothing to do: tenant \\S+ \\(${tenantId}\\) is Pending, not stalled or failing, and operation ${createOp} is under way`,
    ),
    'and names the operation under way',
  );
  t.equal(await opsBefore(), 1, 'neither queued an operation (the create is the only one)');

  const suspend = await cli(['tenants', 'suspend', tenantId, '--reason', 'invoice 42 unpaid'], api.operatorKey);
  t.equal(suspend.code, 0, `suspend --reason exits 0 (${suspend.err})`);
  t.match(suspend.out, /^suspending .*operation [0-9a-f-]+/, 'it prints the operation it queued');
  const got = JSON.parse((await cli(['--json', 'tenants', 'get', tenantId])).out) as {
    status: { suspension?: { by: string; reason: string | null } };
  };
  t.same(got.status.suspension, { by: 'operator', reason: 'invoice 42 unpaid' }, "the reason is the suspension's");

  const again = await cli(['--json', 'tenants', 'suspend', tenantId], api.operatorKey);
  t.equal(again.code, 4, 'a second suspend exits 4');
  t.equal((JSON.parse(again.out) as { queued: boolean }).queued, false, '--json prints the answer, queued: false');
  t.match(again.err, /nothing to do: tenant .* is already suspended \(by operator\)/, 'and the line goes to stderr');

  await settleTenantOperations(api.db.pool, tenantId);
  const settled = await cli(['tenants', 'resume', tenantId]);
  t.equal(settled.code, 0, `resume of the suspended tenant exits 0 (${settled.err})`);
  await settleTenantOperations(api.db.pool, tenantId);
  const none = await cli(['tenants', 'retry', tenantId]);
  t.equal(none.code, 4, 'retry with no operation under way and no failure exits 4');
  t.match(none.err, /NOTHING_TO_RETRY: .*nothing to retry/, "with the API's NOTHING_TO_RETRY");
});

t.test(
  'a tenant never placed on a cluster is not held to upgrade paths and shows no version it never ran',
  async (t) => {
    const oldest = catalog.versions[0]!.version;
    const far = catalog.versions
      .map((v) => v.version)
      .find((v) => !catalog.upgradePath(oldest, v).allowed && catalog.upgradePath(oldest, v).path.length > 1);
    if (!far)
      throw new Error(`precondition: the catalog has a version that ${oldest} reaches only through stepping stones`);
    const { tenantId } = await api.signup({ runtimeVersion: oldest });
    const suspend = await cli(['tenants', 'suspend', tenantId], api.operatorKey);
    t.equal(suspend.code, 0, suspend.err);
    const up = await cli(['tenants', 'upgrade', tenantId, far], api.operatorKey);
    t.equal(up.code, 0, `a never-installed ${oldest} tenant takes ${far} directly (${up.err})`);
    const ops = JSON.parse((await cli(['--json', 'operations', 'list', tenantId])).out) as {
      items: Array<{ kind: string; fromVersion: string | null; toVersion: string | null }>;
    };
    t.same(
      ops.items.map((o) => [o.kind, o.fromVersion]).sort(),
      [
        ['create', null],
        ['suspend', null],
        ['upgrade', null],
      ],
      `no operation claims to start from ${oldest}, which never ran`,
    );
    const table = await cli(['operations', 'list', tenantId]);
    t.match(table.lines[0], /^ID\s+KIND\s+STATE\s+ATTEMPT\s+FROM\s+TO\s/, 'operations list: FROM is the fifth column');
    t.same(
      table.out
        .split('\n')
        .slice(1)
        .map((l) => l.split(/\s+/)[4]),
      ['-', '-', '-'],
      `operations list shows no FROM version for any of the 3 operations (none ran from ${oldest})`,
    );

    // Placed on a cluster (a first install ran there, and may have created part of it): held again.
    const placed = await api.signup({ runtimeVersion: oldest });
    const cluster = await insertCluster(api.db.pool, {
      name: 'never-installed-1',
      region: 'eu-9',
      labels: {},
      capacity: 5,
      plans: [],
      kubeconfigEnc: api.services.box.encrypt('x', 'cluster/never-installed-1'),
    });
    await setTenantStatus(api.db.pool, placed.tenantId, { clusterId: cluster.id });
    const held = await cli(['tenants', 'upgrade', placed.tenantId, far], api.operatorKey);
    t.equal(held.code, 1, 'a tenant whose first install was placed on a cluster is held to the path');
    t.match(held.err, /UPGRADE_PATH_REFUSED/, 'with the API code');
  },
);

t.test('regions and regions list both list the regions; --json prints the API answer', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'hrt-cli-'));
  const kc = join(dir, 'kubeconfig');
  await writeFile(
    kc,
    'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://203.0.113.11:6443"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n',
  );
  // --force: the server is made up (the probe itself: clusters-add.test.ts).
  const add = await cli([
    'clusters',
    'add',
    'regions-1',
    '--region',
    'ap-9',
    '--capacity',
    '5',
    '--kubeconfig',
    kc,
    '--force',
  ]);
  t.equal(add.code, 0, add.err);
  const bare = await cli(['regions']);
  const list = await cli(['regions', 'list']);
  t.equal(bare.code, 0, bare.err);
  t.equal(list.code, 0, list.err);
  t.match(list.lines[0], /^REGION\s+ACCEPTING/, 'regions list prints a table with a header');
  t.match(list.out, /ap-9\s+true/, 'regions list shows the new region accepting tenants');
  t.equal(bare.out, list.out, '`regions` alone prints the same table as `regions list`');
  const json = await cli(['--json', 'regions', 'list']);
  t.ok(
    (JSON.parse(json.out) as { items: { name: string; accepting: boolean }[] }).items.some(
      (r) => r.name === 'ap-9' && r.accepting,
    ),
    '--json regions list prints the API items, ap-9 accepting',
  );
  const help = await cli(['regions', '--help']);
  t.match(help.out, /list\s+regions and whether they accept new tenants/, 'regions --help names the list command');
});

t.test('clusters add/list/cordon and keys create/revoke', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'hrt-cli-'));
  const kc = join(dir, 'kubeconfig');
  await writeFile(
    kc,
    'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://203.0.113.10:6443"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n',
  );
  t.equal(
    (
      await cli([
        'clusters',
        'add',
        'cli-1',
        '--region',
        'eu-1',
        '--capacity',
        '3',
        '--kubeconfig',
        kc,
        '--label',
        'tier=gold',
        '--force',
      ])
    ).code,
    0,
  );
  t.match((await cli(['clusters', 'list'])).out, /cli-1\s+eu-1\s+0\s+3\s+false\s+all/);
  t.match((await cli(['clusters', 'cordon', 'cli-1'])).out, /cordoned/);
  t.match(
    (await cli(['regions'])).out,
    /eu-1\s+false/,
    'regions: the only cluster of eu-1 is cordoned, so it does not accept tenants',
  );
  const badCap = await cli(['clusters', 'add', 'cli-2', '--region', 'eu-1', '--capacity', 'lots', '--kubeconfig', kc]);
  t.equal(badCap.code, 1);
  t.match(badCap.err, /--capacity must be a whole number/);
  const missingFile = join(dir, 'no-such-kubeconfig.yaml');
  const noFile = await cli([
    'clusters',
    'add',
    'cli-3',
    '--region',
    'eu-1',
    '--capacity',
    '3',
    '--kubeconfig',
    missingFile,
  ]);
  t.equal(noFile.code, 1, 'a missing kubeconfig file exits 1, like the other usage errors');
  t.equal(
    noFile.err,
    `provisioner: --kubeconfig: cannot read the kubeconfig file '${missingFile}': no such file`,
    'the error names the file and says it does not exist, without the raw ENOENT',
  );
  const dirAsFile = await cli(['clusters', 'add', 'cli-3', '--region', 'eu-1', '--capacity', '3', '--kubeconfig', dir]);
  t.match(dirAsFile.err, `'${dir}': it is a directory`, 'a directory given as the kubeconfig is named as one');
  t.notMatch((await cli(['clusters', 'list'])).out, /cli-3/, 'nothing was registered for cli-3');
  const created = await cli(['--json', 'keys', 'create', '--role', 'operator', '--name', 'cli']);
  const { key, info } = JSON.parse(created.out);
  t.equal((await cli(['versions', 'list'], key)).code, 0, 'new key works');
  t.equal((await cli(['keys', 'revoke', info.id])).code, 0);
  t.match((await cli(['clusters', 'list'], key)).err, /INVALID_API_KEY/, 'revoked key is refused');
});

t.test('clusters import registers or updates every cluster of the infra output, idempotently', async (t) => {
  const kubeconfig = (server: string, token: string) =>
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'c', cluster: { server, 'certificate-authority-data': 'Q0E=' } }],
      users: [{ name: 'u', user: { token } }],
      contexts: [{ name: 'c', context: { cluster: 'c', user: 'u' } }],
      'current-context': 'c',
    });
  // What `pulumi stack output clusters --show-secrets --json` prints (infra/root-cluster.ts).
  const output = (capacity: number, token: string) =>
    JSON.stringify([
      {
        name: 'imp-1',
        region: 'eu-west',
        labels: { tier: 'standard' },
        capacity,
        apiServer: 'https://203.0.113.21:6443',
        kubeconfig: kubeconfig('https://203.0.113.21:6443', token),
      },
      {
        name: 'imp-2',
        region: 'us-east',
        labels: {},
        capacity: 100,
        apiServer: 'https://203.0.113.22:6443',
        kubeconfig: kubeconfig('https://203.0.113.22:6443', 'tok-2'),
      },
    ]);
  const first = await cli(['clusters', 'import', '-', '--force'], api.operatorKey, output(200, 'tok-1'));
  t.equal(first.code, 0, first.err);
  t.same(
    first.out.split('\n'),
    ['registered imp-1 (eu-west, capacity 200)', 'registered imp-2 (us-east, capacity 100)'],
    'the first import registers both and says so',
  );
  const audits = async () =>
    (await auditRows(api.db.pool, { targetType: 'cluster' })).filter((r) => r.targetId.startsWith('imp-')).length;
  const auditsAfterFirst = await audits();
  // Without --force: an unchanged kubeconfig is not probed again (its made-up server would time out).
  const again = await cli(['clusters', 'import', '-'], api.operatorKey, output(200, 'tok-1'));
  t.same(again.out.split('\n'), ['unchanged imp-1', 'unchanged imp-2'], 'the same output again changes nothing');
  t.equal(await audits(), auditsAfterFirst, 'and writes no audit row');
  await cli(['clusters', 'cordon', 'imp-1']);
  const changed = await cli(
    ['--json', 'clusters', 'import', '-', '--force'],
    api.operatorKey,
    output(250, 'tok-1-rotated'),
  );
  t.equal(changed.code, 0, changed.err);
  const items = (
    JSON.parse(changed.out) as {
      items: Array<{
        created: boolean;
        changed: string[];
        cluster: { name: string; capacity: number; cordoned: boolean };
      }>;
    }
  ).items;
  t.same(
    items.map((r) => [r.cluster.name, r.created, r.changed]),
    [
      ['imp-1', false, ['capacity', 'kubeconfig']],
      ['imp-2', false, []],
    ],
    'a new capacity and a rotated token are reported as what changed',
  );
  t.equal(items[0]!.cluster.capacity, 250, 'the capacity is updated');
  t.equal(items[0]!.cluster.cordoned, true, 'the cordon an operator set stays');
  const stored = (await auditRows(api.db.pool, { action: 'cluster.update', targetId: 'imp-1' })).map((r) => ({
    before: r.before,
    after: r.after,
  }));
  t.equal(stored.length, 1, 'one audit row for the update');
  t.equal(stored[0]!.after?.kubeconfig, 'replaced', 'the audit row says the kubeconfig was replaced');
  t.notMatch(JSON.stringify(stored), /tok-1/, 'and holds no token');

  const hidden = await cli(
    ['clusters', 'import', '-'],
    api.operatorKey,
    JSON.stringify([{ name: 'imp-3', region: 'x', capacity: 1, kubeconfig: '[secret]' }]),
  );
  t.equal(hidden.code, 1);
  t.match(
    hidden.err,
    /clusters\[0\]\.kubeconfig is hidden .*--show-secrets/,
    'a hidden kubeconfig names --show-secrets',
  );
  const bad = await cli(['clusters', 'import', '-'], api.operatorKey, '{"clusters": []}');
  t.match(bad.err, /stdin: expected a JSON list of clusters/);
  const badCapacity = await cli(
    ['clusters', 'import', '-'],
    api.operatorKey,
    JSON.stringify([{ name: 'imp-3', region: 'x', capacity: 'lots', kubeconfig: 'k' }]),
  );
  t.match(badCapacity.err, /clusters\[0\]\.capacity must be a whole number/);
  t.notMatch((await cli(['clusters', 'list'])).out, /imp-3/, 'nothing was registered from a refused document');
});

t.test('PUT /v1/clusters/:name: a cluster holding tenants keeps its region', async (t) => {
  const { tenantId } = await api.signup();
  const cluster = (await getClusterByName(api.db.pool, 'imp-2'))!;
  await setTenantStatus(api.db.pool, tenantId, { cluster: cluster.name });
  await t.rejects(
    api.as(api.operatorKey).call('PUT /v1/clusters/:name', {
      params: { name: cluster.name },
      body: {
        force: true,
        region: `${cluster.region}-moved`,
        capacity: 5,
        kubeconfig:
          'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://203.0.113.10:6443"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n',
      },
    }),
    { status: 409, code: 'CLUSTER_IN_USE', field: 'region' },
    'the refusal names the code and the field',
  );
  t.equal((await getClusterByName(api.db.pool, cluster.name))?.region, cluster.region, 'nothing was changed');
});

t.test(
  'the log endpoint returns the whole log, and follow streams lines as they are written until the operation ends',
  async (t) => {
    const { operationId } = await api.signup();
    await appendLog(api.db.pool, operationId, [{ line: 'Updating (tenant-x)' }, { line: '+ namespace created' }]);
    const whole = await api.client.call('GET /v1/operations/:id/log', { params: { id: operationId } });
    t.same(
      whole.items.map((l) => l.line),
      ['Updating (tenant-x)', '+ namespace created'],
    );
    t.equal(whole.state, 'queued');
    const after = await api.client.call('GET /v1/operations/:id/log', {
      params: { id: operationId },
      query: { after: whole.items[0]!.seq },
    });
    t.same(
      after.items.map((l) => l.line),
      ['+ namespace created'],
    );

    await setOperationState(api.db.pool, operationId, 'running');
    const printed: string[] = [];
    const errors: string[] = [];
    const following = main(['--url', url, '--token', api.adminKey, 'operations', 'logs', operationId, '--follow'], {
      out: (s) => printed.push(s),
      err: (s) => errors.push(s),
      env: {},
    });
    // Each line is written only once the CLI has printed everything before it: a CLI that prints
    // the backlog and stops (or never reads past it) does not print step 1.
    await until('the CLI printing the backlog', 30_000, () => printed.length >= 2);
    for (let i = 1; i <= 5; i++) {
      await appendLogAndNotify(api.db.pool, operationId, [{ stream: 'engine', line: `step ${i}` }]);
      await until(`the CLI printing step ${i}, written after it started`, 30_000, () => printed.includes(`step ${i}`));
    }
    await finishOperations(api.db.pool, operationId); // the store's write wakes the log's followers
    t.equal(await following, 0, errors.join('\n'));
    t.same(printed, ['Updating (tenant-x)', '+ namespace created', 'step 1', 'step 2', 'step 3', 'step 4', 'step 5']);
    t.match(errors.join('\n'), /ended: succeeded/);

    const other = await api.signup();
    const foreign = await api.as(other.apiKey).request('GET /v1/operations/:id/log', { params: { id: operationId } });
    t.equal(foreign.status, 404, "another tenant cannot read this tenant's log");
  },
);

t.test('apps list/get show what the runtime reported; --watch prints changes as they come', async (t) => {
  const { tenantId, apiKey } = await api.signup();
  const runtimeKey = (await createKey(api.db.pool, { role: 'runtime', tenantId, name: 'reporter', createdBy: 'test' }))
    .key;
  const report = async (items: EventBatch['items']) => {
    const res = await api.request('POST', EVENTS_PATH, { key: runtimeKey, body: batch('reporter-0', items) });
    if (res.statusCode !== 200) throw new Error(`report: ${res.statusCode} ${res.body}`);
  };
  await report([application('guestbook', 10, { health: 'Degraded', sync: 'OutOfSync' }), application('billing', 11)]);

  const list = await cli(['apps', 'list', tenantId], apiKey);
  t.equal(list.code, 0, list.err);
  t.match(list.lines[0], /^NAMESPACE\s+NAME\s+HEALTH\s+SYNC\s+PHASE\s+REVISION\s+AGE/, 'a table with a header');
  t.match(list.out, /argocd\s+guestbook\s+Degraded\s+OutOfSync/, 'the degraded application is listed');
  const degraded = await cli(['apps', 'list', tenantId, '--health', 'Degraded'], apiKey);
  t.equal(degraded.out.split('\n').length, 2, 'only the degraded application with --health Degraded');
  t.match(degraded.out.split('\n')[1], /guestbook/, 'and it is guestbook');
  const asJson = await cli(['--json', 'apps', 'list', tenantId, '--sync', 'Synced'], apiKey);
  t.same(
    (JSON.parse(asJson.out) as { items: { name: string }[] }).items.map((i) => i.name),
    ['billing'],
    '--json prints the API answer, filtered',
  );
  const rollouts = await cli(['apps', 'list', tenantId, '--kind', 'rollout'], apiKey);
  t.equal(rollouts.out.split('\n').length, 1, 'no rollouts: only the header');
  const badKind = await cli(['apps', 'list', tenantId, '--kind', 'secret'], apiKey);
  t.equal(badKind.code, 1, 'an unknown kind exits 1');
  t.match(badKind.err, /kind must be one of: application, rollout, workflow/, 'naming the kinds');

  const get = await cli(['apps', 'get', tenantId, 'application', 'argocd', 'guestbook'], apiKey);
  t.equal(get.code, 0, get.err);
  t.match(get.out, /health:\s+Degraded/, 'get shows the health');
  t.match(get.out, /"project": "default"/, 'and the stored object');
  const missing = await cli(['apps', 'get', tenantId, 'application', 'argocd', 'nope'], apiKey);
  t.equal(missing.code, 1, 'an unknown object exits 1');
  t.match(missing.err, /RUNTIME_OBJECT_NOT_FOUND/, 'with the API code');

  // --watch: the current objects, then each change, until interrupted.
  const abort = new AbortController();
  const out: string[] = [];
  const watching = main(['--url', url, '--token', apiKey, 'apps', 'list', tenantId, '--watch'], {
    out: (s) => out.push(s),
    err: () => {},
    env: {},
    signal: abort.signal,
  });
  const waitFor = (re: RegExp, what: string) =>
    until(`--watch printing ${what}`, 10_000, () => out.some((l) => re.test(l)), 50).catch((err: Error) => {
      throw new Error(`${err.message}; it printed:\n${out.join('\n')}`);
    });
  await waitFor(/UPDATED\s+argocd\s+billing/, 'the current objects');
  await report([application('billing', 20, { health: 'Degraded' })]);
  await waitFor(/UPDATED\s+argocd\s+billing\s+Degraded/, 'the change');
  await report([deletion('Application', 'argocd', 'guestbook', 21)]);
  await waitFor(/DELETED\s+argocd\s+guestbook/, 'the deletion');
  abort.abort();
  t.equal(await watching, 0, '--watch ends cleanly when interrupted');
  t.match(out[0], /^EVENT\s+NAMESPACE\s+NAME/, 'with a header first');
});
