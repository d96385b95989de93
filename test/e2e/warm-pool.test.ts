/**
 * End-to-end: the warm pool (docs/operations.md "Warm pool") on the real engine, the real
 * Kubernetes provider plugin and the real vcluster (no runtime pods run as processes: an entry
 * needs only the engine and its vcluster to be Ready). The provisioner runs with
 * PROVISIONER_WARM_POOL=free=2 and its `warm-pool` loop every 2 s (parallelism 1, the default).
 * Through the public API and the root cluster: the pool fills to two Ready entries, one in flight
 * at a time, each a tenant namespace with a vcluster on the root that no tenant listing or count
 * shows; a free signup at the default version is served warm (Ready in the answer, the oldest
 * entry, well under a second), its `bind` operation applies the organization to the namespace while
 * the tenant stays Ready and its vcluster keeps running; a second signup is warm too, a third takes
 * the cold path (its create runs beside the refill's); the pool refills: a new entry Ready. The
 * runtime key is exchanged at the claim: an entry's runtime holds its pool credential (the runtime
 * credentials Secret in its vcluster, a key that authenticates as the entry's runtime); after the
 * bind the Secret holds the tenant's own runtime key, another one, and the pool credential no
 * longer authenticates. The suite's one root cluster keeps the pool's size (it is per root cluster).
 * Then, with the free plan's idle time shortened to IDLE_SECONDS: the first warm tenant, left alone,
 * goes to sleep by itself (the idle loop's sleep operation and audit row), nothing of its vcluster
 * runs on the root any more (no pod, no CPU or memory reserved, the control plane at zero), and a
 * request through its argoCdUrl wakes it (503 TENANT_WAKING naming the wake operation, which
 * succeeds: the control plane back). What a request is answered once the runtime is back is
 * hosted-runtime.test.ts's, where the runtime's pods run as processes.
 */
import t from 'tap';
import type { Operation, RouteResult, SignupResponse } from './harness/api-client.ts';
import { PROVISION_TIMEOUT, provisioningSuite } from './harness/suite.ts';
import { until } from '../../sandbox/processes.ts';
import { catalog } from '../../runtime/catalog.ts';
import { CREDENTIAL_KEYS, CREDENTIALS_SECRET, RUNTIME_NAMESPACE } from '../../runtime/component/agents.ts';
import { kube } from './harness/kube.ts';
import { randomUUID } from 'node:crypto';

const POOL_SIZE = 2;
/**
 * The free plan's idle time in this file (PROVISIONER_SLEEP_IDLE_SECONDS): long enough for the
 * warm tenants' binds to be checked Ready on a loaded machine (a bind took 11–13 s on a quiet one),
 * short enough for the file to wait for a tenant to go to sleep by itself.
 */
const IDLE_SECONDS = 120;
/** The version a signup that names none gets, and the pool keeps: the shipped catalog's default. */
const VERSION = catalog.defaultVersion();
/** The annotation tenants/tenant-namespace.ts sets from the tenant's organization. */
const ORGANIZATION_ANNOTATION = 'hosted.gitops/organization';
const TENANT_ID_LABEL = 'hosted.gitops/tenant-id';
/**
 * Filling the pool is two cold creates one after the other (parallelism 1), each about a minute with
 * the real plugin and vcluster on an idle machine; bounded generously for a loaded CI machine.
 */
const FILL_TIMEOUT = 2 * PROVISION_TIMEOUT;

interface Signup {
  res: RouteResult<'POST /v1/signup'>;
  /** The request's wall time, seconds. */
  seconds: number;
  /** When it was sent (ms since the epoch). */
  started: number;
}

await provisioningSuite(
  t,
  async (e2e, root) => {
    const seconds = (since: number) => (Date.now() - since) / 1000;
    const fileStarted = Date.now();

    /**
     * The `provisioner_warm_pool_entries` gauges of the free plan at VERSION, by state, summed over
     * the root clusters (the gauge's `cluster` label; the suite has one) (absent: undefined).
     */
    async function poolGauges(): Promise<Record<string, number | undefined>> {
      const text = await (
        await fetch(`${e2e.provisioner.url}/metrics`, { signal: AbortSignal.timeout(30_000) })
      ).text();
      const out: Record<string, number | undefined> = {};
      for (const state of ['ready', 'provisioning', 'failing']) {
        const found = [
          ...text.matchAll(
            new RegExp(
              `^provisioner_warm_pool_entries\\{plan="free",version="${VERSION.replaceAll('.', '\\.')}",state="${state}",cluster="[^"]*"\\} (\\d+)$`,
              'gm',
            ),
          ),
        ];
        out[state] = found.length > 0 ? found.reduce((n, m) => n + Number(m[1]), 0) : undefined;
      }
      return out;
    }

    /** The runtime key in a tenant's (or entry's) vcluster: the runtime credentials Secret the agents read. */
    async function runtimeKeyIn(id: string): Promise<string> {
      const vc = kube(await e2e.tenantKubeconfig(id));
      const secret = await vc.core.readNamespacedSecret({ name: CREDENTIALS_SECRET, namespace: RUNTIME_NAMESPACE });
      const data = secret.data?.[CREDENTIAL_KEYS.token];
      if (!data) throw new Error(`tenant-${id}: Secret ${RUNTIME_NAMESPACE}/${CREDENTIALS_SECRET} has no runtime key`);
      return Buffer.from(data, 'base64').toString('utf8');
    }

    /** GET /v1/whoami with a key: its status, and whose key it is. */
    async function whoami(key: string): Promise<{ status: number; role?: string; tenantId?: string | null }> {
      const res = await e2e.api.withToken(key).request('GET /v1/whoami');
      return res.status === 200 && res.ok
        ? { status: 200, role: res.body.role, tenantId: res.body.tenantId }
        : { status: res.status };
    }

    /** `provisioner_signups_total{source}` (absent: 0). */
    async function signupsCounted(source: 'warm' | 'cold'): Promise<number> {
      const text = await (
        await fetch(`${e2e.provisioner.url}/metrics`, { signal: AbortSignal.timeout(30_000) })
      ).text();
      const m = new RegExp(`^provisioner_signups_total\\{source="${source}"\\} (\\d+)$`, 'm').exec(text);
      return m ? Number(m[1]) : 0;
    }

    /**
     * Waits until the gauges show `POOL_SIZE` Ready entries; every sample must show at most
     * `parallelism` entries provisioning (the refill's budget) and none failing.
     */
    async function waitForFullPool(what: string, timeoutMs: number, want = POOL_SIZE) {
      let maxInFlight = 0;
      let failing = 0;
      const samples: string[] = [];
      await until(
        what,
        timeoutMs,
        async () => {
          const g = await poolGauges();
          maxInFlight = Math.max(maxInFlight, g.provisioning ?? 0);
          failing = Math.max(failing, g.failing ?? 0);
          const sample = `ready ${g.ready ?? '-'}, provisioning ${g.provisioning ?? '-'}, failing ${g.failing ?? '-'}`;
          if (samples.at(-1) !== sample) samples.push(sample);
          return (g.ready ?? 0) >= want;
        },
        1000,
      );
      return { maxInFlight, failing, samples };
    }

    /** The tenant namespaces on the root (`tenant-<id>`, labelled with the id), by id. */
    async function tenantNamespaces(): Promise<Map<string, { organization: string | undefined; created: number }>> {
      const list = await root.core.listNamespace({ labelSelector: TENANT_ID_LABEL });
      return new Map(
        list.items
          .filter((ns) => ns.status?.phase !== 'Terminating')
          .map((ns) => [
            ns.metadata!.labels![TENANT_ID_LABEL]!,
            {
              organization: ns.metadata?.annotations?.[ORGANIZATION_ANNOTATION],
              created: new Date(ns.metadata?.creationTimestamp ?? 0).getTime(),
            },
          ]),
      );
    }

    /** The unclaimed entries' namespaces (organization `warm-pool-<hex>`), oldest first. */
    async function poolNamespaces(): Promise<Array<{ id: string; organization: string; created: number }>> {
      return [...(await tenantNamespaces())]
        .filter(([, ns]) => ns.organization?.startsWith('warm-pool-'))
        .map(([id, ns]) => ({ id, organization: ns.organization!, created: ns.created }))
        .sort((a, b) => a.created - b.created || a.id.localeCompare(b.id));
    }

    async function listedTenantIds(): Promise<string[]> {
      return (await e2e.api.expectStatus('GET /v1/tenants', { query: { limit: 200 } }, 200)).items.map((x) => x.id);
    }

    /** The root's vcluster control plane pod of a tenant namespace: its uid (undefined: none). */
    async function vclusterPodUid(id: string): Promise<string | undefined> {
      const pods = await root.core.listNamespacedPod({ namespace: `tenant-${id}`, labelSelector: 'app=vcluster' });
      return pods.items.find((p) => p.metadata?.name === 'vcluster-0')?.metadata?.uid;
    }

    /** POST /v1/signup of plan free naming no version (the default), as a customer would. */
    async function signup(organization: string): Promise<Signup> {
      const started = Date.now();
      const res = await e2e.api.withToken('').request('POST /v1/signup', {
        body: { organization, email: `ops@${organization}.example`, plan: 'free' },
        headers: { 'idempotency-key': `e2e-${organization}-${randomUUID()}` },
      });
      return { res, seconds: seconds(started), started };
    }

    /** A signup's answer; throws, naming its status and error, when it was not a success. */
    function answered(s: Signup): SignupResponse {
      if (!s.res.ok) throw new Error(`signup answered ${s.res.status}: ${JSON.stringify(s.res.body).slice(0, 300)}`);
      return s.res.body;
    }

    let entries: Array<{ id: string; organization: string; created: number }> = [];
    const uidsBefore = new Map<string, string | undefined>();
    /** Each entry's pool credential, as its runtime holds it (the Secret in its vcluster). */
    const poolCredentials = new Map<string, string>();

    await t.test(
      'the pool fills: two Ready entries, one provisioning at a time, on the root and in no listing',
      async (t) => {
        const started = Date.now();
        const fill = await waitForFullPool(`${POOL_SIZE} Ready warm pool entries (/metrics)`, FILL_TIMEOUT);
        e2e.timing('warm pool filled (2 entries, parallelism 1)', seconds(started));
        t.comment(`pool gauges seen while filling: ${fill.samples.join(' → ')}`);
        t.equal(
          fill.maxInFlight,
          1,
          'at most one entry provisioning at any sample (PROVISIONER_WARM_POOL_PARALLELISM 1)',
        );
        t.equal(fill.failing, 0, 'no entry failing');

        entries = await poolNamespaces();
        t.equal(entries.length, POOL_SIZE, 'the root has two tenant namespaces of unclaimed entries');
        for (const e of entries) {
          t.match(e.organization, /^warm-pool-[0-9a-f]{8}$/, `tenant-${e.id}: an entry's organization, no customer's`);
          const sts = await root.apps.readNamespacedStatefulSet({ name: 'vcluster', namespace: `tenant-${e.id}` });
          t.equal(sts.status?.readyReplicas, 1, `tenant-${e.id}: its vcluster StatefulSet is ready`);
          t.ok(e2e.vclusters.get(`tenant-${e.id}`), `tenant-${e.id}: a real vcluster runs for it`);
          uidsBefore.set(e.id, await vclusterPodUid(e.id));
          t.ok(uidsBefore.get(e.id), `tenant-${e.id}: its vcluster pod exists on the root`);
          const credential = await runtimeKeyIn(e.id);
          poolCredentials.set(e.id, credential);
          t.same(
            await whoami(credential),
            { status: 200, role: 'runtime', tenantId: e.id },
            `tenant-${e.id}: its runtime holds its pool credential, a runtime key of the entry`,
          );
        }

        const listed = await listedTenantIds();
        t.same(listed, [], 'GET /v1/tenants lists no entry (no tenant has signed up)');
        const summary = await e2e.api.expectStatus('GET /v1/tenants/summary', {}, 200);
        t.equal(summary.total, 0, 'GET /v1/tenants/summary counts none');
        t.equal(summary.phases.Ready ?? 0, 0, 'and no Ready tenant');

        // Full: a few more rounds of the loop (every 2 s) add nothing.
        await new Promise((r) => setTimeout(r, 8_000));
        const after = await poolGauges();
        t.same(
          { ready: after.ready, provisioning: after.provisioning },
          { ready: POOL_SIZE, provisioning: 0 },
          'four rounds later: still two Ready, none provisioning',
        );
        t.equal((await tenantNamespaces()).size, POOL_SIZE, 'and no other tenant namespace on the root');
      },
    );

    let first: Signup | undefined;
    let second: Signup | undefined;
    let third: Signup | undefined;
    /** Phases of each warm tenant, sampled every 250 ms from its signup's answer until its bind has ended. */
    const phases = new Map<string, { samples: string[]; stop: () => Promise<void> }>();
    // A test that failed before its bind's end leaves its sampler running: stop it with the file.
    t.teardown(async () => {
      for (const w of phases.values()) await w.stop();
    });
    function watchPhase(id: string): void {
      const samples: string[] = [];
      let watching = true;
      const done = (async () => {
        while (watching) {
          const now = await e2e.api.tenant(id).catch((err: unknown) => ({ error: String(err) }));
          samples.push('status' in now ? now.status.phase : `error ${now.error}`);
          await new Promise((r) => setTimeout(r, 250));
        }
      })();
      phases.set(id, {
        samples,
        stop: async () => {
          watching = false;
          await done;
        },
      });
    }

    // The three signups follow each other at once: the refill the first claim starts takes a cold
    // create's minute, so the third finds the pool empty whatever the binds take.
    await t.test('a free signup at the default version is served warm: Ready in the answer', async (t) => {
      if (entries.length !== POOL_SIZE) throw new Error('the pool did not fill');
      first = await signup('acme-warm');
      const { res } = first;
      t.equal(res.status, 202, `signup answered 202 (${res.status}: ${JSON.stringify(res.body).slice(0, 300)})`);
      const body = answered(first);
      e2e.timing('signup → Ready from the warm pool', first.seconds);
      t.ok(
        first.seconds < 3,
        `answered in ${(first.seconds * 1000).toFixed(0)} ms (bound checked: < 3 s; a cold signup is Ready in minutes)`,
      );
      t.equal(body.warm, true, '"warm": true');
      t.equal(body.tenant.status.phase, 'Ready', 'the tenant is Ready in the answer');
      t.equal(body.tenant.id, entries[0]!.id, 'it is the oldest entry (its id, so its namespace and vcluster)');
      t.equal(body.tenant.organization, 'acme-warm', "named for the customer's organization");
      t.equal(body.tenant.spec.runtimeVersion, VERSION, `at the default version ${VERSION}`);
      t.equal(body.tenant.status.runtimeVersion, VERSION, 'which runs');
      const id = body.tenant.id;
      watchPhase(id); // until its bind has ended (the bind's test)
      const op = await e2e.api.operation(body.operationId);
      t.equal(op.kind, 'bind', "the signup's operation is a bind");
      t.equal(op.tenantId, id, 'of that tenant');
      t.equal(op.toVersion, VERSION, 'keeping its version');
    });

    await t.test('a second signup is warm too; a third finds the pool empty and takes the cold path', async (t) => {
      second = await signup('globex-warm');
      t.equal(second.res.status, 202, `second signup answered 202 (${second.res.status})`);
      e2e.timing('signup → Ready from the warm pool (second)', second.seconds);
      t.equal(answered(second).warm, true, 'the second: "warm": true');
      watchPhase(answered(second).tenant.id);
      t.equal(answered(second).tenant.status.phase, 'Ready', 'Ready in the answer');
      t.equal(answered(second).tenant.id, entries[1]!.id, 'the other entry');
      t.ok(second.seconds < 3, `answered in ${(second.seconds * 1000).toFixed(0)} ms (bound checked: < 3 s)`);

      third = await signup('initech-cold');
      t.equal(third.res.status, 202, `third signup answered 202 (${third.res.status})`);
      t.notOk(answered(third).warm, 'the third: not warm');
      t.not(answered(third).tenant.status.phase, 'Ready', `not Ready at once (${answered(third).tenant.status.phase})`);
      t.notOk(
        entries.some((e) => e.id === answered(third!).tenant.id),
        'a new tenant, none of the entries',
      );
      const op = await e2e.api.operation(answered(third).operationId);
      t.equal(op.kind, 'create', 'its operation is a create');
    });

    await t.test(
      "the bind applies the organization to the namespace while the tenant stays Ready; the tenant's key reads it",
      async (t) => {
        if (!first || !second) throw new Error('no warm signups');
        for (const [label, s, org] of [
          ['first', first, 'acme-warm'],
          ['second', second, 'globex-warm'],
        ] as const) {
          const id = answered(s).tenant.id;
          const op = await until(
            `the ${label} warm signup's bind ${answered(s).operationId} to end`,
            PROVISION_TIMEOUT,
            async () => {
              const o = await e2e.api.operation(answered(s).operationId);
              return o.state === 'succeeded' || o.state === 'failed' || o.state === 'cancelled' ? o : undefined;
            },
            500,
          );
          const watched = phases.get(id);
          await watched?.stop();
          t.equal(
            op.state,
            'succeeded',
            `the ${label} bind succeeded${op.error ? ` (${op.error.code}: ${op.error.message.slice(-500)})` : ''}`,
          );
          const ran = bindSeconds(op);
          if (ran !== undefined) e2e.timing(`bind (${label} warm signup, engine run)`, ran);
          e2e.timing(
            `signup → bind succeeded (${label} warm signup)`,
            (Date.parse(op.finishedAt ?? '') - Date.parse(op.createdAt)) / 1000,
          );

          const tenant = await e2e.api.tenant(id);
          t.equal(tenant.status.phase, 'Ready', `the ${label} tenant is Ready after its bind`);
          t.equal(tenant.status.observedGeneration, tenant.generation, 'with its generation observed');
          t.notOk(
            tenant.status.conditions.some((c) => c.type === 'Reconciling' && c.status === 'True'),
            'and nothing reconciling',
          );
          const ns = await root.core.readNamespace({ name: `tenant-${id}` });
          t.equal(
            ns.metadata?.annotations?.[ORGANIZATION_ANNOTATION],
            org,
            `tenant-${id} on the root carries ${ORGANIZATION_ANNOTATION}=${org} (was ${entries.find((e) => e.id === id)?.organization ?? '?'})`,
          );
          t.equal(
            await vclusterPodUid(id),
            uidsBefore.get(id),
            'its vcluster pod is the one that ran before the signup (the runtime was not restarted)',
          );
          // The key exchanged at the claim: the bind installed the tenant's own runtime key, and
          // its success revoked the entry's pool credential.
          const credential = poolCredentials.get(id);
          const runtimeKey = await runtimeKeyIn(id);
          t.ok(credential, `the ${label} tenant's entry had a pool credential`);
          t.not(runtimeKey, credential, "the runtime's key after the bind is another one than the entry's credential");
          t.same(
            await whoami(runtimeKey),
            { status: 200, role: 'runtime', tenantId: id },
            "it is the tenant's runtime key",
          );
          const refused = await until(
            `the ${label} entry's pool credential refused`,
            30_000,
            async () => {
              const w = await whoami(credential!);
              return w.status === 401 ? w : undefined;
            },
            500,
          );
          t.same(refused, { status: 401 }, "the entry's pool credential no longer authenticates (revoked by the bind)");
          const own = await e2e.api.withToken(answered(s).apiKey).request('GET /v1/tenants/:id', { params: { id } });
          t.equal(own.status, 200, "the tenant's API key reads its tenant");
          t.equal(own.ok ? own.body.organization : undefined, org, 'named for its organization');
          const other = s === first ? second : first;
          const foreign = await e2e.api
            .withToken(answered(s).apiKey)
            .request('GET /v1/tenants/:id', { params: { id: answered(other).tenant.id } });
          t.ok(foreign.status === 403 || foreign.status === 404, `and not the other warm tenant (${foreign.status})`);
          const seen = watched?.samples ?? [];
          t.ok(
            seen.length >= 4,
            `the ${label} tenant's phase was sampled ${seen.length} times from its signup to its bind's end`,
          );
          t.same([...new Set(seen)], ['Ready'], `and it was Ready at every sample (${[...new Set(seen)].join(', ')})`);
        }
      },
    );

    // The cold signup's create runs beside the refill's; neither is waited for to its end here (a
    // cold create's Ready is every other file's, a refilled entry's Ready the integration tier's
    // test/integration/api/warm-pool.test.ts): the file keeps its engine runs few.
    await t.test('the pool refills: a new entry is provisioned, one at a time', async (t) => {
      const started = Date.now();
      const fresh = await until("a new entry's namespace on the root", FILL_TIMEOUT, async () => {
        const now = await poolNamespaces();
        const found = now.filter((n) => !entries.some((e) => e.id === n.id));
        return found.length > 0 ? found : undefined;
      });
      e2e.timing('warm pool refill: a new entry provisioning', seconds(started));
      t.equal(fresh.length, 1, 'one new entry (parallelism 1)');
      t.match(fresh[0]!.organization, /^warm-pool-[0-9a-f]{8}$/, 'an entry, no customer');
      const g = await poolGauges();
      t.ok((g.provisioning ?? 0) <= 1, `/metrics: at most one provisioning (${g.provisioning ?? 0})`);
      t.equal(g.failing ?? 0, 0, 'none failing');
      const cold = await e2e.api.operation(answered(third!).operationId);
      t.match(cold.kind, 'create', "the cold signup's create");
      t.not(cold.state, 'failed', `is under way or done (${cold.state})`);
      const tenants = [first, second, third].map((s) => answered(s!).tenant.id).sort();
      t.same((await listedTenantIds()).sort(), tenants, 'GET /v1/tenants lists the three tenants and no entry');
      const summary = await e2e.api.expectStatus('GET /v1/tenants/summary', {}, 200);
      t.equal(summary.total, 3, 'the summary counts three tenants');
      t.equal(await signupsCounted('warm'), 2, '/metrics: two signups served warm');
      t.equal(await signupsCounted('cold'), 1, '/metrics: one cold');
    });

    await t.test('an idle free tenant goes to sleep by itself; a request through its argoCdUrl wakes it', async (t) => {
      if (!first) throw new Error('no warm signup');
      const id = answered(first).tenant.id;
      const ns = `tenant-${id}`;
      const asleep = await until(
        `the first warm tenant to go to sleep by itself (free plan idle after ${IDLE_SECONDS} s)`,
        (IDLE_SECONDS + 300) * 1000,
        async () => {
          const v = await e2e.api.tenant(id);
          return v.status.phase === 'Sleeping' &&
            v.status.sleep?.asleep === true &&
            v.status.observedGeneration === v.generation
            ? v
            : undefined;
        },
        1000,
      );
      e2e.timing('idle sleep: warm signup → asleep by itself', seconds(first.started));
      const audit = await e2e.api.expectStatus(
        'GET /v1/audit',
        { query: { targetType: 'tenant', targetId: id, limit: 50 } },
        200,
      );
      const slept = audit.items.find((a) => a.action === 'tenant.sleep');
      t.equal(slept?.actor, 'idle-sleep', 'put to sleep by the idle loop, not by a request');
      const idle = (slept?.after as { idleSeconds?: number; operationId?: string } | undefined) ?? {};
      t.ok((idle.idleSeconds ?? 0) >= IDLE_SECONDS, `after ${idle.idleSeconds ?? '?'} s without activity`);
      const op = await e2e.api.operation(idle.operationId ?? '');
      t.equal(op.kind, 'sleep', 'through a sleep operation');
      t.equal(op.state, 'succeeded', 'which succeeded');

      const left = await until(
        `no pod of ${ns} left on the root`,
        180_000,
        async () => {
          const pods = (await root.core.listNamespacedPod({ namespace: ns })).items;
          return pods.length === 0 ? pods : undefined;
        },
        1000,
      );
      t.same(left, [], 'no pod of its vcluster or runtime runs on the root: it reserves no CPU or memory');
      const sts = await root.apps.readNamespacedStatefulSet({ name: 'vcluster', namespace: ns });
      t.equal(sts.spec?.replicas, 0, 'its vcluster’s control plane is at zero');

      const path = new URL(asleep.status.endpoints?.argoCdUrl ?? '').pathname;
      const woke = Date.now();
      const res = await fetch(`${e2e.api.url}${path}api/version`, {
        headers: { authorization: `Bearer ${answered(first).apiKey}` },
        signal: AbortSignal.timeout(60_000),
      });
      const body = (await res.json()) as { error?: { code?: string; details?: { operationId?: string } } };
      t.equal(res.status, 503, 'a request through its argoCdUrl waits, then is answered 503');
      t.equal(body.error?.code, 'TENANT_WAKING', 'TENANT_WAKING');
      t.ok(res.headers.get('retry-after'), `with Retry-After (${res.headers.get('retry-after') ?? ''})`);
      const wakeId = body.error?.details?.operationId ?? '';
      const wake = await until(
        `the wake operation ${wakeId} to end`,
        PROVISION_TIMEOUT,
        async () => {
          const o = await e2e.api.operation(wakeId);
          return o.state === 'succeeded' || o.state === 'failed' || o.state === 'cancelled' ? o : undefined;
        },
        1000,
      );
      t.equal(wake.kind, 'wake', 'the request queued a wake operation');
      t.equal(wake.state, 'succeeded', `which succeeded${wake.error ? ` (${wake.error.message.slice(-300)})` : ''}`);
      e2e.timing('idle sleep: request while asleep → wake operation succeeded', seconds(woke));
      const awake = await e2e.api.tenant(id);
      t.equal(awake.status.phase, 'Ready', 'the tenant is Ready again');
      t.equal(awake.status.sleep?.asleep ?? false, false, 'and awake');
      const back = await root.apps.readNamespacedStatefulSet({ name: 'vcluster', namespace: ns });
      t.equal(back.spec?.replicas, 1, 'its vcluster’s control plane is back');
      t.comment(`the file's tests took ${seconds(fileStarted).toFixed(0)} s (environment start excluded)`);
    });
  },
  {
    extraEnv: {
      PROVISIONER_WARM_POOL: `free=${POOL_SIZE}`,
      PROVISIONER_WARM_POOL_CHECK_SECONDS: '2',
      PROVISIONER_SLEEP_IDLE_SECONDS: `free=${IDLE_SECONDS}`,
      PROVISIONER_SLEEP_CHECK_SECONDS: '5',
      PROVISIONER_WAKE_WAIT_SECONDS: '5',
    },
  },
);

/** The engine run of an operation, in seconds (its start to its end). */
function bindSeconds(op: Operation): number | undefined {
  if (!op.startedAt || !op.finishedAt) return undefined;
  return (Date.parse(op.finishedAt) - Date.parse(op.startedAt)) / 1000;
}
