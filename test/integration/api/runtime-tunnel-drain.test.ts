/**
 * A rolling restart of the control plane: two replicas on one database behind a TCP load balancer
 * (a test double of the Service: it sends new connections to whichever replica is in rotation).
 * Replica A shuts down while a request through it is still running at the runtime: the runtime is
 * told to go away, reconnects through the load balancer to replica B, the running request
 * finishes through A, and new requests are served through B — also those that still reach A.
 */
import t from 'tap';
import http from 'node:http';
import net from 'node:net';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { createTestApi, startReplica } from '../../helpers/api.ts';
import { connectRuntime } from '../../helpers/runtime.ts';
import { createPool } from '../../../provisioner/db/database.ts';
import { until } from '../../../sandbox/until.ts';

const a = await createTestApi();
const baseA = await a.app.listen({ port: 0, host: '127.0.0.1' });
const poolB = createPool(a.db.url, 5);
const b = await startReplica(a.config, { pool: poolB, url: a.db.url }, { replicaId: 'replica-b' });
const baseB = await b.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(async () => {
  await b.close();
  await poolB.end();
  await a.close();
});
const portOf = (base: string): number => Number(new URL(base).port);

/** TEST DOUBLE of the Kubernetes Service in front of the replicas: new connections go to `target`. */
let target = portOf(baseA);
const balancer = net.createServer((down) => {
  const up = net.connect(target, '127.0.0.1');
  down.on('error', () => up.destroy());
  up.on('error', () => down.destroy());
  down.pipe(up);
  up.pipe(down);
});
balancer.listen(0, '127.0.0.1');
await once(balancer, 'listening');
t.teardown(() => balancer.close());

const tenant = await a.signup();
const SLOW_BYTES = 2 * 1024 * 1024 + 3;
let releaseSlow: (() => void) | undefined;
let slowArrived: () => void = () => {};
const arrived = new Promise<void>((resolve) => (slowArrived = resolve));
const upstream = http.createServer((req, res) => {
  if (req.url === '/api/slow') {
    releaseSlow = () => {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': SLOW_BYTES });
      res.end(Buffer.alloc(SLOW_BYTES, 3));
    };
    slowArrived();
    return;
  }
  res.writeHead(201, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ path: req.url }));
});
upstream.listen(0, '127.0.0.1');
await once(upstream, 'listening');
t.teardown(() => upstream.close());
const runtime = await connectRuntime(
  a,
  `http://127.0.0.1:${(balancer.address() as AddressInfo).port}`,
  tenant.tenantId,
  upstream,
  'runtime',
);
t.teardown(() => runtime.client.close());
await until('A holds the tunnel', 10_000, () => a.services.tunnel.status(tenant.tenantId).connected);
const auth = { authorization: `Bearer ${tenant.apiKey}` };

t.test(
  'a replica shutting down drains: the running request finishes, new ones go to the replica the runtime moved to',
  async (t) => {
    t.equal(a.services.tunnel.status(tenant.tenantId).connected, true, 'the runtime is connected to A');
    const slow = fetch(`${baseA}/v1/tenants/${tenant.tenantId}/runtime/api/slow`, { headers: auth });
    await arrived;

    // A leaves the rotation and shuts down.
    target = portOf(baseB);
    const draining = once(runtime.client.events, 'draining');
    const reconnected = once(runtime.client.events, 'connected');
    const closingA = a.app.close();
    await draining;
    await reconnected;
    await until('B holds the tunnel', 10_000, () => b.services.tunnel.status(tenant.tenantId).connected);
    t.equal(b.services.tunnel.status(tenant.tenantId).connected, true, 'the runtime reconnected, to B');
    await b.services.tunnelDirectory.renew();

    const viaB = await fetch(`${baseB}/v1/tenants/${tenant.tenantId}/runtime/api/new`, { headers: auth });
    t.equal(viaB.status, 201, 'B serves new requests');
    const viaA = await fetch(`${baseA}/v1/tenants/${tenant.tenantId}/runtime/api/late`, { headers: auth });
    t.equal(viaA.status, 201, 'a request still reaching A while it drains is relayed to B');
    t.same(await viaA.json(), { path: '/api/late' });

    releaseSlow!();
    const res = await slow;
    t.equal(res.status, 200, 'the request that was running when A began to shut down finished');
    t.equal((await res.arrayBuffer()).byteLength, SLOW_BYTES, 'with its whole body');
    await closingA;
    t.equal(a.services.tunnel.status(tenant.tenantId).connected, false);
    t.equal(
      b.services.tunnel.status(tenant.tenantId).connected,
      true,
      'the new tunnel was not closed as a replacement of the drained one',
    );
  },
);
