import t from 'tap';
import { backoffDelay, DEFAULT_BACKOFF, slowRetryDelay } from '../../../runtime/agents/common/backoff.ts';
import { loadTunnelClientConfig } from '../../../runtime/agents/tunnel-client/config.ts';
import { loadRouterConfig } from '../../../runtime/agents/request-router/config.ts';
import { loadAppProxyConfig } from '../../../runtime/agents/app-proxy/config.ts';
import { parseRuntimeInfo } from '../../../runtime/agents/app-proxy/runtime-info.ts';
import { runtimePath } from '../../../provisioner/tunnel/route.ts';
import { headerListFrom } from '../../../runtime/protocol/headers.ts';
import { generateRequestSigningKeys } from '../../../provisioner/tunnel/request-token.ts';

void t.test('reconnect delays grow exponentially, are capped at 4 s by default, and fully jittered', async (t) => {
  t.equal(
    backoffDelay(0, DEFAULT_BACKOFF, () => 0),
    0,
    'full jitter: the delay may be 0',
  );
  t.equal(
    backoffDelay(0, DEFAULT_BACKOFF, () => 1),
    200,
    'the first ceiling is the initial delay',
  );
  t.equal(
    backoffDelay(3, DEFAULT_BACKOFF, () => 1),
    1600,
    'then doubling',
  );
  t.equal(
    backoffDelay(50, DEFAULT_BACKOFF, () => 1),
    4000,
    'after any number of attempts, at most the 4 s cap',
  );
  t.equal(
    backoffDelay(50, DEFAULT_BACKOFF, () => 0.5),
    2000,
    'uniform below the cap',
  );
  t.equal(
    backoffDelay(50, { initialMs: 200, maxMs: 30_000, factor: 2 }, () => 1),
    30_000,
    'a configured cap is kept',
  );
  t.ok(slowRetryDelay(() => 0) >= 15_000 && slowRetryDelay(() => 1) <= 30_000, 'a refused runtime waits 15 to 30 s');
});

void t.test('tunnel client configuration is validated at start', async (t) => {
  const token = 'hrt_runtime_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa';
  const c = loadTunnelClientConfig({ TUNNEL_URL: 'wss://cp.example/v1/tunnel', RUNTIME_TOKEN: token });
  t.equal(c.token(), token);
  t.equal(c.routerUrl, 'http://127.0.0.1:8081/');
  t.throws(() => loadTunnelClientConfig({ RUNTIME_TOKEN: token }), /TUNNEL_URL: is required/);
  t.throws(
    () => loadTunnelClientConfig({ TUNNEL_URL: 'ws://cp.example/v1/tunnel', RUNTIME_TOKEN: token }),
    /must use wss/,
  );
  t.throws(() => loadTunnelClientConfig({ TUNNEL_URL: 'https://x', RUNTIME_TOKEN: token }), /scheme/);
  t.throws(() => loadTunnelClientConfig({ TUNNEL_URL: 'wss://x', RUNTIME_TOKEN: 'short' }), /RUNTIME_TOKEN/);
  t.throws(
    () => loadTunnelClientConfig({ TUNNEL_URL: 'wss://x', RUNTIME_TOKEN_FILE: '/nonexistent/token' }),
    /RUNTIME_TOKEN_FILE: cannot read/,
  );
  t.throws(
    () => loadTunnelClientConfig({ TUNNEL_URL: 'wss://x', RUNTIME_TOKEN: token, TUNNEL_MAX_STREAMS: 'many' }),
    /TUNNEL_MAX_STREAMS/,
  );
});

void t.test('router and app-proxy configuration is validated at start', async (t) => {
  t.throws(() => loadRouterConfig({}), /EVENT_SOURCE_URL: is required/);
  t.equal(loadRouterConfig({ EVENT_SOURCE_URL: 'http://es:12000' }).port, 8081);
  const { publicKeyPem } = generateRequestSigningKeys();
  const ok = loadAppProxyConfig({
    TENANT_ID: 't',
    CONTROL_PLANE_PUBLIC_KEY: publicKeyPem,
    RUNTIME_VERSION: '1.5.0',
    RUNTIME_COMPONENTS: '{"argoCd":"8.0.17"}',
    KUBERNETES_SERVICE_HOST: '10.96.0.1',
  });
  t.same(await ok.runtimeInfo(), { runtimeVersion: '1.5.0', components: { argoCd: '8.0.17' } });
  t.equal(ok.kubeconfigFile, undefined, 'in a pod, the app-proxy acts with its service account');
  t.equal(ok.kubeTimeoutMs, 10_000);
  t.throws(
    () => loadAppProxyConfig({ TENANT_ID: 't', CONTROL_PLANE_PUBLIC_KEY: publicKeyPem, RUNTIME_VERSION: '1' }),
    /KUBECONFIG: is required outside a cluster/,
    'outside a pod, a kubeconfig must be named',
  );
  t.equal(
    loadAppProxyConfig({
      TENANT_ID: 't',
      CONTROL_PLANE_PUBLIC_KEY: publicKeyPem,
      RUNTIME_VERSION: '1',
      KUBECONFIG: '/k',
    }).kubeconfigFile,
    '/k',
  );
  t.throws(
    () => loadAppProxyConfig({ TENANT_ID: 't', CONTROL_PLANE_PUBLIC_KEY: 'nope', RUNTIME_VERSION: '1' }),
    /CONTROL_PLANE_PUBLIC_KEY/,
  );
  t.throws(
    () =>
      loadAppProxyConfig({
        TENANT_ID: 't',
        CONTROL_PLANE_PUBLIC_KEY: publicKeyPem,
        RUNTIME_VERSION: '1',
        RUNTIME_COMPONENTS: '[',
      }),
    /RUNTIME_COMPONENTS/,
  );
  t.throws(() => loadAppProxyConfig({ CONTROL_PLANE_PUBLIC_KEY: publicKeyPem }), /TENANT_ID/);
  t.equal(ok.runtimeId, undefined, "without RUNTIME_ID the app-proxy is the tenant's hosted runtime's");
  const runtimeId = '8d1e5b7a-0c2f-4e7d-b1a3-6f9e2c4d8a10';
  const base = { TENANT_ID: 't', CONTROL_PLANE_PUBLIC_KEY: publicKeyPem, RUNTIME_VERSION: '1', KUBECONFIG: '/k' };
  t.equal(
    loadAppProxyConfig({ ...base, RUNTIME_ID: runtimeId }).runtimeId,
    runtimeId,
    'RUNTIME_ID names the hybrid runtime the app-proxy is',
  );
  t.throws(
    () => loadAppProxyConfig({ ...base, RUNTIME_ID: 'plant-a' }),
    /RUNTIME_ID: 'plant-a' is not a runtime id/,
    'a RUNTIME_ID that is not a UUID stops the app-proxy naming the variable',
  );
});

void t.test('runtime info accepts the ConfigMap shape and names what is wrong', async (t) => {
  t.same(parseRuntimeInfo({ version: '1.4.0', components: { a: '1' } }, 'f'), {
    runtimeVersion: '1.4.0',
    components: { a: '1' },
  });
  t.throws(() => parseRuntimeInfo({ components: {} }, 'f'), /'version'/);
  t.throws(() => parseRuntimeInfo({ version: '1', components: { a: 1 } }, 'f'), /components\.a/);
});

void t.test('the runtime path is taken from the raw URL after /v1/tenants/:id/runtime', async (t) => {
  t.equal(runtimePath('/v1/tenants/abc/runtime/api/runtime?x=1'), '/api/runtime?x=1');
  t.equal(runtimePath('/v1/tenants/abc/runtime/'), '/');
  t.equal(runtimePath('/v1/tenants/abc/runtime?x=%2F'), '/?x=%2F');
  t.equal(runtimePath('/v1/tenants/abc/runtime/a%2Fb/c'), '/a%2Fb/c', 'no decoding');
});

void t.test('hop-by-hop headers and those named by Connection never cross a proxy', async (t) => {
  const list = headerListFrom(
    [
      'Host',
      'h',
      'Connection',
      'keep-alive, X-Hop',
      'X-Hop',
      '1',
      'Transfer-Encoding',
      'chunked',
      'Set-Cookie',
      'a',
      'Set-Cookie',
      'b',
      'Authorization',
      'x',
    ],
    new Set(['host', 'authorization']),
  );
  t.same(list, [
    ['set-cookie', 'a'],
    ['set-cookie', 'b'],
  ]);
});
