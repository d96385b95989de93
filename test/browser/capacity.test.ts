/**
 * The Capacity page (#/capacity, operators), in Debian's Chromium against a real provisioner on
 * real PostgreSQL whose reconciler runs the ScriptedEngine TEST DOUBLE (harness/console-server.ts;
 * the real engine runs in the e2e tier), with a warm pool of one free entry
 * (PROVISIONER_WARM_POOL=free=1) and the default sleep settings (free sleeps after 30 minutes, team
 * never). Free tenants signed up warm (from the pool) and cold, one put to sleep and one put to
 * sleep and woken through the API, a team tenant: the page shows per plan the tenants awake and
 * asleep, what one awake tenant reserves and that an asleep one reserves nothing, what the plan's
 * tenants reserve now, when it sleeps, the pool as ready/size, the signups warm and cold, and the
 * wakes of the last day, each as GET /v1/capacity says; it follows a tenant falling asleep without
 * reload; a 403 is shown with the API's message and code; a tenant key is offered no Capacity page.
 * Accessibility (axe-core) and a screenshot.
 */
import t from 'tap';
import type { Page } from 'playwright-core';
import { axeViolations } from './harness/browser.ts';
import { consoleFixture } from './harness/fixture.ts';
import { until } from '../../sandbox/until.ts';
import type { AnswerOf } from '../../provisioner/http/api-client.ts';

t.setTimeout(6 * 60_000);
const fx = await consoleFixture(t, {
  name: 'capacity',
  env: { CONSOLE_ENGINE_DELAY_MS: 50, PROVISIONER_WARM_POOL: 'free=1', PROVISIONER_WARM_POOL_CHECK_SECONDS: 1 },
});
const { client } = fx;

type Capacity = AnswerOf<'GET /v1/capacity'>;
type Reservation = Capacity['plans'][number]['reservation']['now'];
const capacity = () => client.call('GET /v1/capacity');
const planOf = (c: Capacity, plan: string) => c.plans.find((p) => p.plan === plan)!;
const tenant = (id: string) => client.call('GET /v1/tenants/:id', { params: { id } });
const phase = async (id: string) => (await tenant(id)).status.phase;

// What the page writes, from the API's numbers (console/src/capacity.tsx).
const cpu = (m: number) => `${Number((m / 1000).toFixed(3))} CPU`;
const memory = (b: number) => {
  const mib = b / 1024 ** 2;
  return mib < 1024 ? `${Math.round(mib)} MiB` : `${Number((mib / 1024).toFixed(1))} GiB`;
};
const reserves = (r: Reservation) =>
  r.cpuMillicores === 0 && r.memoryBytes === 0 ? 'nothing' : `${cpu(r.cpuMillicores)}, ${memory(r.memoryBytes)}`;
const runTime = (s: number) => {
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 60) return `${Math.round(s)} s`;
  const min = Math.ceil(s / 60);
  return min < 60 ? `${min} min` : `${Math.floor(min / 60)} h${min % 60 ? ` ${min % 60} min` : ''}`;
};

/** Signs up a tenant; says whether it came warm. */
const signup = (organization: string, plan: string) => fx.signup(organization, { plan });
async function settled(id: string, want = 'Ready'): Promise<void> {
  await until(
    `${id} ${want}, its spec applied, nothing pending`,
    120_000,
    async () => {
      const v = await tenant(id);
      if (v.status.phase !== want || v.generation !== v.status.observedGeneration) return false;
      const ops = await client.call('GET /v1/tenants/:id/operations', { params: { id }, query: { limit: 50 } });
      return ops.items.every((o) => o.state === 'succeeded' || o.state === 'failed');
    },
    100,
  );
}
/** Asks a sleep (retrying while a bind or another operation is still pending: 409) and waits for it applied. */
async function putToSleep(id: string): Promise<void> {
  await until(
    'sleep accepted',
    60_000,
    async () => (await client.request('POST /v1/tenants/:id/sleep', { params: { id } })).status === 202,
    100,
  );
  await until(`${id} asleep`, 60_000, async () => (await phase(id)) === 'Sleeping', 100);
}

const signedIn = (key?: string) => fx.signedIn(key, (page) => page.locator('header.top nav'));
const cell = (page: Page, plan: string, what: string) => page.locator(`tr[data-plan="${plan}"] [data-${what}]`);
const text = async (page: Page, plan: string, what: string) => (await cell(page, plan, what).innerText()).trim();

await fx.registerCluster();

t.test('per plan: awake, asleep, reservations, sleep, warm pool, signups; the wakes', async (t) => {
  // The warm-pool loop provisions the free plan's entry (the reconciler runs it, scripted).
  await until(
    'the free pool entry Ready',
    120_000,
    async () => planOf(await capacity(), 'free').warmPool.ready === 1,
    200,
  );
  const a = await signup('warm-org', 'free');
  const b = await signup('cold-org', 'free');
  const c = await signup('woken-org', 'free');
  const team = await signup('team-org', 'team');
  t.ok(a.warm, 'the first free signup was served from the pool (warm)');
  for (const x of [a, b, c, team]) await settled(x.id);

  // c: asleep, then woken (a wake of the last 24 h); a: asleep.
  await putToSleep(c.id);
  t.equal((await client.request('POST /v1/tenants/:id/wake', { params: { id: c.id } })).status, 202, 'wake accepted');
  await settled(c.id);
  await putToSleep(a.id);
  // The pool refilled after the claim.
  await until(
    'the free pool full again',
    120_000,
    async () => {
      const p = planOf(await capacity(), 'free').warmPool;
      return p.ready === 1 && p.provisioning === 0;
    },
    200,
  );

  const api = await capacity();
  const free = planOf(api, 'free');
  const teamPlan = planOf(api, 'team');
  t.same(free.tenants, { awake: 2, asleep: 1, waking: 0 }, 'the API: free 2 awake (b, c), 1 asleep (a)');
  t.same(teamPlan.tenants, { awake: 1, asleep: 0, waking: 0 }, 'the API: team 1 awake');
  t.ok(
    free.reservation.awakeTenant.cpuMillicores > 0 && free.reservation.awakeTenant.memoryBytes > 0,
    'a free tenant reserves',
  );
  t.same(free.reservation.asleepTenant, { cpuMillicores: 0, memoryBytes: 0 }, 'an asleep one nothing');
  t.equal(free.reservation.now.cpuMillicores, 2 * free.reservation.awakeTenant.cpuMillicores, 'now: 2 awake tenants');
  t.equal(free.sleepAfterSeconds, 1800, 'free sleeps after 30 minutes (the default)');
  t.equal(teamPlan.sleepAfterSeconds, null, 'team never sleeps');
  t.same([free.warmPool.size, teamPlan.warmPool.size], [1, 0], 'the pool: free=1, none for team');
  t.equal(free.warmPool.target, 1, 'one per root cluster, one cluster: a target of 1');
  t.same(
    free.warmPool.clusters.map((c) => [c.cluster, c.ready]),
    [['eu-1a', 1]],
    'its entry on eu-1a',
  );
  const freeWarm = [a, b, c].filter((x) => x.warm).length;
  t.same(free.signups24h, { warm: freeWarm, cold: 3 - freeWarm }, 'the API counts the free signups warm and cold');
  t.same(teamPlan.signups24h, { warm: 0, cold: 1 }, 'the team signup was cold');
  t.equal(api.wakes24h.count, 1, 'the API counts one wake');

  const { page, problems } = await signedIn();
  const nav = page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Capacity' });
  await nav.click();
  await page.getByRole('heading', { name: 'Capacity', level: 1 }).waitFor();
  t.equal(await nav.getAttribute('aria-current'), 'page', 'the Capacity entry of the navigation is current');
  await cell(page, 'free', 'awake').waitFor();

  t.equal(await text(page, 'free', 'awake'), '2', 'free: 2 awake');
  t.equal(await text(page, 'free', 'asleep'), '1', 'free: 1 asleep');
  t.equal(await text(page, 'free', 'waking'), '0', 'free: 0 waking');
  t.equal(await text(page, 'team', 'awake'), '1', 'team: 1 awake');
  t.equal(await text(page, 'team', 'asleep'), '0', 'team: 0 asleep');
  t.equal(
    await text(page, 'free', 'awake-tenant'),
    `awake: ${reserves(free.reservation.awakeTenant)}`,
    'what one awake free tenant reserves, in CPU and MiB/GiB, as the API says',
  );
  t.match(
    await text(page, 'free', 'awake-tenant'),
    /^awake: \d+(\.\d+)? CPU, \d+(\.\d+)? (MiB|GiB)$/,
    'in human units',
  );
  t.equal(await text(page, 'free', 'asleep-tenant'), 'asleep: nothing', 'an asleep one reserves nothing');
  t.equal(
    await text(page, 'free', 'reserved-now'),
    reserves(free.reservation.now),
    "what the free plan's tenants reserve now (2 awake), as the API says",
  );
  t.equal(
    await text(page, 'team', 'awake-tenant'),
    `awake: ${reserves(teamPlan.reservation.awakeTenant)}`,
    'what one team tenant reserves',
  );
  t.equal(await text(page, 'free', 'sleep-after'), 'sleeps after 30m', 'free: sleeps after 30m');
  t.equal(await text(page, 'team', 'sleep-after'), 'never sleeps', 'team: never sleeps');
  t.equal(await text(page, 'free', 'pool-ready'), '1/1 ready', 'the free pool: 1 ready of 1');
  t.equal(await text(page, 'free', 'pool-clusters'), 'eu-1a: 1/1', 'per root cluster: eu-1a holds 1 of 1');
  t.match(await text(page, 'free', 'pool-oldest'), /^oldest ready for \d+[smh]/, "with its oldest entry's age");
  t.equal(await cell(page, 'free', 'pool-failing').count(), 0, 'no failing count while none fails');
  t.equal(await text(page, 'team', 'warm-pool'), 'no pool: every signup is cold', 'team: no pool');
  t.equal(
    await text(page, 'free', 'signups'),
    `${freeWarm} warm, ${3 - freeWarm} cold`,
    'the free signups of the last 24 h, warm and cold',
  );
  t.equal(await text(page, 'team', 'signups'), '0 warm, 1 cold', 'the team signup, cold');
  t.match(
    await page.locator('[data-wakes]').innerText(),
    new RegExp(
      `^1 wake: median ${runTime(api.wakes24h.p50Seconds!).replace('.', '\\.')}, longest ${runTime(api.wakes24h.maxSeconds!).replace('.', '\\.')} `,
    ),
    'the wakes of the last 24 h: count, median, longest, as the API says',
  );
  t.equal(await page.locator('[data-default-version]').innerText(), api.defaultVersion, 'the default version');
  await fx.screenshot(page, 'capacity.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the Capacity page has no serious accessibility violation');

  // Live: b falls asleep; the page follows (the tenants' change stream) without reload, well within its 15 s poll.
  await putToSleep(b.id);
  await page.locator('tr[data-plan="free"] [data-asleep]', { hasText: '2' }).waitFor({ timeout: 10_000 });
  t.equal(await text(page, 'free', 'awake'), '1', 'live: free 1 awake');
  t.equal(
    await text(page, 'free', 'reserved-now'),
    reserves(planOf(await capacity(), 'free').reservation.now),
    'live: reserved now follows (1 awake)',
  );
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});

t.test('a 403 is shown as the API gave it; a tenant key has no Capacity page', async (t) => {
  const signedUp = await signup('tenant-key-org', 'team');
  const denied = await fx.as(signedUp.apiKey).request('GET /v1/capacity');
  t.equal(denied.status, 403, 'the API refuses a tenant key');
  if (denied.ok) throw new Error('precondition: the API refused the tenant key');
  const body = denied.body;

  // The operator's page, answered the API's own 403.
  const { page, problems } = await signedIn();
  await page.route('**/v1/capacity', (route) =>
    route.fulfill({ status: 403, contentType: 'application/json', body: JSON.stringify(body) }),
  );
  await page.evaluate(`location.hash = '#/capacity'`);
  const alert = page.getByRole('alert');
  await alert.waitFor();
  const said = await alert.innerText();
  t.match(said, body.error.message, "the API's message");
  t.match(said, body.error.code, 'and its code');
  t.equal(await page.locator('table.capacity').count(), 0, 'no table without an answer');
  t.same(await axeViolations(page), [], 'the refused page has no serious accessibility violation');
  t.same(
    problems.filter((p) => !/status of 403/.test(p)),
    [],
    'no console error but the refused request (403), no request to another host',
  );
  await page.context().close();

  const w = await signedIn(signedUp.apiKey);
  await w.page.getByRole('link', { name: 'My tenant' }).waitFor();
  t.equal(
    await w.page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Capacity' }).count(),
    0,
    'a tenant key is offered no Capacity entry',
  );
  await w.page.context().close();
});
