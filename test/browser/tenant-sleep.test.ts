/**
 * Idle sleep in the console, in Debian's Chromium against a real provisioner on real PostgreSQL
 * whose reconciler runs the ScriptedEngine TEST DOUBLE (harness/console-server.ts; the real engine
 * runs in the e2e tier): a Ready tenant's page offers Sleep…, whose confirmation queues a `sleep`
 * operation; once the reconciler applied it (phase Sleeping, Ready=False reason Sleeping) the
 * tenants list shows the calm Sleeping badge and "asleep since …" in its Why column, and the tenant
 * page says so and offers Wake, which queues a `wake` operation and the page follows the tenant back
 * to Ready. A suspended tenant is offered no Sleep…, and the API's refusal (409 NOT_SLEEPABLE) is
 * shown with its message. Accessibility (axe-core) and screenshots of the asleep state.
 *
 * Where a state must hold still for a moment (a spec change or a suspension not yet applied), the
 * test holds the tenant's reconciler lease in the database, as a replica in the middle of an
 * attempt would.
 */
import t from 'tap';
import type { Page } from 'playwright-core';
import { axeViolations } from './harness/browser.ts';
import { consoleFixture } from './harness/fixture.ts';
import { until } from '../../sandbox/until.ts';
import {
  holdLease as holdTenantLease,
  releaseLease as releaseTenantLease,
  setTenantStatus,
} from '../helpers/tenants.ts';

t.setTimeout(5 * 60_000);
const fx = await consoleFixture(t, { name: 'tenant-sleep', env: { CONSOLE_ENGINE_DELAY_MS: 50 } });
const { db, client, signedIn } = fx;

const tenant = (id: string) => client.call('GET /v1/tenants/:id', { params: { id } });
const operations = async (id: string) =>
  (await client.call('GET /v1/tenants/:id/operations', { params: { id }, query: { limit: 50 } })).items;

/** A tenant signed up and provisioned by the reconciler: phase Ready, its spec applied. */
async function provisioned(organization: string): Promise<string> {
  const { id } = await fx.signup(organization);
  await until(
    `${organization} Ready`,
    120_000,
    async () => {
      const v = await tenant(id);
      return v.status.phase === 'Ready' && v.generation === v.status.observedGeneration;
    },
    100,
  );
  return id;
}

/** Holds the tenant's reconciler lease (as a replica mid-attempt would): the reconciler leaves it alone. */
async function holdLease(id: string): Promise<void> {
  await until(
    'the tenant free of any lease',
    30_000,
    async () => (await holdTenantLease(db.pool, id, 'tenant-sleep-test', 3600, { ifFree: true })) === 1,
    50,
  );
}
async function releaseLease(id: string): Promise<void> {
  await releaseTenantLease(db.pool, id);
}

async function openTenant(page: Page, id: string, organization: string): Promise<void> {
  await page.evaluate(`location.hash = '#/tenants/${id}'`);
  await page.getByRole('heading', { name: new RegExp(organization) }).waitFor();
}
/** The badge's colours as the page computes them. */
const colours = (badge: ReturnType<Page['locator']>) =>
  badge.evaluate((e) => {
    const s = (
      globalThis as unknown as { getComputedStyle(e: unknown): { color: string; backgroundColor: string } }
    ).getComputedStyle(e);
    return { color: s.color, background: s.backgroundColor };
  });

// A root cluster at a documentation address (forced: nobody answers there); the scripted engine needs none.
await fx.registerCluster();

t.test('Sleep… puts a Ready tenant to sleep; asleep, it is calm in the list and offers Wake', async (t) => {
  const id = await provisioned('sleepy-org');
  const { page, problems } = await signedIn();
  await openTenant(page, id, 'sleepy-org');

  const sleepFact = page.locator('dd[data-sleep]');
  t.match(
    await sleepFact.innerText(),
    /^awake, last activity \d+[smhd] ago$/,
    'the details say the tenant is awake, with its last activity',
  );
  const sleepButton = page.getByRole('button', { name: 'Sleep…' });
  const wakeButton = page.getByRole('button', { name: 'Wake', exact: true });
  await sleepButton.waitFor();
  t.equal(await wakeButton.count(), 0, 'an awake tenant is offered no Wake');

  const before = new Set((await operations(id)).map((o) => o.id));
  await sleepButton.click();
  const confirmSleep = page
    .getByRole('group', { name: 'Confirm sleep' })
    .getByRole('button', { name: 'Confirm sleep' });
  await confirmSleep.waitFor();
  t.match(
    await page.locator('.actions').innerText(),
    /scale to zero; its data is kept/,
    'the confirmation says what sleep does before it is asked',
  );
  await confirmSleep.click();
  await page.getByRole('status').filter({ hasText: 'sleep accepted' }).waitFor();

  const asked = await tenant(id);
  t.equal(asked.status.sleep?.asleep, true, "the API has the tenant's sleep asked (status.sleep.asleep)");
  const sleepOps = (await operations(id)).filter((o) => !before.has(o.id));
  t.same(
    sleepOps.map((o) => o.kind),
    ['sleep'],
    'the confirmation queued one operation, of kind sleep',
  );

  // The reconciler (scripted engine) applies it: phase Sleeping, Ready=False reason Sleeping.
  const asleep = await until(
    'the sleep applied',
    60_000,
    async () => {
      const v = await tenant(id);
      const ready = v.status.conditions.find((c) => c.type === 'Ready');
      return v.status.phase === 'Sleeping' && ready?.status === 'False' && ready.reason === 'Sleeping' && v;
    },
    100,
  );
  t.ok(asleep.status.sleep?.since, 'the API says since when it sleeps');

  // The page follows without reload.
  const heading = page.getByRole('heading', { name: /sleepy-org/ });
  await heading.locator('.phase', { hasText: 'Sleeping' }).waitFor({ timeout: 30_000 });
  t.equal(
    await heading.locator('.phase').getAttribute('class'),
    'phase phase-sleeping',
    'the tenant page badge is Sleeping',
  );
  await page.locator('dd[data-sleep="asleep"]').waitFor();
  t.match(
    await sleepFact.innerText(),
    /^asleep since \d{4}-\d\d-\d\d \d\d:\d\d UTC \(\d+[smhd] ago\); the next request to its runtime wakes it; last activity \d+[smhd] ago$/,
    'the details say since when it sleeps and that the next request wakes it',
  );
  await wakeButton.waitFor();
  t.equal(await sleepButton.count(), 0, 'an asleep tenant is offered no Sleep…');
  await fx.screenshot(page, 'tenant-asleep.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the tenant page asleep has no serious accessibility violation');

  // The list: the calm Sleeping badge and the Why.
  await page.evaluate(`location.hash = '#/tenants'`);
  const row = page.locator(`tr[data-tenant="${id}"]`);
  await row.waitFor();
  const badge = row.locator('td.status .phase');
  t.equal(await badge.getAttribute('class'), 'phase phase-sleeping', 'the list badge is phase-sleeping');
  t.equal(await badge.innerText(), 'Sleeping', 'it says Sleeping');
  t.same(
    await colours(badge),
    { color: 'rgb(47, 63, 143)', background: 'rgb(238, 241, 251)' },
    'in its own calm colours (slate blue; not the Failed red, nor the unstyled text)',
  );
  const why = row.locator('td.why');
  t.match(
    await why.innerText(),
    /^asleep since \d+[smhd] ago; the next request to its runtime wakes it$/,
    'the Why column says since when it sleeps and that the next request wakes it',
  );
  t.equal(await why.locator('.reason').count(), 0, 'and raises no reason in bold: nothing is wrong');
  t.equal(await page.locator('[data-phase-count="Sleeping"]').innerText(), '1', 'the Sleeping count counts it');
  await fx.screenshot(page, 'tenants-asleep.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the tenants page with a tenant asleep has no serious accessibility violation');

  // Wake.
  await row.getByRole('link', { name: 'sleepy-org' }).click();
  await heading.waitFor();
  const beforeWake = new Set((await operations(id)).map((o) => o.id));
  // The wake held still a moment (lease held): asked, then running (phase Waking).
  await holdLease(id);
  await wakeButton.click();
  await page.getByRole('status').filter({ hasText: 'wake accepted' }).waitFor();
  t.equal((await tenant(id)).status.sleep?.asleep, false, 'the API has the tenant awake again (status.sleep.asleep)');
  t.same(
    (await operations(id)).filter((o) => !beforeWake.has(o.id)).map((o) => o.kind),
    ['wake'],
    'Wake queued one operation, of kind wake',
  );
  await page.locator('dd[data-sleep="waking"]').waitFor();
  t.equal(
    await sleepFact.innerText(),
    'waking up: its runtime and virtual cluster start again',
    'the details say it is waking up, without reload',
  );
  await setTenantStatus(db.pool, id, { phase: 'Waking' });
  const waking = heading.locator('.phase', { hasText: 'Waking' });
  await waking.waitFor();
  t.equal(await waking.getAttribute('class'), 'phase phase-waking', 'the Waking badge');
  t.same(
    await colours(waking),
    { color: 'rgb(11, 92, 173)', background: 'rgb(221, 244, 255)' },
    'in its own calm colours (blue, as work under way that is no problem)',
  );
  t.equal((await wakeButton.count()) + (await sleepButton.count()), 0, 'waking: neither Wake nor Sleep… is offered');
  await releaseLease(id);
  // The reconciler runs the wake; the page follows the tenant back to Ready, and offers Sleep… again.
  await heading.locator('.phase', { hasText: /^Ready/ }).waitFor({ timeout: 60_000 });
  await sleepButton.waitFor();
  t.match(await sleepFact.innerText(), /^awake/, 'awake again, the page says so without reload');
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});

t.test('a suspended tenant is offered no Sleep…; a refusal shows the API message', async (t) => {
  const suspended = await provisioned('suspended-org');
  const busy = await provisioned('busy-org');
  const { page, problems } = await signedIn();

  // Suspended, the suspension not applied yet (lease held): phase still Ready, spec suspended.
  await holdLease(suspended);
  const suspend = await client.request('POST /v1/tenants/:id/suspend', { params: { id: suspended } });
  t.equal(suspend.status, 202, 'suspend accepted');
  await openTenant(page, suspended, 'suspended-org');
  await page.getByRole('button', { name: 'Resume…' }).waitFor();
  t.equal(
    await page
      .getByRole('heading', { name: /suspended-org/ })
      .locator('.phase')
      .innerText(),
    'Ready',
    'the phase is still Ready (the suspension is not applied)',
  );
  t.equal(await page.getByRole('button', { name: 'Sleep…' }).count(), 0, 'a suspended Ready tenant: no Sleep…');
  await releaseLease(suspended);
  await page
    .getByRole('heading', { name: /suspended-org/ })
    .locator('.phase', { hasText: 'Suspended' })
    .waitFor({
      timeout: 60_000,
    });
  t.equal(await page.getByRole('button', { name: 'Sleep…' }).count(), 0, 'a Suspended tenant: no Sleep…');

  // A spec change not applied yet (lease held): the page offers Sleep…, the API refuses it.
  await holdLease(busy);
  await setTenantStatus(db.pool, busy, { generationBy: 1 });
  await openTenant(page, busy, 'busy-org');
  await page.getByRole('button', { name: 'Sleep…' }).click();
  await page.getByRole('button', { name: 'Confirm sleep' }).click();
  const alert = page.getByRole('alert');
  await alert.waitFor();
  const text = await alert.innerText();
  t.match(text, /cannot be put to sleep: a change of its spec is not applied yet/, "the API's reason is shown");
  t.match(text, /NOT_SLEEPABLE/, 'with its code');
  t.equal((await tenant(busy)).status.sleep?.asleep, false, 'nothing was asked');
  await fx.screenshot(page, 'sleep-refused.png', { fullPage: true });
  await setTenantStatus(db.pool, busy, { generationBy: -1 });
  await releaseLease(busy);
  t.same(
    problems.filter((p) => !/status of 409/.test(p)),
    [],
    'no console error but the refused sleep (409), no request to another host',
  );
  await page.context().close();
});
