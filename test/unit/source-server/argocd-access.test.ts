/**
 * How the Source Server reaches an Argo CD beside a hybrid runtime (runtime/agents/source-server/
 * argocd-setup.ts, argocd.ts): over https verified against `argocd-server-tls` (another
 * certificate refused, naming TLS; no Secret: unverified, said in the log), with an API token
 * (missing or refused: `unavailable` saying so), and setting its own account's password up in
 * argocd-secret when the login is refused (once; nothing written when the stored hash already
 * matches). The e2e tier runs this against the real Argo CD and API server
 * (test/e2e/hybrid-source-server.test.ts); here Argo CD's API server is TEST DOUBLE `argoDouble`
 * (an https server answering the session and Application routes) and the API server is TEST
 * DOUBLE `kubeDouble` (a KubeTransport over an in-memory Secret map), so the failure paths can be
 * driven one by one.
 */
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import bcrypt from 'bcryptjs';
import { ArgoCdClient, ArgoCdError } from '../../../runtime/agents/source-server/argocd.ts';
import { argoCdAccountSetup, argoCdTls } from '../../../runtime/agents/source-server/argocd-setup.ts';
import type { KubeRequestOptions, KubeResponse, KubeTransport } from '../../../runtime/kube/transport.ts';

const dir = mkdtempSync(join(tmpdir(), 'argocd-access-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

function certificate(name: string, host: string): { cert: string; key: string } {
  const [cert, key] = [join(dir, `${name}.crt`), join(dir, `${name}.key`)];
  execFileSync('openssl', [
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-days',
    '1',
    '-subj',
    `/CN=${host}`,
    '-addext',
    `subjectAltName=IP:${host}`,
    '-keyout',
    key,
    '-out',
    cert,
  ]);
  return { cert: readFileSync(cert, 'utf8'), key: readFileSync(key, 'utf8') };
}

const served = certificate('served', '127.0.0.1');
const other = certificate('other', '127.0.0.1');
const b64 = (v: string) => Buffer.from(v).toString('base64');

/** TEST DOUBLE of the API server: Secrets in one namespace, get and merge-patch. */
function kubeDouble() {
  const secrets = new Map<string, Record<string, string>>();
  const patches: Array<{ name: string; body: unknown }> = [];
  const transport: KubeTransport = {
    async request(path: string, opts: KubeRequestOptions = {}): Promise<KubeResponse> {
      const m = /^\/api\/v1\/namespaces\/argocd\/secrets\/([^/]+)$/.exec(path);
      if (!m) return { status: 404, body: undefined };
      const data = secrets.get(m[1]!);
      if (!data) return { status: 404, body: { kind: 'Status', code: 404 } };
      if (opts.method === 'PATCH') {
        patches.push({ name: m[1]!, body: opts.body });
        Object.assign(data, (opts.body as { data: Record<string, string> }).data);
      }
      return { status: 200, body: { data } };
    },
    watch: () => Promise.reject(new Error('not used')),
  };
  return { secrets, patches, transport };
}

/** TEST DOUBLE of Argo CD's API server: login against argocd-secret's hash (as Argo CD checks it), token or session bearer. */
async function argoDouble(kube: ReturnType<typeof kubeDouble>, apiToken: string) {
  const sessions = new Set<string>();
  let logins = 0;
  const server = https.createServer({ cert: served.cert, key: served.key }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const send = (status: number, body: unknown) =>
        res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
      if (req.url === '/api/v1/session' && req.method === 'POST') {
        logins++;
        const { username, password } = JSON.parse(Buffer.concat(chunks).toString()) as Record<string, string>;
        const hash = kube.secrets.get('argocd-secret')?.[`accounts.${username}.password`];
        if (hash && bcrypt.compareSync(password!, Buffer.from(hash, 'base64').toString())) {
          const token = `session-${logins}`;
          sessions.add(token);
          return send(200, { token });
        }
        return send(401, { error: 'Invalid username or password', code: 16, message: 'Invalid username or password' });
      }
      const bearer = (req.headers.authorization ?? '').replace(/^Bearer /, '');
      if (bearer !== apiToken && !sessions.has(bearer)) return send(401, { code: 16, message: 'invalid session' });
      if (req.url?.startsWith('/api/v1/applications/web?'))
        return send(200, { metadata: { name: 'web', namespace: 'argocd' } });
      return send(403, { code: 7, message: 'permission denied' });
    });
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  t.teardown(
    () =>
      new Promise<void>((ok) => {
        server.closeAllConnections();
        server.close(() => ok());
      }),
  );
  return {
    url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get logins() {
      return logins;
    },
  };
}

function logDouble() {
  const lines: string[] = [];
  return {
    lines,
    info: (_o: object, msg: string) => void lines.push(`info: ${msg}`),
    warn: (_o: object, msg: string) => void lines.push(`warn: ${msg}`),
  };
}

const failure = async (p: Promise<unknown>): Promise<ArgoCdError> => {
  try {
    await p;
  } catch (err) {
    if (err instanceof ArgoCdError) return err;
    throw err;
  }
  throw new Error('it answered');
};

t.test('https verified against argocd-server-tls; another certificate refused; none: unverified', async (t) => {
  const kube = kubeDouble();
  const argo = await argoDouble(kube, 'api-token-1');
  const client = (secret: string, log = logDouble()) => {
    const tls = argoCdTls({ kube: kube.transport, namespace: 'argocd', secret, log });
    return {
      tls,
      log,
      argo: new ArgoCdClient({
        serverUrl: argo.url,
        username: 'source-server',
        password: () => '',
        token: () => 'api-token-1',
        timeoutMs: 5000,
        dispatcher: tls.dispatcher,
      }),
    };
  };
  kube.secrets.set('argocd-server-tls', { 'tls.crt': b64(served.cert), 'tls.key': b64('not read') });
  kube.secrets.set('wrong-tls', { 'tls.crt': b64(other.cert) });

  const ok = client('argocd-server-tls');
  t.match(
    await ok.argo.application('argocd', 'web'),
    { metadata: { name: 'web' } },
    'the certificate in the Secret verifies the server',
  );
  t.equal(ok.tls.mode(), 'verified', 'verified');
  t.match(ok.log.lines, [/verified against its certificate/], 'and said so in the log');

  const wrong = client('wrong-tls');
  const refused = await failure(wrong.argo.application('argocd', 'web'));
  t.equal(refused.failure, 'unavailable', 'a server whose certificate is not the Secret’s is not answered from');
  t.match(refused.message, /certificate/i, `the message names the certificate: ${refused.message}`);

  const none = client('absent-tls');
  t.match(
    await none.argo.application('argocd', 'web'),
    { metadata: { name: 'web' } },
    'without the Secret it connects',
  );
  t.equal(none.tls.mode(), 'unverified', 'unverified');
  t.match(none.log.lines, [/^warn: .*cannot be verified/], 'and warns once in the log');
  await none.argo.application('argocd', 'web');
  t.equal(none.log.lines.length, 1, 'once, not at every request');
});

t.test('an API token: missing, refused, accepted', async (t) => {
  const kube = kubeDouble();
  const argo = await argoDouble(kube, 'api-token-2');
  let token: string | undefined;
  const tls = argoCdTls({ kube: kube.transport, namespace: 'argocd', secret: 'none', log: logDouble() });
  const client = new ArgoCdClient({
    serverUrl: argo.url,
    username: 'source-server',
    password: () => '',
    token: () => token,
    tokenSource: '/etc/source-server-argocd/token',
    timeoutMs: 5000,
    dispatcher: tls.dispatcher,
  });
  const missing = await failure(client.application('argocd', 'web'));
  t.equal(missing.failure, 'unavailable', 'no token yet: unavailable (503), not a failure of the application');
  t.match(
    missing.message,
    /no Argo CD API token yet \(\/etc\/source-server-argocd\/token\)/,
    'naming where it is expected',
  );
  token = 'revoked';
  const bad = await failure(client.application('argocd', 'web'));
  t.match(bad.message, /refused the Source Server's API token \(HTTP 401\)/, 'a refused token says so');
  token = 'api-token-2';
  t.match(
    await client.application('argocd', 'web'),
    { metadata: { name: 'web' } },
    'the token the file holds now is used',
  );
  t.equal(argo.logins, 0, 'and nothing ever logged in');
});

t.test('the account set up in argocd-secret when the login is refused, once', async (t) => {
  const kube = kubeDouble();
  kube.secrets.set('argocd-secret', { 'server.secretkey': b64('signing'), 'admin.password': b64('$2a$10$admin') });
  const argo = await argoDouble(kube, 'unused');
  const log = logDouble();
  const setup = argoCdAccountSetup({
    kube: kube.transport,
    namespace: 'argocd',
    account: 'source-server',
    password: () => 'derived-pw',
    log,
    now: () => new Date('2026-11-29T10:00:00.123Z'),
  });
  const tls = argoCdTls({ kube: kube.transport, namespace: 'argocd', secret: 'none', log: logDouble() });
  const client = new ArgoCdClient({
    serverUrl: argo.url,
    username: 'source-server',
    password: () => 'derived-pw',
    timeoutMs: 5000,
    setupAccount: setup,
    dispatcher: tls.dispatcher,
  });
  t.match(await client.application('argocd', 'web'), { metadata: { name: 'web' } }, 'refused, set up, logged in');
  t.equal(kube.patches.length, 1, 'one patch');
  t.same(
    Object.keys((kube.patches[0]!.body as { data: Record<string, string> }).data).sort(),
    ['accounts.source-server.password', 'accounts.source-server.passwordMtime'],
    'of the two keys of its account only',
  );
  const data = kube.secrets.get('argocd-secret')!;
  t.equal(
    Buffer.from(data['accounts.source-server.passwordMtime']!, 'base64').toString(),
    '2026-11-29T10:00:00Z',
    'RFC 3339 time',
  );
  t.equal(Buffer.from(data['server.secretkey']!, 'base64').toString(), 'signing', 'Argo CD’s other keys kept');
  t.equal(argo.logins, 2, 'the refused login and the one after the set-up');

  // The hash already matches: the refusal has another cause; nothing is written.
  const again = await setup();
  t.equal(again, false, 'a matching hash: nothing written');
  t.equal(kube.patches.length, 1, 'no second patch');
  t.match(log.lines.at(-1), /declared in argocd-cm/, 'the log says what else to look at');
});
