/**
 * The runtimes' proxy route with a runtime registered with `access: ingress`: the route hands the
 * request to the ingress forwarder it was given — the runtime-side path, the caller's headers
 * without its credentials, the runtime's id and ingressUrl, the caller as subject — and streams its
 * answer back through the same response rules; without a forwarder it answers 503
 * RUNTIME_UNREACHABLE naming why. The forwarder and the runtime lookup here are TEST DOUBLES: the
 * real https transport is test/integration/runtime/hybrid-ingress.test.ts's, the real lookup (the
 * runtimes table) test/integration/runtime/hybrid-tunnel-replicas.test.ts's.
 */
import t from 'tap';
import { Readable } from 'node:stream';
import Fastify, { type FastifyError } from 'fastify';
import { AppError } from '../../../provisioner/errors.ts';
import { createTunnelServer } from '../../../provisioner/tunnel/server.ts';
import { tunnelRoutes, type ProxiedRuntime } from '../../../provisioner/tunnel/route.ts';
import type { IngressForwardInput, IngressForwarder } from '../../../provisioner/tunnel/ingress.ts';

const TENANT = '3f6c1a52-6a0e-4c1b-9a57-2d8e0f4b7c11';
const EDGE: ProxiedRuntime = {
  id: '8d1e5b7a-0c2f-4e7d-b1a3-6f9e2c4d8a10',
  name: 'edge',
  mode: 'hybrid',
  access: 'ingress',
  ingressUrl: 'https://runtime.edge.example.test',
  state: 'installed',
};

/** TEST DOUBLE of the ingress transport: records what the route gave it and answers with a redirect. */
class RecordingIngress implements IngressForwarder {
  readonly seen: Array<Omit<IngressForwardInput, 'body' | 'signal'>> = [];
  async forward(input: IngressForwardInput) {
    const { body: _body, signal: _signal, ...rest } = input;
    this.seen.push(rest);
    return {
      status: 302,
      headers: [
        ['location', '/api/runtime'],
        ['set-cookie', 'runtime=1'],
        ['content-type', 'application/json'],
      ] as Array<[string, string]>,
      body: Readable.from([Buffer.from('{"from":"ingress"}')]),
    };
  }
}

async function app(ingress: IngressForwarder | undefined) {
  const tunnel = createTunnelServer({ authenticate: async () => null });
  const server = Fastify();
  server.setErrorHandler((err: FastifyError | AppError, _request, reply) =>
    reply
      .status(err.statusCode ?? 500)
      .send({ error: { code: err instanceof AppError ? err.code : 'INTERNAL', message: err.message } }),
  );
  await server.register(tunnelRoutes, {
    tunnel,
    canAccessTenant: (_request, tenantId) => tenantId === TENANT,
    subjectOf: () => 'key-1',
    // TEST DOUBLE of the runtimes table lookup.
    runtimeByName: async (tenantId, name) => (tenantId === TENANT && name === 'edge' ? EDGE : undefined),
    ...(ingress ? { ingress } : {}),
  });
  t.teardown(async () => {
    await tunnel.close();
    await server.close();
  });
  return server;
}

t.test('an ingress runtime is reached through the ingress forwarder, with the route rules', async (t) => {
  const ingress = new RecordingIngress();
  const server = await app(ingress);
  const res = await server.inject({
    method: 'GET',
    url: `/v1/tenants/${TENANT}/runtimes/edge/proxy/api/runtime?x=1`,
    headers: { authorization: 'Bearer caller', cookie: 'session=caller', 'x-custom': 'kept' },
  });
  t.equal(res.statusCode, 302, "the runtime's status comes back");
  t.equal(res.body, '{"from":"ingress"}', "the runtime's body comes back");
  t.equal(
    res.headers.location,
    `/v1/tenants/${TENANT}/runtimes/edge/proxy/api/runtime`,
    "the Location is put under the runtime's proxy route",
  );
  t.equal(res.headers['set-cookie'], undefined, "the runtime's cookie does not reach the caller");
  t.equal(ingress.seen.length, 1, 'the forwarder was called once');
  const input = ingress.seen[0]!;
  t.match(
    input,
    {
      tenantId: TENANT,
      runtimeId: EDGE.id,
      ingressUrl: EDGE.ingressUrl,
      method: 'GET',
      path: '/api/runtime?x=1',
      subject: 'key-1',
    },
    "the forwarder gets the runtime's id and ingressUrl, the runtime-side path with its query and the caller as subject",
  );
  const names = input.headers.map(([name]) => name.toLowerCase());
  t.notOk(names.includes('authorization'), "the caller's Authorization is not passed on");
  t.notOk(names.includes('cookie'), "the caller's Cookie is not passed on");
  t.ok(names.includes('x-custom'), 'other caller headers are passed on');
});

t.test('without an ingress forwarder: 503 RUNTIME_UNREACHABLE naming why', async (t) => {
  const server = await app(undefined);
  const res = await server.inject({ method: 'GET', url: `/v1/tenants/${TENANT}/runtimes/edge/proxy/api/runtime` });
  t.equal(res.statusCode, 503);
  t.match(
    res.json(),
    {
      error: {
        code: 'RUNTIME_UNREACHABLE',
        message: /reached through its ingress, which this control plane is not configured to call/,
      },
    },
    'the error says the control plane has no ingress transport',
  );
});
