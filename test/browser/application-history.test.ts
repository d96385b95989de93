/**
 * An application's page in Debian's Chromium against a real provisioner on real PostgreSQL: the
 * history its runtime's reports made (POST /v1/runtime/events with `change`), newest first, with
 * commit, author, result and the images that moved; a new change arriving on the application's
 * change stream shown without reload; a change's diff side by side, fetched through a real tunnel
 * from a TEST DOUBLE of the runtime's app-proxy and Source Server (the e2e asks the real ones); a
 * runtime without a tunnel shown as unreachable with when to retry.
 */
import http from 'node:http';
import { once } from 'node:events';
import t from 'tap';
import type { Page } from 'playwright-core';
import { createKey } from '../../provisioner/store/keys.ts';
import { changedApplication, imageDiff, sha } from '../helpers/app-history.ts';
import { batch } from '../helpers/events.ts';
import type { EventBatch } from '../../runtime/protocol/events.ts';
import { axeViolations } from './harness/browser.ts';
import { consoleFixture } from './harness/fixture.ts';
import { seedTenants } from './harness/seed.ts';
import { findTenants, setTenantStatus } from '../helpers/tenants.ts';

t.setTimeout(5 * 60_000);
const fx = await consoleFixture(t, { name: 'application-history', env: { CONSOLE_ENGINE: 'none' } });
const { db } = fx;

const web = { namespace: 'argocd', name: 'web' };
const [c1, c2, c3] = [sha('c1'), sha('c2'), sha('c3')];

/** TEST DOUBLE of the runtime's app-proxy and Source Server: the diff of `web`, and what it was asked. */
const asked: string[] = [];
const sourceServer = http.createServer((req, res) => {
  const u = new URL(req.url ?? '/', 'http://runtime');
  asked.push(`${u.pathname}${u.search}`);
  const revision = u.searchParams.get('revision');
  const body =
    u.pathname !== '/api/applications/argocd/web/diff'
      ? { error: { code: 'NOT_FOUND', message: `no route ${u.pathname}` } }
      : revision
        ? imageDiff(web, revision, c1, 'nginx:1.25', 'nginx:1.26')
        : imageDiff(web, c2, 'live', 'nginx:1.24', 'nginx:1.26');
  res.writeHead('error' in body ? 404 : 200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
});
sourceServer.listen(0, '127.0.0.1');
await once(sourceServer, 'listening');

/** Settled tenants on the Source Server's runtime version, not due for any reconciler. */
await seedTenants(db.pool, 2, 'history', 1_000_000);
const tenantIds = (await findTenants(db.pool))
  .filter((r) => r.organization.startsWith('history-'))
  .sort((a, b) => a.organization.localeCompare(b.organization))
  .map((r) => r.id);
await setTenantStatus(db.pool, tenantIds, { runtimeVersion: '1.7.0', actualRuntimeVersion: '1.7.0', phase: 'Ready' });
const [lit, dark] = tenantIds as [string, string];
const keyOf = async (tenantId: string) =>
  (await createKey(db.pool, { role: 'runtime', tenantId, name: 'runtime', createdBy: 'test' })).key;
const litKey = await keyOf(lit);
const darkKey = await keyOf(dark);

await fx.tunnel(litKey, (sourceServer.address() as { port: number }).port);
fx.onClose(() => sourceServer.close());

const report = (key: string, items: EventBatch['items']) => fx.postEvents(key, batch('reporter-0', items));

await report(litKey, [
  changedApplication('web', 10, { commit: c1, author: 'Ada', message: 'scale web to 2', sync: 'Succeeded' }),
]);
await report(litKey, [
  changedApplication('web', 11, {
    commit: c2,
    previous: c1,
    author: 'Grace',
    message: 'web: nginx 1.26\n\nthe security fix',
    image: { before: 'nginx:1.25', after: 'nginx:1.26' },
    sync: 'Succeeded',
  }),
]);
await report(darkKey, [
  changedApplication('web', 10, { commit: c1, author: 'Ada', message: 'scale web to 2', sync: 'Succeeded' }),
]);

/** The change revisions of the timeline, top to bottom. */
const timeline = (page: Page) =>
  page.locator('ol.timeline > li').evaluateAll((lis) => lis.map((li) => li.getAttribute('data-change-revision')));

t.test("an application's history, its diff side by side, and a new change arriving live", async (t) => {
  const { page, problems, requests } = await fx.open(fx.operatorKey);
  await page.getByRole('heading', { name: 'Tenants' }).waitFor();
  await page.evaluate(`location.hash = '#/tenants/${lit}'`);
  const row = page.locator('table.applications tbody tr', { hasText: 'argocd/web' });
  await row.waitFor();
  await row.locator('td').nth(1).click(); // the row, not its link
  await page.getByRole('heading', { name: 'Application argocd/web' }).waitFor();
  t.match(
    page.url(),
    /#\/tenants\/[0-9a-f-]+\/applications\/argocd\/web$/,
    "a click on the row opens the application's page",
  );

  const entries = page.locator('ol.timeline > li');
  await entries.nth(1).waitFor();
  t.same(await timeline(page), [c2, c1], 'both changes are in the timeline, newest first');
  const newest = entries.nth(0);
  const text = await newest.innerText();
  t.match(text, /succeeded/, "the newest change's result badge");
  t.match(text, new RegExp(`${c2.slice(0, 7)} web: nginx 1\\.26`), 'its short change revision and message first line');
  t.notMatch(text, /security fix/, "the message's body is not in the timeline");
  t.match(text, /Grace/, 'its author');
  t.match(text, /took 42 s/, 'the duration of its sync');
  t.match(text, /web: nginx:1\.25 → nginx:1\.26/, 'the image before → after');
  t.equal(
    await page.locator('[data-fact="change-revision"] code').innerText(),
    c2.slice(0, 7),
    "the header shows the application's change revision",
  );

  const diffAsked = page.waitForRequest((r) => r.url().includes('/diff'));
  await newest.getByRole('button').click();
  t.equal(
    new URL((await diffAsked).url()).pathname + new URL((await diffAsked).url()).search,
    `/v1/tenants/${lit}/applications/argocd/web/diff?revision=${c2}`,
    "selecting a change asks the diff route for that change's revision",
  );
  const resource = page.locator('section.resource-diff[data-resource="Deployment.apps default/web"]');
  await resource.locator('table.side-by-side').waitFor();
  t.same(
    asked.at(-1),
    `/api/applications/argocd/web/diff?revision=${c2}`,
    "the runtime's diff route was asked through the tunnel",
  );
  t.same(
    (await resource.locator('td.removed').allInnerTexts()).map((l) => l.trim()),
    ['- image: nginx:1.25'],
    'the left side (before) highlights the one changed line: the old image',
  );
  t.same(
    (await resource.locator('td.added').allInnerTexts()).map((l) => l.trim()),
    ['- image: nginx:1.26'],
    'the right side (after) highlights the new image',
  );
  t.match(
    await resource.locator('thead').innerText(),
    new RegExp(`Before \\(${c1.slice(0, 7)}\\)\\s+After \\(${c2.slice(0, 7)}\\)`),
    'the columns name both revisions',
  );
  t.match(
    await page.locator('ul.resources').innerText(),
    /modified Deployment\.apps default\/web: spec\.template\.spec\.containers\[name=web\]\.image/,
    'the resources the change touched, with their action and fields',
  );
  await fx.screenshot(page, 'application-diff.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the application page with a diff has no serious accessibility violation');

  const liveAsked = page.waitForRequest((r) => r.url().endsWith('/diff'));
  await page.getByRole('button', { name: 'Git vs cluster' }).click();
  await liveAsked;
  await page.getByRole('columnheader', { name: 'Cluster (live)' }).waitFor();
  t.same(
    (await resource.locator('td.removed').allInnerTexts()).map((l) => l.trim()),
    ['- image: nginx:1.24'],
    'Git vs cluster: the live image on the left',
  );

  // A new change reported while the page is open: it arrives on the application's change stream.
  const before = requests.length;
  await report(litKey, [
    changedApplication('web', 12, {
      commit: c3,
      previous: c2,
      author: 'Linus',
      message: 'broken kustomization',
      error: 'kustomize build failed: missing resource deployment.yaml',
    }),
  ]);
  await page.locator(`ol.timeline > li[data-change-revision="${c3}"]`).waitFor({ timeout: 15_000 });
  t.same(await timeline(page), [c3, c2, c1], 'the new change is at the top of the timeline, without reload');
  const failed = await entries.nth(0).innerText();
  t.match(failed, /failed/, 'with its failed badge');
  t.match(failed, /kustomize build failed: missing resource deployment\.yaml/, "and Argo CD's message");
  t.notOk(
    requests.slice(before).some((u) => /\/history(\?|$)/.test(new URL(u).pathname + new URL(u).search)),
    'the history was not read again: the entry came on the stream',
  );
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});

t.test(
  'a runtime without a tunnel: the diff says the runtime is unreachable, the history is still shown',
  async (t) => {
    const { page, problems } = await fx.open(fx.operatorKey);
    await page.getByRole('heading', { name: 'Tenants' }).waitFor();
    await page.evaluate(`location.hash = '#/tenants/${dark}/applications/argocd/web'`);
    const entry = page.locator(`ol.timeline > li[data-change-revision="${c1}"]`);
    await entry.waitFor();
    await entry.getByRole('button').click();
    const alert = page.locator('.diff-card [role="alert"]');
    await alert.waitFor();
    const text = await alert.innerText();
    t.match(text, /RUNTIME_UNREACHABLE/, "the API's code is shown");
    t.match(
      text,
      /The runtime is unreachable, so its Source Server cannot be asked for the diff: retry in \d+ s\./,
      'and what it means, with when to retry',
    );
    t.match(
      await page.locator('ul.resources').innerText(),
      /modified Deployment\.apps default\/web/,
      'what the change touched is still shown from the history',
    );
    await fx.screenshot(page, 'application-unreachable.png', { fullPage: true });
    t.same(await axeViolations(page), [], 'the page with the error has no serious accessibility violation');
    t.same(
      problems.filter((p) => !/status of 503/.test(p)),
      [],
      'no console error but the 503 of the diff, no request to another host',
    );
    await page.context().close();
  },
);
