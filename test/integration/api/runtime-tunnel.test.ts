/**
 * The whole path on loopback with the real pieces: the provisioner app (real keys in Postgres),
 * a runtime's tunnel client dialling /v1/tunnel with a runtime key, the request router and the
 * app-proxy verifying the control plane's signature.
 */
import t from 'tap';
import http from 'node:http';
import { once } from 'node:events';
import { ApiClient, type ApiError } from '../../../provisioner/http/api-client.ts';
import { createTestApi } from '../../helpers/api.ts';
import { connectRuntime } from '../../helpers/runtime.ts';
import { createRouter } from '../../../runtime/agents/request-router/router.ts';
import { buildAppProxy } from '../../../runtime/agents/app-proxy/app.ts';
import { loadPublicKey } from '../../../runtime/agents/app-proxy/request-token.ts';
import { staticRuntimeInfo } from '../../../runtime/agents/app-proxy/runtime-info.ts';

const api = await createTestApi();
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

const a = await api.signup();
const b = await api.signup();
/** GET of the runtime's API of `tenantId` through the tunnel with `key` (outside the route map: the client's raw), as a status. */
const runtimeStatus = (tenantId: string, key: string | null) =>
  new ApiClient({ baseUrl: base, ...(key ? { token: key } : {}) })
    .raw('GET', `/v1/tenants/${tenantId}/runtime/api/runtime`)
    .then(
      (res) => res,
      (err: unknown) => err as ApiError,
    );

const proxy = await buildAppProxy({
  tenantId: a.tenantId,
  publicKey: loadPublicKey(api.services.signer.publicKeyPem),
  runtimeInfo: staticRuntimeInfo({ runtimeVersion: '1.4.0', components: { argoCd: '7.9.1' } }),
});
const proxyUrl = await proxy.listen({ port: 0, host: '127.0.0.1' });
const router = createRouter({ appProxyUrl: proxyUrl, eventSourceUrl: 'http://127.0.0.1:9' });
const routerServer = http.createServer(router.handler).listen(0, '127.0.0.1');
await once(routerServer, 'listening');
const { client, runtimeKey } = await connectRuntime(api, base, a.tenantId, routerServer, 'runtime a');
t.teardown(async () => {
  await client.close();
  router.close();
  routerServer.close();
  await proxy.close();
});

t.test('a tenant reaches its own runtime through the tunnel; status shows the tunnel', async (t) => {
  const res = await runtimeStatus(a.tenantId, a.apiKey);
  t.equal(res.status, 200);
  t.match(res instanceof Response ? await res.json() : res, { runtimeVersion: '1.4.0' });
  const tenant = await api.client.call('GET /v1/tenants/:id', { params: { id: a.tenantId } });
  t.equal(tenant.status.tunnel?.connected, true);
  t.ok(Date.parse(tenant.status.tunnel?.since ?? '') > 0);
  const other = await api.client.call('GET /v1/tenants/:id', { params: { id: b.tenantId } });
  t.same(other.status.tunnel, { connected: false, since: null });
});

t.test("no tunnel is 503 RUNTIME_UNREACHABLE; another tenant's key is 404", async (t) => {
  const none = await runtimeStatus(b.tenantId, b.apiKey);
  t.equal(none.status, 503);
  t.match(none, { code: 'RUNTIME_UNREACHABLE' });
  t.equal((await runtimeStatus(a.tenantId, b.apiKey)).status, 404);
  t.equal(
    (await runtimeStatus(a.tenantId, runtimeKey.key)).status,
    403,
    'a runtime key cannot call its own runtime through the API',
  );
  t.equal((await runtimeStatus(a.tenantId, null)).status, 401);
});

t.test(
  'a tenant key cannot open a tunnel; revoking the runtime key closes its tunnel and refuses reconnects',
  async (t) => {
    const { WebSocket } = await import('ws');
    const ws = new WebSocket(base.replace('http', 'ws') + '/v1/tunnel', 'hrt-tunnel.v1', {
      headers: { authorization: `Bearer ${a.apiKey}` },
    });
    const [status] = await new Promise<[number]>((resolve) =>
      ws.on('unexpected-response', (_req, res) => resolve([res.statusCode ?? 0])),
    );
    t.equal(status, 401);
    const rejected = once(client.events, 'rejected');
    const down = once(client.events, 'disconnected');
    const revoke = await api.client.request('DELETE /v1/keys/:id', { params: { id: runtimeKey.info.id } });
    t.equal(revoke.status, 200);
    const [code] = (await down) as [number];
    t.equal(code, 4003, 'closed with the revoked close code');
    t.same(await rejected, [401], 'the reconnect is refused');
    t.equal((await runtimeStatus(a.tenantId, a.apiKey)).status, 503);
  },
);
