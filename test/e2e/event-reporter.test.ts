/**
 * The event reporter agent (runtime/agents/event-reporter) as processes against a real
 * kube-apiserver with the real Argo CRDs (harness/argo.ts), reporting to the real control plane:
 * the provisioner's `POST /v1/runtime/events` listening on loopback with its Postgres, a tenant and
 * its runtime key. What the tests read is what a user gets: the `runtime_objects` rows (and the
 * applications listing), compared with what the API server holds.
 *
 * Covered: every object's final state stored (creates, updates, deletes of all three kinds), each
 * by its owner; a replica added moves at most 1/N + 10 % of the objects, all to it, and a replica
 * stopped with SIGTERM hands its objects back within seconds; a burst of updates across
 * 1,000 Applications stored within 60 s of the last write; a replica killed with SIGKILL has its
 * objects reported by the others within 30 s, and objects deleted while nobody owned them are
 * removed by a digest; the control plane stopped during writes loses nothing (its outage is
 * shortened for CI, see the test's name) while the reporters' watches pause on full queues.
 */
import t from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import { Agent, request as httpsRequest, type RequestOptions } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CoreV1Api } from '@kubernetes/client-node';
import { objectKeyString, ownerOf } from '../../runtime/protocol/events.ts';
import { REPORTED_KINDS, type ReportedKind } from '../../runtime/protocol/kinds.ts';
import type { RuntimeObjectPage } from '../../provisioner/api/types.ts';
import { createKey } from '../../provisioner/store/keys.ts';
import { createTestApi, startReplica, type TestReplica } from '../helpers/api.ts';
import { storedObjects } from '../helpers/runtime-objects.ts';
import { reporterRows } from '../helpers/runtimes.ts';
import {
  applicationStatus,
  argoApiServerUnavailable,
  rolloutStatus,
  sampleApplication,
  sampleRollout,
  sampleWorkflow,
  startArgoApiServer,
  workflowStatus,
} from './harness/argo.ts';
import { freePort, startProcess, until, type ManagedProcess } from '../../sandbox/processes.ts';

// The file took 239 s with the issue's full sizes on a quiet machine (docs/e2e.md); the limit
// leaves room for a loaded one, where the API server takes fewer writes per second.
t.setTimeout(12 * 60_000);
/**
 * Updates in the burst test, across 1,000 Applications: 3,000 here (three rounds, enough for the
 * queues to coalesce and for a stale state to show), written as fast as the API server with the
 * real Application CRD takes them (40 to 150 writes/s on a 2-core machine). The issue's 10,000 is a
 * throughput figure: `npm run bench -- reporter` measures it (10,000 Applications, the rate per
 * replica and the latency, docs/benchmarks.md), and EVENT_REPORTER_BURST_UPDATES=10000 runs this
 * test at that size.
 */
const BURST_UPDATES = Number(process.env.EVENT_REPORTER_BURST_UPDATES ?? 3_000);
/** How long the control plane stays down in the outage test: the issue's 2 minutes (EVENT_REPORTER_OUTAGE_SECONDS shortens it). */
const OUTAGE_SECONDS = Number(process.env.EVENT_REPORTER_OUTAGE_SECONDS ?? 120);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const LEASE_NAMESPACE = 'hosted-runtime';
/**
 * The Argo kinds, which this file's API server has the real CRDs of; the GitOps Operator's products
 * and promotions are reported by the same code (test/unit/event-reporter/summaries.test.ts,
 * test/integration/api/promotions-reports.test.ts).
 */
type ArgoKind = 'Application' | 'Rollout' | 'Workflow';
const NS: Record<ArgoKind, string> = { Application: 'argocd', Rollout: 'apps', Workflow: 'argo' };
const KINDS: ArgoKind[] = ['Application', 'Rollout', 'Workflow'];
type Obj = Record<string, unknown>;

const unavailable = argoApiServerUnavailable();
if (unavailable) {
  if (process.env.CI === 'true') t.fail(`the Argo API server cannot start: ${unavailable}`);
  else t.plan(0, unavailable);
} else {
  await run();
}

async function run(): Promise<void> {
  const argo = await startArgoApiServer(t, { name: 'reporter', crds: ['applications', 'rollouts', 'workflows'] });
  const dir = await mkdtemp(join(tmpdir(), 'hrt-e2e-reporter-'));
  const api = await createTestApi();
  const tenant = await api.signup();
  const token = (
    await createKey(api.db.pool, {
      role: 'runtime',
      tenantId: tenant.tenantId,
      name: 'event reporter',
      createdBy: 'test',
    })
  ).key;
  // The control plane the reporters talk to: a provisioner replica listening on loopback (stopped
  // and started again on the same port to play an outage).
  const cpPort = await freePort();
  let cp: TestReplica | undefined;
  const startControlPlane = async () => {
    cp = await startReplica(api.config, api.db);
    await cp.app.listen({ port: cpPort, host: '127.0.0.1' });
  };
  const stopControlPlane = async () => {
    const c = cp;
    cp = undefined;
    await c?.close();
  };
  await startControlPlane();
  const replicas = new Map<string, { proc: ManagedProcess; port: number }>();
  t.teardown(async () => {
    for (const r of replicas.values()) await r.proc.stop(2000);
    await stopControlPlane();
    await api.close();
    if (process.env.E2E_KEEP !== '1') await rm(dir, { recursive: true, force: true });
  });
  t.comment(
    `kube-apiserver with the Argo CRDs ready in ${argo.startSeconds.toFixed(1)} s; control plane on :${cpPort}`,
  );

  const core = argo.kc.makeApiClient(CoreV1Api);
  for (const ns of [LEASE_NAMESPACE, ...Object.values(NS)])
    await core.createNamespace({ body: { metadata: { name: ns } } });

  // --- the test writer: one pool of kept-alive connections (a TLS handshake per request would
  // make the writer, not the reporter, the bottleneck of the burst) ---
  const tls: RequestOptions = {};
  await argo.kc.applyToHTTPSOptions(tls);
  const agent = new Agent({ keepAlive: true, maxSockets: 64, ca: tls.ca, cert: tls.cert, key: tls.key });
  t.teardown(() => agent.destroy());
  const kubeWrite = (method: string, path: string, payload?: unknown, contentType = 'application/json') =>
    new Promise<void>((resolve, reject) => {
      const data = payload === undefined ? undefined : JSON.stringify(payload);
      const req = httpsRequest(
        new URL(path, argo.server),
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
  const pathOf = (kind: ArgoKind, name?: string, sub = '') => {
    const { group, version, plural } = REPORTED_KINDS[kind];
    return `/apis/${group}/${version}/namespaces/${NS[kind]}/${plural}${name ? `/${name}` : ''}${sub}`;
  };
  const counterOf = (n: number) => ({ metadata: { annotations: { 'e2e.hosted-runtimes.io/counter': String(n) } } });
  /** Created as a user writes it, then with the status its controller would write. */
  const create = async (kind: ArgoKind, name: string) => {
    if (kind === 'Application')
      return kubeWrite('POST', pathOf(kind), {
        ...sampleApplication(NS[kind], name),
        status: applicationStatus({ health: 'Progressing', sync: 'OutOfSync', revision: 'rev-0' }),
      });
    if (kind === 'Workflow')
      return kubeWrite('POST', pathOf(kind), {
        ...sampleWorkflow(NS[kind], name),
        status: workflowStatus({ phase: 'Running', progress: '0/10' }),
      });
    await kubeWrite('POST', pathOf(kind), sampleRollout(NS[kind], name));
  };
  /** An update without reading first (a merge patch), as the controllers write status. */
  const update = (kind: ArgoKind, name: string, n: number) => {
    const merge = 'application/merge-patch+json';
    if (kind === 'Application')
      return kubeWrite(
        'PATCH',
        pathOf(kind, name),
        {
          ...counterOf(n),
          status: { sync: { status: 'Synced', revision: `rev-${n}` }, health: { status: 'Healthy' } },
        },
        merge,
      );
    if (kind === 'Workflow')
      return kubeWrite('PATCH', pathOf(kind, name), { ...counterOf(n), status: { progress: `${n}/10` } }, merge);
    // A Rollout's status goes through its status subresource.
    return kubeWrite(
      'PATCH',
      pathOf(kind, name, '/status'),
      { status: rolloutStatus({ phase: 'Paused', currentStepIndex: n % 4 }) },
      merge,
    ).then(() => kubeWrite('PATCH', pathOf(kind, name), counterOf(n), merge));
  };
  const remove = (kind: ArgoKind, name: string) => kubeWrite('DELETE', pathOf(kind, name));
  const keyOf = (kind: ArgoKind, name: string) => objectKeyString({ kind, namespace: NS[kind], name });

  /** Runs `tasks` with at most `concurrency` at once. */
  const pool = async (tasks: (() => Promise<unknown>)[], concurrency: number): Promise<void> => {
    let next = 0;
    await Promise.all(
      Array.from({ length: Math.min(concurrency, tasks.length) }, async () => {
        while (next < tasks.length) await tasks[next++]!();
      }),
    );
  };

  /** What the API server holds now: key → resourceVersion, every kind. */
  const apiState = async (): Promise<Map<string, string>> => {
    const out = new Map<string, string>();
    for (const kind of KINDS) {
      const { group, version, plural } = REPORTED_KINDS[kind];
      const list = (await argo.objects.listClusterCustomObject({ group, version, plural })) as {
        items: { metadata: { namespace: string; name: string; resourceVersion: string } }[];
      };
      for (const o of list.items)
        out.set(
          objectKeyString({ kind, namespace: o.metadata.namespace, name: o.metadata.name }),
          o.metadata.resourceVersion,
        );
    }
    return out;
  };
  interface Row {
    key: string;
    resourceVersion: string;
    deleted: boolean;
    reportedBy: string;
    object: Obj | null;
  }
  /** The tenant's stored objects: key → row. */
  const stored = async (): Promise<Map<string, Row>> =>
    new Map(
      (await storedObjects(api.db.pool, tenant.tenantId)).map((r) => {
        const key = objectKeyString({ kind: r.kind as ReportedKind, namespace: r.namespace, name: r.name });
        const { resourceVersion, deleted, reportedBy, object } = r;
        return [key, { key, resourceVersion, deleted, reportedBy, object }];
      }),
    );
  /** Differences between the API server and the stored rows (none when every final state is stored). */
  const differences = async (): Promise<string[]> => {
    const [want, have] = await Promise.all([apiState(), stored()]);
    const diff: string[] = [];
    for (const [k, rv] of want) {
      const row = have.get(k);
      if (!row || row.deleted || row.resourceVersion !== rv)
        diff.push(
          `${k}: api ${rv}, stored ${row ? `${row.resourceVersion}${row.deleted ? ' (deleted)' : ''}` : 'none'}`,
        );
    }
    for (const row of have.values())
      if (!row.deleted && !want.has(row.key)) diff.push(`${row.key}: deleted in the api, live in the store`);
    return diff;
  };
  const converged = async (what: string, timeoutMs: number): Promise<number> => {
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
  };

  // --- the replicas ---
  const startReporter = async (name: string): Promise<void> => {
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
          CONTROL_PLANE_URL: `http://127.0.0.1:${cpPort}`,
          RUNTIME_TOKEN: token,
          REPLICA_NAME: name,
          LEASE_NAMESPACE,
          KUBECONFIG: argo.kubeconfigFile,
          PORT: String(port),
          HOST: '127.0.0.1',
          // The delivery backoff's cap: how soon a replica notices the control plane is back.
          RETRY_MAX_SECONDS: '5',
          SHUTDOWN_GRACE_SECONDS: '10',
          // A small queue, so that the outage test fills it and the watches must pause.
          QUEUE_LIMIT: '100',
          LOG_LEVEL: 'info',
        },
      },
    );
    replicas.set(name, { proc, port });
  };
  const metricsOf = async (name: string) =>
    (await fetch(`http://127.0.0.1:${replicas.get(name)!.port}/metrics`)).text();
  const ready = async (name: string) => {
    const r = replicas.get(name)!;
    await until(`replica ${name} to be ready`, 60_000, async () => {
      if (!r.proc.running()) throw new Error(`replica ${name} exited: ${await r.proc.tail(20)}`);
      return (await fetch(`http://127.0.0.1:${r.port}/readyz`)).status === 200;
    });
  };
  /** Waits until replica `name` sees `n` live replicas (its /metrics). */
  const seesMembers = (name: string, n: number) =>
    until(
      `replica ${name} to see ${n} live replicas`,
      30_000,
      async () => new RegExp(`^event_reporter_members ${n}$`, 'm').test(await metricsOf(name)),
      200,
    );
  const sum = (text: string, metric: string) =>
    [...text.matchAll(new RegExp(`^${metric}(?:\\{[^}]*\\})? (\\d+)`, 'gm'))].reduce((a, m) => a + Number(m[1]), 0);

  await t.test('three replicas: every object’s final state is stored, each by its one owner', async (t) => {
    for (const name of ['a', 'b', 'c']) await startReporter(name);
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
    const updates: (() => Promise<unknown>)[] = [];
    for (let i = 0; i < 40; i++) updates.push(() => update('Application', `app-${i}`, 1));
    for (let i = 0; i < 15; i++)
      updates.push(
        () => update('Rollout', `ro-${i}`, 1),
        () => update('Workflow', `wf-${i}`, 1),
      );
    await pool(updates, 10);
    for (let i = 0; i < 5; i++) {
      await remove('Application', `app-${i}`);
      await remove('Workflow', `wf-${i}`);
    }
    const secs = await converged('the store to hold every final state (70 objects, 10 deleted)', 60_000);
    t.comment(`all final states stored ${secs.toFixed(1)} s after the last write`);
    const rows = await stored();
    t.equal([...rows.values()].filter((r) => !r.deleted).length, 60, '60 live rows (70 created, 10 deleted)');
    t.equal(rows.get(keyOf('Application', 'app-0'))?.deleted, true, 'a deleted Application is a tombstone');
    const wrongOwner = [...rows.values()].filter((r) => r.reportedBy !== ownerOf(r.key, ['a', 'b', 'c']));
    t.same(
      wrongOwner.map((r) => `${r.key} by ${r.reportedBy}`).slice(0, 5),
      [],
      `every row was reported by its owner by rendezvous over a, b, c (${wrongOwner.length} were not)`,
    );
    const res = await api.request('GET', `/v1/tenants/${tenant.tenantId}/applications?namePrefix=app-1&limit=100`, {
      key: tenant.apiKey,
    });
    t.equal(
      res.statusCode,
      200,
      `the tenant lists its Applications${res.statusCode === 200 ? '' : ` (${res.body.slice(0, 200)})`}`,
    );
    const listed = res.json<RuntimeObjectPage>().items;
    t.same(
      listed.map((i) => i.name).sort(),
      Array.from({ length: 10 }, (_, i) => `app-1${i}`),
      'the listing filtered by name prefix app-1 holds app-10..19 (app-1 was deleted)',
    );
    t.same(
      listed.filter((i) => i.health !== 'Healthy' || i.sync !== 'Synced').map((i) => i.name),
      [],
      'each with the health and sync status Argo CD last wrote (Healthy, Synced)',
    );
  });

  await t.test(
    'a replica added: at most 1/N + 10 % of the objects change owner, all to it; one stopped with SIGTERM hands its objects back within seconds',
    async (t) => {
      await pool(
        Array.from({ length: 300 }, (_, i) => () => create('Application', `spread-${i}`)),
        20,
      );
      await converged('the 300 new Applications to be stored', 60_000);
      const apps = [...(await apiState()).keys()].filter((k) => k.startsWith('Application/'));
      const names = apps.map((k) => k.split('/')[2]!);
      // Who owns an object shows in the row of its next state: write one to every Application
      // before and after the new replica joins, and compare who reported them.
      await pool(
        names.map((n) => () => update('Application', n, 2)),
        20,
      );
      await converged('round 2 stored', 60_000);
      const before = new Map([...(await stored())].map(([k, r]) => [k, r.reportedBy]));
      await startReporter('d');
      await ready('d');
      await Promise.all(['a', 'b', 'c', 'd'].map((n) => seesMembers(n, 4)));
      await pool(
        names.map((n) => () => update('Application', n, 3)),
        20,
      );
      await converged('round 3 stored', 60_000);
      const after = new Map([...(await stored())].map(([k, r]) => [k, r.reportedBy]));
      const moved = apps.filter((k) => before.get(k) !== after.get(k));
      const bound = apps.length * (1 / 4 + 0.1);
      t.ok(
        moved.length <= bound,
        `${moved.length} of ${apps.length} Applications changed owner (≤ 1/4 + 10 % = ${Math.floor(bound)})`,
      );
      t.ok(moved.length > 0, 'the new replica took some');
      t.same(
        moved.filter((k) => after.get(k) !== 'd'),
        [],
        'every object that moved went to the new replica',
      );

      const ofD = apps.filter((k) => after.get(k) === 'd').map((k) => k.split('/')[2]!);
      const stoppedAt = Date.now();
      await replicas.get('d')!.proc.stop(15_000);
      replicas.delete('d');
      await Promise.all(['a', 'b', 'c'].map((n) => seesMembers(n, 3)));
      const handover = (Date.now() - stoppedAt) / 1000;
      t.ok(
        handover < 10,
        `after SIGTERM (d deletes its Lease) the others own everything again within ${handover.toFixed(1)} s (< 10 s; the Lease lasts 15 s)`,
      );
      await pool(
        ofD.map((n) => () => update('Application', n, 4)),
        20,
      );
      await converged('the objects d had, updated after it left, stored', 30_000);
      const rows = await stored();
      t.ok(
        ofD.every((n) => rows.get(keyOf('Application', n))?.reportedBy !== 'd'),
        `the ${ofD.length} objects d owned are reported by a, b or c`,
      );
    },
  );

  await t.test(
    `a burst of ${BURST_UPDATES} updates across 1,000 Applications (the 10,000 of the throughput target: npm run bench -- reporter): all final states stored within 60 s`,
    async (t) => {
      const names = Array.from({ length: 1000 }, (_, i) => `burst-${i}`);
      await pool(
        names.map((n) => () => create('Application', n)),
        40,
      );
      await converged('the 1,000 Applications stored', 120_000);
      const coalescedBefore = await Promise.all(
        ['a', 'b', 'c'].map(async (n) => sum(await metricsOf(n), 'event_reporter_coalesced_updates_total')),
      );
      const started = Date.now();
      const updates: (() => Promise<unknown>)[] = [];
      const rounds = Math.max(1, Math.ceil(BURST_UPDATES / names.length));
      for (let round = 1; round <= rounds; round++)
        for (const n of names) updates.push(() => update('Application', n, round));
      await pool(updates, 40);
      const writeSecs = (Date.now() - started) / 1000;
      t.comment(
        `${updates.length} updates written in ${writeSecs.toFixed(1)} s (${Math.round(updates.length / writeSecs)}/s: the API server on this machine is the limit; the issue's 10,000 in 5 s needs 2,000/s)`,
      );
      const secs = await converged('every final state of the burst stored', 60_000);
      t.ok(secs <= 60, `all 1,000 final states stored ${secs.toFixed(1)} s after the last write (≤ 60 s)`);
      const rows = await stored();
      const counters = names.map(
        (n) =>
          (rows.get(keyOf('Application', n))?.object?.metadata as { annotations?: Record<string, string> } | undefined)
            ?.annotations?.['e2e.hosted-runtimes.io/counter'],
      );
      t.equal(
        counters.filter((c) => c === String(rounds)).length,
        1000,
        `each stored Application is its last written state (counter ${rounds}), none older`,
      );
      const coalescedAfter = await Promise.all(
        ['a', 'b', 'c'].map(async (n) => sum(await metricsOf(n), 'event_reporter_coalesced_updates_total')),
      );
      t.comment(
        `updates coalesced in the queues during the burst: ${coalescedAfter.map((v, i) => v - coalescedBefore[i]!).join(', ')}`,
      );
    },
  );

  await t.test(
    'SIGKILL of a replica: its objects are reported by the others within 30 s; objects deleted meanwhile are removed by a digest',
    async (t) => {
      const rows = await stored();
      const ofB = [...rows.values()].filter((r) => !r.deleted && r.reportedBy === 'b').map((r) => r.key);
      t.ok(ofB.length > 100, `b reported ${ofB.length} of the stored objects`);
      const removedBefore = sum(
        await cp!.services.metrics.registry.metrics(),
        'provisioner_runtime_objects_removed_by_digest_total',
      );
      const killedAt = Date.now();
      await replicas.get('b')!.proc.kill();
      replicas.delete('b');
      // Deleted right after the kill: a and c see the deletions but do not own these objects yet.
      // (Taken from spread-*: the burst-* Applications are written again in the outage test.)
      const spreadOfB = ofB.filter((k) => k.startsWith('Application/argocd/spread-')).map((k) => k.split('/')[2]!);
      const deleted = spreadOfB.slice(0, 10);
      for (const n of deleted) await remove('Application', n);
      // Every other object of b gets a new state: it is stored only once a or c reports it.
      const rest = ofB.filter((k) => !deleted.some((n) => k === keyOf('Application', n)));
      await pool(
        rest.map((k) => () => update(k.split('/')[0] as ArgoKind, k.split('/')[2]!, 50)),
        20,
      );
      await converged('every object of b stored with its new state', 30_000 - (Date.now() - killedAt));
      const secs = (Date.now() - killedAt) / 1000;
      const after = await stored();
      t.same(
        rest.filter((k) => !['a', 'c'].includes(after.get(k)?.reportedBy ?? '')),
        [],
        `all ${rest.length} remaining objects of b were reported by a or c, ${secs.toFixed(1)} s after the SIGKILL (≤ 30 s)`,
      );
      t.same(
        deleted.filter((n) => after.get(keyOf('Application', n))?.deleted !== true),
        [],
        `the ${deleted.length} Applications deleted while nobody owned them are tombstones`,
      );
      const removed =
        sum(await cp!.services.metrics.registry.metrics(), 'provisioner_runtime_objects_removed_by_digest_total') -
        removedBefore;
      t.ok(removed >= deleted.length, `a digest removed them (${removed} objects removed by digests)`);
    },
  );

  await t.test(
    `control plane down ${OUTAGE_SECONDS} s during writes${OUTAGE_SECONDS < 120 ? ' (the issue asks 2 minutes; shortened by EVENT_REPORTER_OUTAGE_SECONDS)' : ''}: nothing lost, deletions applied`,
    async (t) => {
      await stopControlPlane();
      const downAt = Date.now();
      const tasks: (() => Promise<unknown>)[] = [];
      // 400 updates of distinct objects over two replicas whose queues hold 100: the watches must pause.
      for (let i = 0; i < 400; i++) tasks.push(() => update('Application', `burst-${i}`, 1000 + i));
      for (let i = 0; i < 30; i++) tasks.push(() => create('Workflow', `outage-${i}`));
      for (let i = 400; i < 430; i++) tasks.push(() => remove('Application', `burst-${i}`));
      await pool(tasks, 20);
      // Keep writing through the outage.
      let round = 0;
      while (Date.now() - downAt < OUTAGE_SECONDS * 1000) {
        round++;
        await pool(
          Array.from({ length: 30 }, (_, i) => () => update('Workflow', `outage-${i}`, round)),
          10,
        );
        await new Promise((r) => setTimeout(r, 1000));
      }
      t.ok((await differences()).length > 400, 'the store missed the writes while the control plane was down');
      await startControlPlane();
      const backAt = Date.now();
      await converged('every final state after the control plane returned', 60_000);
      t.comment(`backlog drained ${((Date.now() - backAt) / 1000).toFixed(1)} s after the control plane returned`);
      const rows = await stored();
      t.same(
        [400, 410, 429].map((i) => rows.get(keyOf('Application', `burst-${i}`))?.deleted),
        [true, true, true],
        'Applications deleted during the outage are tombstones',
      );
      for (const name of ['a', 'c']) {
        const text = await metricsOf(name);
        t.match(text, /^event_reporter_queue_depth 0$/m, `replica ${name} reports an empty queue`);
        t.ok(
          sum(text, 'event_reporter_batches_total\\{result="retry"\\}') > 0,
          `replica ${name} counted its retried batches`,
        );
        t.ok(
          sum(text, 'event_reporter_back_pressure_pauses_total') > 0,
          `replica ${name} paused its watch when its queue of 100 was full`,
        );
      }
      const beats = await reporterRows(api.db.pool, tenant.tenantId);
      t.ok(
        beats.some((b) => b.replica === 'a') && beats.every((b) => b.queue_depth <= 100),
        `heartbeats are stored, none with a queue deeper than its limit (${beats.map((b) => `${b.replica}: ${b.queue_depth}`).join(', ')})`,
      );
    },
  );
}
