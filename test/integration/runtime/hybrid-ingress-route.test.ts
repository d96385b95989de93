/**
 * An ingress-based hybrid runtime through the API, every part real on loopback: the provisioner
 * app (real Postgres) with the operator's settings for the customer's CA
 * (PROVISIONER_HYBRID_INGRESS_CA_FILE, a CA made here with openssl) and loopback
 * (PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS); a runtime registered with `access: ingress` and
 * installed by redeeming its bootstrap token; its request router in ingress mode behind an https
 * server with that CA's certificate, the real app-proxy and a plain http server standing for the
 * webhook event source behind it.
 *
 * Asserted: `GET /v1/tenants/:id/runtimes/:name/proxy/api/runtime` with the tenant's key reaches
 * the app-proxy (which accepted the control plane's token for this runtime); a webhook through the
 * route arrives with the token and without the caller's credentials, its body intact.
 */
import { createHash } from 'node:crypto';
import { EventEmitter, once } from 'node:events';
import http from 'node:http';
import https from 'node:https';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';
import { createCa, createServingCert } from '../../../sandbox/pki.ts';
import { createRouter, type Router } from '../../../runtime/agents/request-router/router.ts';
import { buildAppProxy } from '../../../runtime/agents/app-proxy/app.ts';
import { loadPublicKey } from '../../../runtime/agents/app-proxy/request-token.ts';
import { staticRuntimeInfo } from '../../../runtime/agents/app-proxy/runtime-info.ts';
import { REQUEST_TOKEN_HEADER } from '../../../runtime/protocol/request-token.ts';
import type { RuntimeBootstrapAnswer } from '../../../provisioner/api/types.ts';

const dir = await mkdtemp(join(tmpdir(), 'hybrid-ingress-route-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));
const ca = await createCa(join(dir, 'ca'), 'customer-ingress-ca');
const cert = await createServingCert(ca, 'ingress');

const api = await createTestApi({
  env: {
    PROVISIONER_PUBLIC_URL: 'https://cp.example.test',
    PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS: '127.0.0.0/8,::1/128',
    PROVISIONER_HYBRID_INGRESS_CA_FILE: ca.certFile,
    PROVISIONER_HYBRID_INGRESS_REQUESTS_PER_RUNTIME: '1',
  },
});
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
const close = async (server: http.Server | https.Server) => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
};

// The event source: what reached it, headers included.
// `/hold` is answered when the test releases it.
const seen: Array<{ url: string; headers: http.IncomingHttpHeaders; sha256: string }> = [];
const held: Array<() => void> = [];
const heldEvents = new EventEmitter();
const eventSource = http.createServer((req, res) => {
  const parts: Buffer[] = [];
  req.on('data', (c: Buffer) => parts.push(c));
  req.on('end', () => {
    seen.push({ url: req.url ?? '', headers: req.headers, sha256: sha256(Buffer.concat(parts)) });
    const answer = () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"received":true}');
    if (req.url === '/hold') {
      held.push(answer);
      heldEvents.emit('held');
    } else answer();
  });
});
eventSource.listen(0, '127.0.0.1');
await once(eventSource, 'listening');
t.teardown(() => close(eventSource));

// The customer's ingress: listening first (its URL is registered), its router made once the
// runtime's id is known.
const behind: { router?: Router } = {};
const ingress = https.createServer(
  { cert: await readFile(cert.certFile), key: await readFile(cert.keyFile) },
  (req, res) => {
    if (behind.router) behind.router.handler(req, res);
    else res.writeHead(503).end();
  },
);
// Both loopback families: ::1 is reached with a certificate that does not name it.
ingress.listen(0, '::');
await once(ingress, 'listening');
t.teardown(async () => {
  behind.router?.close();
  await close(ingress);
});
const ingressUrl = `https://localhost:${(ingress.address() as AddressInfo).port}`;

const tenant = await api.signup();
/** The runtimes' own routes and the runtime's API through the proxy (outside the route map), over the socket. */
async function call(method: string, path: string, key: string | null, body?: unknown) {
  const res = await fetch(base + path, {
    method,
    headers: {
      ...(key ? { authorization: `Bearer ${key}` } : {}),
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, text, retryAfter: res.headers.get('retry-after') };
}

/** Registers an ingress-based runtime at `url` and redeems its bootstrap token (installed). */
async function install(name: string, url: string) {
  const registered = await new ApiClient({ baseUrl: base, token: tenant.apiKey }).call(
    'POST /v1/tenants/:id/runtimes',
    {
      params: { id: tenant.tenantId },
      body: { name, mode: 'hybrid', access: 'ingress', ingressUrl: url, argo: 'new' },
    },
  );
  const exchange = await call('POST', '/v1/runtimes/bootstrap', registered.bootstrapToken, {});
  if (exchange.status !== 200) throw new Error(`precondition: bootstrap answered ${exchange.status} ${exchange.text}`);
  return { registered, credentials: JSON.parse(exchange.text) as RuntimeBootstrapAnswer };
}
const { registered, credentials } = await install('plant-a', ingressUrl);
const publicKeyPem = credentials.publicKey;

const appProxy = await buildAppProxy({
  tenantId: tenant.tenantId,
  runtimeId: registered.runtime.id,
  publicKey: loadPublicKey(publicKeyPem),
  runtimeInfo: staticRuntimeInfo({ runtimeVersion: '1.5.0', components: { argoCd: '8.0.17' } }),
});
await appProxy.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => appProxy.close());
behind.router = createRouter({
  appProxyUrl: `http://127.0.0.1:${(appProxy.server.address() as AddressInfo).port}`,
  eventSourceUrl: `http://127.0.0.1:${(eventSource.address() as AddressInfo).port}`,
  requestTokens: {
    publicKey: loadPublicKey(publicKeyPem),
    tenantId: tenant.tenantId,
    runtimeId: registered.runtime.id,
  },
});

const proxy = `/v1/tenants/${tenant.tenantId}/runtimes/plant-a/proxy`;

t.test('through the route: the app-proxy behind the https ingress answers', async (t) => {
  const res = await call('GET', `${proxy}/api/runtime`, tenant.apiKey);
  t.equal(res.status, 200, `the router and the app-proxy accepted the control plane's token (got ${res.text})`);
  t.match(JSON.parse(res.text), { runtimeVersion: '1.5.0' }, "the app-proxy's answer came back");
});

t.test("a webhook through the route: signed, without the caller's credentials, body intact", async (t) => {
  const body = { ref: 'refs/heads/main', commits: Array.from({ length: 200 }, (_, i) => ({ id: `c${i}` })) };
  const before = seen.length;
  const res = await call('POST', `${proxy}/webhooks/github/push`, tenant.apiKey, body);
  t.equal(res.status, 200, res.text);
  const got = seen[before];
  if (!got) throw new Error('nothing reached the event source');
  t.equal(got.url, '/github/push', 'the event source got it without the /webhooks prefix');
  t.equal(got.sha256, sha256(Buffer.from(JSON.stringify(body))), 'the body arrived intact');
  t.ok(got.headers[REQUEST_TOKEN_HEADER], "the control plane's request token came with it");
  t.equal(got.headers.authorization, undefined, "the caller's Authorization did not reach the runtime");
});

t.test("past the runtime's budget (1 here): 503 RUNTIME_BUSY with Retry-After, naming the budget", async (t) => {
  const first = call('POST', `${proxy}/webhooks/hold`, tenant.apiKey, {});
  if (held.length === 0)
    await Promise.race([
      once(heldEvents, 'held'),
      first.then((r) => {
        throw new Error(`the request to hold was answered ${r.status} ${r.text} before it reached the runtime`);
      }),
    ]);
  const busy = await call('GET', `${proxy}/api/runtime`, tenant.apiKey);
  t.equal(busy.status, 503);
  const error = (JSON.parse(busy.text) as { error: { code: string; message: string } }).error;
  t.equal(error.code, 'RUNTIME_BUSY');
  t.match(error.message, /PROVISIONER_HYBRID_INGRESS_REQUESTS_PER_RUNTIME/, 'the message names the budget');
  t.ok(busy.retryAfter, `with Retry-After (${busy.retryAfter ?? 'none'})`);
  for (const release of held.splice(0)) release();
  t.equal((await first).status, 200, 'the held request finishes');
  t.equal((await call('GET', `${proxy}/api/runtime`, tenant.apiKey)).status, 200, 'and the next is served');
});

t.test('an ingress whose certificate does not name its host: 503 RUNTIME_UNREACHABLE naming TLS', async (t) => {
  // The certificate names 127.0.0.1 and localhost, not ::1.
  await install('plant-b', `https://[::1]:${(ingress.address() as AddressInfo).port}`);
  const res = await call('GET', `/v1/tenants/${tenant.tenantId}/runtimes/plant-b/proxy/api/runtime`, tenant.apiKey);
  t.equal(res.status, 503);
  const error = (JSON.parse(res.text) as { error: { code: string; message: string } }).error;
  t.equal(error.code, 'RUNTIME_UNREACHABLE');
  t.match(error.message, /TLS with runtime .* failed \(ERR_TLS_CERT_ALTNAME_INVALID/, 'the message names TLS and why');
  t.ok(res.retryAfter, `with Retry-After (${res.retryAfter ?? 'none'})`);
});
