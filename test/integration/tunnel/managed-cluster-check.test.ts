/**
 * The managed-cluster check through a runtime's tunnel, with the real pieces on loopback (the
 * tunnel server and its request signer, the tunnel client, the request router, the app-proxy):
 * the control plane's own request is checked inside the runtime and answered with the check's
 * outcome; a tenant's call relayed through the tunnel is refused; a malformed check is a 400; a
 * runtime without a tunnel is reported as such. The checks against a real kube-apiserver (accepted,
 * unauthorized, missing permissions, going away and back) are in the end-to-end tier
 * (test/e2e/managed-cluster-via-runtime.test.ts).
 */
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:net';
import t from 'tap';
import { checkThroughRuntime, RuntimeCheckError } from '../../../provisioner/managed-clusters/via-runtime.ts';
import { json, ready, request, startControlPlane, startRuntime, StubCallers, StubRuntimeTokens } from './harness.ts';

const tokens = new StubRuntimeTokens();
const callers = new StubCallers();
const tenant = randomUUID();
const cp = await startControlPlane({ tokens, callers });
const runtime = await startRuntime(tenant, cp, tokens.issue(tenant).token);
t.teardown(async () => {
  await runtime.close();
  await cp.close();
});
await ready(cp, runtime);

/** A port nothing listens on (bound, then closed). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

t.test('the runtime checks a cluster for the control plane and answers the outcome', async (t) => {
  const port = await closedPort();
  const check = await checkThroughRuntime(
    cp.tunnel,
    tenant,
    { server: `https://127.0.0.1:${port}`, config: { bearerToken: 'some-token', tlsClientConfig: {} } },
    AbortSignal.timeout(10_000),
  );
  t.match(
    check,
    { ok: false, problem: 'UNREACHABLE', error: 'ECONNREFUSED', message: /ECONNREFUSED/ },
    "the runtime's own connection attempt was refused, and it says so",
  );
});

t.test("a tenant's call relayed through the tunnel may not ask for a check", async (t) => {
  const key = callers.add('tenant', tenant);
  const res = await request(`${cp.base}/v1/tenants/${tenant}/runtime/api/managed-clusters/check`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: Buffer.from(JSON.stringify({ server: 'https://10.0.0.1:6443', config: {} })),
  });
  t.equal(res.status, 403, 'refused: the check is the control plane’s own request only');
  t.match(
    json(res),
    { error: { code: 'FORBIDDEN', message: /for the control plane only/ } },
    "answered by the app-proxy's check route",
  );
});

t.test('a malformed check is refused naming the field; an insecure one too', async (t) => {
  const err = await checkThroughRuntime(
    cp.tunnel,
    tenant,
    { server: 'http://127.0.0.1:1', config: {} },
    AbortSignal.timeout(10_000),
  ).catch((e: unknown) => e);
  t.ok(err instanceof RuntimeCheckError, 'the control plane gets a RuntimeCheckError');
  t.match((err as Error).message, /answered 400 \(server: server must be an https URL\)/, 'naming the field');
  const insecure = await checkThroughRuntime(
    cp.tunnel,
    tenant,
    { server: 'https://127.0.0.1:1', config: { tlsClientConfig: { insecure: true } } },
    AbortSignal.timeout(10_000),
  ).catch((e: unknown) => e);
  t.match(
    (insecure as Error).message,
    /config\.tlsClientConfig\.insecure: a managed cluster is checked with TLS verification/,
    'TLS verification cannot be turned off',
  );
});

t.test('a runtime without a tunnel is reported as not connected', async (t) => {
  const err = await checkThroughRuntime(
    cp.tunnel,
    randomUUID(),
    { server: 'https://127.0.0.1:1', config: {} },
    AbortSignal.timeout(10_000),
  ).catch((e: unknown) => e);
  t.ok(err instanceof RuntimeCheckError, 'a RuntimeCheckError');
  t.equal((err as RuntimeCheckError).connected, false, 'that says the tunnel is not connected');
  t.equal((err as Error).message, "the runtime's tunnel is not connected", 'in words');
});
