/**
 * A registration of a cluster only the runtime reaches (`reach: runtime`) arriving at a replica that
 * does not hold the runtime's tunnel: it is relayed to the replica that does, which has the runtime
 * check the cluster. Two provisioner replicas on one database, a real runtime (tunnel client,
 * request router, app-proxy) connected to replica A. The cluster is a closed loopback port, so the
 * runtime's own check answers ECONNREFUSED: a 422 naming it proves the check was made in the
 * runtime (replica B alone could only answer 503 RUNTIME_UNREACHABLE). The registration with a real
 * kube-apiserver: test/e2e/managed-cluster-via-runtime.test.ts.
 */
import t from 'tap';
import http from 'node:http';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { createTestApi, startReplica } from '../../helpers/api.ts';
import { connectRuntime } from '../../helpers/runtime.ts';
import { createPool } from '../../../provisioner/db/database.ts';
import { buildAppProxy } from '../../../runtime/agents/app-proxy/app.ts';
import { loadPublicKey } from '../../../runtime/agents/app-proxy/request-token.ts';
import { staticRuntimeInfo } from '../../../runtime/agents/app-proxy/runtime-info.ts';
import { createRouter } from '../../../runtime/agents/request-router/router.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';

const a = await createTestApi({ env: { PROVISIONER_MANAGED_CLUSTER_PROBE_SECONDS: '0' } });
const baseA = await a.app.listen({ port: 0, host: '127.0.0.1' });
const poolB = createPool(a.db.url, 5);
const b = await startReplica(a.config, { pool: poolB, url: a.db.url }, { replicaId: 'replica-b' });
const baseB = await b.app.listen({ port: 0, host: '127.0.0.1' });
const tenant = await a.signup();

const proxy = await buildAppProxy({
  tenantId: tenant.tenantId,
  publicKey: loadPublicKey(a.services.signer.publicKeyPem),
  runtimeInfo: staticRuntimeInfo({ runtimeVersion: '1.4.0', components: { argoCd: '7.9.1' } }),
});
const proxyUrl = await proxy.listen({ port: 0, host: '127.0.0.1' });
const router = createRouter({ appProxyUrl: proxyUrl, eventSourceUrl: 'http://127.0.0.1:9' });
const routerServer = http.createServer(router.handler).listen(0, '127.0.0.1');
await once(routerServer, 'listening');
const runtime = await connectRuntime(a, baseA, tenant.tenantId, routerServer);
await a.services.tunnelDirectory.renew();
t.teardown(async () => {
  await runtime.client.close();
  router.close();
  routerServer.close();
  await proxy.close();
  await b.close();
  await poolB.end();
  await a.close();
});

/** A port nothing listens on (bound, then closed). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

t.test('a registration through the runtime at the replica without the tunnel is checked by the runtime', async (t) => {
  t.equal(b.services.tunnel.status(tenant.tenantId).connected, false, 'replica B does not hold the tunnel');
  const server = `https://127.0.0.1:${await closedPort()}`;
  await t.rejects(
    new ApiClient({ baseUrl: baseB, token: tenant.apiKey }).call('POST /v1/tenants/:id/managed-clusters', {
      params: { id: tenant.tenantId },
      body: { name: 'behind', reach: 'runtime', server, token: 'some-token', namespaces: ['apps'] },
    }),
    { status: 422, code: 'MANAGED_CLUSTER_UNREACHABLE', message: /could not be reached: ECONNREFUSED/ },
    "refused by the runtime's check: MANAGED_CLUSTER_UNREACHABLE, naming the runtime's network error",
  );
});
