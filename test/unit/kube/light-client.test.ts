/**
 * The event reporter's API server client without @kubernetes/client-node (runtime/kube/
 * light-client.ts): kubeconfig credentials as the reporter reads them, requests and watch streams
 * against an API server stand-in on loopback (plain HTTP), and the Lease times it writes.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { connectionFromKubeconfig, connectionInCluster, lightTransport } from '../../../runtime/kube/light-client.ts';
import { microTime } from '../../../runtime/agents/event-reporter/leases.ts';
import { until } from '../../../sandbox/until.ts';

const dir = await mkdtemp(join(tmpdir(), 'light-client-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));

const kubeconfig = async (name: string, user: string, cluster = 'server: https://10.0.0.1:6443') => {
  const file = join(dir, name);
  await writeFile(
    file,
    `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {${cluster}}}]
users: [{name: u, user: ${user}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`,
  );
  return file;
};

t.test('kubeconfig credentials', async (t) => {
  const withToken = connectionFromKubeconfig(await kubeconfig('token', '{token: abc}'));
  t.equal(withToken.server, 'https://10.0.0.1:6443', 'the current context’s server');
  t.equal(withToken.authorization?.(), 'Bearer abc', 'an inline token is a bearer token');

  await writeFile(join(dir, 'sa-token'), 'from-file\n');
  const fromFile = connectionFromKubeconfig(await kubeconfig('token-file', '{tokenFile: sa-token}'));
  t.equal(fromFile.authorization?.(), 'Bearer from-file', 'a token file relative to the kubeconfig is read (trimmed)');

  const pem = Buffer.from('-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n');
  const certs = connectionFromKubeconfig(
    await kubeconfig(
      'certs',
      `{client-certificate-data: ${pem.toString('base64')}, client-key-data: ${pem.toString('base64')}}`,
      `server: https://10.0.0.1:6443, certificate-authority-data: ${pem.toString('base64')}, tls-server-name: api.internal`,
    ),
  );
  t.same([certs.cert, certs.key, certs.ca], [pem, pem, pem], 'client certificate, key and CA decoded from base64');
  t.equal(certs.tlsServerName, 'api.internal', 'tls-server-name kept');
  t.equal(certs.authorization?.(), undefined, 'no Authorization header with a client certificate');

  t.throws(
    () => connectionFromKubeconfig(join(dir, 'missing')),
    /missing cannot be read as a kubeconfig: ENOENT/,
    'a kubeconfig that cannot be read names the file and why',
  );
  const exec = await kubeconfig('exec', '{exec: {command: aws, apiVersion: client.authentication.k8s.io/v1}}');
  t.throws(
    () => connectionFromKubeconfig(exec),
    /exec or auth-provider plugin, which the event reporter does not run/,
    'an exec plugin is refused, saying so',
  );
  t.throws(() => connectionInCluster({}), /KUBERNETES_SERVICE_HOST is not set/, 'in-cluster without a pod environment');
});

t.test('requests and watches against a loopback API server', async (t) => {
  const seen: { method: string; url: string; auth: string | undefined; body: string }[] = [];
  let watchRes: ServerResponse | undefined;
  const server = createServer((req: IncomingMessage, res) => {
    let body = '';
    req.on('error', () => {}); // the client ends watches by closing the connection
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      seen.push({ method: req.method!, url: req.url!, auth: req.headers.authorization, body });
      const url = new URL(req.url!, 'http://x');
      if (url.pathname === '/apis/g/v1/things' && url.searchParams.get('watch') === 'true') {
        if (url.searchParams.get('resourceVersion') === 'refused')
          return res.writeHead(403, { 'content-type': 'application/json' }).end('{}');
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write('{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"5"}}}\n');
        // Split across writes, and a line that is not JSON (skipped).
        res.write('{"type":"MODIFIED","object":{"metadata":');
        res.write('{"name":"a","resourceVersion":"6"}}}\nnot json\n');
        watchRes = res;
        return;
      }
      if (url.pathname === '/apis/g/v1/things')
        return res
          .writeHead(200, { 'content-type': 'application/json' })
          .end('{"items":[],"metadata":{"resourceVersion":"4"}}');
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"kind":"Status","code":404}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  const kube = lightTransport(
    connectionFromKubeconfig(
      await kubeconfig(
        'loopback',
        '{token: secret}',
        `server: "http://127.0.0.1:${(server.address() as AddressInfo).port}"`,
      ),
    ),
    300,
  );

  const list = await kube.request('/apis/g/v1/things', { query: { limit: '500' } });
  t.same(
    list,
    { status: 200, body: { items: [], metadata: { resourceVersion: '4' } } },
    'a GET answers status and JSON',
  );
  t.equal(seen.at(-1)?.auth, 'Bearer secret', 'with the token');
  t.equal(seen.at(-1)?.url, '/apis/g/v1/things?limit=500', 'and the query');
  const put = await kube.request('/apis/g/v1/other', { method: 'PUT', body: { a: 1 } });
  t.equal(put.status, 404, 'a non-2xx status is returned, not thrown');
  t.same([seen.at(-1)?.method, seen.at(-1)?.body], ['PUT', '{"a":1}'], 'a body is sent as JSON');

  const events: string[] = [];
  let ended: (err: unknown) => void = () => {};
  const done = new Promise<unknown>((r) => (ended = r));
  await kube.watch(
    '/apis/g/v1/things',
    { resourceVersion: '4', allowWatchBookmarks: true },
    (type, obj) => {
      events.push(`${type}:${(obj.metadata as { resourceVersion: string }).resourceVersion}`);
    },
    (err) => ended(err),
  );
  await t.resolves(
    until('the watch events', 5000, () => events.length === 2),
    'both events arrive',
  );
  t.same(events, ['ADDED:5', 'MODIFIED:6'], 'events in order, a line split across writes joined, a bad line skipped');
  t.match(seen.at(-1)?.url, /watch=true.*|.*resourceVersion=4/, 'watch=true and the query are sent');
  const err = (await done) as Error;
  t.equal(err?.name, 'TimeoutError', 'a watch silent for the idle timeout ends with a TimeoutError');
  t.ok(watchRes, 'the server held the watch open');

  const refused = await new Promise<unknown>((resolve) => {
    void kube.watch('/apis/g/v1/things', { resourceVersion: 'refused' }, () => {}, resolve);
  });
  t.equal((refused as { statusCode?: number }).statusCode, 403, 'a refused watch ends with its status');
});

t.test('Lease times are MicroTimes: six fractional digits', async (t) => {
  t.equal(microTime(new Date('2026-11-23T21:00:00.123Z')), '2026-11-23T21:00:00.123000Z');
});
