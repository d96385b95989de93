/**
 * The app-proxy's diff route (runtime/agents/app-proxy/diff.ts) over real HTTP on loopback: signed
 * by the control plane's request signer, answered from a Source Server double (a loopback HTTP
 * server standing for runtime/agents/source-server, which the e2e tier runs for real against Argo
 * CD). What a caller gets: the Source Server's diff as it gave it, a clear 404 on a runtime without
 * a Source Server, 503 with Retry-After when it is down, 400 naming a bad parameter.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { createRequestSigner, generateRequestSigningKeys } from '../../../provisioner/tunnel/request-token.ts';
import { buildAppProxy } from '../../../runtime/agents/app-proxy/app.ts';
import { loadPublicKey } from '../../../runtime/agents/app-proxy/request-token.ts';
import { staticRuntimeInfo } from '../../../runtime/agents/app-proxy/runtime-info.ts';
import { REQUEST_TOKEN_HEADER } from '../../../runtime/protocol/request-token.ts';
import type { ApplicationDiff } from '../../../runtime/protocol/sources.ts';

const TENANT = '5f0c7a52-8a4e-4a55-9d1e-3b7f0e1c2a10';
const keys = generateRequestSigningKeys();
const signer = createRequestSigner({ privateKeyPem: keys.privateKeyPem, ttlSeconds: 30 });

const diff: ApplicationDiff = {
  application: { namespace: 'argocd', name: 'web' },
  revision: '2f1c0a9',
  base: '9e8d7c6',
  truncated: false,
  resources: [
    {
      group: 'apps',
      kind: 'Deployment',
      namespace: 'web',
      name: 'web',
      action: 'modified',
      fields: ['spec.template.spec.containers[name=web].image'],
      before: { spec: { template: { spec: { containers: [{ name: 'web', image: 'web:1.0' }] } } } },
      after: { spec: { template: { spec: { containers: [{ name: 'web', image: 'web:1.1' }] } } } },
    },
  ],
};

/** The Source Server double: records what it was asked and answers per path. */
const asked: string[] = [];
let answer: (req: IncomingMessage) => { status: number; body: string; headers?: Record<string, string> } = () => ({
  status: 200,
  body: JSON.stringify(diff),
});
const double: Server = createServer((req, res) => {
  asked.push(req.url ?? '');
  const a = answer(req);
  res.writeHead(a.status, { 'content-type': 'application/json', ...a.headers }).end(a.body);
});
await new Promise<void>((resolve) => double.listen(0, '127.0.0.1', resolve));
t.teardown(() => new Promise<void>((resolve) => double.close(() => resolve())));
const doubleUrl = `http://127.0.0.1:${(double.address() as AddressInfo).port}`;

async function proxy(sourceServerUrl: string | undefined): Promise<string> {
  const app = await buildAppProxy({
    tenantId: TENANT,
    publicKey: loadPublicKey(keys.publicKeyPem),
    runtimeInfo: staticRuntimeInfo({ runtimeVersion: '1.7.0', components: {} }),
    sourceServerUrl,
    sourceServerTimeoutMs: 5_000,
  });
  const address = await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  return address;
}

/** What the app-proxy answers: a diff, or an error. */
type Answer = Partial<ApplicationDiff> & { error?: { code: string; message: string; field?: string } };

async function get(base: string, path: string, signed = true) {
  const headers: Record<string, string> = {};
  if (signed) headers[REQUEST_TOKEN_HEADER] = signer.sign({ tenantId: TENANT, method: 'GET', path, subject: 'key-1' });
  const res = await fetch(`${base}${path}`, { headers });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Answer };
}

const withServer = await proxy(doubleUrl);
const without = await proxy(undefined);

void t.test("a signed diff request is answered with the Source Server's diff, as it gave it", async (t) => {
  asked.length = 0;
  const r = await get(withServer, '/api/applications/argocd/web/diff?revision=2f1c0a9');
  t.equal(r.status, 200, 'answered 200');
  t.same(r.body, diff, 'the body is the Source Server’s ApplicationDiff');
  t.same(asked, ['/v1/applications/argocd/web/diff?revision=2f1c0a9'], 'the Source Server was asked for that revision');

  asked.length = 0;
  const live = await get(withServer, '/api/applications/argocd/web/diff');
  t.equal(live.status, 200, 'the diff against the cluster is answered too');
  t.same(asked, ['/v1/applications/argocd/web/diff'], 'without a revision, none is asked for');
});

void t.test("the Source Server's refusals pass through with their status and body", async (t) => {
  answer = () => ({
    status: 404,
    body: JSON.stringify({ error: { code: 'APPLICATION_NOT_FOUND', message: "Application 'argocd/gone' not found" } }),
  });
  t.teardown(() => {
    answer = () => ({ status: 200, body: JSON.stringify(diff) });
  });
  const r = await get(withServer, '/api/applications/argocd/gone/diff');
  t.equal(r.status, 404, 'its 404 is the caller’s 404');
  t.equal(r.body.error?.code, 'APPLICATION_NOT_FOUND', 'with its code');

  answer = () => ({
    status: 503,
    headers: { 'retry-after': '7' },
    body: JSON.stringify({ error: { code: 'ARGOCD_UNAVAILABLE', message: 'Argo CD cannot be reached' } }),
  });
  const busy = await get(withServer, '/api/applications/argocd/web/diff');
  t.equal(busy.status, 503, 'its 503 is passed on');
  t.equal(busy.headers.get('retry-after'), '7', 'with its Retry-After');
});

void t.test('an unsigned diff request is refused before the Source Server is asked', async (t) => {
  asked.length = 0;
  const r = await get(withServer, '/api/applications/argocd/web/diff', false);
  t.equal(r.status, 401, 'answered 401');
  t.equal(r.body.error?.code, 'UNAUTHENTICATED', 'naming the missing request token');
  t.same(asked, [], 'the Source Server was not asked');
});

void t.test('a bad namespace, name, revision or parameter is a 400 naming it', async (t) => {
  asked.length = 0;
  const cases: [string, string][] = [
    ['/api/applications/Not_A_Namespace/web/diff', 'namespace'],
    ['/api/applications/argocd/web%20app/diff', 'name'],
    ['/api/applications/argocd/web/diff?revision=two%20words', 'revision'],
    ['/api/applications/argocd/web/diff?rev=abc', 'rev'],
  ];
  for (const [path, field] of cases) {
    const r = await get(withServer, path);
    t.equal(r.status, 400, `${path}: 400`);
    t.equal(r.body.error?.code, 'VALIDATION_FAILED', `${path}: VALIDATION_FAILED`);
    t.equal(r.body.error?.field, field, `${path}: names ${field}`);
  }
  t.same(asked, [], 'the Source Server was asked nothing');
});

void t.test('a runtime without a Source Server answers 404 naming the runtime version that has one', async (t) => {
  const r = await get(without, '/api/applications/argocd/web/diff?revision=2f1c0a9');
  t.equal(r.status, 404, 'answered 404');
  t.equal(r.body.error?.code, 'SOURCE_SERVER_NOT_INSTALLED', 'the code says the Source Server is missing');
  t.match(r.body.error?.message, /runtime version 1\.7\.0/, 'the message names runtime version 1.7.0');
});

void t.test('a Source Server that cannot be reached is a 503 with Retry-After', async (t) => {
  // A port that was just free: nothing listens there.
  const closed = createServer();
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
  const port = (closed.address() as AddressInfo).port;
  await new Promise<void>((resolve) => closed.close(() => resolve()));
  const down = await proxy(`http://127.0.0.1:${port}`);
  const r = await get(down, '/api/applications/argocd/web/diff');
  t.equal(r.status, 503, 'answered 503');
  t.equal(r.body.error?.code, 'SOURCE_SERVER_UNAVAILABLE', 'the code names the Source Server');
  t.equal(r.headers.get('retry-after'), '5', 'with Retry-After');
});

void t.test('an answer that is not JSON is a 502, not passed on', async (t) => {
  answer = () => ({ status: 200, body: '<html>proxy error</html>' });
  t.teardown(() => {
    answer = () => ({ status: 200, body: JSON.stringify(diff) });
  });
  const r = await get(withServer, '/api/applications/argocd/web/diff');
  t.equal(r.status, 502, 'answered 502');
  t.equal(r.body.error?.code, 'SOURCE_SERVER_BAD_ANSWER', 'naming the bad answer');
});
