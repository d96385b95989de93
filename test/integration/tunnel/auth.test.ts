import { randomUUID } from 'node:crypto';
import t from 'tap';
import WebSocket from 'ws';
import { CloseCode, SUBPROTOCOL } from '../../../runtime/protocol/frames.ts';
import { createRequestSigner, generateRequestSigningKeys } from '../../../provisioner/tunnel/request-token.ts';
import {
  ready,
  json,
  KEYS,
  request,
  startControlPlane,
  startRuntime,
  StubCallers,
  StubRuntimeTokens,
} from './harness.ts';
import { until } from '../../../sandbox/until.ts';

const tokens = new StubRuntimeTokens();
const callers = new StubCallers();
const tenantA = randomUUID();
const tenantB = randomUUID();
const cp = await startControlPlane({ tokens, callers, limits: { revalidateIntervalMs: 100 } });
const a = tokens.issue(tenantA);
const runtimeA = await startRuntime(tenantA, cp, a.token);
t.teardown(async () => {
  await runtimeA.close();
  await cp.close();
});
await ready(cp, runtimeA);

/** Dials the tunnel endpoint and resolves with the HTTP status the upgrade was refused with (101 if accepted). */
function upgradeStatus(headers: Record<string, string>, protocol: string | undefined = SUBPROTOCOL): Promise<number> {
  return new Promise((resolve) => {
    const ws = new WebSocket(cp.wsUrl, protocol, { headers });
    ws.on('unexpected-response', (_req, res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
      ws.terminate();
    });
    ws.on('open', () => {
      resolve(101);
      ws.close();
    });
    ws.on('error', () => {});
  });
}

const errCode = (res: { body: Buffer }): string => (json(res as never) as { error: { code: string } }).error.code;

void t.test('a bad or missing runtime token gets 401 before the upgrade', async (t) => {
  t.equal(await upgradeStatus({ authorization: 'Bearer hrt_runtime_not-a-real-token-at-all' }), 401);
  t.equal(await upgradeStatus({}), 401);
  t.equal(
    await upgradeStatus({ authorization: `Bearer ${a.token}` }, 'some-other-protocol'),
    400,
    'an unknown protocol version is refused',
  );
});

void t.test('a tunnel client with a bad token reports the rejection', async (t) => {
  const bad = await startRuntime(randomUUID(), cp, 'hrt_runtime_wrong-wrong-wrong-wrong');
  const status = await new Promise<number>((resolve) => bad.client.events.once('rejected', resolve));
  t.equal(status, 401);
  t.equal(bad.client.connected, false);
  await bad.close();
});

// The access decision here is the harness's TEST DOUBLE (StubCallers.canAccessTenant); what this
// checks is that the forwarding route obeys it: refused callers get 404 and nothing is forwarded.
// The real app's roles on this route (a runtime key is 403 there) are tested through the real
// access check in test/integration/api/runtime-tunnel.test.ts and authorization.test.ts.
void t.test('the forwarding route answers 404 TENANT_NOT_FOUND to every caller the access check refuses', async (t) => {
  const keyA = callers.add('tenant', tenantA);
  const keyB = callers.add('tenant', tenantB);
  t.equal(
    (
      await request(`${cp.base}/v1/tenants/${tenantA}/runtime/api/runtime`, {
        headers: { authorization: `Bearer ${keyA}` },
      })
    ).status,
    200,
  );
  const cross = await request(`${cp.base}/v1/tenants/${tenantA}/runtime/api/runtime`, {
    headers: { authorization: `Bearer ${keyB}` },
  });
  t.equal(cross.status, 404, "tenant B's key on tenant A's route");
  t.equal(errCode(cross), 'TENANT_NOT_FOUND');
  const runtimeKey = callers.add('runtime', tenantA);
  t.equal(
    (
      await request(`${cp.base}/v1/tenants/${tenantA}/runtime/api/runtime`, {
        headers: { authorization: `Bearer ${runtimeKey}` },
      })
    ).status,
    404,
    'a runtime key, which the access double refuses, gets 404',
  );
  t.equal((await request(`${cp.base}/v1/tenants/${tenantA}/runtime/api/runtime`)).status, 401, 'no key');
  const op = callers.add('operator');
  t.equal(
    (
      await request(`${cp.base}/v1/tenants/${tenantA}/runtime/api/runtime`, {
        headers: { authorization: `Bearer ${op}` },
      })
    ).status,
    200,
    'operators reach any runtime',
  );
  const bad = await request(`${cp.base}/v1/tenants/not-a-uuid/runtime/api/runtime`, {
    headers: { authorization: `Bearer ${op}` },
  });
  t.equal(bad.status, 400, 'a malformed tenant id is a 400');
});

void t.test("a runtime never receives another tenant's traffic", async (t) => {
  const admin = callers.add('admin');
  const before = runtimeA.webhooks.length;
  const res = await request(`${cp.base}/v1/tenants/${tenantB}/runtime/webhooks/x`, {
    method: 'POST',
    headers: { authorization: `Bearer ${admin}` },
    body: Buffer.from('{}'),
  });
  t.equal(res.status, 503);
  t.equal(errCode(res), 'RUNTIME_UNREACHABLE');
  t.equal(runtimeA.webhooks.length, before, "tenant A's runtime saw nothing");
});

void t.test('a request that did not come through the control plane is refused by the app-proxy', async (t) => {
  const direct = await request(`${runtimeA.appProxyBase}/api/runtime`);
  t.equal(direct.status, 401);
  t.equal(errCode(direct), 'UNAUTHENTICATED');
  const viaRouter = await request(`${runtimeA.routerBase}/api/runtime`);
  t.equal(viaRouter.status, 401, 'also when sent to the router directly');

  const signer = createRequestSigner({ privateKeyPem: KEYS.privateKeyPem });
  const forB = signer.sign({ tenantId: tenantB, method: 'GET', path: '/api/runtime' });
  const r1 = await request(`${runtimeA.appProxyBase}/api/runtime`, { headers: { 'x-hrt-request-token': forB } });
  t.equal(r1.status, 401, "a token for tenant B is refused by tenant A's runtime");
  t.match((json(r1) as { error: { message: string } }).error.message, /another runtime/);

  const forged = createRequestSigner({ privateKeyPem: generateRequestSigningKeys().privateKeyPem }).sign({
    tenantId: tenantA,
    method: 'GET',
    path: '/api/runtime',
  });
  t.equal(
    (await request(`${runtimeA.appProxyBase}/api/runtime`, { headers: { 'x-hrt-request-token': forged } })).status,
    401,
    'a token signed by another key',
  );

  const otherPath = signer.sign({ tenantId: tenantA, method: 'GET', path: '/api/other' });
  t.equal(
    (await request(`${runtimeA.appProxyBase}/api/runtime`, { headers: { 'x-hrt-request-token': otherPath } })).status,
    401,
    'a token for another path',
  );

  const expired = createRequestSigner({ privateKeyPem: KEYS.privateKeyPem, now: () => Date.now() - 120_000 }).sign({
    tenantId: tenantA,
    method: 'GET',
    path: '/api/runtime',
  });
  t.equal(
    (await request(`${runtimeA.appProxyBase}/api/runtime`, { headers: { 'x-hrt-request-token': expired } })).status,
    401,
    'an expired token',
  );

  const good = signer.sign({ tenantId: tenantA, method: 'GET', path: '/api/runtime' });
  t.equal(
    (await request(`${runtimeA.appProxyBase}/api/runtime`, { headers: { 'x-hrt-request-token': good } })).status,
    200,
    'a valid token',
  );
  t.equal(
    (await request(`${runtimeA.appProxyBase}/api/runtime`, { headers: { 'x-hrt-request-token': good } })).status,
    401,
    'the same token replayed',
  );

  t.equal((await request(`${runtimeA.appProxyBase}/healthz`)).status, 200, 'health needs no token');
  t.equal(
    (await request(`${runtimeA.appProxyBase}/readyz`)).status,
    200,
    'nor does readiness (the path its readiness probe calls)',
  );
});

void t.test('a caller cannot smuggle its own request token through the control plane', async (t) => {
  const key = callers.add('tenant', tenantA);
  const signer = createRequestSigner({ privateKeyPem: generateRequestSigningKeys().privateKeyPem });
  const res = await request(`${cp.base}/v1/tenants/${tenantA}/runtime/api/runtime`, {
    headers: {
      authorization: `Bearer ${key}`,
      'x-hrt-request-token': signer.sign({ tenantId: tenantA, method: 'GET', path: '/api/runtime' }),
    },
  });
  t.equal(res.status, 200, 'the control plane replaces it with its own');
});

void t.test('revoking a runtime key closes its tunnel and refuses the next upgrade', async (t) => {
  const tenant = randomUUID();
  const issued = tokens.issue(tenant);
  const rt = await startRuntime(tenant, cp, issued.token);
  t.teardown(() => rt.close());
  await ready(cp, rt);
  const closed = new Promise<number>((resolve) => rt.client.events.once('disconnected', (code) => resolve(code)));
  tokens.revoke(issued.keyId);
  t.equal(cp.tunnel.disconnectKey(issued.keyId), 1);
  t.equal(await closed, CloseCode.revoked);
  t.equal(cp.tunnel.status(tenant).connected, false);
  t.equal(await upgradeStatus({ authorization: `Bearer ${issued.token}` }), 401);
});

void t.test('a key revoked elsewhere is noticed by revalidation and its tunnel closed', async (t) => {
  const tenant = randomUUID();
  const issued = tokens.issue(tenant);
  const rt = await startRuntime(tenant, cp, issued.token);
  t.teardown(() => rt.close());
  await ready(cp, rt);
  const closed = new Promise<number>((resolve) => rt.client.events.once('disconnected', (code) => resolve(code)));
  tokens.revoke(issued.keyId);
  t.equal(await closed, CloseCode.revoked);
  await until('tunnel gone', 10_000, () => !cp.tunnel.status(tenant).connected);
});
