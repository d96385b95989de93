/**
 * An application's diff through the real path on loopback: the provisioner app (real keys in
 * Postgres), the runtime's tunnel client dialling /v1/tunnel, the request router, and the real
 * app-proxy verifying the control plane's request token and asking its Source Server. The Source
 * Server is a SOURCE SERVER DOUBLE (a loopback server answering `GET /v1/applications/:namespace/
 * :name/diff` with fixed diffs): the real Source Server and Argo CD are the end-to-end tier's. Also: no tunnel is
 * 503 RUNTIME_UNREACHABLE with Retry-After; a runtime without a Source Server, or without the
 * route (before 1.7.0), is 409 SOURCE_SERVER_NOT_INSTALLED; an unknown application is 404; an
 * oversized answer is 502.
 */
import t from 'tap';
import http from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { createTestApi } from '../../helpers/api.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';
import { connectRuntime } from '../../helpers/runtime.ts';
import { createRouter } from '../../../runtime/agents/request-router/router.ts';
import { buildAppProxy } from '../../../runtime/agents/app-proxy/app.ts';
import { loadPublicKey } from '../../../runtime/agents/app-proxy/request-token.ts';
import { staticRuntimeInfo } from '../../../runtime/agents/app-proxy/runtime-info.ts';
import { MAX_DIFF_BYTES, type ApplicationDiff } from '../../../runtime/protocol/sources.ts';

const api = await createTestApi();
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

/** What the double was asked: the revision of each diff request. */
const asked: (string | null)[] = [];
const diffOf = (namespace: string, name: string, revision: string | null): ApplicationDiff => ({
  application: { namespace, name },
  revision: revision ?? 'HEAD',
  base: revision ? 'previous' : 'live',
  resources: [
    {
      group: 'apps',
      kind: 'Deployment',
      namespace: 'default',
      name: 'web',
      action: 'modified',
      fields: ['spec.template.spec.containers[name=web].image'],
      before: { spec: { template: { spec: { containers: [{ name: 'web', image: 'web:1.0' }] } } } },
      after: { spec: { template: { spec: { containers: [{ name: 'web', image: 'web:1.1' }] } } } },
    },
  ],
  truncated: false,
});

const json = (res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
};
const listen = async (server: http.Server): Promise<string> => {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
};

/**
 * The SOURCE SERVER DOUBLE behind the real app-proxy: `GET /v1/applications/:namespace/:name/diff`
 * with fixed diffs; `missing` is an Application it does not have, `down` one whose Argo CD it cannot reach.
 */
const sourceServer = http.createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://source-server');
  const m = /^\/v1\/applications\/([^/]+)\/([^/]+)\/diff$/.exec(url.pathname);
  if (!m) return json(res, 404, { error: { code: 'NOT_FOUND', message: 'no route' } });
  const [namespace, name] = [decodeURIComponent(m[1]!), decodeURIComponent(m[2]!)];
  asked.push(url.searchParams.get('revision'));
  if (name === 'missing')
    return json(res, 404, {
      error: { code: 'APPLICATION_NOT_FOUND', message: `application ${namespace}/${name} not found` },
    });
  if (name === 'down')
    return json(
      res,
      503,
      { error: { code: 'ARGO_CD_UNAVAILABLE', message: 'Argo CD API server unreachable' } },
      { 'retry-after': '7' },
    );
  return json(res, 200, diffOf(namespace, name, url.searchParams.get('revision')));
});
const sourceServerUrl = await listen(sourceServer);

/** A runtime of `tenantId` on loopback: the real app-proxy (with a Source Server or without) behind the router, its tunnel connected. */
async function realRuntime(tenantId: string, withSourceServer: boolean) {
  const proxy = await buildAppProxy({
    tenantId,
    publicKey: loadPublicKey(api.services.signer.publicKeyPem),
    runtimeInfo: staticRuntimeInfo({ runtimeVersion: '1.7.0', components: { argoCd: '7.9.1' } }),
    ...(withSourceServer ? { sourceServerUrl } : {}),
  });
  const proxyUrl = await proxy.listen({ port: 0, host: '127.0.0.1' });
  const router = createRouter({ appProxyUrl: proxyUrl, eventSourceUrl: 'http://127.0.0.1:9' });
  const routerServer = http.createServer(router.handler);
  await listen(routerServer);
  const { client } = await connectRuntime(api, base, tenantId, routerServer, `runtime ${tenantId}`);
  t.teardown(async () => {
    await client.close();
    router.close();
    routerServer.close();
    await proxy.close();
  });
}

const a = await api.signup();
const b = await api.signup();
const c = await api.signup();
const d = await api.signup();
await realRuntime(a.tenantId, true);
await realRuntime(b.tenantId, false);
/**
 * An OLDER APP-PROXY DOUBLE (a runtime before 1.7.0: no diff route, fastify's own 404), which for
 * `huge` answers more than a Source Server ever sends.
 */
const legacy = http.createServer((req, res) => {
  if (req.url?.startsWith('/api/applications/argocd/huge/diff'))
    return json(res, 200, { ...diffOf('argocd', 'huge', null), pad: 'x'.repeat(MAX_DIFF_BYTES + 100 * 1024) });
  json(res, 404, { message: `Route GET:${req.url} not found`, error: 'Not Found', statusCode: 404 });
});
await listen(legacy);
const legacyRuntime = await connectRuntime(api, base, c.tenantId, legacy, 'older runtime');
t.teardown(async () => {
  await legacyRuntime.client.close();
  legacy.close();
  sourceServer.close();
});

const client = new ApiClient({ baseUrl: base });
/** An application's diff (argocd namespace) asked with `key`: the status, headers and answer or error body. */
const diff = (tenant: string, key: string, name: string, revision?: string) =>
  client.withToken(key).request('GET /v1/tenants/:id/applications/:namespace/:name/diff', {
    params: { id: tenant, namespace: 'argocd', name },
    ...(revision !== undefined ? { query: { revision } } : {}),
  });
/** The error body of an answer that is not a success (undefined for a success). */
const errorOf = (res: Awaited<ReturnType<typeof diff>>) => (res.ok ? undefined : res.body.error);

t.test("the diff comes from the runtime's Source Server through the tunnel", async (t) => {
  const rev = 'a'.repeat(40);
  const res = await diff(a.tenantId, a.apiKey, 'web', rev);
  t.equal(res.status, 200, 'the diff is answered');
  if (!res.ok) return void t.fail(res.body.error.message);
  t.equal(asked.at(-1), rev, 'the Source Server was asked for the revision');
  t.match(
    res.body,
    {
      application: { namespace: 'argocd', name: 'web' },
      revision: rev,
      base: 'previous',
      resources: [
        {
          kind: 'Deployment',
          fields: ['spec.template.spec.containers[name=web].image'],
          before: { spec: { template: { spec: { containers: [{ image: 'web:1.0' }] } } } },
          after: { spec: { template: { spec: { containers: [{ image: 'web:1.1' }] } } } },
        },
      ],
    },
    'both sides of the changed resource, for a side-by-side view',
  );
  const live = await client
    .withToken(a.apiKey)
    .request('GET /v1/tenants/:id/runtimes/:name/objects/applications/:namespace/:objectName/diff', {
      params: { id: a.tenantId, name: 'hosted', namespace: 'argocd', objectName: 'web' },
    });
  t.equal(live.status, 200, 'the runtime-scoped route answers too');
  t.equal(live.ok ? live.body.base : undefined, 'live', 'without a revision: Git against the cluster');
  t.equal(asked.at(-1), null, 'and no revision was passed on');
});

t.test('what the runtime refuses becomes a clear error', async (t) => {
  const none = await diff(b.tenantId, b.apiKey, 'web');
  t.equal(none.status, 409, 'a runtime whose app-proxy has no Source Server: 409');
  const e = errorOf(none)!;
  t.equal(e.code, 'SOURCE_SERVER_NOT_INSTALLED', 'SOURCE_SERVER_NOT_INSTALLED');
  t.match(e.message, /1\.7\.0/, 'naming the runtime version needed');

  const older = await diff(c.tenantId, c.apiKey, 'web');
  t.equal(older.status, 409, 'an app-proxy without the route (a runtime before 1.7.0): 409');
  t.equal(errorOf(older)?.code, 'SOURCE_SERVER_NOT_INSTALLED', 'SOURCE_SERVER_NOT_INSTALLED as well');

  const missing = await diff(a.tenantId, a.apiKey, 'missing');
  t.equal(missing.status, 404, 'an application the runtime does not have: 404');
  t.equal(errorOf(missing)?.code, 'RUNTIME_OBJECT_NOT_FOUND', 'RUNTIME_OBJECT_NOT_FOUND');

  const down = await diff(a.tenantId, a.apiKey, 'down');
  t.equal(down.status, 503, 'the Source Server cannot reach Argo CD: 503');
  t.ok(Number(down.headers.get('retry-after')) > 0, 'with Retry-After');
  const downError = errorOf(down)!;
  t.equal(downError.code, 'RUNTIME_UNREACHABLE', 'RUNTIME_UNREACHABLE');
  t.match(downError.message, /Argo CD API server unreachable/, "with the runtime's message");

  const huge = await diff(c.tenantId, c.apiKey, 'huge');
  t.equal(huge.status, 502, 'an answer larger than a Source Server sends is refused');
  t.equal(errorOf(huge)?.code, 'RUNTIME_BAD_RESPONSE', 'as RUNTIME_BAD_RESPONSE');

  const count = asked.length;
  const badRevision = await diff(a.tenantId, a.apiKey, 'web', 'a b');
  t.equal(badRevision.status, 400, 'a revision with a space is refused');
  t.equal(errorOf(badRevision)?.field, 'revision', 'naming revision');
  t.equal(asked.length, count, 'before the runtime is asked');
});

t.test('a runtime that is not connected: 503 RUNTIME_UNREACHABLE with Retry-After', async (t) => {
  const res = await diff(d.tenantId, d.apiKey, 'web');
  t.equal(res.status, 503, '503');
  t.ok(Number(res.headers.get('retry-after')) > 0, 'with Retry-After');
  t.equal(errorOf(res)?.code, 'RUNTIME_UNREACHABLE', 'RUNTIME_UNREACHABLE');
  const cross = await diff(a.tenantId, d.apiKey, 'web');
  t.equal(cross.status, 404, "another tenant's key cannot ask this tenant's runtime");
});
