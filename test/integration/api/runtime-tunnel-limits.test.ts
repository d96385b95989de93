/**
 * Tunnel limits set through the provisioner's configuration (PROVISIONER_TUNNEL_*) and the tunnel's
 * shutdown, through the real app: a runtime's tunnel client forwards to a plain HTTP upstream, and
 * the forwarding route answers with the provisioner's own error handler.
 */
import t from 'tap';
import http from 'node:http';
import { once } from 'node:events';
import { createTestApi } from '../../helpers/api.ts';
import { connectRuntime } from '../../helpers/runtime.ts';

const LIMIT = 4096;
const api = await createTestApi({ env: { PROVISIONER_TUNNEL_MAX_REQUEST_BODY_BYTES: String(LIMIT) } });
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

const tenant = await api.signup();
// Test double of the runtime side: an upstream that answers with the size of what it received.
let hanging: () => void = () => {};
const hangReached = new Promise<void>((resolve) => {
  hanging = resolve;
});
const upstream = http
  .createServer((req, res) => {
    if (req.url === '/api/hang') return hanging(); // never answers: a request in flight at shutdown
    let n = 0;
    req.on('data', (c: Buffer) => {
      n += c.length;
    });
    req.on('end', () =>
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ received: n })),
    );
  })
  .listen(0, '127.0.0.1');
await once(upstream, 'listening');
const { client } = await connectRuntime(api, base, tenant.tenantId, upstream);
t.teardown(async () => {
  await client.close();
  upstream.close();
});

const post = (body: Buffer | AsyncIterable<Buffer>, headers: Record<string, string> = {}) => {
  // A streamed body needs `duplex: 'half'`, which the DOM RequestInit type does not list yet.
  const init = {
    method: 'POST',
    body,
    headers: { authorization: `Bearer ${tenant.apiKey}`, ...headers },
    duplex: 'half',
  };
  return fetch(`${base}/v1/tenants/${tenant.tenantId}/runtime/api/upload`, init as unknown as RequestInit);
};

t.test(
  'PROVISIONER_TUNNEL_MAX_REQUEST_BODY_BYTES: a body within the limit is forwarded, a larger one is 413 naming the limit',
  async (t) => {
    const ok = await post(Buffer.alloc(LIMIT, 1));
    t.equal(ok.status, 200);
    t.same(await ok.json(), { received: LIMIT });

    const declared = await post(Buffer.alloc(LIMIT + 1, 1));
    t.equal(declared.status, 413, 'declared Content-Length over the limit');
    const body = (await declared.json()) as { error: { code: string; message: string } };
    t.equal(body.error.code, 'PAYLOAD_TOO_LARGE');
    t.match(body.error.message, new RegExp(String(LIMIT)), 'the message names the limit');

    async function* chunks(): AsyncIterable<Buffer> {
      for (let i = 0; i < 4; i++) yield Buffer.alloc(2048, 2);
    }
    const chunked = await post(chunks());
    t.equal(chunked.status, 413, 'a chunked body that grows past the limit');
    t.equal(((await chunked.json()) as { error: { code: string } }).error.code, 'PAYLOAD_TOO_LARGE');

    const after = await post(Buffer.from('small'));
    t.equal(after.status, 200, 'the tunnel keeps serving');
  },
);

t.test(
  'shutdown of the tunnel server: a request in flight and a new one get 503 SHUTTING_DOWN from the app',
  async (t) => {
    const url = `${base}/v1/tenants/${tenant.tenantId}/runtime/api/hang`;
    const headers = { authorization: `Bearer ${tenant.apiKey}` };
    const inFlight = fetch(url, { headers });
    await hangReached; // forwarded through the tunnel and waiting at the runtime's upstream
    await api.services.tunnel.close();
    const cut = await inFlight;
    t.equal(cut.status, 503);
    t.equal(((await cut.json()) as { error: { code: string } }).error.code, 'SHUTTING_DOWN');
    const later = await fetch(url, { headers });
    t.equal(later.status, 503);
    const body = (await later.json()) as { error: { code: string; message: string } };
    t.match(body.error, { code: 'SHUTTING_DOWN', message: /shutting down/ });
  },
);
