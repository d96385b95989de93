/**
 * The ops console live, in Debian's Chromium, against a real provisioner on real PostgreSQL whose
 * reconciler runs the ScriptedEngine TEST DOUBLE (harness/console-server.ts; the real engine runs
 * in the e2e tier): a phase change shown without reload, an upgrade refused with its path, a
 * delete confirmed by the typed name, a 100,000-line log rendered virtualised, a log followed
 * across a provisioner killed and started again (every line once), the clusters and runtime
 * versions pages, fleet upgrades, a tenant's reported applications; accessibility (axe-core) and
 * screenshots of each.
 */
import { readFileSync } from 'node:fs';
import t from 'tap';
import { appendLog, appendLogAndNotify } from '../../provisioner/store/operations.ts';
import type { Page } from 'playwright-core';
import { createKey } from '../../provisioner/store/keys.ts';
import { insertOperation, insertTenant, setSuspender } from '../../provisioner/store/tenants.ts';
import { application, batch, deletion } from '../helpers/events.ts';
import { axeViolations, type PageGlobals } from './harness/browser.ts';
import { consoleFixture } from './harness/fixture.ts';
import { seedTenants } from './harness/seed.ts';
import { startFleetUpgrade } from '../helpers/fleet.ts';
import { portOutsideEphemeralRange } from '../helpers/ports.ts';
import { until } from '../../sandbox/until.ts';
import { findTenants, setTenantStatus } from '../helpers/tenants.ts';
import { finishOperations, setOperationState } from '../helpers/operations.ts';
import { addInstalledHybridRuntime } from '../helpers/runtimes.ts';
import { getClusterByName } from '../../provisioner/store/clusters.ts';
import { getFleetRow } from '../../provisioner/store/fleet-upgrades.ts';

// Chromium and a provisioner process on a shared 2-core machine: more than tap's default of 120 s.
t.setTimeout(10 * 60_000);

const fx = await consoleFixture(t, {
  name: 'live',
  env: { CONSOLE_ENGINE_DELAY_MS: 1000 },
  // The console server is killed and started again on this port: one outside the ephemeral range,
  // which nothing else takes in between.
  port: await portOutsideEphemeralRange(),
  signupIdempotencyKey: true,
});
const { db, client, signedIn } = fx;

const phaseOf = async (id: string) => (await findTenants(db.pool, { ids: [id] }))[0]?.phase;

async function signup(organization: string, runtimeVersion?: string): Promise<string> {
  const { id } = await fx.signup(organization, {
    email: 'ops@example.com',
    ...(runtimeVersion ? { runtimeVersion } : {}),
  });
  await until(`${organization} Ready`, 30_000, async () => (await phaseOf(id)) === 'Ready', 25);
  return id;
}

/** Problems that are expected while the provisioner is down: the browser logs its refused connections. */
const connectionLost = (p: string) =>
  /ERR_CONNECTION_REFUSED|ERR_INCOMPLETE_CHUNKED_ENCODING|ERR_EMPTY_RESPONSE|network error|Failed to fetch/.test(p);

await fx.registerCluster();

t.test('a phase change appears without reload within 2 s', async (t) => {
  const id = await signup('live-phase');
  const { page, problems } = await signedIn();
  await page.getByRole('searchbox', { name: 'Search' }).fill('live-phase');
  const cell = (phase: string) => page.locator(`tr[data-tenant="${id}"] td[data-phase="${phase}"]`);
  await cell('Ready').waitFor();
  const suspend = await client.request('POST /v1/tenants/:id/suspend', { params: { id } });
  t.equal(suspend.status, 202, 'suspend accepted');
  const [tDb, tDom] = await Promise.all([
    until('Suspended in the database', 30_000, async () => (await phaseOf(id)) === 'Suspended' && Date.now(), 25),
    cell('Suspended')
      .waitFor({ timeout: 30_000 })
      .then(() => Date.now()),
  ]);
  console.log(`# phase change shown ${tDom - tDb} ms after the database had it`);
  t.ok(
    tDom - tDb < 2000,
    `the page showed Suspended ${tDom - tDb} ms after it was written (bound 2 s), without reload`,
  );
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});

t.test('an upgrade refused by the catalog shows the path; delete needs the typed name', async (t) => {
  const id = await signup('live-actions', '1.3.0');
  const { page, problems } = await signedIn();
  await page.evaluate(`location.hash = '#/tenants/${id}'`);
  await page.getByRole('heading', { name: /live-actions/ }).waitFor();
  await page.getByLabel('Upgrade to').selectOption('1.5.0');
  const hint = await page.locator('.path-refused').innerText();
  t.match(hint, /Path to follow: 1\.3\.0 → 1\.4\.\d → 1\.5\.0/, `the path is shown before asking (${hint})`);
  await page.getByRole('button', { name: 'Upgrade…' }).click();
  await page.getByRole('button', { name: /Confirm upgrade/ }).click();
  const alert = page.getByRole('alert');
  await alert.waitFor();
  const text = await alert.innerText();
  t.match(text, /UPGRADE_PATH_REFUSED/, "the API's refusal is shown with its code");
  t.match(text, /Path to follow: 1\.4\.\d → 1\.5\.0/, "with the API's path to follow");
  await fx.screenshot(page, 'upgrade-refused.png', { fullPage: true });

  t.equal(await page.getByRole('button', { name: 'Resume…' }).count(), 0, 'no Resume button on a running tenant');
  await page.getByRole('button', { name: 'Delete…' }).click();
  const confirm = page.getByRole('button', { name: 'Delete this tenant' });
  t.ok(await confirm.isDisabled(), 'delete is disabled until the name is typed');
  await page.getByLabel(/Type the organization name/).fill('live-action');
  t.ok(await confirm.isDisabled(), 'a name that is not the organization keeps it disabled');
  await page.getByLabel(/Type the organization name/).fill('live-actions');
  t.ok(await confirm.isEnabled(), 'the organization name enables it');
  t.same(await axeViolations(page), [], 'the tenant page with its actions open has no serious accessibility violation');
  await confirm.click();
  await page.getByText('delete accepted').waitFor();
  await page.locator('h1 .phase', { hasText: /Deleting|Deleted/ }).waitFor({ timeout: 30_000 });
  t.match(
    await phaseOf(id),
    /^(Deleting|Deleted)$/,
    'the delete is accepted: the tenant is Deleting or Deleted, as the page shows live',
  );
  t.same(
    problems.filter((p) => !/status of 422/.test(p)),
    [],
    'no console error but the refused upgrade (422), no request to another host',
  );
  await page.context().close();
});

/** A settled tenant (not due for the reconciler) with one operation, for the log tests. */
async function tenantWithOperation(org: string, state: 'running' | 'succeeded'): Promise<{ id: string; op: string }> {
  await seedTenants(db.pool, 1, org, 1_000_000);
  const id = (await findTenants(db.pool, { organization: `${org}-00001` }))[0]!.id;
  const op = await insertOperation(db.pool, id, 'resync', 1, null, null);
  await setOperationState(db.pool, op, state, { startedNow: true });
  return { id, op };
}
const numbered = (from: number, to: number) =>
  Array.from({ length: to - from + 1 }, (_, i) => ({ line: `line ${String(from + i).padStart(6, '0')} of the test` }));
const stats = (page: Page) => page.locator('.log-stats');
const cordoned = async (cluster: string) => (await getClusterByName(db.pool, cluster))?.cordoned;
/** Every line of the downloaded log, checked: numbered 1..n in order, seqs strictly increasing. */
async function downloaded(page: Page): Promise<{ count: number; inOrder: boolean; seqsIncrease: boolean }> {
  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page.getByRole('button', { name: 'Download' }).click(),
  ]);
  const lines = readFileSync(await download.path(), 'utf8')
    .trimEnd()
    .split('\n');
  let inOrder = true;
  let seqsIncrease = true;
  let prev = 0;
  lines.forEach((l, i) => {
    const [seq, , , text] = l.split('\t');
    if (text !== `line ${String(i + 1).padStart(6, '0')} of the test`) inOrder = false;
    if (!(Number(seq) > prev)) seqsIncrease = false;
    prev = Number(seq);
  });
  return { count: lines.length, inOrder, seqsIncrease };
}

t.test('a 100,000-line log renders virtualised, searchable and downloadable', async (t) => {
  const { id, op } = await tenantWithOperation('bigLog', 'succeeded');
  for (let i = 0; i < 10; i++) await appendLog(db.pool, op, numbered(i * 10_000 + 1, (i + 1) * 10_000));
  const { page, problems } = await signedIn();
  const t0 = Date.now();
  await page.evaluate(`location.hash = '#/tenants/${id}/operations/${op}'`);
  await page.locator('.log-stats[data-lines="100000"]').waitFor({ timeout: 120_000 });
  console.log(`# 100,000 log lines streamed and rendered in ${Date.now() - t0} ms`);
  const nodes = await page.evaluate<number>("document.getElementsByTagName('*').length");
  t.ok(nodes < 2000, `the page holds ${nodes} elements with 100,000 lines loaded (bound 2,000)`);
  await page.locator('.log-lines').evaluate((el) => {
    (el as unknown as { scrollTop: number }).scrollTop = 50_000 * 18;
  });
  await page.locator('.line[data-seq]', { hasText: 'line 050001 of the test' }).waitFor();
  t.equal(
    await page.locator('.line[data-seq="1"]').count(),
    0,
    'scrolled to the middle, the lines there are drawn and the first line no longer is',
  );
  await page.getByLabel('Search the log').fill('line 099999');
  await page.getByText('1 matching').waitFor();
  t.same(
    await page.locator('.line[data-seq] .text').allInnerTexts(),
    ['line 099999 of the test'],
    'a search finds the one matching line among 100,000 and shows only it',
  );
  await page.getByLabel('Search the log').fill('');
  const d = await downloaded(page);
  t.equal(d.count, 100_000, 'the download holds every line');
  t.ok(d.inOrder && d.seqsIncrease, 'in order, each once');
  await fx.screenshot(page, 'log-100k.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the log view has no serious accessibility violation');
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});

t.test('a long log line wraps: all of it is shown, and the next line starts below it', async (t) => {
  const { id, op } = await tenantWithOperation('longLine', 'succeeded');
  const long = `error: ${'0123456789'.repeat(150)} END`;
  await appendLog(db.pool, op, [{ line: 'a short line' }, { line: long }, { line: 'the line after it' }]);
  const { page, problems } = await signedIn();
  await page.evaluate(`location.hash = '#/tenants/${id}/operations/${op}'`);
  await page.locator('.log-stats[data-lines="3"]').waitFor();
  const rows = await page.locator('.log-lines .line').evaluateAll((els) =>
    els.map((e) => {
      const r = e.getBoundingClientRect();
      const text = e.querySelector('.text')!;
      return {
        top: r.top,
        bottom: r.bottom,
        textHeight: text.getBoundingClientRect().height,
        scrollWidth: text.scrollWidth,
        clientWidth: text.clientWidth,
        text: text.textContent,
      };
    }),
  );
  t.equal(rows.length, 3, 'the three lines are shown');
  const [, wrapped, next] = rows;
  t.equal(wrapped?.text, long, `the long line (${long.length} characters) is in the page whole`);
  t.ok(wrapped!.bottom - wrapped!.top > 18, `it takes more than one 18 px row (${wrapped!.bottom - wrapped!.top} px)`);
  t.ok(
    wrapped!.textHeight <= wrapped!.bottom - wrapped!.top,
    `its wrapped text (${wrapped!.textHeight} px) fits the height given to it (${wrapped!.bottom - wrapped!.top} px): nothing cut below`,
  );
  t.ok(
    wrapped!.scrollWidth <= wrapped!.clientWidth,
    `nothing cut at the right (text ${wrapped!.scrollWidth} px wide in ${wrapped!.clientWidth} px)`,
  );
  t.ok(next!.top >= wrapped!.bottom, `the next line starts below it (${next!.top} ≥ ${wrapped!.bottom})`);
  await fx.screenshot(page, 'log-long-line.png', { fullPage: true });
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});

t.test('a followed log survives the provisioner killed and started again: every line once', async (t) => {
  const { id, op } = await tenantWithOperation('followed', 'running');
  let written = 0;
  const write = async (n: number) => {
    await appendLogAndNotify(
      db.pool,
      op,
      numbered(written + 1, written + n).map((l) => ({ stream: 'engine', ...l })),
    );
    written += n;
  };
  await write(200);
  const { page, problems } = await signedIn();
  await page.evaluate(`location.hash = '#/tenants/${id}/operations/${op}'`);
  await page.locator('.log-stats[data-lines="200"]').waitFor();
  // The backlog is read first, then the stream opens.
  await stats(page).filter({ hasText: 'following' }).waitFor(); // the running operation is followed

  // Lines keep coming (bounded: at most 60 batches) while the provisioner is killed and restarted.
  let writing = true;
  const writer = (async () => {
    for (let i = 0; i < 60 && writing; i++) {
      await write(10);
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  await page.waitForFunction(
    () => Number((globalThis as unknown as PageGlobals).document.querySelector('.log-stats')?.dataset.lines) > 300,
  );
  await fx.server.kill();
  // A banner says the connection is lost (the wait fails the test when it does not).
  await page.getByText('Connection to the provisioner lost — reconnecting…').first().waitFor({ timeout: 10_000 });
  await fx.screenshot(page, 'log-reconnecting.png');
  await new Promise((r) => setTimeout(r, 1000));
  await fx.restart();
  const restarted = Date.now();
  await page.waitForFunction(
    () => {
      const d = (globalThis as unknown as PageGlobals).document;
      return (
        !d.querySelector('.log .banner') && (d.querySelector('.log-stats')?.textContent ?? '').includes('following')
      );
    },
    undefined,
    { timeout: 15_000 },
  );
  const reconnectMs = Date.now() - restarted;
  console.log(`# log stream reconnected ${reconnectMs} ms after the provisioner listened again`);
  t.ok(reconnectMs < 5000, `reconnected ${reconnectMs} ms after the restart (bound 5 s)`);
  writing = false;
  await writer;
  await write(50);
  await finishOperations(db.pool, op); // the store's write wakes the log's followers
  await page
    .locator(`.log-stats[data-lines="${written}"]`)
    .waitFor({ timeout: 15_000 })
    .catch(async (err: unknown) => {
      throw new Error(
        `the page holds ${await stats(page).getAttribute('data-lines')} lines, not ${written}: ${String(err)}`,
      );
    });
  await page.getByText(/operation succeeded/).waitFor({ timeout: 15_000 });
  const d = await downloaded(page);
  t.equal(d.count, written, `every one of the ${written} lines is held`);
  t.ok(d.inOrder, 'each line once, in order (numbered 1..n), none lost across the restart');
  t.ok(d.seqsIncrease, 'sequence numbers strictly increase: no line shown twice');
  t.same(
    problems.filter((p) => !connectionLost(p)),
    [],
    'no console error but the refused connections while the provisioner was down',
  );
  await page.context().close();
});

t.test('a suspended tenant is marked in the list; one never placed takes any version as a first install', async (t) => {
  // As a suspended signup waits when no cluster can take it: Pending, nothing installed, not due.
  const id = await insertTenant(db.pool, {
    organization: 'never-placed',
    email: 'ops@example.com',
    plan: 'team',
    runtimeVersion: '1.3.0',
  });
  await setTenantStatus(db.pool, id, {
    suspended: true,
    phase: 'Pending',
    observed: true,
    lastReconciledSecondsAgo: 0,
    conditions: [
      {
        type: 'Ready',
        status: 'False',
        reason: 'NoCapacity',
        message: 'no root cluster can take it',
        lastTransitionTime: '2026-01-01T00:00:00Z',
      },
    ],
  });
  await setSuspender(db.pool, id, 'operator', 'invoice 42 unpaid');
  const { page, problems } = await signedIn();
  await page.getByRole('searchbox', { name: 'Search' }).fill('never-placed');
  const row = page.locator(`tr[data-tenant="${id}"]`);
  await row.waitFor();
  t.match(
    await row.locator('td.status').first().innerText(),
    /Pending\s*suspended/,
    'the row shows its phase and a suspended mark',
  );
  t.match(
    (await row.locator('.suspended-tag').getAttribute('title')) ?? '',
    /by operator: invoice 42 unpaid/,
    'the mark says who suspended it and why',
  );
  await fx.screenshot(page, 'suspended-mark.png', { fullPage: true });
  await page.evaluate(`location.hash = '#/tenants/${id}'`);
  await page.getByRole('heading', { name: /never-placed/ }).waitFor();
  await page.getByLabel('Upgrade to').selectOption('1.5.0');
  t.match(
    await page.locator('.path-ok').innerText(),
    /Nothing is installed yet: 1\.5\.0 is installed directly/,
    'a never-placed tenant is offered the version directly, as the API accepts it',
  );
  t.equal(await page.locator('.path-refused').count(), 0, 'no upgrade path is asked for');
  await fx.screenshot(page, 'first-install.png', { fullPage: true });
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});

t.test('clusters and runtime versions pages: cordon, the upgrade graph', async (t) => {
  const { page, problems } = await signedIn();
  await page.getByRole('link', { name: 'Clusters' }).click();
  const row = page.locator('tr[data-cluster="eu-1a"]');
  await row.waitFor();
  t.match(await row.innerText(), /eu-west-1/, 'the cluster with its region');
  await row.getByRole('button', { name: 'Cordon…' }).click();
  await row.getByRole('button', { name: 'Confirm cordon' }).click();
  await row.getByText('cordoned').waitFor();
  t.equal(await cordoned('eu-1a'), true, 'cordoned from the page: the database has the cluster cordoned');
  await fx.screenshot(page, 'clusters.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the clusters page has no serious accessibility violation');
  await row.getByRole('button', { name: 'Uncordon…' }).click();
  await row.getByRole('button', { name: 'Confirm uncordon' }).click();
  await row.getByText('accepting').waitFor();
  t.equal(await cordoned('eu-1a'), false, 'uncordoned from the page: the database has the cluster accepting');

  await page.getByRole('link', { name: 'Runtime versions' }).click();
  await page.locator('svg.graph path.edge').first().waitFor();
  const edges = await page.locator('svg.graph path.edge').count();
  t.ok(edges >= 4, `the graph draws the direct steps (${edges} arcs)`);
  const caption = await page.locator('figure figcaption').innerText();
  for (const noun of ['upgrade', 'rollback']) {
    const m = new RegExp(`(\\d+) direct ${noun}(s?)\\b`).exec(caption);
    t.ok(m, `the caption counts the direct ${noun}s (${caption})`);
    t.equal(m?.[2] === '', m?.[1] === '1', `"${m?.[0]}": singular exactly when the count is 1`);
  }
  await fx.screenshot(page, 'versions.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the runtime versions page has no serious accessibility violation');
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});

t.test('a fleet upgrade: its waves and tenants, pause, resume and abort from the page', async (t) => {
  const a = await signup('fleet-wave-a', '1.4.0');
  const b = await signup('fleet-wave-b', '1.4.0');
  // A hybrid runtime of tenant a, installed in its customer's cluster at 1.4.0: the fleet upgrade
  // does not move it, and the page lists it as needing its customer.
  await addInstalledHybridRuntime(db.pool, {
    tenantId: a,
    name: 'edge',
    access: 'tunnel',
    argo: 'new',
    argoNamespace: undefined,
    upgrades: 'customer',
    version: '1.4.0',
    tokenHash: 'seeded-hash',
  });
  // One of tenant b that opted in to the in-cluster upgrader: the fleet upgrade moves it after b.
  await addInstalledHybridRuntime(db.pool, {
    tenantId: b,
    name: 'plant',
    access: 'tunnel',
    argo: 'existing',
    argoNamespace: 'argocd',
    upgrades: 'agent',
    version: '1.4.0',
    tokenHash: 'seeded-hash-b',
  });
  const { fleetUpgrade } = await startFleetUpgrade(client, {
    targetVersion: '1.4.1',
    selector: { tenantIds: [a, b] },
    waves: [{ count: 1 }, { percent: 100 }],
    gate: { tunnel: false, applications: false },
  });
  t.equal(fleetUpgrade.targetVersion, '1.4.1', 'fleet upgrade started');
  const { page, problems } = await signedIn();
  await page.getByRole('link', { name: 'Fleet upgrades' }).click();
  const hint = await page.locator('section[aria-labelledby="fleet-title"] p.hint').innerText();
  t.match(hint, /provisioner fleet start VERSION/, `the page names the CLI command that starts one (${hint})`);
  t.notMatch(hint, /fleet-upgrades create/, 'and not a command that does not exist');
  await page.locator(`tr[data-fleet-upgrade="${fleetUpgrade.id}"] a`).click();
  await page.getByRole('heading', { name: /Fleet upgrade to 1\.4\.1/ }).waitFor();
  t.equal(await page.locator('table.waves tbody tr').count(), 2, 'both waves are listed');
  t.equal(await page.locator('table.fleet-tenants tbody tr').count(), 2, 'both tenants are listed');
  t.match(await page.locator(`tr[data-fleet-tenant="${a}"]`).innerText(), /1\.4\.0 → 1\.4\.1/, "a tenant's path");
  const hybrid = page.locator('table.fleet-hybrid tbody tr');
  t.equal(await hybrid.count(), 1, 'one hybrid runtime needs its customer');
  const hybridRow = await page.locator(`tr[data-fleet-hybrid="${a}/edge"]`).innerText();
  t.match(hybridRow, /fleet-wave-a/, 'named by its tenant');
  t.match(
    hybridRow,
    /provisioner runtimes upgrade .* edge --runtime-version 1\.4\.1/,
    'with the command that asks for the target',
  );
  const upgraderRow = page.locator(`tr[data-fleet-upgrader="${b}/plant"]`);
  t.equal(await upgraderRow.count(), 1, "tenant b's opted-in runtime is listed as moved by its upgrader");
  t.match(
    await upgraderRow.locator('[data-phase]').innerText(),
    /^(waiting|pending|applying|succeeded)$/,
    'with the phase it is in',
  );
  t.equal(await page.locator(`tr[data-fleet-hybrid="${b}/plant"]`).count(), 0, 'and not as needing its customer');
  const state = page.locator('[data-fleet-state]');
  for (const [action, after] of [
    ['pause', 'paused'],
    ['resume', 'running'],
  ] as const) {
    await page.getByRole('button', { name: `${action[0]!.toUpperCase()}${action.slice(1)}…` }).click();
    await page.getByRole('button', { name: `Confirm ${action}` }).click();
    await page.locator(`[data-fleet-state="${after}"]`).waitFor();
    t.equal(
      (await getFleetRow(db.pool, fleetUpgrade.id))?.state,
      after,
      `${action}: the page and the database have the fleet upgrade ${after}`,
    );
  }
  await fx.screenshot(page, 'fleet-upgrade.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the fleet upgrade page has no serious accessibility violation');
  await page.getByRole('button', { name: 'Abort…' }).click();
  await page.getByRole('button', { name: 'Confirm abort' }).click();
  await page.locator('[data-fleet-state="aborting"], [data-fleet-state="aborted"]').first().waitFor();
  t.match(await state.innerText(), /abort/, 'abort: the fleet upgrade is aborting or aborted');
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});

t.test("a tenant's applications as its runtime reported them, updated live", async (t) => {
  const { id } = await tenantWithOperation('reporting', 'succeeded');
  const runtimeKey = (await createKey(db.pool, { role: 'runtime', tenantId: id, name: 'reporter', createdBy: 'test' }))
    .key;
  const post = (body: unknown) => fx.postEvents(runtimeKey, body);
  await post(batch('reporter-0', [application('guestbook', 10), application('billing', 11)]));
  const { page, problems } = await signedIn();
  await page.evaluate(`location.hash = '#/tenants/${id}'`);
  const rows = page.locator('table.applications tbody tr');
  await rows.filter({ hasText: 'argocd/guestbook' }).waitFor();
  t.equal(await rows.count(), 2, 'both reported applications are listed');
  await post(batch('reporter-0', [application('guestbook', 20, { health: 'Degraded' })]));
  await rows.filter({ hasText: 'Degraded' }).waitFor({ timeout: 10_000 });
  t.equal(
    await rows.filter({ hasText: 'argocd/guestbook' }).filter({ hasText: 'Degraded' }).count(),
    1,
    "a change of health reported by the runtime appears without reload: guestbook's row says Degraded",
  );
  await post(batch('reporter-0', [deletion('Application', 'argocd', 'billing', 21)]));
  await rows.filter({ hasText: 'argocd/billing' }).waitFor({ state: 'detached', timeout: 10_000 });
  t.equal(await rows.count(), 1, 'a deleted application leaves the list');
  await fx.screenshot(page, 'tenant-applications.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the tenant page with applications has no serious accessibility violation');
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});
