/**
 * A newcomer signs up a tenant and follows its operation's log: the log says why the tenant
 * waits (no root cluster registered, the engine unavailable) in one line when the wait starts or
 * its reason changes, not one line per retry. What to do about it (register a cluster, install
 * the Pulumi CLI) is the operator's: an operator's key reads it in the log and the tenant's
 * conditions; the tenant's own key reads a plain line instead.
 */
import t from 'tap';
import { ScriptedEngine } from '../../helpers/scripted-engine.ts';
import { Reconciler } from '../../../provisioner/reconciler/reconciler.ts';
import { createTestApi } from '../../helpers/api.ts';
import { until } from '../../../sandbox/until.ts';

t.test('signup with no root cluster registered: the operation log says why the tenant waits, once', async (t) => {
  const api = await createTestApi();
  t.teardown(() => api.close());
  // TEST DOUBLE engine (the reconciler, database and API are real); retries every 50 ms here.
  const engine = new ScriptedEngine();
  const reconciler = new Reconciler({
    pool: api.db.pool,
    engine,
    box: api.services.box,
    pollMs: 50,
    noCapacityRetryMs: 50,
    waitCapMs: 50,
    engineRetryMs: 50,
  });
  await reconciler.start();
  t.teardown(() => reconciler.stop({ graceMs: 0 }));

  const { operationId, apiKey, tenantId } = await api.signup();
  const log = (key = api.operatorKey) =>
    api.as(key).call('GET /v1/operations/:id/log', { params: { id: operationId } });
  const ready = async (key: string) =>
    (await api.as(key).call('GET /v1/tenants/:id', { params: { id: tenantId } })).status.conditions.find(
      (c) => c.type === 'Ready',
    );
  const PLAIN = 'The service is provisioning your runtime; no action is needed from you.';
  const first = await until('a waiting line', 10_000, async () => {
    const l = await log();
    return l.items.length > 0 && l;
  });
  t.equal(first.state, 'queued', 'the operation is still queued');
  t.match(
    first.items[0]?.line,
    /^waiting for a root cluster \(NoCapacity\): no root cluster can take a .* tenant \(no root cluster is registered\); register a cluster/,
    "the operator's key reads the reason and what to do",
  );
  t.equal(
    (await log(apiKey)).items[0]?.line,
    `waiting for a root cluster (NoCapacity): ${PLAIN} It retries by itself.`,
    "the tenant's key reads the reason and a plain line, nothing of what the operator must do",
  );
  t.match(
    await ready(api.operatorKey),
    { reason: 'NoCapacity', message: /register a cluster/ },
    "the operator's view of the condition",
  );
  t.match(await ready(apiKey), { reason: 'NoCapacity', message: PLAIN }, "the tenant's view of the condition");
  const retries = reconciler.stats.waiting;
  await until('five more retries', 10_000, async () => reconciler.stats.waiting >= retries + 5);
  t.equal((await log()).items.length, 1, 'five more retries for the same reason add no line');

  engine.setAvailability({ available: false, message: 'the Pulumi CLI was not found on PATH: install it' });
  const second = await until('a line for the new reason', 10_000, async () => {
    const l = await log();
    return l.items.length > 1 && l;
  });
  t.match(
    second.items[1]?.line,
    /^waiting for the Pulumi engine \(EngineUnavailable\): the Pulumi CLI was not found on PATH/,
    'a new reason is a new line',
  );
  t.notMatch(
    JSON.stringify((await log(apiKey)).items),
    /install|Pulumi CLI/,
    "the tenant's key reads nothing of the engine's remediation in the log",
  );
  const tenantReady = await until('the EngineUnavailable condition', 10_000, async () => {
    const c = await ready(apiKey);
    return c?.reason === 'EngineUnavailable' && c;
  });
  t.equal(tenantReady.message, PLAIN, 'nor in its conditions');
  t.match(await ready(api.operatorKey), { message: /install it/ }, 'while the operator reads the remediation');
  const again = reconciler.stats.waiting;
  await until('five more retries', 10_000, async () => reconciler.stats.waiting >= again + 5);
  t.equal((await log()).items.length, 2, 'and is not repeated either');
});
