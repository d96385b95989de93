/**
 * The CLI where a newcomer tripped over it, against the real API on loopback: `runtimes list`
 * takes the tenant like the other list commands; `runtime render` says --out is required;
 * `tenants get` keeps its values in one column whatever the key; `versions list` shows Argo CD's
 * own version beside its chart's, `versions get` one version whole; `fleet list` counts the
 * tenants upgrading and shows ages, not raw timestamps.
 */
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';
import { cliAgainst } from '../../helpers/cli.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { insertCluster } from '../../../provisioner/store/clusters.ts';
import { setTenantStatus } from '../../helpers/tenants.ts';
import { settleTenantOperations } from '../../helpers/operations.ts';

const api = await createTestApi({ env: { PROVISIONER_PUBLIC_URL: 'https://cp.example.test' } });
const url = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

const cli = (args: string[], token = api.adminKey) => cliAgainst(url, token)(args);

const { tenantId } = await api.signup();

t.test('runtimes list takes the tenant positionally, as --tenant, and refuses two different ones', async (t) => {
  const positional = await cli(['runtimes', 'list', tenantId], api.operatorKey);
  t.equal(positional.code, 0, positional.err);
  t.match(positional.out, /^NAME\s+MODE.*\nhosted\s+hosted/, "the tenant's runtimes, without a TENANT column");
  const flag = await cli(['runtimes', 'list', '--tenant', tenantId], api.operatorKey);
  // The AGE column ("1s ago") may tick between the two commands: compare the rest of each line.
  const withoutAge = (out: string) => out.split('\n').map((l) => l.replace(/\s*\S+ ago\s*$|\s*AGE\s*$/, ''));
  t.same(withoutAge(flag.out), withoutAge(positional.out), '--tenant still works, with the same answer');
  const both = await cli(['runtimes', 'list', tenantId, '--tenant', tenantId], api.operatorKey);
  t.equal(both.code, 0, 'the same tenant both ways is fine');
  const other = '00000000-0000-4000-8000-000000000000';
  const conflict = await cli(['runtimes', 'list', tenantId, '--tenant', other], api.operatorKey);
  t.equal(conflict.code, 1, 'two different tenants exit 1');
  t.match(conflict.err, new RegExp(`given twice, as '${tenantId}' and as --tenant '${other}'`), 'naming both');
});

t.test('runtime render without --out says it is required and what for', async (t) => {
  const res = await cli(['runtime', 'render', catalog.versions[0]!.version]);
  t.equal(res.code, 1, 'exit 1');
  t.match(res.err, /^provisioner: runtime render: --out <dir> is required: the folder to write/, 'naming --out');
  const help = await cli(['runtime', 'render', '--help']);
  t.match(help.out, /Usage: provisioner runtime render <version> --out <dir>/, 'the usage line shows --out');
  t.match(help.out, /--out <dir>\s+required:/, 'the option says it is required');
});

t.test('tenants get keeps every value in one column, a long key (vclusterEndpoint) too', async (t) => {
  await setTenantStatus(api.db.pool, tenantId, {
    endpoints: { vclusterEndpoint: 'https://vc.example.test:443', argoCdUrl: 'https://a.example.test/' },
  });
  const res = await cli(['tenants', 'get', tenantId]);
  t.equal(res.code, 0, res.err);
  const head = res.out.split('\nconditions:')[0]!.split('\n');
  t.ok(
    head.some((l) => l.startsWith('vclusterEndpoint:')),
    `the endpoint is shown (${head.join(' | ')})`,
  );
  const columns = new Set(head.map((l) => l.search(/:\s+\S/) + (/:\s+/.exec(l)?.[0].length ?? 0)));
  t.equal(columns.size, 1, `every value starts in the same column:\n${head.join('\n')}`);
  t.match(res.out, /vclusterEndpoint: +https:\/\/vc\.example\.test:443/, 'key and value apart');
});

t.test("versions list shows Argo CD's version and its chart's; versions get shows one version whole", async (t) => {
  const v = catalog.versions.find((x) => x.appVersions)!;
  const list = await cli(['versions', 'list']);
  t.equal(list.code, 0, list.err);
  t.match(list.out, /^VERSION\s+CHANNEL\s+AVAILABILITY\s+DEFAULT\s+RELEASED\s+ARGO CD\s+ARGO CD CHART\s+VCLUSTER/);
  t.match(
    list.out,
    new RegExp(`\\n${v.version}\\s.*\\s${v.appVersions!.argoCd}\\s+${v.components.argoCd}\\s+${v.components.vcluster}`),
    `ARGO CD is Argo CD's version (${v.appVersions!.argoCd}), ARGO CD CHART the chart's (${v.components.argoCd})`,
  );
  const get = await cli(['versions', 'get', v.version]);
  t.equal(get.code, 0, get.err);
  t.match(get.out, new RegExp(`Argo CD: +${v.appVersions!.argoCd} \\(chart ${v.components.argoCd}\\)`), 'Argo CD');
  t.match(get.out, new RegExp(`Argo Workflows: +${v.appVersions!.argoWorkflows}`), 'the other Argo applications');
  t.match(get.out, /availability: +available/, 'its availability');
  t.match(get.out, /from this version to:\n/, 'where a tenant can go from it');
  t.match(get.out, /to this version from:\n/, 'and come to it from');
  const asJson = JSON.parse((await cli(['--json', 'versions', 'get', v.version])).out) as {
    appVersions: Record<string, string>;
    components: Record<string, string>;
    pathsFrom: unknown[];
    pathsTo: unknown[];
  };
  t.same(asJson.appVersions, v.appVersions, '--json: the app versions');
  t.equal(asJson.components.argoCd, v.components.argoCd, '--json: the chart versions');
  t.equal(asJson.pathsFrom.length, catalog.versions.length - 1, '--json: a path to every other version');
  const unknown = await cli(['versions', 'get', '9.9.9']);
  t.equal(unknown.code, 1, 'an unknown version exits 1');
  t.match(unknown.err, /no runtime version '9\.9\.9' in the catalog \(it has /, 'naming the versions there are');
});

t.test('fleet list counts the tenants upgrading and shows ages, not raw timestamps', async (t) => {
  const [from, to] = catalog.versions.map((v) => v.version) as [string, string];
  const cluster = await insertCluster(api.db.pool, {
    name: 'fleet-list-1',
    region: 'eu-1',
    labels: {},
    capacity: 10,
    plans: [],
    kubeconfigEnc: api.services.box.encrypt('x', 'cluster/fleet-list-1'),
  });
  const { tenantId: moving } = await api.signup({ runtimeVersion: from });
  await setTenantStatus(api.db.pool, moving, { clusterId: cluster.id, actualRuntimeVersion: from });
  await settleTenantOperations(api.db.pool, moving);
  const started = await cli(['fleet', 'start', to, '--tenants', moving], api.operatorKey);
  t.equal(started.code, 0, started.err);
  const list = await cli(['fleet', 'list'], api.operatorKey);
  t.equal(list.code, 0, list.err);
  t.match(list.out, /^ID\s+TARGET\s+STATE\s+WAVE\s+UPGRADING\s+SUCCEEDED\s+FAILED\s+PENDING\s+AGE$/m, 'the columns');
  t.notMatch(list.out, /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z/, 'no raw timestamp');
  const row = list.out.split('\n').find((l) => l.includes(to))!;
  t.match(row, /\s\d+(?:s|m\d+s)$/, `the age ends the row (${row})`);
  const asJson = JSON.parse((await cli(['--json', 'fleet', 'list'], api.operatorKey)).out) as {
    items: Array<{ counts: Record<string, number> }>;
  };
  const cells = row.trim().split(/\s+/);
  t.equal(Number(cells[4]), asJson.items[0]!.counts.upgrading, 'UPGRADING is the count of tenants upgrading');
});
