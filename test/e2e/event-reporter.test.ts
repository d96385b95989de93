/**
 * The event reporter agent (runtime/agents/event-reporter) as processes against a real
 * kube-apiserver from the toolchain: three replicas share the Argo objects through their Leases and
 * report them to a receiver double of `POST /v1/runtime/events` (harness/event-receiver.ts: it
 * applies the contract's ordering and digest rules and records who reported what).
 *
 * Covered: every object's final state delivered (creates, updates, deletes of all three kinds); a
 * replica added moves at most 1/N + 10 % of the objects, all to it, and leaves quickly on SIGTERM;
 * a burst of 10,000 updates across 1,000 Applications is delivered within 60 s; a replica killed
 * with SIGKILL has its objects reported by the others within 30 s, and objects deleted while
 * nobody owned them are removed by the digest; the receiver down during writes loses nothing.
 *
 * The CRDs are minimal stand-ins (argoproj.io/v1alpha1, schema left open) until the fixture with
 * the real Argo CRDs is in the harness.
 */
import t from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Agent, request as httpsRequest, type RequestOptions } from 'node:https';
import { ApiextensionsV1Api, CoreV1Api, CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node';
import { objectKeyString, ownerOf, REPORTED_KINDS, type ReportedKind } from '../../runtime/protocol/events.ts';
import { startEtcd, startKubeControlPlane, toolchainFrom } from './harness/control-plane.ts';
import { EventReceiverDouble } from './harness/event-receiver.ts';
import { freePort, startProcess, until, type ManagedProcess } from './harness/processes.ts';

t.setTimeout(6 * 60_000);
const bin = process.env.HRT_TOOLCHAIN_BIN;
if (!bin) throw new Error('HRT_TOOLCHAIN_BIN is not set: run the tier through scripts/test.sh e2e');
/** How long the receiver stays down in the outage test (the issue asks 120 s; CI runs 20 s). */
const OUTAGE_SECONDS = Number(process.env.EVENT_REPORTER_OUTAGE_SECONDS ?? 20);

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const LEASE_NAMESPACE = 'hosted-runtime';
const NS: Record<ReportedKind, string> = { Application: 'argocd', Rollout: 'apps', Workflow: 'argo' };
const TOKEN = 'rt_' + 'e'.repeat(40);

const dir = await mkdtemp(join(tmpdir(), 'hrt-e2e-reporter-'));
const toolchain = toolchainFrom(bin);
const etcd = await startEtcd(toolchain, join(dir, 'etcd'));
const api = await startKubeControlPlane(toolchain, {
  name: 'reporter',
  dir: join(dir, 'api'),
  etcdUrl: etcd.url,
  etcdPrefix: '/reporter',
  nodes: 0,
  apiServerOnly: true,
});
const receiver = new EventReceiverDouble(TOKEN);
await receiver.start();
const replicas = new Map<string, { proc: ManagedProcess; port: number }>();
t.teardown(async () => {
  for (const r of replicas.values()) await r.proc.stop(2000);
  await receiver.stop();
  await api.stop();
  await etcd.stop();
  await rm(dir, { recursive: true, force: true });
});

const kc: KubeConfig = api.kc;
const custom = kc.makeApiClient(CustomObjectsApi);
const core = kc.makeApiClient(CoreV1Api);

// --- the cluster: namespaces and CRDs ---
for (const ns of [LEASE_NAMESPACE, ...Object.values(NS)])
  await core.createNamespace({ body: { metadata: { name: ns } } });
const ext = kc.makeApiClient(ApiextensionsV1Api);
for (const [kind, { group, version, plural }] of Object.entries(REPORTED_KINDS)) {
  await ext.createCustomResourceDefinition({
    body: {
      metadata: { name: `${plural}.${group}` },
      spec: {
        group,
        scope: 'Namespaced',
        names: { kind, plural, singular: kind.toLowerCase(), listKind: `${kind}List` },
        versions: [
          {
            name: version,
            served: true,
            storage: true,
            schema: { openAPIV3Schema: { type: 'object', x_kubernetes_preserve_unknown_fields: true } },
          },
        ],
      },
    },
  });
}
await until('the three CRDs to be established', 60_000, async () => {
  const crds = await ext.listCustomResourceDefinition();
  return (
    crds.items.filter((c) => c.status?.conditions?.some((x) => x.type === 'Established' && x.status === 'True'))
      .length === 3
  );
});

// --- the test writer ---
type Obj = Record<string, unknown>;
function body(kind: ReportedKind, name: string, counter: number): Obj {
  const { group, version } = REPORTED_KINDS[kind];
  const status: Obj =
    kind === 'Application'
      ? {
          sync: { status: counter % 2 ? 'OutOfSync' : 'Synced', revision: `rev-${counter}` },
          health: { status: 'Healthy' },
        }
      : kind === 'Rollout'
        ? { phase: 'Progressing', currentStepIndex: counter }
        : { phase: 'Running', progress: `${counter}/10` };
  return {
    apiVersion: `${group}/${version}`,
    kind,
    metadata: { name, namespace: NS[kind] },
    spec: { counter },
    status,
  };
}
// Writes go over one pool of kept-alive connections (a TLS handshake per request would make the
// writer, not the reporter, the bottleneck of the burst).
const tls: RequestOptions = {};
await kc.applyToHTTPSOptions(tls);
const agent = new Agent({ keepAlive: true, maxSockets: 64, ca: tls.ca, cert: tls.cert, key: tls.key });
t.teardown(() => agent.destroy());
function kubeWrite(method: string, path: string, payload?: unknown, contentType = 'application/json'): Promise<void> {
  return new Promise((resolve, reject) => {
    const data = payload === undefined ? undefined : JSON.stringify(payload);
    const req = httpsRequest(
      new URL(path, api.server),
      {
        method,
        agent,
        headers: data === undefined ? {} : { 'content-type': contentType, 'content-length': Buffer.byteLength(data) },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8').on('data', (d: string) => (text += d));
        res.on('end', () =>
          (res.statusCode ?? 0) < 300
            ? resolve()
            : reject(new Error(`${method} ${path}: HTTP ${res.statusCode} ${text.slice(0, 300)}`)),
        );
      },
    );
    req.once('error', reject);
    req.end(data);
  });
}
const pathOf = (kind: ReportedKind, name?: string) => {
  const { group, version, plural } = REPORTED_KINDS[kind];
  return `/apis/${group}/${version}/namespaces/${NS[kind]}/${plural}${name ? `/${name}` : ''}`;
};
const create = (kind: ReportedKind, name: string, counter = 0) =>
  kubeWrite('POST', pathOf(kind), body(kind, name, counter));
/** An update without reading first: a merge patch of spec and status. */
const update = (kind: ReportedKind, name: string, counter: number) => {
  const { spec, status } = body(kind, name, counter);
  return kubeWrite('PATCH', pathOf(kind, name), { spec, status }, 'application/merge-patch+json');
};
const remove = (kind: ReportedKind, name: string) => kubeWrite('DELETE', pathOf(kind, name));
const keyOf = (kind: ReportedKind, name: string) => objectKeyString({ kind, namespace: NS[kind], name });

/** Runs `tasks` with at most `concurrency` at once. */
async function pool(tasks: (() => Promise<unknown>)[], concurrency: number): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, tasks.length) }, async () => {
      while (next < tasks.length) await tasks[next++]!();
    }),
  );
}

/** What the API server holds now: key → resourceVersion, every kind. */
async function apiState(): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const kind of Object.keys(REPORTED_KINDS) as ReportedKind[]) {
    const { group, version, plural } = REPORTED_KINDS[kind];
    const list = (await custom.listClusterCustomObject({ group, version, plural })) as {
      items: { metadata: { namespace: string; name: string; resourceVersion: string } }[];
    };
    for (const o of list.items)
      out.set(
        objectKeyString({ kind, namespace: o.metadata.namespace, name: o.metadata.name }),
        o.metadata.resourceVersion,
      );
  }
  return out;
}

/** Differences between the API server and the receiver (empty when every final state is delivered). */
async function differences(): Promise<string[]> {
  const want = await apiState();
  const have = receiver.live();
  const diff: string[] = [];
  for (const [k, rv] of want) if (have.get(k) !== rv) diff.push(`${k}: api ${rv}, receiver ${have.get(k) ?? 'none'}`);
  for (const k of have.keys()) if (!want.has(k)) diff.push(`${k}: deleted in the api, live at the receiver`);
  return diff;
}

async function converged(what: string, timeoutMs: number): Promise<number> {
  const started = Date.now();
  let last: string[] = [];
  try {
    await until(what, timeoutMs, async () => {
      last = await differences();
      return last.length === 0;
    });
  } catch (err) {
    throw new Error(`${(err as Error).message}; ${last.length} differences, first: ${last.slice(0, 5).join('; ')}`, {
      cause: err,
    });
  }
  return (Date.now() - started) / 1000;
}

// --- the replicas ---
async function startReplica(name: string): Promise<void> {
  const port = await freePort();
  const proc = startProcess(
    `event-reporter-${name}`,
    process.execPath,
    [join(ROOT, 'runtime/agents/event-reporter/main.ts')],
    join(dir, `reporter-${name}.log`),
    {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH,
        CONTROL_PLANE_URL: receiver.url,
        RUNTIME_TOKEN: TOKEN,
        REPLICA_NAME: name,
        LEASE_NAMESPACE,
        KUBECONFIG: api.kubeconfigFile,
        PORT: String(port),
        HOST: '127.0.0.1',
        // The delivery backoff's cap: how soon a replica notices the receiver is back.
        RETRY_MAX_SECONDS: '5',
        // Digests every 8 s (10 minutes in production): the test reads who owns what from them.
        DIGEST_INTERVAL_SECONDS: '8',
        SHUTDOWN_GRACE_SECONDS: '10',
        // A small queue, so the outage test fills it and the watches must pause.
        QUEUE_LIMIT: '100',
        LOG_LEVEL: 'info',
      },
    },
  );
  replicas.set(name, { proc, port });
}
async function ready(name: string): Promise<void> {
  const r = replicas.get(name)!;
  await until(`replica ${name} to be ready`, 60_000, async () => {
    if (!r.proc.running()) throw new Error(`replica ${name} exited: ${await r.proc.tail(20)}`);
    const res = await fetch(`http://127.0.0.1:${r.port}/readyz`);
    return res.status === 200;
  });
}
/** Waits until replica `name` sees `n` live replicas (its /metrics). */
async function seesMembers(name: string, n: number): Promise<void> {
  await until(
    `replica ${name} to see ${n} live replicas`,
    30_000,
    async () => {
      const text = await (await fetch(`http://127.0.0.1:${replicas.get(name)!.port}/metrics`)).text();
      return new RegExp(`^event_reporter_members ${n}$`, 'm').test(text);
    },
    200,
  );
}
/** The replicas whose digests, for `kind`, were computed with exactly `members`: key → owner. */
function ownersFromDigests(kind: ReportedKind, members: string[]): Map<string, string> {
  const want = [...members].sort().join(',');
  const latest = new Map<string, (typeof receiver.digests)[number]>();
  for (const d of receiver.digests)
    if (d.kind === kind && [...d.members].sort().join(',') === want) latest.set(d.replica, d);
  const out = new Map<string, string>();
  for (const d of latest.values())
    for (const o of d.objects) out.set(objectKeyString({ kind, namespace: o.namespace, name: o.name }), d.replica);
  return out;
}

t.comment(`kube-apiserver ready; receiver double at ${receiver.url}`);

await t.test('three replicas: every object’s final state is delivered, each by its one owner', async (t) => {
  for (const name of ['a', 'b', 'c']) await startReplica(name);
  await Promise.all(['a', 'b', 'c'].map(ready));
  await Promise.all(['a', 'b', 'c'].map((n) => seesMembers(n, 3)));
  const tasks: (() => Promise<unknown>)[] = [];
  for (let i = 0; i < 40; i++) tasks.push(() => create('Application', `app-${i}`));
  for (let i = 0; i < 15; i++)
    tasks.push(
      () => create('Rollout', `ro-${i}`),
      () => create('Workflow', `wf-${i}`),
    );
  await pool(tasks, 10);
  await pool(
    Array.from({ length: 40 }, (_, i) => () => update('Application', `app-${i}`, 1)),
    10,
  );
  for (let i = 0; i < 5; i++) {
    await remove('Application', `app-${i}`);
    await remove('Workflow', `wf-${i}`);
  }
  const secs = await converged('the receiver to hold every final state (70 objects, 10 deleted)', 60_000);
  t.pass(`all final states delivered ${secs.toFixed(1)} s after the last write`);
  const live = receiver.live();
  t.equal(live.size, 60, '60 live objects at the receiver (70 created, 10 deleted)');
  t.equal(receiver.objects.get(keyOf('Application', 'app-0'))?.deleted, true, 'a deleted Application is a tombstone');
  const members = ['a', 'b', 'c'];
  const wrongOwner = receiver.reports.filter((r) => r.replica !== ownerOf(r.key, members));
  t.same(
    wrongOwner.slice(0, 5),
    [],
    `every report came from the object’s owner by rendezvous over a, b, c (${wrongOwner.length} did not)`,
  );
  const stored = receiver.objects.get(keyOf('Application', 'app-10'))?.item;
  t.match(
    stored,
    { summary: { syncStatus: 'OutOfSync', revision: 'rev-1', healthStatus: 'Healthy' }, truncated: false },
    'the stored Application carries its summary',
  );
  t.ok(
    receiver.heartbeats.some((h) => h.replica === 'a'),
    'replica a sent a heartbeat',
  );
});

await t.test(
  'a replica added: at most 1/N + 10 % of the objects change owner, all to it; on SIGTERM it hands them back quickly',
  async (t) => {
    await pool(
      Array.from({ length: 300 }, (_, i) => () => create('Application', `spread-${i}`)),
      20,
    );
    await converged('the 300 new Applications to be delivered', 60_000);
    const apps = [...(await apiState()).keys()].filter((k) => k.startsWith('Application/'));
    const before = await until(
      'digests of a, b, c covering every Application',
      30_000,
      () => {
        const m = ownersFromDigests('Application', ['a', 'b', 'c']);
        return apps.every((k) => m.has(k)) ? m : undefined;
      },
      200,
    );
    await startReplica('d');
    await ready('d');
    const after = await until(
      'digests of a, b, c, d covering every Application',
      45_000,
      () => {
        const m = ownersFromDigests('Application', ['a', 'b', 'c', 'd']);
        return apps.every((k) => m.has(k)) && m.size === apps.length ? m : undefined;
      },
      200,
    );
    const moved = apps.filter((k) => before.get(k) !== after.get(k));
    const bound = apps.length * (1 / 4 + 0.1);
    t.ok(
      moved.length <= bound,
      `${moved.length} of ${apps.length} Applications changed owner (≤ 1/4 + 10 % = ${Math.floor(bound)})`,
    );
    t.ok(moved.length > 0, 'the new replica took some');
    t.ok(
      moved.every((k) => after.get(k) === 'd'),
      'every object that moved went to the new replica',
    );

    const stoppedAt = Date.now();
    await replicas.get('d')!.proc.stop(15_000);
    replicas.delete('d');
    await until(
      'digests of a, b, c again after d stopped',
      20_000,
      () => receiver.digests.some((d) => d.at > stoppedAt && d.members.join(',') === 'a,b,c'),
      200,
    );
    const handover = (Date.now() - stoppedAt) / 1000;
    t.ok(
      handover < 10,
      `after SIGTERM (d deletes its Lease) the others own everything again within ${handover.toFixed(1)} s (< 10 s, well under the 15 s Lease)`,
    );
    await converged('every state delivered after d left', 30_000);
  },
);

await t.test(
  'a burst of 10,000 updates across 1,000 Applications: all final states delivered within 60 s',
  async (t) => {
    const names = Array.from({ length: 1000 }, (_, i) => `burst-${i}`);
    await pool(
      names.map((n) => () => create('Application', n)),
      40,
    );
    const batchesBefore = receiver.batches;
    const started = Date.now();
    const updates: (() => Promise<unknown>)[] = [];
    for (let round = 1; round <= 10; round++)
      for (const n of names) updates.push(() => update('Application', n, round));
    await pool(updates, 40);
    const writeSecs = (Date.now() - started) / 1000;
    t.comment(
      `10,000 updates written in ${writeSecs.toFixed(1)} s (${Math.round(10_000 / writeSecs)}/s through this machine’s API server)`,
    );
    const secs = await converged('every final state of the burst at the receiver', 60_000);
    t.ok(secs <= 60, `all 1,000 final states delivered ${secs.toFixed(1)} s after the last write (≤ 60 s)`);
    const final = names.map(
      (n) => receiver.objects.get(keyOf('Application', n))?.item?.object?.spec as { counter?: number } | undefined,
    );
    t.ok(
      final.every((s) => s?.counter === 10),
      'each stored Application is its last written state (counter 10)',
    );
    const reportsOfBurst = receiver.reports.filter((r) => r.key.includes('/burst-')).length;
    t.comment(
      `${reportsOfBurst} reports in ${receiver.batches - batchesBefore} batches for 11,000 writes (coalescing)`,
    );
  },
);

await t.test(
  'SIGKILL of a replica: its objects are reported by the others within 30 s; objects deleted meanwhile are removed by the digest',
  async (t) => {
    const members = ['a', 'b', 'c'];
    const state = await apiState();
    const ofB = [...state.keys()].filter((k) => ownerOf(k, members) === 'b');
    t.ok(ofB.length > 100, `b owns ${ofB.length} objects`);
    const killedAt = Date.now();
    await replicas.get('b')!.proc.kill();
    replicas.delete('b');
    // Deleted right after the kill: a and c see the deletions but do not own these objects yet.
    // Taken from the spread-* Applications: the burst-* ones are written again in the outage test.
    const spreadOfB = ofB.filter((k) => k.startsWith('Application/argocd/spread-'));
    const deletedApps = spreadOfB.slice(0, 10).map((k) => k.split('/')[2]!);
    for (const n of deletedApps) await remove('Application', n);
    const updatedApps = spreadOfB.slice(10, 30).map((k) => k.split('/')[2]!);
    for (const n of updatedApps) await update('Application', n, 99);

    const takenOver = await until(
      'every object of b reported again by a or c',
      30_000,
      async () => {
        const after = new Set(receiver.reports.filter((r) => r.at >= killedAt && r.replica !== 'b').map((r) => r.key));
        const live = await apiState();
        return ofB.filter((k) => live.has(k)).every((k) => after.has(k)) ? Date.now() : undefined;
      },
      250,
    );
    const secs = (takenOver - killedAt) / 1000;
    t.ok(secs <= 30, `all of b’s objects reported by a or c ${secs.toFixed(1)} s after the SIGKILL (≤ 30 s)`);
    await converged('every final state after the takeover', 30_000);
    const viaDigest = deletedApps.filter((n) => receiver.objects.get(keyOf('Application', n))?.via === 'digest');
    t.equal(
      viaDigest.length,
      deletedApps.length,
      `the ${deletedApps.length} Applications deleted while nobody owned them were removed by a digest`,
    );
  },
);

await t.test(
  `receiver down ${OUTAGE_SECONDS} s during writes (the issue's 2 minutes shortened for CI; EVENT_REPORTER_OUTAGE_SECONDS=120 runs it in full): nothing lost, deletions applied`,
  async (t) => {
    await receiver.stop();
    const downAt = Date.now();
    const tasks: (() => Promise<unknown>)[] = [];
    // 400 updates of distinct objects over two replicas whose queues hold 100: the watches must pause.
    for (let i = 0; i < 400; i++) tasks.push(() => update('Application', `burst-${i}`, 1000 + i));
    for (let i = 0; i < 30; i++) tasks.push(() => create('Rollout', `outage-${i}`, 5));
    for (let i = 400; i < 430; i++) tasks.push(() => remove('Application', `burst-${i}`));
    await pool(tasks, 20);
    // Keep writing through the outage.
    let round = 0;
    while (Date.now() - downAt < OUTAGE_SECONDS * 1000) {
      round++;
      await pool(
        Array.from({ length: 30 }, (_, i) => () => update('Rollout', `outage-${i}`, 10 + round)),
        10,
      );
      await new Promise((r) => setTimeout(r, 1000));
    }
    t.ok((await differences()).length > 0, 'the receiver missed the writes while it was down');
    await receiver.start();
    const backAt = Date.now();
    const secs = await converged('every final state after the receiver returned', 60_000);
    t.pass(
      `backlog drained ${((Date.now() - backAt) / 1000).toFixed(1)} s after the receiver returned (${secs.toFixed(1)} s of polling)`,
    );
    t.equal(
      [400, 410, 429].map((i) => receiver.objects.get(keyOf('Application', `burst-${i}`))?.deleted).join(','),
      'true,true,true',
      'Applications deleted during the outage are tombstones',
    );
    for (const name of ['a', 'c']) {
      const metrics = await (await fetch(`http://127.0.0.1:${replicas.get(name)!.port}/metrics`)).text();
      t.match(metrics, /event_reporter_queue_depth 0/, `replica ${name} reports an empty queue`);
      t.match(
        metrics,
        /event_reporter_batches_total\{result="retry"\} [1-9]/,
        `replica ${name} counted its retried batches`,
      );
    }
    const pauses = await Promise.all(
      ['a', 'c'].map(async (name) => {
        const text = await (await fetch(`http://127.0.0.1:${replicas.get(name)!.port}/metrics`)).text();
        return [...text.matchAll(/^event_reporter_back_pressure_pauses_total\{[^}]*\} (\d+)/gm)].reduce(
          (a, m) => a + Number(m[1]),
          0,
        );
      }),
    );
    t.ok(
      pauses.every((p) => p > 0),
      `both replicas paused their watch when their queue of 100 was full (pauses: ${pauses.join(', ')})`,
    );
    const deepest = Math.max(...receiver.heartbeats.map((h) => h.queueDepth));
    t.ok(deepest <= 100, `no heartbeat reported a queue deeper than its limit of 100 (deepest ${deepest})`);
  },
);
