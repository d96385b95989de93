/**
 * The control plane's audit of runtime actions (docs/api.md, "Runtime actions"), with two
 * provisioner replicas on one database and a runtime connected to one of them: one row per action
 * whichever replica the caller reaches (a relayed request is audited once, by the replica that
 * serves it), every spelling of an action path audited, nothing else audited, the row written
 * before the request is forwarded (an audit write that fails means nothing reaches the runtime),
 * and a runtime that cannot be reached recorded with the control plane's error.
 *
 * The runtime here is a test double that answers every request with 200 and counts what it got:
 * the real app-proxy's actions are exercised end to end in test/e2e/app-actions.test.ts.
 */
import t from 'tap';
import http from 'node:http';
import { once } from 'node:events';
import { createTestApi, startReplica } from '../../helpers/api.ts';
import { connectRuntime } from '../../helpers/runtime.ts';
import { createPool } from '../../../provisioner/db/database.ts';
import { main } from '../../../provisioner/cli/main.ts';
import { refuseRuntimeAudits } from '../../helpers/audit.ts';

const a = await createTestApi();
const baseA = await a.app.listen({ port: 0, host: '127.0.0.1' });
const poolB = createPool(a.db.url, 5);
const b = await startReplica(a.config, { pool: poolB, url: a.db.url }, { replicaId: 'replica-b' });
const baseB = await b.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(async () => {
  await b.close();
  await poolB.end();
  await a.close();
});

const tenant = await a.signup();
const unconnected = await a.signup();

/** The runtime double: records each request it receives (and its body) and answers 200 with a JSON object. */
const received: string[] = [];
const bodies: string[] = [];
const runtimeDouble = http
  .createServer((req, res) => {
    received.push(`${req.method ?? ''} ${req.url ?? ''}`);
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      bodies.push(body);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"kind":"Rollout","metadata":{"resourceVersion":"42"}}');
    });
  })
  .listen(0, '127.0.0.1');
await once(runtimeDouble, 'listening');
t.teardown(() => runtimeDouble.close());

const runtime = await connectRuntime(a, baseA, tenant.tenantId, runtimeDouble, 'runtime on a');
t.teardown(() => runtime.client.close());
await a.services.tunnelDirectory.renew();

async function runtimeRows(tenantId: string) {
  const { items } = await a.as(a.operatorKey).call('GET /v1/audit', {
    query: { targetType: 'tenant', targetId: tenantId, limit: 500 },
  });
  return items.filter((r) => r.action.startsWith('runtime.'));
}

async function post(base: string, tenantId: string, key: string, path: string): Promise<Response> {
  return fetch(`${base}/v1/tenants/${tenantId}/runtime${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}` },
  });
}

t.test('an action through either replica is audited once, by the replica that forwards it', async (t) => {
  const direct = await post(baseA, tenant.tenantId, tenant.apiKey, '/api/rollouts/team-a/web/promote');
  t.equal(direct.status, 200, 'the action through the replica holding the tunnel is answered');
  const relayed = await post(baseB, tenant.tenantId, tenant.apiKey, '/api/workflows/team-a/build/terminate');
  t.equal(relayed.status, 200, 'the action through the other replica is relayed and answered');
  t.same(
    received.filter((r) => r.startsWith('POST /api/')),
    ['POST /api/rollouts/team-a/web/promote', 'POST /api/workflows/team-a/build/terminate'],
    'the runtime received each action once',
  );
  const rows = await runtimeRows(tenant.tenantId);
  t.equal(rows.length, 2, 'one audit row per action, none for the relay hop');
  const byAction = new Map(rows.map((r) => [r.action, r]));
  t.match(
    byAction.get('runtime.rollout.promote'),
    {
      actorRole: 'tenant',
      targetType: 'tenant',
      targetId: tenant.tenantId,
      after: { kind: 'Rollout', namespace: 'team-a', name: 'web', status: 200 },
    },
    'the direct action: actor role, tenant, target and the runtime status',
  );
  t.match(
    byAction.get('runtime.workflow.terminate'),
    { after: { kind: 'Workflow', namespace: 'team-a', name: 'build', status: 200 } },
    'the relayed action: recorded with the runtime status',
  );
  t.equal(
    byAction.get('runtime.rollout.promote')?.actor,
    byAction.get('runtime.workflow.terminate')?.actor,
    "both rows name the same actor: the tenant's key",
  );
  const metricsA = await (await fetch(`${baseA}/metrics`)).text();
  t.match(
    metricsA,
    /provisioner_runtime_actions_total\{action="runtime.workflow.terminate",status="200"\} 1/,
    'the replica that forwarded the relayed action counts it',
  );
  t.notMatch(
    await (await fetch(`${baseB}/metrics`)).text(),
    /provisioner_runtime_actions_total\{/,
    'the relaying replica does not count it again',
  );
});

t.test('every spelling of an action path is audited; other requests are not', async (t) => {
  const before = (await runtimeRows(tenant.tenantId)).length;
  const encoded = await post(baseA, tenant.tenantId, tenant.apiKey, '/api/%72ollouts/team-a/w%65b/abort?x=1');
  t.equal(encoded.status, 200, 'the percent-encoded action is forwarded');
  const read = await fetch(`${baseA}/v1/tenants/${tenant.tenantId}/runtime/api/rollouts/team-a/web/promote`, {
    headers: { authorization: `Bearer ${tenant.apiKey}` },
  });
  t.equal(read.status, 200, 'a GET is forwarded');
  const notAnAction = await post(baseA, tenant.tenantId, tenant.apiKey, '/api/runtime');
  t.equal(notAnAction.status, 200, 'a POST to another path is forwarded');
  const rows = await runtimeRows(tenant.tenantId);
  t.equal(rows.length, before + 1, 'only the action was audited');
  t.match(
    rows[0],
    { action: 'runtime.rollout.abort', after: { namespace: 'team-a', name: 'web', status: 200 } },
    'under its decoded target',
  );
});

t.test('when the audit row cannot be written, the action does not reach the runtime', async (t) => {
  t.teardown(await refuseRuntimeAudits(a.db.pool));
  const count = received.length;
  const res = await post(baseA, tenant.tenantId, tenant.apiKey, '/api/workflows/team-a/build/stop');
  t.equal(res.status, 500, 'the caller gets an error');
  t.equal(received.length, count, 'the runtime received nothing');
});

t.test('a runtime that cannot be reached is recorded with the control plane error', async (t) => {
  const res = await post(baseA, unconnected.tenantId, unconnected.apiKey, '/api/applications/argocd/web/sync');
  t.equal(res.status, 503, 'no tunnel: 503');
  const rows = await runtimeRows(unconnected.tenantId);
  t.equal(rows.length, 1, 'the attempt is audited once');
  t.match(
    rows[0],
    {
      action: 'runtime.application.sync',
      after: { kind: 'Application', namespace: 'argocd', name: 'web', status: 503, error: 'RUNTIME_UNREACHABLE' },
    },
    'with the status and code the caller got',
  );
});

t.test('provisioner apps act sends the action with its options and prints the outcome', async (t) => {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(
    [
      '--url',
      baseB,
      '--token',
      tenant.apiKey,
      'apps',
      'act',
      tenant.tenantId,
      'application',
      'argocd',
      'guestbook',
      'sync',
      '--revision',
      'v1.2.3',
      '--prune',
    ],
    { out: (s) => out.push(s), err: (s) => err.push(s), env: {} },
  );
  t.equal(code, 0, `the command succeeds (${err.join(' ')})`);
  t.equal(
    received.at(-1),
    'POST /api/applications/argocd/guestbook/sync',
    'the runtime received the sync of that Application',
  );
  t.same(JSON.parse(bodies.at(-1) ?? ''), { revision: 'v1.2.3', prune: true }, 'with the revision and prune asked for');
  t.match(out.join('\n'), /application argocd\/guestbook: sync done \(resourceVersion 42\)/, 'and says it is done');
  const rows = await runtimeRows(tenant.tenantId);
  t.match(rows[0], { action: 'runtime.application.sync', after: { name: 'guestbook', status: 200 } }, 'audited');
});
