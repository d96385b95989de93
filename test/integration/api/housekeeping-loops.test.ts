/**
 * What outlives its use is deleted by loops under the loop manager (real Postgres, the real
 * services): an Idempotency-Key record past its replay window (a stored signup answer holds an API
 * key) is gone after a round of `idempotency-pruner` while a fresh one stays and still replays;
 * a hybrid runtime removed longer than PROVISIONER_REMOVED_RUNTIME_RETENTION_HOURS is gone after a
 * round of `removed-runtime-purger`, with its revoked key and its tunnel row, its audit rows kept,
 * while a runtime removed recently and a live one stay.
 */
import t from 'tap';
import { createHash, randomUUID } from 'node:crypto';
import { createTestApi, uniqueOrg } from '../../helpers/api.ts';
import type { PeriodicLoop } from '../../../runtime/loops/periodic.ts';
import type { BodyOf } from '../../../provisioner/http/api-client.ts';
import { until } from '../../../sandbox/until.ts';
import { ageIdempotencyKey, storedIdempotencyKeys } from '../../helpers/housekeeping.ts';
import { putHybridTunnelRow, tunnelRows } from '../../helpers/tunnels.ts';
import { markRemovedAgo, runtimeRowIds } from '../../helpers/runtimes.ts';
import { auditActions } from '../../helpers/audit.ts';
import { storedKeys } from '../../helpers/keys.ts';

const api = await createTestApi({ env: { PROVISIONER_PUBLIC_URL: 'https://cp.example.test' } });
t.teardown(() => api.close());

/** Wakes the loop and waits for the round that follows (observable: its round count). */
async function oneRound(loop: PeriodicLoop): Promise<void> {
  const before = loop.status().rounds;
  loop.kick();
  await until(`a round of ${loop.name}`, 10_000, () => loop.status().rounds > before);
  const status = loop.status();
  if (status.consecutiveFailures > 0) throw new Error(`${loop.name} failed: ${status.lastError}`);
}

const digest = (key: string) => createHash('sha256').update(key).digest('hex');

t.test('idempotency records are deleted once past their replay window', async (t) => {
  t.ok(
    api.services.loops.status().some((l) => l.name === 'idempotency-pruner' && l.state === 'running'),
    'the idempotency-pruner runs under the loop manager',
  );
  const oldKey = randomUUID();
  const freshKey = randomUUID();
  const oldOrg = { organization: uniqueOrg('old'), email: 'old@example.com' };
  const freshOrg = { organization: uniqueOrg('fresh'), email: 'fresh@example.com' };
  const signup = (body: BodyOf<'POST /v1/signup'>, key: string) =>
    api.as(null).request('POST /v1/signup', { body, headers: { 'idempotency-key': key } });
  t.equal((await signup(oldOrg, oldKey)).status, 202, 'a signup with a key');
  const fresh = await signup(freshOrg, freshKey);
  t.equal(fresh.status, 202, 'another signup with another key');
  await ageIdempotencyKey(api.db.pool, digest(oldKey), 61 * 60);

  await oneRound(api.services.idempotencyPruner.loop);

  const rows = await storedIdempotencyKeys(api.db.pool);
  t.notOk(
    rows.some((r) => r === digest(oldKey)),
    'the record past the window (with its sealed API key) is gone',
  );
  t.ok(
    rows.some((r) => r === digest(freshKey)),
    'the record within the window stays',
  );
  const replay = await signup(freshOrg, freshKey);
  t.equal(replay.status, 202, 'and still replays its answer');
  t.equal(replay.ok && replay.body.apiKey, fresh.ok && fresh.body.apiKey, 'the same answer');
});

t.test('a hybrid runtime removed longer than the retention is purged with what names it', async (t) => {
  t.equal(api.config.hybrid.removedRetentionHours, 24, 'the default retention is a day');
  const tenant = await api.signup();
  const client = api.as(tenant.apiKey);
  const register = async (name: string) => {
    const res = await client.request('POST /v1/tenants/:id/runtimes', {
      params: { id: tenant.tenantId },
      body: { name, mode: 'hybrid', access: 'tunnel', argo: 'new' },
    });
    if (res.status !== 201 || !res.ok) throw new Error(`registration of ${name} answered ${res.status}`);
    const reg = res.body;
    const redeemed = await api.as(reg.bootstrapToken).call('POST /v1/runtimes/bootstrap', { body: {} });
    return { id: reg.runtime.id, key: redeemed.runtimeToken };
  };
  const remove = async (name: string) => {
    const res = await client.request('DELETE /v1/tenants/:id/runtimes/:name', {
      params: { id: tenant.tenantId, name },
    });
    if (res.status !== 200) throw new Error(`removal of ${name} answered ${res.status}`);
  };
  const old = await register('old');
  const recent = await register('recent');
  const live = await register('live');
  // A tunnel row left behind by a replica that died while it held the old runtime's tunnel.
  await putHybridTunnelRow(api.db.pool, old.id, tenant.tenantId, {
    replicaId: 'gone-replica',
    replicaUrl: 'http://127.0.0.1:1',
    connectedSecondsAgo: 2 * 86_400,
    seenSecondsAgo: 2 * 86_400,
  });
  await remove('old');
  await remove('recent');
  await markRemovedAgo(api.db.pool, old.id, 25 * 3600);
  // The name of a removed runtime may be registered again: the new one is not purged with the old.
  const again = await register('old');

  await oneRound(api.services.removedRuntimePurger.loop);

  const ids = async () => new Set(await runtimeRowIds(api.db.pool, tenant.tenantId));
  const left = await ids();
  t.notOk(left.has(old.id), 'the runtime removed 25 hours ago is gone');
  t.ok(left.has(recent.id), 'the runtime removed just now stays (within the retention)');
  t.ok(left.has(live.id) && left.has(again.id), 'the live runtimes stay, the new one of the same name included');
  const keys = await storedKeys(api.db.pool, { runtimeId: old.id });
  t.equal(keys.length, 0, "its revoked runtime key's row is gone");
  const tunnels = await tunnelRows(api.db.pool, 'hybrid', old.id);
  t.equal(tunnels.length, 0, 'its tunnel row is gone');
  t.same(
    await auditActions(api.db.pool, { targetType: 'runtime', targetId: old.id }),
    ['runtime.register', 'runtime.bootstrap', 'runtime.remove'],
    'its audit rows stay',
  );
  const liveKey = await api.as(live.key).request('GET /v1/whoami');
  t.equal(liveKey.status, 200, "a live runtime's key still works");
  const listed = await client.call('GET /v1/tenants/:id/runtimes', { params: { id: tenant.tenantId } });
  t.same(
    listed.items.map((r) => r.name).sort(),
    ['hosted', 'live', 'old'],
    'the tenant lists its hosted runtime and the live ones',
  );
});
