/**
 * Idle sleep and wake on demand through the control plane: the idle round puts an idle free tenant
 * to sleep (not a team tenant, not one with recent activity), the reconciler applies it as a
 * suspension (phase Sleeping, Ready=False Sleeping, no alarm), a request to the sleeping runtime
 * wakes it and is answered once the runtime's tunnel is back, a runtime that is not back in time
 * gives 503 TENANT_WAKING with Retry-After, and the sleep/wake routes, audit rows and a spec
 * change's wake. Real Postgres, the real app on loopback, the real reconciler and tunnel client;
 * the engine is the ScriptedEngine TEST DOUBLE, whose script connects the runtime's tunnel when a
 * run leaves the runtime up and closes it when a run suspends it (what the vcluster's pods do;
 * the real engine and vcluster run in test/e2e/tenant-sleep.test.ts).
 */
import t from 'tap';
import http from 'node:http';
import { once } from 'node:events';
import { ScriptedEngine } from '../../helpers/scripted-engine.ts';
import { Reconciler } from '../../../provisioner/reconciler/reconciler.ts';
import { ApiClient, type ApiError } from '../../../provisioner/http/api-client.ts';
import { createTestApi } from '../../helpers/api.ts';
import { connectRuntime, type ConnectedRuntime } from '../../helpers/runtime.ts';
import { cliAgainst } from '../../helpers/cli.ts';
import { application, batch } from '../../helpers/events.ts';
import { EVENTS_PATH } from '../../../runtime/protocol/events.ts';
import { until } from '../../../sandbox/until.ts';
import { countTenantRecords, markIdle } from '../../helpers/tenants.ts';
import { auditRows } from '../../helpers/audit.ts';
import { tenantOperations } from '../../helpers/operations.ts';
import { queuedWebhooks } from '../../../provisioner/store/webhooks.ts';

const KUBECONFIG =
  'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://203.0.113.10:6443"}}]\n' +
  'users: [{name: u, user: {token: root-cluster-token-0123456789}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n';

const api = await createTestApi({
  env: {
    PROVISIONER_SLEEP_IDLE_SECONDS: 'free=600,enterprise=600',
    // Enterprise tenants are kept awake on Mondays 09:00–10:00 UTC.
    PROVISIONER_SLEEP_AWAKE_WINDOWS: 'enterprise=FREQ=WEEKLY;BYDAY=MO;BYHOUR=9 UTC 60',
    PROVISIONER_WAKE_WAIT_SECONDS: '5',
    PROVISIONER_WEBHOOK_MAX_BYTES: '4096',
    PROVISIONER_WEBHOOK_QUEUE_PER_TENANT: '3',
  },
});
const url = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());
const operator = api.as(api.operatorKey);
/** The client of a tenant's key, over the listening server (its runtime's API through the tunnel: `raw`). */
const tenantClient = (key: string) => new ApiClient({ baseUrl: url, token: key });

/** Webhooks the runtime's event source received (through its request router's /webhooks/*), per tenant. */
const received = new Map<string, Array<{ path: string; headers: http.IncomingHttpHeaders; body: string }>>();
/** Answers the event source gives next (500: it is not ready), per path; then 200. */
const failures = new Map<string, number>();
// The runtime's request router, as the tunnel client forwards to it.
const upstream = http.createServer((req, res) => {
  if (req.url?.startsWith('/webhooks/')) {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const left = failures.get(req.url!) ?? 0;
      if (left > 0) {
        failures.set(req.url!, left - 1);
        res.statusCode = 500;
        return res.end('event source not ready');
      }
      const tenant = String(req.headers['x-tenant-under-test']);
      received.set(tenant, [
        ...(received.get(tenant) ?? []),
        { path: req.url!, headers: req.headers, body: Buffer.concat(chunks).toString('utf8') },
      ]);
      res.end('ok');
    });
    return;
  }
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify({ path: req.url }));
});
upstream.listen(0, '127.0.0.1');
await once(upstream, 'listening');
t.teardown(() => upstream.close());

/** The runtime of each tenant while its engine run left it up (what its pods do). */
const runtimes = new Map<string, ConnectedRuntime>();
/** Every runtime started, so that the test's end closes each (one may connect after the last check). */
const connecting = new Set<Promise<ConnectedRuntime>>();
/** Tenants whose runtime does not come back after a wake (a slow start). */
const slow = new Set<string>();
// TEST DOUBLE engine: an up that suspends closes the runtime's tunnel; one that does not opens it.
const engine = new ScriptedEngine({
  script: (c) => {
    if (c.kind !== 'up') return undefined;
    return { outputs: { runtimeVersion: c.input.runtimeVersion, suspended: c.input.suspended } };
  },
  onStart: (c) => {
    if (c.kind !== 'up') return;
    if (c.input.suspended) {
      const r = runtimes.get(c.tenantId);
      runtimes.delete(c.tenantId);
      void r?.client.close();
    } else if (!slow.has(c.tenantId) && !runtimes.has(c.tenantId)) {
      connecting.add(
        connectRuntime(api, url, c.tenantId, upstream).then((r) => {
          runtimes.set(c.tenantId, r);
          return r;
        }),
      );
    }
  },
});
const reconciler = new Reconciler({ pool: api.db.pool, engine, box: api.services.box, pollMs: 100, logFlushMs: 10 });
await reconciler.start();
t.teardown(async () => {
  await reconciler.stop({ graceMs: 0 });
  await Promise.all([...connecting].map(async (p) => (await p).client.close()));
});

t.equal(
  (
    await operator.request('POST /v1/clusters', {
      body: { name: 'root-sleep', region: 'eu', capacity: 100, kubeconfig: KUBECONFIG, force: true },
    })
  ).status,
  201,
  'a root cluster is registered',
);

const view = (id: string) => operator.call('GET /v1/tenants/:id', { params: { id } });
const phaseIs = (id: string, phase: string) =>
  until(`tenant ${id} in phase ${phase}`, 30_000, async () => (await view(id)).status.phase === phase, 50);
/** Asleep once the sleep operation is done (the phase says Sleeping while it runs, too). */
const asleepDone = (id: string) =>
  until(
    `tenant ${id} asleep`,
    30_000,
    async () => {
      const v = await view(id);
      return (
        v.status.phase === 'Sleeping' && v.status.conditions.some((c) => c.type === 'Ready' && c.reason === 'Sleeping')
      );
    },
    50,
  );
const connected = (id: string) => api.services.tunnel.status(id).connected;

/** A signed-up tenant of the plan, Ready with its runtime connected. */
async function readyTenant(plan = 'free'): Promise<{ id: string; key: string }> {
  const s = await api.signup();
  if (plan !== 'free') await operator.call('PATCH /v1/tenants/:id', { params: { id: s.tenantId }, body: { plan } });
  await phaseIs(s.tenantId, 'Ready');
  await until('the runtime tunnel', 10_000, () => connected(s.tenantId));
  return { id: s.tenantId, key: s.apiKey };
}

/** Moves the tenant's last activity back (instead of waiting out its idle time). */
const idleFor = (id: string, seconds: number) => markIdle(api.db.pool, id, seconds);

const operation = (id: string) => operator.call('GET /v1/operations/:id', { params: { id } });
/** The tenant puts itself to sleep (202). */
const putToSleep = (tenant: { id: string; key: string }) =>
  api.as(tenant.key).request('POST /v1/tenants/:id/sleep', { params: { id: tenant.id } });

t.test('an idle free tenant sleeps; a team tenant and a recently active one do not', async (t) => {
  const idle = await readyTenant();
  const team = await readyTenant('team');
  const active = await readyTenant();
  await idleFor(idle.id, 3600);
  await idleFor(team.id, 3600);
  await idleFor(active.id, 60);

  t.equal(await api.services.sleep.sleepIdle(), 1, 'one tenant put to sleep by the round');
  const v = await view(idle.id);
  t.equal(v.status.sleep?.asleep, true, 'the idle free tenant is asleep in its status');
  t.ok(v.status.sleep?.since, 'with the time it was put to sleep');
  t.equal((await operation(v.status.lastOperationId!)).kind, 'sleep', 'through a sleep operation');
  await asleepDone(idle.id);
  const asleep = await view(idle.id);
  t.match(
    asleep.status.conditions.find((c) => c.type === 'Ready'),
    { status: 'False', reason: 'Sleeping', message: /next request to it wakes it/ },
    'Ready=False, Sleeping, says how it wakes',
  );
  t.notOk(
    asleep.status.conditions.some((c) => c.type === 'RuntimeConnected'),
    'no RuntimeConnected alarm for a runtime that sleeps',
  );
  const run = engine.calls.filter((c) => c.tenantId === idle.id && c.kind === 'up').at(-1);
  t.equal(run?.input.suspended, true, 'the engine ran the program with the runtime suspended');
  await until('the runtime tunnel closed', 10_000, () => !connected(idle.id));

  t.equal((await view(team.id)).status.sleep?.asleep, false, 'the team plan never sleeps (not configured)');
  t.equal((await view(active.id)).status.phase, 'Ready', 'a tenant active a minute ago stays awake');
  t.equal(await api.services.sleep.sleepIdle(), 0, 'the next round finds nothing more');

  const audit = await auditRows(api.db.pool, { targetId: idle.id, action: 'tenant.sleep' });
  t.match(audit, [{ actor: 'idle-sleep', actorRole: 'system' }], 'audited as the idle loop');
  t.ok(Number(audit[0]!.after?.idleSeconds) >= 3600, 'with how long it was idle');

  await t.test('a request to the sleeping runtime wakes it and is answered after the wake', async (t) => {
    const before = Date.now();
    const res = await tenantClient(idle.key).raw('GET', `/v1/tenants/${idle.id}/runtime/api/applications`);
    t.equal(res.status, 200, 'answered by the runtime');
    t.same(await res.json(), { path: '/api/applications' }, 'the runtime served the request');
    const woken = await view(idle.id);
    t.equal(woken.status.sleep?.asleep, false, 'awake again');
    const wake = await tenantOperations(api.db.pool, idle.id);
    t.equal(wake.at(-1)?.kind, 'wake', 'through a wake operation');
    await phaseIs(idle.id, 'Ready');
    t.ok(
      Date.parse(woken.status.sleep!.lastActivityAt) >= before - 1000,
      'the request counts as activity: last activity moved',
    );
    const audit = await auditRows(api.db.pool, { targetId: idle.id, action: 'tenant.wake' });
    t.match(audit[0]?.after?.reason, /a request to its runtime/, 'the wake is audited with what woke it');
  });
});

t.test('a runtime that is not back within the wait: 503 TENANT_WAKING with Retry-After', async (t) => {
  const tenant = await readyTenant();
  slow.add(tenant.id);
  t.equal((await putToSleep(tenant)).status, 202, 'the tenant puts itself to sleep');
  await asleepDone(tenant.id);
  const runtime = tenantClient(tenant.key);
  const [a, b] = await Promise.all(
    [1, 2].map(() =>
      runtime.raw('GET', `/v1/tenants/${tenant.id}/runtime/api/version`).then(
        () => undefined,
        (err: unknown) => err as ApiError,
      ),
    ),
  );
  for (const err of [a, b]) {
    t.equal(err?.status, 503, 'not back in time');
    t.equal(err?.retryAfterSeconds, 10, 'Retry-After says when to try again');
    t.equal(err?.code, 'TENANT_WAKING');
    t.match(err?.message, /asleep and is waking up/, 'the body says it is waking');
    t.equal((await operation(String(err?.details?.operationId))).kind, 'wake', 'and names the wake operation');
  }
  const wakes = await tenantOperations(api.db.pool, tenant.id, { kind: 'wake' });
  t.equal(wakes.length, 1, 'two requests at once queue one wake');
  await phaseIs(tenant.id, 'Ready');
  slow.delete(tenant.id);
});

t.test('the sleep and wake routes: what may sleep, repeats, and a spec change wakes', async (t) => {
  const tenant = await readyTenant();
  const suspended = await readyTenant();
  await operator.call('POST /v1/tenants/:id/suspend', { params: { id: suspended.id } });
  await phaseIs(suspended.id, 'Suspended');
  await t.rejects(
    operator.call('POST /v1/tenants/:id/sleep', { params: { id: suspended.id } }),
    { status: 409, code: 'NOT_SLEEPABLE', message: /suspended/ },
    'a suspended tenant does not sleep; the message says why',
  );

  const params = { id: tenant.id };
  const first = await operator.request('POST /v1/tenants/:id/sleep', { params });
  t.equal(first.status, 202);
  t.equal(first.ok && first.body.queued, true, 'queued a sleep');
  const again = await operator.call('POST /v1/tenants/:id/sleep', { params });
  t.equal(again.queued, false, 'asleep already: nothing queued');
  await asleepDone(tenant.id);

  const other = await api.signup();
  await t.rejects(
    api.as(other.apiKey).call('POST /v1/tenants/:id/wake', { params }),
    { name: 'ApiError', status: 404 },
    "another tenant's key cannot wake it",
  );

  // An upgrade of a sleeping tenant wakes it: the engine needs its virtual cluster running.
  const patched = await operator.request('PATCH /v1/tenants/:id', { params, body: { plan: 'team' } });
  t.equal(patched.status, 202);
  t.equal(patched.ok && patched.body.tenant.status.sleep?.asleep, false, 'a spec change wakes the tenant');
  await phaseIs(tenant.id, 'Ready');
  const run = engine.calls.filter((c) => c.tenantId === tenant.id && c.kind === 'up').at(-1);
  t.equal(run?.input.suspended, false, 'the change ran with the runtime up');

  const notAsleep = await api.as(tenant.key).request('POST /v1/tenants/:id/wake', { params });
  t.equal(notAsleep.status, 202);
  t.equal(notAsleep.ok && notAsleep.body.queued, false, 'waking an awake tenant queues nothing');
});

t.test('the CLI and /metrics show sleep', async (t) => {
  const tenant = await readyTenant();
  const cli = cliAgainst(url, api.operatorKey);
  const awake = await cli(['tenants', 'get', tenant.id]);
  t.match(awake.out, /sleep:\s+awake, last activity \S+ \(/, 'tenants get: awake, with its last activity');
  const slept = await cli(['tenants', 'sleep', tenant.id]);
  t.equal(slept.code, 0, `tenants sleep: ${slept.err}`);
  t.match(slept.out, /putting to sleep .*operation [0-9a-f-]{36}/, 'names the sleep operation');
  await asleepDone(tenant.id);
  const again = await cli(['tenants', 'sleep', tenant.id]);
  t.equal(again.code, 4, 'sleeping one that sleeps: nothing to do (exit 4)');
  t.match(again.out, /nothing to do: .*is already asleep/);
  const got = await cli(['tenants', 'get', tenant.id]);
  t.match(got.out, /sleep:\s+asleep since \S+; the next request to its runtime/, 'tenants get says it is asleep');
  t.match(got.out, /status:\s+asleep \(Sleeping\)/, 'and its status line says why it is not Ready');
  const list = await cli(['tenants', 'list']);
  t.match(
    list.out.split('\n').find((l) => l.includes(tenant.id)),
    /Sleeping.*asleep/,
    'tenants list: phase Sleeping, status asleep',
  );

  const metrics = (await api.request('GET', '/metrics', { key: null })).body;
  const asleep = Number(/^provisioner_tenants_sleep\{plan="free",state="asleep"\} (\d+)/m.exec(metrics)?.[1]);
  t.equal(
    asleep,
    await countTenantRecords(api.db.pool, { plan: 'free', phase: 'Sleeping', deleted: false }),
    `/metrics counts the sleeping free tenants (${asleep})`,
  );
  t.ok(asleep >= 1);
  t.match(metrics, /^provisioner_sleep_events_total\{event="woken_by_request"\} [1-9]/m, 'and the wakes by request');

  const woke = await cli(['tenants', 'wake', tenant.id]);
  t.equal(woke.code, 0, `tenants wake: ${woke.err}`);
  t.match(woke.out, /waking .*operation [0-9a-f-]{36}/, 'names the wake operation');
  await phaseIs(tenant.id, 'Ready');
  const hook = await cli(['tenants', 'webhook-url', tenant.id]);
  t.equal(hook.code, 0, `tenants webhook-url: ${hook.err}`);
  const hookUrl = hook.out.split('\n')[0]!;
  t.match(hookUrl, new RegExp(`/v1/webhooks/${tenant.id}/[A-Za-z0-9_-]{43}/$`), 'prints the URL first');
  const kept = await fetch(`${hookUrl}github`, { method: 'POST', body: '{}' });
  t.equal(kept.status, 202, 'the printed URL takes webhooks');
  t.match(await kept.json(), { queued: true, waking: false }, 'for the awake tenant');

  const notAsleep = await cli(['tenants', 'wake', tenant.id]);
  t.equal(notAsleep.code, 4, 'waking an awake tenant: nothing to do');
  t.match(notAsleep.out, /nothing to do: .*is not asleep \(phase Ready\)/);
});

t.test('webhooks: a public per-tenant URL; kept, delivered in order, also after a sleep', async (t) => {
  const tenant = await readyTenant();
  const mint = (key: string) => api.as(key).request('POST /v1/tenants/:id/webhook-url', { params: { id: tenant.id } });
  const minted = await mint(tenant.key);
  t.equal(minted.status, 201, 'the tenant gets a webhook URL');
  if (!minted.ok) throw new Error('precondition: a webhook URL');
  const hookUrl = new URL(minted.body.url);
  t.match(hookUrl.pathname, new RegExp(`^/v1/webhooks/${tenant.id}/[A-Za-z0-9_-]{43}/$`), 'with a secret in it');
  // the webhooks' public route is outside the route map, sent with the providers' raw headers
  const post = (path: string, body: string, headers: Record<string, string> = {}, base = hookUrl.pathname) =>
    fetch(`${url}${base}${path}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'push',
        'x-hub-signature-256': 'sha256=feedface',
        'x-tenant-under-test': tenant.id,
        authorization: 'Bearer not-forwarded',
        ...headers,
      },
      body,
    });
  const queued = async () => Number((await queuedWebhooks(api.db.pool, tenant.id)).count);

  await t.test('awake: delivered to the event source as sent', async (t) => {
    const res = await post('github?source=repo-a', '{"ref":"refs/heads/main"}');
    t.equal(res.status, 202, 'accepted');
    t.match(await res.json(), { queued: true, waking: false });
    const got = await until('the event source to receive it', 10_000, () => received.get(tenant.id)?.[0]);
    t.equal(got.path, '/webhooks/github?source=repo-a', 'at its path under /webhooks, with the query');
    t.equal(got.body, '{"ref":"refs/heads/main"}', 'the body byte for byte');
    t.equal(got.headers['x-github-event'], 'push', "the provider's event header");
    t.equal(got.headers['x-hub-signature-256'], 'sha256=feedface', 'and its signature header');
    t.notOk(got.headers.authorization, "the caller's Authorization is not passed on");
    await until('the queue to be empty', 10_000, async () => (await queued()) === 0);
  });

  await t.test('a wrong or replaced secret is a 404; too large a body 413', async (t) => {
    const wrong = await post('github', '{}', {}, `/v1/webhooks/${tenant.id}/${'A'.repeat(43)}/`);
    t.equal(wrong.status, 404, 'a wrong secret');
    const escaping = await post('..%2Fapi%2Fapplications', '{}');
    t.equal(escaping.status, 400, 'a path with an encoded slash is refused: it could leave /webhooks on the runtime');
    const big = await post('github', 'x'.repeat(5000));
    t.equal(big.status, 413, 'over PROVISIONER_WEBHOOK_MAX_BYTES');
    const again = await mint(api.operatorKey);
    const old = await post('github', '{}');
    t.equal(old.status, 404, 'the previous URL stops working once a new one is minted');
    hookUrl.pathname = new URL(again.ok ? again.body.url : '').pathname;
    t.equal((await post('github', '{"n":0}')).status, 202, 'the new one works');
    await until('delivered', 10_000, async () => (await queued()) === 0);
    received.delete(tenant.id);
  });

  await t.test('asleep: kept, the tenant woken, delivered in order after the wake', async (t) => {
    t.equal((await putToSleep(tenant)).status, 202);
    await asleepDone(tenant.id);
    slow.add(tenant.id); // the runtime is not back before the test says so
    const first = await post('github', '{"n":1}');
    t.equal(first.status, 202);
    t.match(await first.json(), { queued: true, waking: true }, 'the answer says the tenant is waking for it');
    t.equal((await post('github', '{"n":2}')).status, 202);
    t.equal((await post('github', '{"n":3}')).status, 202);
    const full = await post('github', '{"n":4}');
    t.equal(full.status, 503, "the fourth is over the tenant's queue budget of 3");
    t.equal(full.headers.get('retry-after'), '60', 'with Retry-After');
    t.equal(((await full.json()) as { error: { code: string } }).error.code, 'WEBHOOK_QUEUE_FULL');
    t.equal(await queued(), 3, 'three kept while the runtime is away');
    t.equal(received.get(tenant.id), undefined, 'none delivered yet');
    const wake = await auditRows(api.db.pool, { targetId: tenant.id, action: 'tenant.wake' });
    t.equal(wake.at(-1)?.actor, 'webhook', 'the webhook woke the tenant (audited)');
    await phaseIs(tenant.id, 'Ready');
    failures.set('/webhooks/github', 1); // the event source is not ready at first
    slow.delete(tenant.id);
    runtimes.delete(tenant.id);
    connecting.add(connectRuntime(api, url, tenant.id, upstream).then((r) => (runtimes.set(tenant.id, r), r)));
    const got = await until('all three delivered', 30_000, () =>
      received.get(tenant.id)?.length === 3 ? received.get(tenant.id) : undefined,
    );
    t.same(
      got.map((g) => g.body),
      ['{"n":1}', '{"n":2}', '{"n":3}'],
      'in the order they came, the first after a 500 from the event source was retried',
    );
    // Deleted once the runtime's answer is back, a moment after the event source has it.
    t.ok(
      await until('nothing left in the queue', 10_000, async () => (await queued()) === 0),
      'nothing left in the queue',
    );
  });
});

t.test("a diff asked of a sleeping tenant's runtime wakes it too", async (t) => {
  const tenant = await readyTenant();
  const reporter = runtimes.get(tenant.id)!.runtimeKey.key;
  // the runtime's event reports are outside the route map: raw
  const posted = await api.request('POST', EVENTS_PATH, {
    key: reporter,
    body: batch('reporter-0', [application('web', 1)]),
  });
  t.equal(posted.statusCode, 200, 'the runtime reported an Application');
  t.equal((await putToSleep(tenant)).status, 202);
  await asleepDone(tenant.id);
  slow.add(tenant.id);
  const err = (await t.rejects(
    api.as(tenant.key).call('GET /v1/tenants/:id/applications/:namespace/:name/diff', {
      params: { id: tenant.id, namespace: 'argocd', name: 'web' },
    }),
    { status: 503, code: 'TENANT_WAKING' },
    'the runtime is not back within the wait: the answer says it is waking',
  )) as ApiError;
  t.equal((await operation(String(err.details?.operationId))).kind, 'wake', 'the diff queued a wake');
  await phaseIs(tenant.id, 'Ready');
  slow.delete(tenant.id);
});

t.test("a plan's keep-awake window: its idle tenants sleep only outside it", async (t) => {
  const tenant = await readyTenant('enterprise');
  await idleFor(tenant.id, 3600);
  t.equal(await api.services.sleep.sleepIdle(Date.parse('2026-11-30T09:30:00Z')), 0, 'inside the window: none');
  t.equal((await view(tenant.id)).status.sleep?.asleep, false, 'the idle enterprise tenant stays awake');
  t.equal(await api.services.sleep.sleepIdle(Date.parse('2026-11-30T10:30:00Z')), 1, 'after it: put to sleep');
  t.equal((await view(tenant.id)).status.sleep?.asleep, true);
  await asleepDone(tenant.id);
});
