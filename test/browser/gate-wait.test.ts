/**
 * What the console says of a fleet upgrade blocked on a health gate and of the names it shows, in
 * Debian's Chromium against a provisioner process whose reconciler runs the ScriptedEngine TEST
 * DOUBLE and whose fleet driver is the real one (harness/console-server.ts). The double installs
 * a runtime whose agents never run, so no tunnel ever connects: the driver's tunnel gate waits,
 * as it does for a hosted runtime that does not come back after an upgrade. Checked: the fleet
 * upgrade page names the gate, since when, the time left and the actions (wait, skip gate, abort);
 * the tenant's page shows the fleet upgrade it is part of; "Skip gate…" with a reason moves the
 * tenant on; who started it by key name; runtimes by organization; log
 * lines numbered within their log; words, not field names; dates that do not wrap; the upgrade
 * graph's legend. Accessibility (axe-core) and a screenshot of each page.
 */
import t from 'tap';
import { appendLog } from '../../provisioner/store/operations.ts';
import { insertOperation } from '../../provisioner/store/tenants.ts';
import { axeViolations } from './harness/browser.ts';
import { consoleFixture } from './harness/fixture.ts';
import { until } from '../../sandbox/until.ts';
import { setOperationState } from '../helpers/operations.ts';
import { startFleetUpgrade } from '../helpers/fleet.ts';
import { findTenants } from '../helpers/tenants.ts';

t.setTimeout(6 * 60_000);
const fx = await consoleFixture(t, {
  name: 'gate-wait',
  env: { CONSOLE_ENGINE_DELAY_MS: 200 },
  operatorName: 'ops-alice',
  signupIdempotencyKey: true,
});
const { db, client, operator, signedIn } = fx;

await fx.registerCluster();

async function signup(organization: string, runtimeVersion: string): Promise<string> {
  const { id } = await fx.signup(organization, { email: 'ops@example.com', runtimeVersion });
  await until(
    `${organization} Ready`,
    60_000,
    async () => (await findTenants(db.pool, { ids: [id] }))[0]?.phase === 'Ready' || undefined,
  );
  return id;
}

const GATE_TIMEOUT = 3600;
const tenant = await signup('gated-org', '1.4.0');
const created = await startFleetUpgrade(client, {
  targetVersion: '1.4.1',
  selector: { tenantIds: [tenant] },
  waves: [{ count: 1 }],
  gateTimeoutSeconds: GATE_TIMEOUT,
});
const fleetId = created.fleetUpgrade.id;
const fleetView = () => client.call('GET /v1/fleet-upgrades/:id', { params: { id: fleetId } });
// The driver upgrades the tenant, then its gate waits on the tunnel (no agent of the double
// connects one): the state the pages are read in.
const wait = await until(
  'the fleet upgrade waiting on the tunnel gate',
  120_000,
  async () => {
    const f = await fleetView();
    const w = f.tenants?.find((x) => x.tenantId === tenant)?.gateWait;
    return w && w.waitingOn.some((c) => c.name === 'tunnel') ? w : undefined;
  },
  250,
);

t.test('a fleet upgrade blocked on its gate shows the gate, since when, the time left and the actions', async (t) => {
  const { page, problems } = await signedIn();
  await page.evaluate(`location.hash = '#/fleet-upgrades/${fleetId}'`);
  const card = page.getByRole('region', { name: /Waiting on the health gate: 1 tenant/ });
  await card.waitFor();
  const detail = card.locator(`[data-gate-wait="${tenant}"]`);
  t.match(
    await detail.locator('[data-waiting-on]').innerText(),
    /^tunnel \(not connected\)/,
    'it names the check it waits on: the tunnel, not connected',
  );
  const text = await detail.innerText();
  const since = wait.since.slice(0, 16).replace('T', ' ');
  t.match(text, new RegExp(`Since ${since} UTC`), `since when: the step's start (${wait.since})`);
  const left = Number(await detail.locator('[data-seconds-left]').getAttribute('data-seconds-left'));
  t.ok(left > 0 && left <= GATE_TIMEOUT, `a time left before the timeout, within the gate timeout (${left} s)`);
  t.match(
    text,
    /\d+ (h|min)( \d+ min)? left before the gate times out at \d{4}-\d\d-\d\d \d\d:\d\d UTC/,
    'the time left in words',
  );
  t.ok(text.includes(wait.onTimeout), `what happens then, as the API says (${wait.onTimeout})`);
  const actions = await card.locator(`[data-gate-actions="${tenant}"] li`).allInnerTexts();
  t.same(
    actions.map((a) => a.split(/[:(]/)[0]!.trim()),
    ['Wait', 'Skip gate', 'Abort'],
    "the tenant's actions: wait, skip gate, abort",
  );
  t.match(
    actions[0],
    /^Wait: \d+ (h|min)( \d+ min)? left before the gate times out; it passes as soon as its checks do/,
    'waiting says the time left plainly',
  );
  t.match(actions[1], /^Skip gate: count tunnel as passed for this step only \(audited\)/, 'skipping names the check');
  t.equal(
    await card.getByRole('button', { name: 'Skip gate of gated-org…' }).count(),
    1,
    'with a Skip gate… button for the tenant',
  );
  t.match(
    actions[2],
    /^Abort \(the Abort… button above\): the whole fleet upgrade stops/,
    'abort is the whole fleet upgrade',
  );
  t.match(
    await card.locator('[data-fleet-action="pause"]').innerText(),
    /^Or pause the fleet upgrade/,
    'pausing the fleet upgrade is offered too',
  );
  t.equal(await page.getByRole('button', { name: 'Pause…' }).count(), 1, 'with the Pause… button on the page');
  t.equal(await page.getByRole('button', { name: 'Abort…' }).count(), 1, 'and the Abort… button');
  t.match(
    await page.locator(`tr[data-fleet-tenant="${tenant}"]`).innerText(),
    /waiting on tunnel \(not connected\); \d+ (h|min)( \d+ min)? left/,
    "the tenant's row says what its gate waits on and the time left",
  );
  const by = await page.locator('[data-created-by]').innerText();
  t.equal(by, 'ops-alice (operator key)', 'started by the key named, with its role');
  t.notOk((await page.locator('main').innerText()).includes(operator.info.id), "the key's id is not shown as its name");
  await fx.screenshot(page, 'fleet-upgrade-blocked.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the blocked fleet upgrade page has no serious accessibility violation');

  await page.locator(`[data-gate-wait="${tenant}"] a`).first().click();
  const part = page.locator('[data-tenant-fleet-upgrades]');
  await part.waitFor();
  t.equal(
    await part.getByRole('link', { name: /fleet upgrade to 1\.4\.1/ }).getAttribute('href'),
    `#/fleet-upgrades/${fleetId}`,
    'the tenant page links the fleet upgrade it is part of',
  );
  t.match(await part.innerText(), /This tenant: upgrading in canary/, "with the tenant's state in it");
  t.match(
    await part.locator('[data-waiting-on]').innerText(),
    /^tunnel \(not connected\)/,
    'and the gate its step waits on',
  );
  await fx.screenshot(page, 'tenant-in-fleet-upgrade.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the tenant page has no serious accessibility violation');
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});

t.test('Skip gate… asks for a reason, skips the check for that step and the tenant moves on', async (t) => {
  const { page, problems } = await signedIn();
  await page.evaluate(`location.hash = '#/fleet-upgrades/${fleetId}'`);
  const card = page.getByRole('region', { name: /Waiting on the health gate: 1 tenant/ });
  await card.waitFor();
  const opener = card.getByRole('button', { name: 'Skip gate of gated-org…' });
  await opener.click();
  const form = page.getByRole('form', { name: /Skip the gate of gated-org's upgrade 1\.4\.0 → 1\.4\.1/ });
  await form.waitFor();
  const focused = () =>
    page.evaluate('document.activeElement?.getAttribute("name") ?? document.activeElement?.textContent');
  t.equal(await focused(), 'skip-reason', 'the form opens with the focus on the reason');
  t.equal(
    await form.getByRole('checkbox', { name: /tunnel \(not connected\)/ }).isChecked(),
    true,
    'the check it waits on is chosen, with what was found',
  );
  const confirm = form.getByRole('button', { name: 'Skip gate', exact: true });
  t.equal(await confirm.isDisabled(), true, 'it cannot be confirmed without a reason');
  t.same(await axeViolations(page), [], 'the open form has no serious accessibility violation');
  await page.keyboard.press('Escape');
  await opener.waitFor();
  t.equal(await focused(), 'Skip gate…', 'Escape closes it and gives the focus back to the button');

  await opener.click();
  const reason = 'INC-4711: its tunnel client is down for a DNS outage';
  await form.getByRole('textbox', { name: 'Reason (audited)' }).fill(reason);
  await fx.screenshot(page, 'skip-gate-form.png', { fullPage: true });
  await confirm.click();
  const notice = page.locator('[data-skip-notice]');
  await notice.waitFor();
  t.match(
    await notice.innerText(),
    /^Skipped tunnel for gated-org's upgrade 1\.4\.0 → 1\.4\.1/,
    'the page says which check was skipped for which step',
  );
  t.equal(await notice.getAttribute('role'), 'status', 'as a status message');
  t.equal(
    await page.evaluate('document.activeElement?.hasAttribute("data-skip-notice")'),
    true,
    'which takes the focus',
  );
  const row = page.locator(`tr[data-fleet-tenant="${tenant}"]`);
  await row.locator('td', { hasText: /^succeeded$/ }).waitFor({ timeout: 60_000 });
  t.equal(
    await row.locator('td').nth(2).innerText(),
    'succeeded',
    "the tenant's step moved on: its row says succeeded",
  );
  const skipped = row.locator('[data-gate-skipped]');
  t.equal(await skipped.getAttribute('data-gate-skipped'), 'tunnel', 'its row says its tunnel check was skipped');
  t.match(
    await skipped.innerText(),
    new RegExp(`tunnel of 1\\.4\\.0 → 1\\.4\\.1 skipped by ops-alice \\(operator key\\): ${reason}`),
    'by whom and why',
  );
  t.match(await row.innerText(), /passed: .*tunnel skipped/, 'and its gate passed with the tunnel check skipped');
  t.equal(
    await page.getByRole('region', { name: /Waiting on the health gate/ }).count(),
    0,
    'nothing waits on the health gate any more',
  );
  const f = await fleetView();
  t.same(
    f.tenants?.find((x) => x.tenantId === tenant)?.gateSkipped.map((x) => [x.checks, x.reason, x.byKey?.name]),
    [[['tunnel'], reason, 'ops-alice']],
    'the API records the skip with the reason and the key',
  );
  await fx.screenshot(page, 'fleet-upgrade-gate-skipped.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the page after the skip has no serious accessibility violation');
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});

t.test('names, not ids or field names: runtimes by organization, words for fields, dates whole', async (t) => {
  const { page, problems } = await signedIn();
  await page.getByRole('link', { name: 'Runtimes' }).click();
  const link = page.locator(`tr[data-tenant="${tenant}"][data-mode="hosted"] a[data-tenant-link]`);
  await link.waitFor();
  t.equal(await link.innerText(), 'gated-org', "the runtime's tenant is named by its organization");
  t.equal(await link.getAttribute('href'), `#/tenants/${tenant}`, 'linking to the tenant');
  t.notOk(
    (await page.locator(`tr[data-tenant="${tenant}"]`).innerText()).includes(tenant),
    "the tenant's UUID is not what the row shows",
  );
  await fx.screenshot(page, 'runtimes.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the runtimes page has no serious accessibility violation');

  await page.evaluate(`location.hash = '#/tenants/${tenant}'`);
  await page.getByRole('heading', { name: 'Conditions' }).waitFor();
  const facts = await page.locator('dl.facts dt').allInnerTexts();
  const endpoints = (await client.call('GET /v1/tenants/:id', { params: { id: tenant } })).status.endpoints;
  const camel = Object.keys(endpoints).filter((k) => /[a-z][A-Z]/.test(k));
  if (camel.length === 0)
    throw new Error(`precondition: an endpoint named in camelCase (${Object.keys(endpoints).join(', ')})`);
  t.same(
    facts.filter((f) => /[a-z][A-Z]/.test(f)),
    [],
    `no label is a field name in camelCase (${camel.join(', ')} among the endpoints)`,
  );
  t.ok(
    facts.some((f) => /^vcluster endpoint$|^Argo CD URL$/.test(f)),
    `the endpoints are labelled in words (${facts.join(' | ')})`,
  );
  const dates = await page.locator('main time').evaluateAll((els) =>
    els.map((e) => ({
      wrap: (globalThis as unknown as { getComputedStyle(el: unknown): { whiteSpace: string } }).getComputedStyle(e)
        .whiteSpace,
      title: e.getAttribute('title') ?? '',
      height: e.getBoundingClientRect().height,
    })),
  );
  t.ok(dates.length > 3, `the page shows dates (${dates.length})`);
  t.same(
    dates.filter((d) => d.wrap !== 'nowrap'),
    [],
    'every date is set not to wrap',
  );
  t.same(
    dates.filter((d) => !/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/.test(d.title)),
    [],
    'each with its full timestamp in its tooltip',
  );
  t.ok(
    dates.every((d) => d.height < 24),
    `each on one line (heights ${[...new Set(dates.map((d) => Math.round(d.height)))].join(', ')} px)`,
  );
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});

t.test("an operation's log numbers its lines within the log shown", async (t) => {
  // Another operation's lines first: the log's own lines have sequence numbers above 1.
  const other = await insertOperation(db.pool, tenant, 'resync', 1, null, null);
  await appendLog(
    db.pool,
    other,
    Array.from({ length: 5 }, (_, i) => ({ line: `other ${i}` })),
  );
  const op = await insertOperation(db.pool, tenant, 'resync', 1, null, null);
  await setOperationState(db.pool, [op, other], 'succeeded', { startedNow: true, finishedNow: true });
  await appendLog(db.pool, op, [{ line: 'first' }, { line: 'second' }, { line: 'third' }]);
  const { page, problems } = await signedIn();
  await page.evaluate(`location.hash = '#/tenants/${tenant}/operations/${op}'`);
  await page.locator('.log-stats[data-lines="3"]').waitFor();
  const firstSeq = Number(await page.locator('.log-stats').getAttribute('data-first-seq'));
  if (!(firstSeq > 1))
    throw new Error(`precondition: the log's first line has a sequence number above 1 (${firstSeq})`);
  t.same(await page.locator('.log-lines .line .seq').allInnerTexts(), ['1', '2', '3'], 'its lines are numbered 1 to 3');
  t.equal(
    await page.locator('.log-lines .line .seq').last().getAttribute('title'),
    'line 3 of 3',
    'the last one is line 3 of 3',
  );
  t.match(await page.locator('.log-stats').innerText(), /^3 lines/, 'the log has 3 lines');
  await fx.screenshot(page, 'log-numbered.png', { fullPage: true });
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});

t.test('the upgrade-path graph has a legend for its marks', async (t) => {
  const { page, problems } = await signedIn();
  await page.getByRole('link', { name: 'Runtime versions' }).click();
  await page.locator('svg.graph path.edge').first().waitFor();
  const legend = await page.getByRole('list', { name: 'Legend' }).locator('li').allInnerTexts();
  t.same(
    legend.map((l) => l.trim()),
    [
      'a runtime version (oldest on the left)',
      "arc above, solid: a direct upgrade, in the arrow's direction",
      'arc below, dashed: a direct rollback',
    ],
    'the legend explains the circles, the solid arcs and the dashed arcs',
  );
  t.notMatch(
    await page.locator('table.versions').innerText(),
    /argoCd|argoWorkflows/,
    'components are named in words, not by field name',
  );
  await fx.screenshot(page, 'versions-legend.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the versions page has no serious accessibility violation');
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});
