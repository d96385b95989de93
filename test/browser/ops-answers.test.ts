/**
 * What ops look for first on the console, in Debian's Chromium against a real provisioner on real
 * PostgreSQL with no reconciler (CONSOLE_ENGINE=none) and one root cluster nobody answers for: the
 * banner naming what keeps tenants from being provisioned (the checks of GET /v1/doctor, as
 * `provisioner doctor` prints them), the "why" of a waiting or failing tenant, a suspension not
 * applied yet counted, tenants per runtime version, a cluster's health, and an operation's row
 * following its log without a reload. Screenshots of each page.
 */
import t from 'tap';
import { appendLog, appendLogAndNotify } from '../../provisioner/store/operations.ts';
import { insertOperation, setSuspender } from '../../provisioner/store/tenants.ts';
import type { Condition, Phase } from '../../provisioner/store/states.ts';
import { axeViolations } from './harness/browser.ts';
import { consoleFixture } from './harness/fixture.ts';
import { seedTenants } from './harness/seed.ts';
import { findTenants, setTenantStatus } from '../helpers/tenants.ts';
import { finishOperations, setOperationState } from '../helpers/operations.ts';

t.setTimeout(5 * 60_000);
const fx = await consoleFixture(t, { name: 'ops-answers', env: { CONSOLE_ENGINE: 'none' } });
const { db, client, signedIn } = fx;

// A root cluster at a documentation address: registered without its probe (force), so doctor
// finds it unreachable.
await fx.registerCluster();

/** One seeded tenant `<org>-00001` with the given state, as the reconciler would have left it. */
async function tenant(
  org: string,
  set: { phase: Phase; suspended?: boolean; version: string; installed: string | null; conditions: Condition[] },
): Promise<string> {
  await seedTenants(db.pool, 1, org, 1_000_000);
  const id = (await findTenants(db.pool, { organization: `${org}-00001` }))[0]!.id;
  await setTenantStatus(db.pool, id, {
    phase: set.phase,
    suspended: set.suspended ?? false,
    runtimeVersion: set.version,
    actualRuntimeVersion: set.installed,
    conditions: set.conditions,
  });
  await setSuspender(db.pool, id, set.suspended ? 'operator' : null, null);
  return id;
}
const cond = (type: string, status: Condition['status'], reason: string, message: string): Condition => ({
  type,
  status,
  reason,
  message,
  lastTransitionTime: new Date().toISOString(),
});
const waiting = await tenant('waiting', {
  phase: 'Pending',
  version: '1.4.1',
  installed: null,
  conditions: [cond('Ready', 'False', 'NoCapacity', 'no root cluster has room for plan team: register one')],
});
const failing = await tenant('failing', {
  phase: 'Failed',
  version: '1.4.1',
  installed: '1.4.1',
  conditions: [
    cond('Ready', 'False', 'ReconcileFailed', 'the last reconcile failed'),
    cond('Stalled', 'True', 'RetriesExhausted', 'gave up after 8 attempts: the vcluster chart did not install'),
  ],
});
const suspending = await tenant('suspending', {
  phase: 'Ready',
  suspended: true,
  version: '1.5.0',
  installed: '1.4.1',
  conditions: [cond('Ready', 'True', 'Ready', 'runtime is ready')],
});

t.test(
  "the tenants page: doctor's blocking problems, why tenants wait, suspensions and versions counted",
  async (t) => {
    const { page, problems } = await signedIn();
    const doctor = await client.call('GET /v1/doctor');
    const blocking = doctor.checks.filter((c) => c.status === 'problem');
    t.same(
      blocking.map((c) => c.name).sort(),
      ['cluster/eu-1a', 'engine'],
      'doctor finds two problems here: no engine, an unreachable cluster',
    );
    const banner = page.locator('.blocking');
    await banner.waitFor({ timeout: 20_000 });
    t.equal(await banner.getAttribute('data-blocking'), '2', 'the banner counts the two problems doctor reports');
    for (const c of blocking)
      t.ok(
        (await banner.locator(`li[data-check="${c.name}"]`).innerText()).includes(c.message),
        `the banner gives doctor's message for ${c.name}`,
      );
    t.match(await banner.innerText(), /unset PROVISIONER_ENGINE/, "the banner gives doctor's fix for the engine");

    const why = (id: string) => page.locator(`tr[data-tenant="${id}"] td.why`).innerText();
    t.equal(
      await why(waiting),
      'NoCapacity: no root cluster has room for plan team: register one',
      "a Pending tenant's why is its Ready condition's reason and message",
    );
    t.equal(
      await why(failing),
      'RetriesExhausted: gave up after 8 attempts: the vcluster chart did not install',
      "a stalled tenant's why is its Stalled condition, not the Ready one",
    );
    t.equal(await why(suspending), '', 'a Ready tenant has no why');

    await page.locator('[data-suspending-count]').waitFor();
    t.equal(await page.locator('[data-phase-count="Suspended"]').innerText(), '0', 'no suspension is applied yet');
    t.equal(
      await page.locator('[data-suspending-count]').getAttribute('data-suspending-count'),
      '1',
      'the suspended tenant still Ready is counted beside Suspended',
    );
    t.equal(await page.locator('[data-version-count="1.4.1"]').innerText(), '2', 'two tenants name 1.4.1');
    t.equal(await page.locator('[data-version-count="1.5.0"]').innerText(), '1', 'one tenant names 1.5.0');
    await fx.screenshot(page, 'tenants.png', { fullPage: true });
    t.same(await axeViolations(page), [], 'the tenants page has no serious accessibility violation');

    await page.locator('[data-version-count="1.5.0"]').click();
    await page.locator(`tr[data-tenant="${waiting}"]`).waitFor({ state: 'detached' });
    t.equal(await page.locator('tr[data-tenant]').count(), 1, 'a version count filters the list to its tenants');
    t.same(problems, [], 'no console error, no request to another host');
    await page.context().close();
  },
);

t.test("the clusters page: a cluster's health as doctor's probe finds it", async (t) => {
  const { page, problems } = await signedIn();
  await page.getByRole('link', { name: 'Clusters' }).click();
  const row = page.locator('tr[data-cluster="eu-1a"]');
  // The unreachable cluster is shown unreachable (checked in its cells below).
  await row.locator('td.health[data-reachable="false"]').waitFor({ timeout: 20_000 });
  t.match(
    await row.locator('td[data-state]').innerText(),
    /probe fails/,
    'its state does not say plainly "accepting" while the probe fails',
  );
  t.match(await row.locator('td.health').innerText(), /no/, 'Reachable: no');
  t.match(await row.innerText(), /0 \/ 50/, 'tenants placed / capacity');
  t.equal((await page.locator('.blocking').count()) > 0, true, 'the blocking banner is on the clusters page too');
  await fx.screenshot(page, 'clusters.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the clusters page has no serious accessibility violation');

  await page.getByRole('link', { name: 'Runtime versions' }).click();
  const cell = page.locator('td[data-version-tenants="1.4.1"]');
  await page.waitForFunction(
    () =>
      ((
        globalThis as unknown as { document: { querySelector(s: string): { textContent: string } | null } }
      ).document.querySelector('td[data-version-tenants="1.4.1"]')?.textContent ?? '…') !== '…',
  );
  t.equal(await cell.innerText(), '2 (2)', '1.4.1: two tenants name it, two run it');
  t.equal(
    await page.locator('td[data-version-tenants="1.5.0"]').innerText(),
    '1 (0)',
    '1.5.0: one tenant names it, none runs it',
  );
  t.equal(await page.locator('td[data-version-tenants="1.3.0"]').innerText(), '0 (0)', '1.3.0: no tenant');
  await fx.screenshot(page, 'versions.png', { fullPage: true });
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});

t.test("an operation's row follows its log: running, then succeeded, without a reload", async (t) => {
  const op = await insertOperation(db.pool, suspending, 'suspend', 1, null, null);
  const { page, problems } = await signedIn();
  await page.goto(`${fx.url}/console#/tenants/${suspending}`);
  const state = page.locator('table.operations tbody tr.selected td:nth-child(2)');
  await page.locator('table.operations tbody tr.selected td:nth-child(2)', { hasText: 'queued' }).waitFor();
  t.equal(await state.innerText(), 'queued', 'the queued operation is shown queued');
  await setOperationState(db.pool, op, 'running', { startedNow: true });
  await appendLogAndNotify(db.pool, op, [{ stream: 'engine', line: 'suspending the runtime' }]);
  await page.locator('.log').getByText('suspending the runtime').waitFor();
  await page.locator('table.operations tbody tr.selected td:nth-child(2)', { hasText: 'running' }).waitFor();
  t.equal(await state.innerText(), 'running', 'the row says running once the log does');
  await appendLog(db.pool, op, [{ line: 'suspended' }]);
  await finishOperations(db.pool, op); // the store's write wakes the log's followers
  await page.locator('.log-stats', { hasText: 'operation succeeded' }).waitFor();
  await page.locator('table.operations tbody tr.selected td:nth-child(2)', { hasText: 'succeeded' }).waitFor();
  t.equal(await state.innerText(), 'succeeded', 'the row says succeeded as the log ends, with no reload');
  await fx.screenshot(page, 'operation-followed.png', { fullPage: true });
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});
