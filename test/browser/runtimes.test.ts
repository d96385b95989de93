/**
 * Hosted and hybrid runtimes together on the console, in Debian's Chromium against a real
 * provisioner on real PostgreSQL with no reconciler (CONSOLE_ENGINE=none: hosted runtimes stay
 * Pending). Everything is made through the API: two tenants signed up (each with its hosted
 * runtime), three hybrid runtimes registered for one of them (tunnel with a new Argo CD; ingress
 * beside an existing Argo CD, its bootstrap token exchanged so it is installed; one whose token
 * expired), then the Runtimes page (all of them, the mode filter), the tenant's page (hosted
 * first) and the removal of a hybrid runtime with its remove command. Screenshots of each page.
 */
import t from 'tap';
import type { Page } from 'playwright-core';
import type { BodyOf } from '../../provisioner/http/api-client.ts';
import { createKey } from '../../provisioner/store/keys.ts';
import { seedTenants } from './harness/seed.ts';
import { axeViolations } from './harness/browser.ts';
import { consoleFixture } from './harness/fixture.ts';
import { expireBootstrap, markUpgradeRolledBack } from '../helpers/runtimes.ts';

t.setTimeout(5 * 60_000);
const fx = await consoleFixture(t, {
  name: 'runtimes',
  env: {
    CONSOLE_ENGINE: 'none',
    // Registration needs the URL customers' clusters reach the control plane at (else 409).
    PROVISIONER_PUBLIC_URL: 'https://cp.example.test',
  },
  signupIdempotencyKey: true,
});
const { db, client, signedIn } = fx;

const signup = async (organization: string) => (await fx.signup(organization, { email: 'ops@example.com' })).id;
const register = (tenantId: string, body: Omit<BodyOf<'POST /v1/tenants/:id/runtimes'>, 'mode'>) =>
  client.call('POST /v1/tenants/:id/runtimes', { params: { id: tenantId }, body: { mode: 'hybrid', ...body } });

const customer = await signup('hybrid-customer');
const other = await signup('hosted-only');
const edge = await register(customer, { name: 'edge', access: 'tunnel', argo: 'new' });
const onprem = await register(customer, {
  name: 'onprem',
  access: 'ingress',
  ingressUrl: 'https://argo.customer.example',
  argo: 'existing',
  argoNamespace: 'argocd',
  upgrades: 'agent',
});
const late = await register(customer, { name: 'late', access: 'tunnel', argo: 'new' });
// The install's bootstrap Job does this inside the customer's cluster: onprem becomes installed.
await client.call('POST /v1/runtimes/bootstrap', { body: {}, token: onprem.bootstrapToken });
// onprem's in-cluster upgrader rolled an upgrade back (what its report records: hybrid-upgrader.test.ts).
await markUpgradeRolledBack(db.pool, onprem.runtime.id, '1.6.0', 'Deployment app-proxy did not roll out: FailedCreate');
// late's token expired before anyone applied the bundle.
await expireBootstrap(db.pool, late.runtime.id, 60);

/** The cells of a runtime's row (by tenant and name), by their data-cell name. */
async function cells(page: Page, tenantId: string, name: string): Promise<Record<string, string>> {
  const row = page.locator(`tr[data-tenant="${tenantId}"][data-runtime="${name}"]`);
  const out: Record<string, string> = {};
  for (const c of ['mode', 'access', 'argo', 'state', 'tunnel', 'key'])
    out[c] = (await row.locator(`td[data-cell="${c}"]`).innerText()).trim();
  return out;
}

/** The runtime rows shown, as `tenant/name`, in table order. */
async function shown(page: Page): Promise<string[]> {
  return page
    .locator('table.runtimes tbody tr[data-runtime]')
    .evaluateAll((rows) =>
      rows.map(
        (r) =>
          `${(r as unknown as { dataset: Record<string, string> }).dataset.tenant}/${(r as unknown as { dataset: Record<string, string> }).dataset.runtime}`,
      ),
    );
}

t.test('the Runtimes page shows hosted and hybrid runtimes together, and filters by mode', async (t) => {
  const { page, problems } = await signedIn();
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Runtimes' }).click();
  await page.getByRole('heading', { name: 'Runtimes' }).waitFor();
  await page.locator(`tr[data-tenant="${customer}"][data-runtime="late"]`).waitFor();
  t.same(
    await shown(page),
    [`${customer}/hosted`, `${other}/hosted`, `${customer}/edge`, `${customer}/onprem`, `${customer}/late`],
    'both hosted runtimes and the three hybrid ones, in creation order',
  );

  const hosted = await cells(page, customer, 'hosted');
  t.equal(hosted.mode, 'hosted', 'the hosted runtime says hosted');
  t.match(hosted.state, /^Pending/, "the hosted runtime's state is its tenant's phase (no engine here: Pending)");
  t.equal(hosted.argo, 'hosted', "the hosted runtime's Argo CD is the hosted one");

  t.same(
    await cells(page, customer, 'edge'),
    {
      mode: 'hybrid',
      access: 'tunnel',
      argo: 'new',
      state: `awaiting install\nAwaitingInstall: ${edge.runtime.conditions.find((c) => c.type === 'Installed')!.message}`,
      tunnel: 'not connected',
      key: 'none',
    },
    'edge: hybrid, tunnel, a new Argo CD, awaiting its install, no key yet',
  );
  const o = await cells(page, customer, 'onprem');
  t.same(
    [o.mode, o.access, o.argo, o.tunnel, o.key],
    ['hybrid', 'ingress\nhttps://argo.customer.example', 'existing (argocd)', 'none (ingress)', 'issued'],
    'onprem: hybrid, ingress at its URL, beside the Argo CD in argocd, no tunnel, its key issued by the exchange',
  );
  t.match(o.state, /^installed\nBootstrapRedeemed: /, 'onprem is installed: its bootstrap token was redeemed');
  t.match(
    (await cells(page, customer, 'late')).state,
    /^bootstrap expired\nBootstrapExpired: .*remove the runtime and register it again/,
    'late says its bootstrap expired and what to do',
  );
  t.match(
    await page.locator(`tr[data-tenant="${customer}"][data-runtime="edge"] td[data-cell="version"]`).innerText(),
    new RegExp(`^${edge.runtime.version!.replace(/\./g, '\\.')}\\s+reported none yet`),
    "edge's version is its bundle's; nothing reported yet",
  );
  const upgrade = page.locator(`tr[data-tenant="${customer}"][data-runtime="onprem"] [data-upgrade]`);
  t.match(
    await upgrade.innerText(),
    new RegExp(`^upgrader: ${onprem.runtime.version!.replace(/\./g, '\\.')} → 1\\.6\\.0 rolled-back$`),
    "onprem shows its upgrader's last upgrade and how it ended",
  );
  t.equal(
    await upgrade.getAttribute('title'),
    'Deployment app-proxy did not roll out: FailedCreate',
    'with the reason on hover',
  );
  await fx.screenshot(page, 'runtimes.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the Runtimes page has no serious accessibility violation');

  const mode = page.getByLabel('Mode');
  await mode.selectOption('hybrid');
  await page.locator(`tr[data-runtime="hosted"]`).first().waitFor({ state: 'detached' });
  t.same(
    await shown(page),
    [`${customer}/edge`, `${customer}/onprem`, `${customer}/late`],
    'mode hybrid: only the three hybrid runtimes',
  );
  await mode.selectOption('hosted');
  await page.locator(`tr[data-runtime="edge"]`).waitFor({ state: 'detached' });
  t.same(await shown(page), [`${customer}/hosted`, `${other}/hosted`], 'mode hosted: only the two hosted runtimes');
  await mode.selectOption('');
  await page.locator(`tr[data-runtime="edge"]`).waitFor();
  t.equal((await shown(page)).length, 5, 'mode any: all five again');
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});

t.test(
  "the tenant's page lists its runtimes, hosted first; a hybrid one is removed after typing its name",
  async (t) => {
    const { page, problems } = await signedIn();
    await page.goto(`${fx.url}/console#/tenants/${customer}`);
    const card = page.getByRole('region', { name: 'Runtimes' });
    await card.locator('tr[data-runtime="late"]').waitFor();
    t.same(
      await shown(page),
      [`${customer}/hosted`, `${customer}/edge`, `${customer}/onprem`, `${customer}/late`],
      "the tenant's runtimes: hosted first, then its hybrid ones",
    );
    t.equal(
      await card.locator('tr[data-runtime="hosted"]').getByRole('button').count(),
      0,
      'the hosted runtime has no remove button (it goes only with its tenant)',
    );

    await card.getByRole('button', { name: 'Remove edge…' }).click();
    const confirm = card.getByRole('button', { name: 'Remove edge', exact: true });
    t.equal(await confirm.isDisabled(), true, 'the removal stays disabled until the name is typed');
    await card.locator('input[name="confirm-runtime"]').fill('edg');
    t.equal(await confirm.isDisabled(), true, 'a name that does not match keeps it disabled');
    await card.locator('input[name="confirm-runtime"]').fill('edge');
    await confirm.click();

    const notice = page.locator('[data-removed="edge"]');
    await notice.waitFor();
    t.equal(
      (await notice.locator('pre.command').innerText()).trim(),
      edge.install.removeCommand.trim(),
      "the remove command shown is the one that deletes what edge's install created",
    );
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: fx.url });
    await notice.getByRole('button', { name: 'Copy the command' }).click();
    await notice.getByText('copied', { exact: true }).waitFor();
    t.equal(
      await page.evaluate<string>('navigator.clipboard.readText()'),
      edge.install.removeCommand,
      'Copy the command puts exactly the remove command on the clipboard',
    );
    await card.locator('tr[data-runtime="edge"]').waitFor({ state: 'detached' });
    t.same(
      await shown(page),
      [`${customer}/hosted`, `${customer}/onprem`, `${customer}/late`],
      'edge is gone from the list',
    );
    const listed = await client.call('GET /v1/tenants/:id/runtimes', { params: { id: customer } });
    t.same(
      listed.items.map((r) => r.name),
      ['hosted', 'onprem', 'late'],
      'the API lists the tenant without edge: it is removed',
    );
    await fx.screenshot(page, 'tenant-runtimes.png', { fullPage: true });
    t.same(await axeViolations(page), [], "the tenant's page with its runtimes has no serious accessibility violation");

    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Runtimes' }).click();
    // The tenant's page has a `late` row too (the same table), so waiting for it could return
    // before the Runtimes page replaced it: the other tenant's row is on the Runtimes page only.
    await page.locator(`tr[data-tenant="${other}"][data-runtime="hosted"]`).waitFor();
    await page.locator(`tr[data-tenant="${customer}"][data-runtime="late"]`).waitFor();
    t.same(
      await shown(page),
      [`${customer}/hosted`, `${other}/hosted`, `${customer}/onprem`, `${customer}/late`],
      'the Runtimes page no longer lists edge',
    );
    t.same(problems, [], 'no console error, no request to another host');
    await page.context().close();
  },
);

t.test('a tenant key sees its own runtimes on its page and no fleet-wide Runtimes link', async (t) => {
  const key = (await createKey(db.pool, { role: 'tenant', tenantId: other, name: 'tenant console', createdBy: 'test' }))
    .key;
  const w = await fx.open(key);
  const card = w.page.getByRole('region', { name: 'Runtimes' });
  await card.locator('tr[data-runtime="hosted"]').waitFor();
  t.same(await shown(w.page), [`${other}/hosted`], 'only its hosted runtime: no other tenant’s');
  t.equal(
    await w.page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Runtimes' }).count(),
    0,
    'no Runtimes link in the navigation for a tenant key',
  );
  t.same(w.problems, [], 'no console error, no request to another host');
  await w.page.context().close();
});

t.test('the Runtimes page pages through more runtimes than fit one page', async (t) => {
  // 60 more tenants, each with its hosted runtime (made with the tenant), created a minute apart,
  // all but the last before the others: in creation order they come first.
  await seedTenants(db.pool, 60, 'paged');
  const total = 4 + 60;
  const { page, problems } = await signedIn();
  await page.goto(`${fx.url}/console#/runtimes`);
  await page.locator('table.runtimes tbody tr[data-runtime]').nth(49).waitFor();
  const first = await shown(page);
  t.equal(first.length, 50, 'the first page holds 50 runtimes (the page size)');
  t.notOk(
    first.some((r) => r.startsWith(`${customer}/`) || r.startsWith(`${other}/`)),
    'the first page holds only the older, seeded runtimes',
  );
  await page.getByRole('button', { name: 'Next →' }).click();
  await page.getByText('Page 2').waitFor();
  await page.locator(`tr[data-tenant="${customer}"][data-runtime="late"]`).waitFor();
  const second = await shown(page);
  t.equal(second.length, total - 50, `the second page holds the other ${total - 50}`);
  const ours = [`${customer}/hosted`, `${other}/hosted`, `${customer}/onprem`, `${customer}/late`];
  t.same(
    second.filter((r) => ours.includes(r)),
    ours,
    'the runtimes made through the API are all on the last page, in creation order',
  );
  t.same(
    second.filter((r) => first.includes(r)),
    [],
    'no runtime is on both pages',
  );
  t.equal(await page.getByRole('button', { name: 'Next →' }).isDisabled(), true, 'no page after the last');
  await page.getByRole('button', { name: '← Previous' }).click();
  await page.locator(`tr[data-tenant="${customer}"][data-runtime="late"]`).waitFor({ state: 'detached' });
  t.same(await shown(page), first, 'Previous shows the first page again');
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});

t.test("removing a runtime already removed elsewhere shows the API's answer and drops its row", async (t) => {
  await register(other, { name: 'gone', access: 'tunnel', argo: 'new' });
  const { page, problems } = await signedIn();
  await page.goto(`${fx.url}/console#/tenants/${other}`);
  const card = page.getByRole('region', { name: 'Runtimes' });
  await card.locator('tr[data-runtime="gone"]').waitFor();
  // Removed with the CLI (the API) while the page shows it.
  t.equal(
    (await client.request('DELETE /v1/tenants/:id/runtimes/:name', { params: { id: other, name: 'gone' } })).status,
    200,
    'removed through the API',
  );
  await card.getByRole('button', { name: 'Remove gone…' }).click();
  await card.locator('input[name="confirm-runtime"]').fill('gone');
  await card.getByRole('button', { name: 'Remove gone', exact: true }).click();
  const alert = card.getByRole('alert');
  await alert.waitFor();
  t.match(await alert.innerText(), /NOT_FOUND/, "the API's 404 is shown with its code");
  await card.locator('tr[data-runtime="gone"]').waitFor({ state: 'detached' });
  t.same(await shown(page), [`${other}/hosted`], 'the list is loaded again, without the removed runtime');
  t.same(
    problems.filter((p) => !/status of 404/.test(p)),
    [],
    'no console error but the 404 itself, no request to another host',
  );
  await page.context().close();
});
