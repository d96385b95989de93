/**
 * The lease heartbeat is a loop of its own (`lease-heartbeat`, real Postgres): on a database that
 * answers a lease renewal slowly (each renewal held 400 ms, four heartbeat periods), renewals come
 * one after the other, never two at once, and the lease is still renewed; a stop waits for the
 * renewal in flight instead of leaving it running. A timer firing every period would have had
 * four renewals in flight at once and left one behind at stop.
 */
import t from 'tap';
import type pg from 'pg';
import { createHarness, gate, scripted } from './harness.ts';
import { until } from '../../../sandbox/until.ts';

const h = await createHarness();
t.teardown(() => h.close());
await h.addCluster('root-a', { capacity: 100 });

const RENEWAL = /^\s*UPDATE tenants SET lease_expires_at = now\(\) \+/;

/** The test database's pool, with every lease renewal held `delayMs` before it runs; counts them. */
function slowRenewals(pool: pg.Pool, delayMs: number) {
  const seen = { inFlight: 0, most: 0, done: 0 };
  const query = (text: unknown, ...rest: unknown[]): Promise<unknown> => {
    const call = () => (pool.query as (...a: unknown[]) => Promise<unknown>).call(pool, text, ...rest);
    if (typeof text !== 'string' || !RENEWAL.test(text)) return call();
    seen.inFlight += 1;
    seen.most = Math.max(seen.most, seen.inFlight);
    return new Promise((resolve) => setTimeout(resolve, delayMs)).then(call).finally(() => {
      seen.inFlight -= 1;
      seen.done += 1;
    });
  };
  const slow = new Proxy(pool, {
    get(target, prop) {
      if (prop === 'query') return query;
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  return { pool: slow, seen };
}

t.test('a slow lease renewal delays the next one instead of overlapping it; stop waits for it', async (t) => {
  const { pool, seen } = slowRenewals(h.db.pool, 400);
  const g = gate();
  const engine = scripted({ script: () => ({ gate: g.promise }) });
  const r = await h.reconciler(engine, { pool, leaseTtlMs: 5000, heartbeatMs: 100 });
  const { id } = await h.createTenant();
  await until('running', 10_000, async () => engine.callsFor(id).length === 1);
  const first = (await h.tenant(id)).lease_expires_at!;
  await until('four renewals done', 20_000, async () => seen.done >= 4);
  t.equal(seen.most, 1, 'never two renewals in flight at once');
  t.ok((await h.tenant(id)).lease_expires_at!.getTime() > first.getTime(), 'the slow renewals still renewed the lease');
  const status = r.heartbeat.status();
  t.equal(status.name, 'lease-heartbeat', 'the heartbeat is a loop of its own');
  t.ok(status.rounds >= 4 && status.failures === 0, `its rounds are counted (${status.rounds}), none failed`);

  // Stop while a renewal is in flight: the stop waits for it.
  await until('a renewal in flight', 5_000, async () => seen.inFlight === 1);
  g.open();
  await r.stop();
  t.equal(seen.inFlight, 0, 'no renewal is left running once stop() resolved');
  t.equal(r.heartbeat.status().state, 'stopped', 'the heartbeat is stopped with the reconciler');
});
