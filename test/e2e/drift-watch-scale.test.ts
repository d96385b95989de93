/**
 * The root-cluster watch over many tenants, on real kube-apiservers and real Postgres: 2,000
 * tenants' objects here (namespace, quota, limit range, network policy each: 8,000 objects) on
 * three root clusters, written by the test, the watch started in this process against them.
 * Asserted: the watch knows every object, requests nothing for its first lists or at rest, and one
 * object changed by hand → exactly one resync requested, for exactly that tenant. Measured and
 * printed: the time to its first lists, its memory (heap after a full GC) and its CPU at rest. The
 * fleet-size targets (10,000 tenants: heap < 300 MiB, CPU at rest < 0.1 core) are a benchmark:
 * `npm run bench -- drift-watch` runs this file at 10,000 tenants and checks them
 * (bench/drift-watch.bench.ts; figures in docs/benchmarks.md).
 *
 * No KWOK nodes: nothing here runs pods (no controllers), and the watched objects do not need
 * nodes to exist.
 */
import t from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { CoreV1Api } from '@kubernetes/client-node';
import { SecretBox } from '../../provisioner/crypto.ts';
import { DriftWatch } from '../../provisioner/drift-watch/watch.ts';
import { STRICT_KUBECONFIG_POLICY } from '../../kubeconfig-policy/policy.ts';
import { insertCluster } from '../../provisioner/store/clusters.ts';
import { createTestDatabase } from '../helpers/postgres.ts';
import { findTenants } from '../helpers/tenants.ts';
import { startEtcd, startKubeControlPlane, toolchainFrom, type KubeControlPlane } from '../../sandbox/control-plane.ts';
import { until } from '../../sandbox/processes.ts';
import { insertReadyTenants, OBJECTS_PER_TENANT, seedTenantObjects } from './harness/tenant-objects.ts';

t.setTimeout(20 * 60_000);
const TENANTS = Number(process.env.DRIFT_WATCH_TENANTS ?? 2_000);
/** Root clusters the tenants are spread over (the sizing: 10,000 tenants on 3). */
const CLUSTERS = 3;

const bin = process.env.HRT_TOOLCHAIN_BIN;
if (!bin) throw new Error('HRT_TOOLCHAIN_BIN is not set: run the tier through scripts/test.sh e2e');
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const heapMiB = () => {
  gc();
  gc();
  return process.memoryUsage().heapUsed / 2 ** 20;
};

const dir = await mkdtemp(join(tmpdir(), 'hrt-e2e-watch-scale-'));
const toolchain = toolchainFrom(bin);
const etcd = await startEtcd(toolchain, join(dir, 'etcd'));
const roots = await Promise.all(
  Array.from({ length: CLUSTERS }, (_, i) =>
    startKubeControlPlane(toolchain, {
      name: `scale-${i}`,
      dir: join(dir, `root-${i}`),
      etcd,
      etcdPrefix: `/scale-${i}`,
      nodes: 0,
      apiServerOnly: true,
    }),
  ),
);
const db = await createTestDatabase();
const box = new SecretBox(Buffer.alloc(32, 7));
let watch: DriftWatch | undefined;
t.teardown(async () => {
  await watch?.stop();
  for (const r of roots) await r.stop();
  await etcd.stop();
  await db.drop();
  await rm(dir, { recursive: true, force: true });
});

// The tenants spread over the clusters as placement would: each cluster its share.
const ids: string[] = [];
const rootOf = new Map<string, KubeControlPlane>();
const seeded = Date.now();
for (const [i, root] of roots.entries()) {
  const name = `scale-root-${i}`;
  const cluster = await insertCluster(db.pool, {
    name,
    region: 'eu-1',
    labels: {},
    capacity: TENANTS,
    plans: [],
    kubeconfigEnc: box.encrypt(Buffer.from(root.kubeconfig), `cluster/${name}`),
  });
  const share = Math.floor(TENANTS / CLUSTERS) + (i < TENANTS % CLUSTERS ? 1 : 0);
  const mine = await insertReadyTenants(db.pool, cluster.id, share);
  await seedTenantObjects(root, mine);
  ids.push(...mine);
  for (const id of mine) rootOf.set(id, root);
}
t.comment(
  `seeded ${TENANTS} tenants (${TENANTS * OBJECTS_PER_TENANT} objects) on ${CLUSTERS} root clusters in ${((Date.now() - seeded) / 1000).toFixed(0)} s`,
);

t.test(`the watch over ${TENANTS} tenants' objects: cost at rest, and one change → one resync`, async (t) => {
  const started = Date.now();
  watch = new DriftWatch({
    pool: db.pool,
    box,
    kubeconfigPolicy: { ...STRICT_KUBECONFIG_POLICY, allowedCidrs: ['127.0.0.0/8'] },
  });
  await watch.start();
  await until('first lists done', 5 * 60_000, async () => watch!.synced, 200);
  const listSeconds = (Date.now() - started) / 1000;
  const objects = watch.status().reduce((n, s) => n + s.objects, 0);
  t.equal(objects, TENANTS * OBJECTS_PER_TENANT, `the watch knows every seeded object (${objects})`);
  const heapWith = heapMiB();
  const rssMiB = process.memoryUsage().rss / 2 ** 20;

  // At rest: nothing changes for 20 s.
  const cpu0 = process.cpuUsage();
  const wall0 = process.hrtime.bigint();
  await new Promise((resolve) => setTimeout(resolve, 20_000));
  const cpu = process.cpuUsage(cpu0);
  const cores = (cpu.user + cpu.system) / 1000 / (Number(process.hrtime.bigint() - wall0) / 1e6);
  t.equal(watch.stats.requested, 0, 'nothing was requested for the first lists');

  // One change by hand → exactly one resync, for that tenant.
  const target = ids[Math.floor(TENANTS / 2)]!;
  await rootOf
    .get(target)!
    .kc.makeApiClient(CoreV1Api)
    .deleteNamespacedResourceQuota({ name: 'tenant-quota', namespace: `tenant-${target}` });
  await until('the resync request', 30_000, async () => watch!.stats.requested === 1, 100);
  const requested = await findTenants(db.pool, { resyncRequested: true });
  t.same(
    requested.map(({ id, resync_reason }) => ({ id, resync_reason })),
    [{ id: target, resync_reason: `ResourceQuota tenant-${target}/tenant-quota: deleted` }],
    'exactly one tenant has a resync requested: the one whose quota was deleted, with the reason',
  );

  // What the watch holds: the heap with it, less the heap once it is stopped and dropped.
  await watch.stop();
  watch = undefined;
  const heap = heapWith - heapMiB();
  // One line bench/drift-watch.bench.ts reads (keep its shape).
  t.comment(
    `watch over ${objects} objects: first lists ${listSeconds.toFixed(1)} s; retained heap ${heap.toFixed(1)} MiB ` +
      `(${((heap * 2 ** 20) / objects).toFixed(0)} B/object); process RSS ${rssMiB.toFixed(0)} MiB; ` +
      `CPU at rest ${(cores * 100).toFixed(2)} % of a core (whole test process)`,
  );
});
