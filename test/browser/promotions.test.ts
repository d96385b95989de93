/**
 * Products and promotions in Debian's Chromium against a real provisioner on real PostgreSQL, as a
 * customer signed in with their tenant key sees them: the products card on the tenant page (the
 * release in each environment), a product's page with its environments side by side and its
 * promotions, the failed one's timeline (each step's phase, commit, gate and message), a newer
 * state reported while the page is open shown without reload, and Retry, Abort and Promote sent
 * through a real tunnel to a TEST DOUBLE of the runtime's app-proxy (the real one acts in
 * test/e2e/promotions.test.ts and test/e2e/app-actions.test.ts), a refusal shown as the API says it.
 */
import http from 'node:http';
import { once } from 'node:events';
import t from 'tap';
import { createKey } from '../../provisioner/store/keys.ts';
import { batch } from '../helpers/events.ts';
import { upsertItem } from '../../runtime/agents/event-reporter/items.ts';
import type { UpsertItem } from '../../runtime/protocol/events.ts';
import { axeViolations } from './harness/browser.ts';
import { consoleFixture } from './harness/fixture.ts';
import { seedTenants } from './harness/seed.ts';
import { findTenants, setTenantStatus } from '../helpers/tenants.ts';
import { shopDryRun } from '../helpers/promotions.ts';

t.setTimeout(5 * 60_000);
const fx = await consoleFixture(t, { name: 'promotions', env: { CONSOLE_ENGINE: 'none' } });
const { db } = fx;

await seedTenants(db.pool, 1, 'promo', 1_000_000);
const tenantId = (await findTenants(db.pool)).find((r) => r.organization.startsWith('promo-'))!.id;
await setTenantStatus(db.pool, tenantId, { runtimeVersion: '1.8.0', actualRuntimeVersion: '1.8.0', phase: 'Ready' });
const tenantKey = (await createKey(db.pool, { role: 'tenant', tenantId, name: 'customer', createdBy: 'test' })).key;
const runtimeKey = (await createKey(db.pool, { role: 'runtime', tenantId, name: 'runtime', createdBy: 'test' })).key;

/** TEST DOUBLE of the runtime's app-proxy: what it was asked, answered as the real one answers. */
const asked: Array<{ method: string; path: string; body: unknown }> = [];
const appProxy = http.createServer((req, res) => {
  let raw = '';
  req.on('data', (c: Buffer) => (raw += c.toString()));
  req.on('end', () => {
    const path = req.url ?? '/';
    const body = raw ? (JSON.parse(raw) as unknown) : undefined;
    asked.push({ method: req.method ?? '', path, body });
    const send = (status: number, answer: unknown) =>
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(answer));
    if (path === '/api/promotions/argocd/shop-1-2-0-ab12cd34/retry')
      return send(200, { metadata: { name: 'shop-1-2-0-ab12cd34' }, spec: { retry: 1 } });
    if (path === '/api/products/argocd/shop/rollback')
      return send(201, { kind: 'Promotion', metadata: { name: 'shop-r8m4q', namespace: 'argocd' }, spec: body });
    if (path === '/api/products/argocd/shop/dry-run')
      return send(201, {
        kind: 'PromotionPreview',
        metadata: { name: 'shop-dry9z', namespace: 'argocd' },
        spec: { ...(body as object), product: 'shop' },
      });
    if (path === '/api/promotionpreviews/argocd/shop-dry9z/abort')
      return send(200, {
        kind: 'PromotionPreview',
        metadata: { name: 'shop-dry9z', namespace: 'argocd' },
        spec: { product: 'shop', abort: true },
      });
    if (path === '/api/products/argocd/shop/promote')
      return send(201, { kind: 'Promotion', metadata: { name: 'shop-7xk2p', namespace: 'argocd' }, spec: body });
    if (path === '/api/promotions/argocd/shop-1-2-0-ab12cd34/abort')
      return send(409, {
        error: {
          code: 'ACTION_REFUSED',
          reason: 'Finished',
          message: "Promotion 'argocd/shop-1-2-0-ab12cd34' has finished (Succeeded): nothing to abort",
        },
      });
    return send(404, { error: { code: 'ROUTE_NOT_FOUND', message: `no route ${path}` } });
  });
});
appProxy.listen(0, '127.0.0.1');
await once(appProxy, 'listening');
await fx.tunnel(runtimeKey, (appProxy.address() as { port: number }).port);
fx.onClose(() => appProxy.close());

let rv = 10;
/** Reports objects as the runtime's event reporter does (its own summaries). */
async function report(
  kind: 'Product' | 'Promotion' | 'PromotionPreview',
  objects: Record<string, unknown>[],
): Promise<void> {
  const items = objects.map((o): UpsertItem => {
    const it = upsertItem(kind, {
      apiVersion: 'promotions.hosted-runtimes.io/v1alpha1',
      kind,
      ...o,
      metadata: {
        namespace: 'argocd',
        uid: `uid-${String((o.metadata as { name: string }).name)}`,
        generation: 1,
        resourceVersion: String(++rv),
        ...(o.metadata as object),
      },
    });
    if (!it) throw new Error('no item');
    return it;
  });
  await fx.postEvents(runtimeKey, batch('reporter-0', items));
}

const minutesAgo = (m: number) => new Date(Date.now() - m * 60_000).toISOString();
const staging = {
  environment: 'staging',
  phase: 'Succeeded',
  commit: 'c0ffee0123456789abcdef',
  startedAt: minutesAgo(9),
  finishedAt: minutesAgo(7),
  postAction: { workflow: 'promotion-post-staging-1a2b', phase: 'Succeeded' },
};
const failed = {
  metadata: { name: 'shop-1-2-0-ab12cd34' },
  spec: { product: 'shop', release: '1.2.0', requestedBy: 'trigger' },
  status: {
    phase: 'Failed',
    release: '1.2.0',
    message: 'prod: pre-action Workflow promotion-pre-prod-3c4d failed: smoke tests failed: 2 of 14 checks',
    startedAt: minutesAgo(9),
    finishedAt: minutesAgo(6),
    steps: [
      staging,
      {
        environment: 'prod',
        phase: 'Failed',
        startedAt: minutesAgo(7),
        finishedAt: minutesAgo(6),
        message: 'pre-action Workflow promotion-pre-prod-3c4d failed: smoke tests failed: 2 of 14 checks',
        preAction: { workflow: 'promotion-pre-prod-3c4d', phase: 'Failed' },
      },
    ],
  },
};
await report('Product', [
  {
    metadata: { name: 'shop' },
    spec: { flow: 'dev-to-prod' },
    status: {
      environments: [
        { environment: 'dev', release: '1.2.0', revision: 'aaaaaaa111' },
        { environment: 'staging', release: '1.2.0', revision: 'aaaaaaa111' },
        { environment: 'prod', release: '1.1.0', revision: 'aaaaaaa111' },
      ],
    },
  },
]);
await report('Promotion', [
  {
    metadata: { name: 'shop-1-1-0-0f0f0f0f' },
    spec: { product: 'shop', release: '1.1.0', requestedBy: 'trigger' },
    status: { phase: 'Succeeded', release: '1.1.0', startedAt: minutesAgo(60), finishedAt: minutesAgo(50), steps: [] },
  },
  failed,
]);

t.test("a product's environments side by side, the failed promotion's timeline, retry and promote", async (t) => {
  const { page, problems } = await fx.open(tenantKey);
  const card = page.locator('table.products');
  await card.locator('tbody tr', { hasText: 'argocd/shop' }).waitFor();
  t.match(
    (await card.innerText()).replace(/\s+/g, ' '),
    /dev 1\.2\.0 → staging 1\.2\.0 → prod 1\.1\.0/,
    "the tenant page shows each environment's release",
  );
  await card.getByRole('link', { name: 'argocd/shop' }).click();
  await page.getByRole('heading', { name: 'Product argocd/shop' }).waitFor();
  t.match(page.url(), /#\/tenants\/[0-9a-f-]+\/products\/argocd\/shop$/, "the product's page");

  const envs = page.locator('ol.environments > li');
  await envs.nth(2).waitFor();
  t.same(
    (await envs.allInnerTexts()).map((x) => x.replace(/\s+/g, ' ').trim()),
    ['dev 1.2.0 aaaaaaa Roll back', 'staging 1.2.0 aaaaaaa Roll back', 'prod 1.1.0 aaaaaaa Roll back'],
    'the environments side by side, in the flow’s order, with the release and revision of each',
  );
  const timeline = page.locator('section.promotion');
  await timeline.waitFor();
  t.equal(await timeline.getAttribute('aria-label'), 'Promotion shop-1-2-0-ab12cd34', 'the newest promotion is shown');
  const steps = page.locator('ol.promotion-timeline > li');
  t.same(
    await steps.evaluateAll((lis) =>
      lis.map((li) => [li.getAttribute('data-environment'), li.getAttribute('data-phase')]),
    ),
    [
      ['staging', 'Succeeded'],
      ['prod', 'Failed'],
    ],
    'each step with its phase',
  );
  const stagingText = await steps.nth(0).innerText();
  t.match(stagingText, /commit c0ffee0/, "staging's commit");
  t.match(stagingText, /post-action: promotion-post-staging-1a2b Succeeded/, 'and its post-action');
  t.match(stagingText, /2 min/, 'and how long it took');
  const prodText = await steps.nth(1).innerText();
  t.match(prodText, /pre-action: promotion-pre-prod-3c4d Failed/, "prod's failed gate");
  t.match(prodText, /smoke tests failed: 2 of 14 checks/, 'and why');
  t.ok(await page.getByRole('button', { name: 'Abort' }).isDisabled(), 'a finished promotion cannot be aborted');
  await fx.screenshot(page, 'product-failed.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the product page has no serious accessibility violation');

  await page.getByRole('button', { name: 'Retry' }).click();
  await page.getByText(/Retry of shop-1-2-0-ab12cd34 asked/).waitFor();
  t.match(
    asked.at(-1),
    { method: 'POST', path: '/api/promotions/argocd/shop-1-2-0-ab12cd34/retry' },
    'retry went through the tunnel to the runtime',
  );

  // The operator takes the retry: the runtime reports the promotion running at prod's gate.
  await report('Promotion', [
    {
      ...failed,
      spec: { ...failed.spec, retry: 1 },
      status: {
        ...failed.status,
        phase: 'Running',
        message: 'retry 1',
        finishedAt: undefined,
        observedRetry: 1,
        steps: [
          staging,
          {
            environment: 'prod',
            phase: 'PreAction',
            startedAt: minutesAgo(0),
            preAction: { workflow: 'promotion-pre-prod-9e8f' },
          },
        ],
      },
    },
  ]);
  await page
    .locator('ol.promotion-timeline > li[data-environment="prod"][data-phase="PreAction"]')
    .waitFor({ timeout: 15_000 });
  t.match(
    await steps.nth(1).innerText(),
    /pre-action: promotion-pre-prod-9e8f Running/,
    'the new gate runs, shown without reload',
  );
  t.match(
    await envs.nth(2).innerText(),
    /1\.2\.0 PreAction/,
    'the environment being promoted shows the release arriving',
  );
  t.notOk(await page.getByRole('button', { name: 'Abort' }).isDisabled(), 'a running promotion can be aborted');

  await page.getByLabel('Release').fill('1.3.0');
  await page.getByRole('button', { name: 'Promote' }).click();
  await page.getByText(/Promotion shop-7xk2p started/).waitFor();
  t.match(
    asked.at(-1),
    { method: 'POST', path: '/api/products/argocd/shop/promote', body: { release: '1.3.0' } },
    'promote asked the runtime for the release typed',
  );

  page.once('dialog', (d) => void d.accept());
  await page.getByRole('button', { name: 'Roll back prod' }).click();
  await page.getByText(/Rollback shop-r8m4q of prod started/).waitFor();
  t.match(
    asked.at(-1),
    { method: 'POST', path: '/api/products/argocd/shop/rollback', body: { environment: 'prod' } },
    'after a confirmation, roll back asked the runtime for that environment',
  );
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});

t.test('a refused action is shown as the API says it', async (t) => {
  await report('Promotion', [
    { ...failed, status: { ...failed.status, phase: 'Running', finishedAt: undefined, message: undefined } },
  ]);
  const { page, problems } = await fx.open(tenantKey);
  await page.locator('table.products').waitFor(); // signed in: the tenant's page, then the product's
  await page.evaluate(`location.hash = '#/tenants/${tenantId}/products/argocd/shop'`);
  await page.locator('section.promotion[data-phase="Running"]').waitFor();
  // The runtime has meanwhile finished it (the double answers as the app-proxy does for a finished one).
  await page.getByRole('button', { name: 'Abort' }).click();
  const alert = page.locator('[role="alert"]');
  await alert.waitFor();
  const text = await alert.innerText();
  t.match(text, /has finished \(Succeeded\): nothing to abort/, "the runtime's reason");
  t.match(text, /ACTION_REFUSED/, 'and its code');
  t.same(await axeViolations(page), [], 'the page with the error has no serious accessibility violation');
  t.same(
    problems.filter((p) => !/status of 409/.test(p)),
    [],
    'no console error other than the refused request',
  );
  await page.context().close();
});

t.test('Preview (dry run): started from the product page, each environment’s changes shown', async (t) => {
  await report('Promotion', [failed]); // nothing runs but the dry run
  const { page, problems } = await fx.open(tenantKey);
  await page.locator('table.products').waitFor();
  await page.evaluate(`location.hash = '#/tenants/${tenantId}/products/argocd/shop'`);
  await page.getByRole('heading', { name: 'Product argocd/shop' }).waitFor();
  await page.getByRole('button', { name: 'Preview (dry run)' }).click();
  await page.getByText(/Preview shop-dry9z started/).waitFor();
  t.match(
    asked.at(-1),
    { method: 'POST', path: '/api/products/argocd/shop/dry-run', body: {} },
    'the dry run asked of the runtime',
  );
  const preview = (environment: string, outside: boolean) => ({
    environment,
    phase: 'Succeeded',
    startedAt: minutesAgo(0),
    finishedAt: minutesAgo(0),
    dryRun: shopDryRun(environment, { outside, at: minutesAgo(0) }),
  });
  // While it runs (staging previewed, prod next), no environment shows a release arriving.
  await report('PromotionPreview', [
    {
      metadata: { name: 'shop-dry9z' },
      spec: { product: 'shop', requestedBy: 'customer' },
      status: {
        phase: 'Running',
        release: '1.2.0',
        startedAt: minutesAgo(0),
        steps: [preview('staging', false), { environment: 'prod', phase: 'Pending' }],
      },
    },
  ]);
  await page.locator('section.promotion[aria-label="Preview shop-dry9z"][data-phase="Running"]').waitFor();
  t.notMatch(
    (await page.locator('ol.environments').innerText()).replace(/\s+/g, ' '),
    /Succeeded|Pending|Running/,
    'a dry run is not shown as arriving in any environment',
  );
  await report('PromotionPreview', [
    {
      metadata: { name: 'shop-dry9z' },
      spec: { product: 'shop', requestedBy: 'customer' },
      status: {
        phase: 'Succeeded',
        release: '1.2.0',
        startedAt: minutesAgo(0),
        finishedAt: minutesAgo(0),
        message: 'dry run of 1.2.0: staging 1 resource, prod 2 resources; nothing was changed',
        steps: [preview('staging', false), preview('prod', true)],
      },
    },
  ]);
  const section = page.locator('section.promotion[aria-label="Preview shop-dry9z"][data-phase="Succeeded"]');
  await section.waitFor({ timeout: 15_000 });
  t.match(await section.locator('h3').innerText(), /^Preview \(dry run\) shop-dry9z/, 'shown as a preview');
  t.ok(await page.getByRole('button', { name: 'Retry' }).isDisabled(), 'a preview is not retried');
  const prod = section.locator('li[data-environment="prod"] table.dry-run-diff');
  const rows = (await prod.locator('tbody tr').allInnerTexts()).map((x) => x.replace(/\s+/g, ' ').trim());
  t.same(
    rows,
    [
      'shop-prod-web Deployment shop-prod/web modified spec.template.spec.containers[name=web].image',
      'shop-prod-api ConfigMap shop-prod/shop-api modified data.color not from the change: data.color',
    ],
    "prod's previewed changes, per application and resource, with what the change does not cause",
  );
  t.match(
    await section.locator('li[data-environment="staging"]').innerText(),
    /shop-staging-api\s+unchanged/,
    'an application without changes',
  );
  await fx.screenshot(page, 'product-dry-run.png', { fullPage: true });
  // A running preview is aborted through its own action.
  await report('PromotionPreview', [
    {
      metadata: { name: 'shop-dry9z' },
      spec: { product: 'shop', requestedBy: 'customer' },
      status: { phase: 'Running', release: '1.2.0', startedAt: minutesAgo(0), steps: [preview('staging', false)] },
    },
  ]);
  await page.locator('section.promotion[aria-label="Preview shop-dry9z"][data-phase="Running"]').waitFor();
  await page.getByRole('button', { name: 'Abort' }).click();
  await page.getByText(/Abort of preview shop-dry9z asked/).waitFor();
  t.match(
    asked.at(-1),
    { method: 'POST', path: '/api/promotionpreviews/argocd/shop-dry9z/abort' },
    "Abort asked of the preview's own action",
  );
  t.same(await axeViolations(page), [], 'no serious accessibility violation');
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});
