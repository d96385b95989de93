/**
 * The per-key stream limit holds against a burst: 300 opens of one Server-Sent Events route with
 * one key, all sent at once over real sockets, give at most PROVISIONER_SSE_STREAMS_PER_KEY
 * streams and 429 TOO_MANY_STREAMS for the rest, on every stream route. A place is given back on
 * every way out: the client goes away, the route refuses after taking it (404), the key is revoked.
 */
import t, { type Test } from 'tap';
import http from 'node:http';
import { startFleetUpgrade } from '../../helpers/fleet.ts';
import { createTestApi } from '../../helpers/api.ts';
import { insertCluster } from '../../../provisioner/store/clusters.ts';
import { until } from '../../../sandbox/until.ts';
import { markReconciled } from '../../helpers/tenants.ts';
import { settleTenantOperations } from '../../helpers/operations.ts';

const LIMIT = 5;
const BURST = 300;
const api = await createTestApi({ env: { PROVISIONER_SSE_STREAMS_PER_KEY: String(LIMIT) } });
t.teardown(() => api.close());
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
// Each open gets its own connection: the burst reaches the server at once.
const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
t.teardown(() => agent.destroy());

interface Opened {
  status: number;
  code?: string;
  close(): void;
}

/** Opens a stream; resolves on the status line (and, for a refusal, its body's code). */
function open(path: string, key: string, headers: Record<string, string> = {}): Promise<Opened> {
  return new Promise((resolve, reject) => {
    const req = http.get(
      `${base}${path}`,
      { agent, headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream', ...headers } },
      (res) => {
        const status = res.statusCode ?? 0;
        const close = () => req.destroy();
        if (status === 200) {
          res.on('error', () => {});
          resolve({ status, close });
          return;
        }
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => {
          let code: string | undefined;
          try {
            code = (JSON.parse(body) as { error?: { code?: string } }).error?.code;
          } catch {
            code = undefined;
          }
          resolve({ status, ...(code !== undefined ? { code } : {}), close });
        });
      },
    );
    req.on('error', reject);
  });
}

async function keyIdOf(key: string): Promise<string> {
  const { keyId } = await api.as(key).call('GET /v1/whoami');
  if (!keyId) throw new Error('precondition: whoami names the key');
  return keyId;
}

/** Polls (a wait, not a claim about speed) until the key holds no stream on the server. */
async function noStreamsLeft(keyId: string, what: string): Promise<void> {
  await until(`no stream left on the key ${what}`, 60_000, () => api.services.streams.count(keyId) === 0, 50);
}

async function burst(t: Test, path: string, key: string): Promise<void> {
  const keyId = await keyIdOf(key);
  const all = await Promise.all(Array.from({ length: BURST }, () => open(path, key)));
  const opened = all.filter((o) => o.status === 200);
  const refused = all.filter((o) => o.status === 429 && o.code === 'TOO_MANY_STREAMS');
  t.ok(opened.length >= 1, `at least one of ${BURST} concurrent opens of ${path} is a stream (got ${opened.length})`);
  t.ok(
    opened.length <= LIMIT,
    `at most ${LIMIT} (PROVISIONER_SSE_STREAMS_PER_KEY) of ${BURST} concurrent opens are streams (got ${opened.length})`,
  );
  t.equal(opened.length + refused.length, BURST, 'every other open is 429 TOO_MANY_STREAMS');
  t.ok(
    api.services.streams.count(keyId) <= LIMIT,
    `the server counts at most ${LIMIT} streams for the key (counts ${api.services.streams.count(keyId)})`,
  );
  for (const o of all) o.close();
  await noStreamsLeft(keyId, `after the clients of ${path} went away`);
  const again = await open(path, key);
  t.equal(again.status, 200, 'a place is free again once the streams closed');
  again.close();
  await noStreamsLeft(keyId, `after the last client of ${path} went away`);
}

const tenant = await api.signup();

t.test('GET /v1/tenants/:id/changes', (t) => burst(t, `/v1/tenants/${tenant.tenantId}/changes`, tenant.apiKey));

t.test('GET /v1/tenants/events', (t) => burst(t, `/v1/tenants/events`, tenant.apiKey));

t.test('GET /v1/operations/:id/log?follow=1', (t) =>
  burst(t, `/v1/operations/${tenant.operationId}/log?follow=1`, tenant.apiKey),
);

t.test('GET /v1/fleet-upgrades/:id/events', async (t) => {
  await insertCluster(api.db.pool, {
    name: 'burst-root',
    region: 'eu-1',
    labels: {},
    capacity: 100,
    plans: [],
    kubeconfigEnc: api.services.box.encrypt('x', 'cluster/burst-root'),
  });
  const { tenantId } = await api.signup({ runtimeVersion: '1.4.1', plan: 'team' });
  await markReconciled(api.db.pool, tenantId, { cluster: 'burst-root', readyCondition: true });
  await settleTenantOperations(api.db.pool, tenantId, { finishedNow: false });
  const start = await startFleetUpgrade(api.as(api.operatorKey), {
    targetVersion: '1.5.0',
    selector: { tenantIds: [tenantId] },
  });
  const id = start.fleetUpgrade.id;
  await burst(t, `/v1/fleet-upgrades/${id}/events`, api.operatorKey);
});

t.test('a route that refuses after taking a place gives it back (404 on an unknown tenant)', async (t) => {
  const keyId = await keyIdOf(api.operatorKey);
  const unknown = '00000000-0000-4000-8000-000000000000';
  const all = await Promise.all(
    Array.from({ length: BURST }, (_, i) =>
      open(i % 2 ? `/v1/tenants/${unknown}/changes` : `/v1/tenants/events?id=${unknown}`, api.operatorKey),
    ),
  );
  t.equal(
    all.filter((o) => o.status === 404).length + all.filter((o) => o.status === 429).length,
    BURST,
    'each is 404 or 429',
  );
  t.ok(
    all.some((o) => o.status === 404),
    'at least one was refused as 404 (not only 429)',
  );
  await noStreamsLeft(keyId, 'after 404s');
  const streams = await Promise.all(Array.from({ length: LIMIT }, () => open(`/v1/tenants/events`, api.operatorKey)));
  t.same(
    streams.map((s) => s.status),
    Array.from({ length: LIMIT }, () => 200),
    `${LIMIT} (the limit) streams open after the refused burst`,
  );
  for (const s of streams) s.close();
  await noStreamsLeft(keyId, 'after the streams closed');
});

t.test('a revoked key gives back the places of a burst, streams and opens under way alike', async (t) => {
  const { key, info } = await api.client.call('POST /v1/keys', {
    body: { role: 'tenant', name: 'burst', tenantId: tenant.tenantId },
  });
  const keyId = info.id;
  const pending = Array.from({ length: BURST }, () => open(`/v1/tenants/${tenant.tenantId}/changes`, key));
  const revoked = await api.client.request('DELETE /v1/keys/:id', { params: { id: keyId } });
  t.equal(revoked.status, 200, 'the key is revoked');
  const all = await Promise.all(pending.map((p) => p.catch(() => ({ status: 0, close() {} }))));
  await noStreamsLeft(keyId, 'after the revocation');
  t.ok(all.filter((o) => o.status === 200).length <= LIMIT, `at most ${LIMIT} of the burst were streams`);
  for (const o of all) o.close();
});
