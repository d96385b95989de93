/**
 * The ops console in Debian's Chromium against a real provisioner on real PostgreSQL, with 10,000
 * tenants seeded: signing in (operator, tenant and bad keys), the tenants page's first render and
 * its filters and sorts (timed and printed; docs/benchmarks.md keeps the figures), stale status
 * greyed, accessibility (axe-core) and screenshots. No reconciler runs here (CONSOLE_ENGINE=none):
 * the live tests are in live.test.ts.
 */
import { loadavg } from 'node:os';
import t from 'tap';
import type { Page } from 'playwright-core';
import { createKey } from '../../provisioner/store/keys.ts';
import { axeViolations, median, openPage, p95, signIn, type PageGlobals } from './harness/browser.ts';
import { consoleFixture } from './harness/fixture.ts';
import { seedTenants } from './harness/seed.ts';
import { findTenants } from '../helpers/tenants.ts';

// Chromium and a provisioner process on a shared 2-core machine: more than tap's default of 120 s.
t.setTimeout(5 * 60_000);

const TENANTS = 10_000;
const fx = await consoleFixture(t, {
  name: 'fleet',
  env: { CONSOLE_ENGINE: 'none' },
  beforeStart: (db) => seedTenants(db.pool, TENANTS),
});
const { db, operatorKey } = fx;
const tenantOf = async (organization: string) => (await findTenants(db.pool, { organization }))[0]!;
const [own, other] = [await tenantOf('fleet-00007'), await tenantOf('fleet-00008')];
const tenantKey = (await createKey(db.pool, { role: 'tenant', tenantId: own.id, name: 'tenant', createdBy: 'test' }))
  .key;

const rowsShown = 'table.tenants tbody tr[data-tenant]';

t.test('a bad key is refused with a clear message, and nothing is kept', async (t) => {
  const { page, problems } = await fx.open(`hrt_operator_${'x'.repeat(43)}`);
  await page.getByRole('alert').waitFor();
  t.match(
    await page.getByRole('alert').innerText(),
    /not valid or has been revoked/,
    'an unknown key is named as not valid',
  );
  t.equal(await page.evaluate('sessionStorage.length'), 0, 'a refused key is not kept in sessionStorage');
  await signIn(page, fx.url, 'not-a-key');
  await page.getByRole('alert').waitFor();
  t.match(await page.getByRole('alert').innerText(), /not valid/, 'a malformed key gets the same clear refusal');
  t.match(await page.getByRole('alert').innerText(), /INVALID_API_KEY/, "the refusal shows the API's error code");
  await fx.screenshot(page, 'sign-in-refused.png');
  t.same(await axeViolations(page), [], 'the sign-in page has no serious accessibility violation');
  // The browser logs the refused requests (401) itself; nothing else may be logged.
  const unexpected = problems.filter((p) => !/status of 401/.test(p));
  t.same(unexpected, [], 'no console error other than the two refused sign-ins, no request to another host');
  await page.context().close();
});

/**
 * Timings taken in the page itself, on the page's clock: from the user's input or click (the
 * event's timeStamp) to the frame after the table shows the answer to the new query, and from the
 * navigation's start to the frame after the first 50 rows. These are what a user waits for; the
 * times measured from this process add the test driver's round trips to the browser on top.
 */
const PAGE_TIMINGS = `(() => {
  const timings = { first: undefined, answers: [] };
  window.__consoleTimings = timings;
  let start, from;
  const began = (e) => {
    if (start !== undefined) return;
    start = e.timeStamp;
    from = document.querySelector('table.tenants')?.dataset.query;
  };
  addEventListener('input', began, true);
  addEventListener('click', began, true);
  new MutationObserver(() => {
    const table = document.querySelector('table.tenants');
    if (!table) return;
    if (timings.first === undefined && table.querySelectorAll('tbody tr[data-tenant]').length >= 50)
      requestAnimationFrame(() => (timings.first ??= performance.now()));
    if (start !== undefined && table.dataset.loading === 'false' && table.dataset.query !== from) {
      const s = start, query = table.dataset.query;
      start = undefined;
      requestAnimationFrame(() => timings.answers.push({ query, ms: performance.now() - s }));
    }
  }).observe(document, { subtree: true, childList: true, attributes: true, attributeFilter: ['data-loading', 'data-query'] });
})();`;

interface PageTimings {
  first?: number;
  answers: { query: string; ms: number }[];
}
const pageTimings = (page: Page) =>
  page.evaluate(() => (globalThis as unknown as { __consoleTimings: PageTimings }).__consoleTimings);

t.test('an operator key: the fleet, first render and filters timed', async (t) => {
  const { page, problems, requests } = await openPage(fx.browser, fx.url);
  await page.addInitScript({ content: PAGE_TIMINGS });
  await signIn(page, fx.url, operatorKey);
  await page.locator(rowsShown).nth(49).waitFor();
  t.equal(await page.locator(rowsShown).count(), 50, 'the first page shows 50 tenants');
  // The counts come from their own request (the summary): '…' until it answers.
  await page.waitForFunction(
    () =>
      (globalThis as unknown as PageGlobals).document
        .querySelector('[data-phase-count="total"]')
        ?.textContent?.trim() !== '…',
    undefined,
    { timeout: 30_000 },
  );
  t.equal(
    await page.locator('[data-phase-count="total"]').innerText(),
    String(TENANTS),
    'the total counts every tenant',
  );
  const ready = Number(await page.locator('[data-phase-count="Ready"]').innerText());
  t.ok(ready > 4000 && ready < 6000, `the Ready count is the seeded share (${ready})`);
  t.notOk(
    requests.some((r) => r.includes(operatorKey)),
    'the key never appears in a URL',
  );
  t.equal(await page.evaluate("location.href.includes('hrt_')"), false, 'the page URL holds no key');

  // First render: a reload with the key in the tab's session, until 50 rows are shown.
  const first: number[] = [];
  const firstInPage: number[] = [];
  for (let i = 0; i < 5; i++) {
    const t0 = performance.now();
    await page.reload();
    await page.locator(rowsShown).nth(49).waitFor();
    first.push(performance.now() - t0);
    await page.waitForFunction(
      () => (globalThis as unknown as { __consoleTimings: PageTimings }).__consoleTimings.first !== undefined,
    );
    firstInPage.push((await pageTimings(page)).first!);
  }

  // Filters: a search typed, answered when the table shows the page of that query.
  const settled = (fragment: string) =>
    page.waitForFunction(
      (f: string) => {
        const table = (globalThis as unknown as PageGlobals).document.querySelector('table.tenants');
        return table?.dataset.loading === 'false' && (table.dataset.query ?? '').includes(f);
      },
      fragment,
      { timeout: 10_000 },
    );
  const search = page.getByRole('searchbox', { name: 'Search' });
  const filter: number[] = [];
  const filterInPage: number[] = [];
  // The floor, in the same page at the same moment: the same list request alone (fetch and JSON,
  // nothing rendered), so the console's own share can be told from what the machine allows.
  const floor: number[] = [];
  const apiAlone = (q: string) =>
    page.evaluate(async (query: string) => {
      const g = globalThis as unknown as {
        sessionStorage: { getItem(k: string): string | null };
        fetch(url: string, init: { headers: Record<string, string> }): Promise<{ json(): Promise<unknown> }>;
        performance: { now(): number };
      };
      const t0 = g.performance.now();
      const res = await g.fetch(`/v1/tenants${query}`, {
        headers: { authorization: `Bearer ${g.sessionStorage.getItem('hrt-console-api-key') ?? ''}` },
      });
      await res.json();
      return g.performance.now() - t0;
    }, q);
  const answered = async (fragment: string): Promise<number> => {
    await page.waitForFunction(
      (f: string) =>
        (globalThis as unknown as { __consoleTimings: PageTimings }).__consoleTimings.answers.some((a) =>
          a.query.includes(f),
        ),
      fragment,
      { timeout: 10_000 },
    );
    const { answers } = await pageTimings(page);
    await page.evaluate(() => {
      (globalThis as unknown as { __consoleTimings: PageTimings }).__consoleTimings.answers = [];
    });
    const answer = answers.find((a) => a.query.includes(fragment))!;
    floor.push(await apiAlone(answer.query));
    return answer.ms;
  };
  for (let i = 0; i < 20; i++) {
    const term = `fleet-0${String(100 + i * 37).padStart(3, '0')}`;
    const t0 = performance.now();
    await search.fill(term);
    await settled(`q=${term}`);
    filter.push(performance.now() - t0);
    filterInPage.push(await answered(`q=${term}`));
  }
  t.equal(await page.locator(rowsShown).count(), 10, 'a search shows the tenants whose organization contains it');
  await search.fill('');
  await settled('sort=createdAt');
  await answered('sort=createdAt');

  const sort: number[] = [];
  const sortInPage: number[] = [];
  const orgHeader = page.getByRole('button', { name: /^Organization/ });
  for (let i = 0; i < 20; i++) {
    const t0 = performance.now();
    await orgHeader.click();
    await settled(`order=${i % 2 === 0 ? 'asc' : 'desc'}`);
    sort.push(performance.now() - t0);
    sortInPage.push(await answered(`order=${i % 2 === 0 ? 'asc' : 'desc'}`));
  }
  const firstOrg = await page.locator(`${rowsShown} a`).first().innerText();
  t.equal(firstOrg, 'fleet-10000', 'sorted by organization, descending, after an even number of clicks');

  const fmt = (xs: number[]) =>
    `median ${median(xs).toFixed(0)} ms, p95 ${p95(xs).toFixed(0)} ms, max ${Math.max(...xs).toFixed(0)} ms`;
  const of = `# console with ${TENANTS} tenants, load ${loadavg()[0]!.toFixed(1)}:`;
  console.log(
    `${of} first render (reload to 50 rows, 5 tries), in the page ${fmt(firstInPage)}; from the driver ${fmt(first)}`,
  );
  console.log(`${of} search filter (20 tries), in the page ${fmt(filterInPage)}; from the driver ${fmt(filter)}`);
  console.log(`${of} sort by organization (20 tries), in the page ${fmt(sortInPage)}; from the driver ${fmt(sort)}`);
  console.log(`${of} floor: the same list requests alone from the page (fetch and JSON, 41 tries) ${fmt(floor)}`);
  // Generous bounds only (a shared CI machine); the targets (1.5 s, 300 ms) are checked in docs/benchmarks.md.
  t.ok(median(firstInPage) < 6000, `first render within 6 s (median ${median(firstInPage).toFixed(0)} ms)`);
  t.ok(p95(filterInPage) < 2000, `a filter answered within 2 s at p95 (${p95(filterInPage).toFixed(0)} ms)`);
  t.ok(p95(sortInPage) < 2000, `a sort answered within 2 s at p95 (${p95(sortInPage).toFixed(0)} ms)`);

  // Paging goes on from where the page ended.
  await page.getByRole('button', { name: 'Next →' }).click();
  await page.getByText('Page 2').waitFor();
  await settled('cursor=');
  t.equal(await page.locator(rowsShown).count(), 50, 'the second page shows 50 more tenants');

  // Phase filter from the counts.
  await page.getByRole('button', { name: /^Failed \d+/ }).click();
  await settled('phase=Failed');
  const phases = await page
    .locator(`${rowsShown} td[data-phase]`)
    .evaluateAll((tds) => tds.map((td) => td.getAttribute('data-phase')));
  t.ok(phases.length > 0 && phases.every((p) => p === 'Failed'), 'the Failed count filters the list to Failed tenants');

  // Stale status greyed: every 1000th seeded tenant was last observed three days ago.
  await page.getByRole('button', { name: /^All \d+/ }).click();
  await search.fill('fleet-01000');
  await settled('q=fleet-01000');
  const row = page.locator(`${rowsShown}`).first();
  t.match(await row.getAttribute('class'), /stale/, 'a tenant observed three days ago is shown as stale');
  t.equal(await row.locator('.stale-tag').innerText(), 'stale', 'its row says "stale"');
  const grey = await row
    .locator('td.status')
    .first()
    .evaluate((td) => (globalThis as unknown as PageGlobals).getComputedStyle(td).color);
  t.equal(grey, 'rgb(87, 96, 106)', 'its status cells are greyed');
  await search.fill('fleet-0100');
  await settled('q=fleet-0100');
  await fx.screenshot(page, 'tenants.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the tenants page has no serious accessibility violation');

  await page.locator(`${rowsShown} a`, { hasText: 'fleet-01001' }).click();
  await page.getByRole('heading', { name: /fleet-01001/ }).waitFor();
  await page.getByRole('heading', { name: 'Conditions' }).waitFor();
  await fx.screenshot(page, 'tenant.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the tenant page has no serious accessibility violation');
  t.same(problems, [], 'no console error, no uncaught exception, no request to another host');
  await page.context().close();
});

t.test('a tenant key sees its own tenant only', async (t) => {
  const { page, problems } = await fx.open(tenantKey);
  // A tenant key lands on its own tenant (the wait fails the test when it does not).
  await page.getByRole('heading', { name: new RegExp(own.organization) }).waitFor();
  t.equal(await page.getByRole('link', { name: 'Clusters' }).count(), 0, 'no Clusters page for a tenant key');
  await page.evaluate("location.hash = '#/tenants'");
  t.equal(await page.evaluate('location.hash'), '#/tenants', 'the tenants address was asked for');
  await page.getByRole('heading', { name: new RegExp(own.organization) }).waitFor();
  t.equal(await page.locator(rowsShown).count(), 0, 'the tenants address shows the own tenant, not the fleet list');
  await page.evaluate(`location.hash = '#/tenants/${other.id}'`);
  await page.getByRole('alert').waitFor();
  t.match(await page.getByRole('alert').innerText(), /TENANT_NOT_FOUND/, "another tenant's page is not found");
  await fx.screenshot(page, 'tenant-key-other-tenant.png');
  t.same(
    problems.filter((p) => !/status of 404/.test(p)),
    [],
    'no console error other than the refused request for the other tenant (404)',
  );
  await page.context().close();
});
