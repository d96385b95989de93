import t from 'tap';
import { createHarness, scripted } from './harness.ts';
import { until } from '../../../sandbox/until.ts';

const h = await createHarness();
t.teardown(() => h.close());
await h.addCluster('root-a');

t.test('NOTIFY wakes an idle reconciler at once (polling every 60 s)', async (t) => {
  const engine = scripted();
  const r = await h.reconciler(engine, { pollMs: 60_000 });
  await until('listening', 10_000, async () => r.listening);
  const before = Date.now();
  const { id } = await h.createTenant();
  await until('engine started', 10_000, async () => engine.callsFor(id).length > 0, 5);
  const latency = engine.callsFor(id)[0]!.startedAt - before;
  // Polling would take 60 s; the bound only has to tell a wake-up from a poll on a loaded machine.
  t.ok(latency < 10_000, `spec change → engine start in ${latency} ms (bound checked: < 10 s, the poll is every 60 s)`);
  await r.stop();
});

t.test('with no notifications at all, polling still finds every due tenant', async (t) => {
  const engine = scripted();
  const r = await h.reconciler(engine, { listen: false, pollMs: 100 });
  const ids = [(await h.createTenant()).id, (await h.createTenant()).id, (await h.createTenant()).id];
  await until('all Ready', 5000, async () =>
    (await Promise.all(ids.map((id) => h.tenant(id)))).every((x) => x.phase === 'Ready'),
  );
  t.equal(r.listening, false, 'the reconciler never listened');
  t.ok(r.stats.polls >= 1, 'and found every due tenant by polling');
  await r.stop();
});

t.test('the listener reconnects after losing its connection', async (t) => {
  const engine = scripted();
  const r = await h.reconciler(engine, { pollMs: 60_000 });
  await until('listening', 10_000, async () => r.listening);
  const pollsBefore = r.stats.polls;
  h.notificationsOf(r)!.simulateDisconnect();
  t.equal(r.listening, false);
  await until('listening again', 10_000, async () => r.listening);
  // The reconnect triggers one catch-up look; only a tenant created after it proves that NOTIFY
  // wakes the reconciler again (the next poll is 60 s away).
  await until('the catch-up look after the reconnect', 10_000, async () => r.stats.polls > pollsBefore);
  const { id } = await h.createTenant();
  await until('woken by NOTIFY after the reconnect', 10_000, async () => engine.callsFor(id).length > 0);
  t.ok(
    engine.callsFor(id).length > 0,
    'a tenant created after the reconnect and its catch-up is reconciled within 10 s (the poll is 60 s away)',
  );
  await r.stop();
});

t.test(
  'an unavailable engine: EngineUnavailable condition with install help, no busy loop, resumes when available',
  async (t) => {
    const engine = scripted({
      unavailable: 'the Pulumi CLI was not found on PATH: install the Pulumi CLI 3.181.0 or newer',
    });
    const r = await h.reconciler(engine, { engineRetryMs: 300 });
    const { id, operationId } = await h.createTenant();
    const row = await until('EngineUnavailable', 10_000, async () => {
      const x = await h.tenant(id);
      return x.conditions.some((c) => c.type === 'Ready' && c.reason === 'EngineUnavailable') && x;
    });
    t.match(row.conditions.find((c) => c.type === 'Ready')?.message, /install the Pulumi CLI/);
    t.equal(row.consecutive_failures, 0);
    t.ok(row.next_attempt_at && row.next_attempt_at.getTime() > Date.now(), 'retry scheduled in the future');
    const claims = r.stats.claimed;
    const polls = r.stats.polls;
    await until('five more looks for due tenants', 10_000, () => r.stats.polls >= polls + 5);
    t.ok(r.stats.claimed - claims < 5, 'no busy loop while waiting: fewer claims than looks for due tenants');
    t.equal((await h.operations(id))[0]!.state, 'queued');
    engine.setAvailability({ available: true });
    await until('Ready once the engine is back', 5000, async () => (await h.tenant(id)).phase === 'Ready');
    t.match((await h.operations(id))[0], { id: operationId, state: 'succeeded' });
    t.ok(engine.startCalls >= 2, 'the engine was re-checked');
    await r.stop();
  },
);

t.test(
  'a tenant waiting for capacity is woken by the cluster that can take it, not by its (long) backoff',
  async (t) => {
    const engine = scripted();
    const r = await h.reconciler(engine, { pollMs: 60_000, noCapacityRetryMs: 600_000 });
    await until('listening', 10_000, async () => r.listening);
    const { id } = await h.createTenant({ region: 'far-away' });
    const waiting = await until('NoCapacity', 10_000, async () => {
      const x = await h.tenant(id);
      return x.conditions.some((c) => c.type === 'Ready' && c.reason === 'NoCapacity') && x;
    });
    t.ok(
      waiting.next_attempt_at && waiting.next_attempt_at.getTime() - Date.now() > 500_000,
      'the next try is 10 min away',
    );
    const claims = r.stats.claimed;
    const registered = Date.now();
    await h.addCluster('root-far', { region: 'far-away' });
    await until('Ready on the new cluster', 10_000, async () => (await h.tenant(id)).phase === 'Ready');
    t.ok(Date.now() - registered < 10_000, `Ready ${Date.now() - registered} ms after the cluster was registered`);
    t.ok(r.stats.claimed > claims, 'claimed again after the registration');
    await r.stop();
  },
);
