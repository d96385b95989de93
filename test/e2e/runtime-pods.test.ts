/**
 * The runtime pods runner (sandbox/runtime-pods.ts) as the kubelet of the pods it runs: their
 * status on the root cluster is the processes', not KWOK's. A root control plane with KWOK (the
 * toolchain's stages and the synced-pod stages, with the runner's pods left out as the e2e stack
 * leaves them), the runner on a pod network of its own, and pods in the shape vcluster syncs them
 * (its managed-by label) whose image is a named stand-in (fixtures/probe-stand-in.ts).
 * `vclusters` is a double (one namespace, "ready"): the real vcluster runs under the same runner
 * in hosted-runtime.test.ts.
 *
 * Covered: a pod whose process does not listen yet is Running with its start time and not Ready
 * while its httpGet readiness probe fails, and Ready once it passes; a process killed with SIGKILL
 * makes the pod not Ready, and once restarted it shows the restart with exit code 137 as its last
 * state; a pod without a probe is Ready when started; a Job's pod (restartPolicy Never) whose
 * process exits 3 is Failed with that exit code; a pod of an image the runner does not run is
 * still KWOK's (Running and Ready at once).
 */
import t from 'tap';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CoreV1Api, type V1Pod } from '@kubernetes/client-node';
import { kwokLabelQuery, startEtcd, startKubeControlPlane, toolchainFrom } from '../../sandbox/control-plane.ts';
import { RuntimePods, runtimePodsKwokQuery, runtimePodsUnavailable } from '../../sandbox/runtime-pods.ts';
import {
  createPodNetwork,
  realVclusterUnavailable,
  SYNCED_JOB_POD_STAGE,
  VCLUSTER_POD_LABEL,
} from '../../sandbox/vcluster-pods.ts';
import { until } from '../../sandbox/until.ts';

t.setTimeout(5 * 60_000);

const bin = process.env.HRT_TOOLCHAIN_BIN;
if (!bin) throw new Error('HRT_TOOLCHAIN_BIN is not set: run the tier through scripts/test.sh e2e');
const why = (await realVclusterUnavailable()) || (await runtimePodsUnavailable());
if (why) {
  if (process.env.CI === 'true') t.fail(`the runtime pods runner cannot run here: ${why}`);
  else t.plan(0, `the runtime pods runner cannot run here: ${why}`);
} else {
  const IMAGE = 'e2e-probe';
  const SCRIPT = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'probe-stand-in.ts');
  const NS = 'tenant-runner';
  const standIns = { [IMAGE]: SCRIPT };

  const dir = await mkdtemp(join(tmpdir(), 'hrt-e2e-runtime-pods-'));
  // The pods run as 65534 and look for the test's file in here.
  await chmod(dir, 0o755);
  const toolchain = toolchainFrom(bin);
  const etcd = await startEtcd(toolchain, join(dir, 'etcd'));
  t.teardown(() => etcd.stop());
  const root = await startKubeControlPlane(toolchain, {
    name: 'runner',
    dir: join(dir, 'root'),
    etcd,
    etcdPrefix: '/runner',
    nodes: 1,
    extraKwokStages: SYNCED_JOB_POD_STAGE,
    kwokLeavesPods: [
      kwokLabelQuery(VCLUSTER_POD_LABEL.label, VCLUSTER_POD_LABEL.value),
      runtimePodsKwokQuery({ standIns }),
    ],
  });
  t.teardown(() => root.stop());
  const network = await createPodNetwork();
  t.teardown(() => network.remove());
  const core = root.kc.makeApiClient(CoreV1Api);
  await core.createNamespace({ body: { metadata: { name: NS } } });

  // Double of VclusterPods: the namespace's vcluster is "ready"; address slots from 2.
  const slots = new Map<string, number>();
  const vclusters = {
    namespaces: () => [NS],
    get: (ns: string) => (ns === NS ? { ready: true, ip: network.hostIp } : undefined),
    allocate: (owner: string) => {
      if (!slots.has(owner)) slots.set(owner, Math.max(1, ...slots.values()) + 1);
      return slots.get(owner)!;
    },
    release: (owner: string) => void slots.delete(owner),
  };
  const log: string[] = [];
  const runner = new RuntimePods({
    root: root.kc,
    network,
    vclusters,
    dir: join(dir, 'pods'),
    hostPorts: [],
    pollMs: 200,
    standIns,
    log: (m) => log.push(m),
  });
  await runner.start();
  t.teardown(async () => {
    if (!t.passing()) for (const line of [...log, ...runner.errors]) t.comment(line);
    await runner.stop();
    await rm(dir, { recursive: true, force: true });
  });

  const listenFile = join(dir, 'listen');
  const pod = (
    name: string,
    o: { image?: string; env?: Record<string, string>; probe?: boolean; job?: boolean },
  ): V1Pod => ({
    metadata: {
      name,
      namespace: NS,
      labels: { 'vcluster.loft.sh/managed-by': 'runner', ...(o.job ? { 'job-name': name } : {}) },
      annotations: { 'vcluster.loft.sh/object-name': name, 'vcluster.loft.sh/object-namespace': 'default' },
    },
    spec: {
      nodeName: 'kwok-node-0',
      restartPolicy: o.job ? 'Never' : 'Always',
      // vcluster translates the token volume of a synced pod; these are written here directly.
      automountServiceAccountToken: false,
      securityContext: { runAsUser: 65534, runAsGroup: 65534 },
      containers: [
        {
          name: 'main',
          image: o.image ?? `registry.test/${IMAGE}:1`,
          ports: [{ name: 'http', containerPort: 8080 }],
          env: Object.entries(o.env ?? {}).map(([name, value]) => ({ name, value })),
          ...(o.probe ? { readinessProbe: { httpGet: { path: '/', port: 'http' }, periodSeconds: 1 } } : {}),
        },
      ],
    },
  });
  const read = (name: string) => core.readNamespacedPodStatus({ name, namespace: NS });
  const ready = (p: V1Pod) => p.status?.conditions?.find((c) => c.type === 'Ready')?.status;
  const main = (p: V1Pod) => p.status?.containerStatuses?.find((c) => c.name === 'main');

  await core.createNamespacedPod({
    namespace: NS,
    body: pod('probed', { probe: true, env: { LISTEN_WHEN: listenFile } }),
  });
  await core.createNamespacedPod({ namespace: NS, body: pod('unprobed', {}) });
  await core.createNamespacedPod({ namespace: NS, body: pod('job', { job: true, env: { EXIT_CODE: '3' } }) });
  await core.createNamespacedPod({ namespace: NS, body: pod('elsewhere', { image: 'registry.test/unknown:1' }) });

  t.test('a pod of an image the runner does not run stays KWOK’s', async (t) => {
    const p = await until('KWOK to mark pod elsewhere Ready', 60_000, async () => {
      const p = await read('elsewhere');
      return ready(p) === 'True' ? p : undefined;
    });
    t.equal(p.status?.phase, 'Running', 'Running');
    await until('the runner to name pod elsewhere as left to KWOK', 30_000, () =>
      runner.kwokOnly(NS).has(`${NS}/elsewhere`),
    );
    t.notOk(
      runner.pods(NS).some((p) => p.name === 'elsewhere'),
      'no process runs for it',
    );
  });

  t.test('a pod without a readiness probe is Ready when its process starts', async (t) => {
    const p = await until('pod unprobed Ready', 60_000, async () => {
      const p = await read('unprobed');
      return ready(p) === 'True' ? p : undefined;
    });
    const rp = runner.pods(NS).find((x) => x.name === 'unprobed');
    t.ok(rp, 'its process runs');
    t.equal(p.status?.podIP, rp?.ip, 'the pod’s address is the one its process has');
    t.equal(
      new Date(main(p)!.state!.running!.startedAt!).getTime(),
      Math.floor(rp!.startedAt / 1000) * 1000,
      'state.running.startedAt is when the process started',
    );
  });

  t.test('not Ready until its process listens, Ready once the probe passes', async (t) => {
    const running = await until('pod probed Running', 60_000, async () => {
      const p = await read('probed');
      return p.status?.phase === 'Running' && main(p)?.state?.running?.startedAt ? p : undefined;
    });
    t.equal(ready(running), 'False', 'Running with a start time, not Ready');
    // Two failed probes (one second apart) and still not Ready: nothing else marked it Ready.
    await until(
      'two failed readiness probes',
      30_000,
      () => {
        const rp = runner.pods(NS).find((x) => x.name === 'probed');
        return (rp?.readiness.failures ?? 0) >= 2;
      },
      100,
    );
    const notYet = await read('probed');
    t.equal(ready(notYet), 'False', 'not Ready while nothing listens');
    t.equal(main(notYet)?.ready, false, 'its container is not ready');
    await writeFile(listenFile, '');
    const up = await until('pod probed Ready', 30_000, async () => {
      const p = await read('probed');
      return ready(p) === 'True' ? p : undefined;
    });
    t.equal(main(up)?.ready, true, 'Ready, its container ready, once the process listens and the probe passes');
    t.equal(main(up)?.restartCount, 0, 'not restarted');
  });

  t.test('a killed process: not Ready, restarted, its exit code and restart shown', async (t) => {
    const rp = runner.pods(NS).find((x) => x.name === 'probed')!;
    process.kill(rp.process.pid, 'SIGKILL');
    const down = await until(
      'pod probed not Ready after the kill',
      30_000,
      async () => {
        const p = await read('probed');
        return ready(p) === 'False' ? p : undefined;
      },
      100,
    );
    t.equal(main(down)?.ready, false, 'its container is not ready after the kill');
    const back = await until('pod probed restarted and Ready', 60_000, async () => {
      const p = await read('probed');
      return ready(p) === 'True' && main(p)?.restartCount === 1 ? p : undefined;
    });
    const c = main(back)!;
    t.equal(c.lastState?.terminated?.exitCode, 137, 'last state: terminated with exit code 137 (SIGKILL)');
    t.equal(c.lastState?.terminated?.reason, 'Error', 'reason Error');
    t.ok(c.state?.running?.startedAt, 'running again');
    t.equal(back.status?.podIP, rp.ip, 'the same pod address after the restart');
  });

  t.test('a Job’s pod whose process exits 3 is Failed with that exit code', async (t) => {
    const p = await until('pod job Failed', 60_000, async () => {
      const p = await read('job');
      return p.status?.phase === 'Failed' ? p : undefined;
    });
    t.equal(main(p)?.state?.terminated?.exitCode, 3, 'terminated with exit code 3');
    t.equal(main(p)?.state?.terminated?.reason, 'Error', 'reason Error');
  });
}
