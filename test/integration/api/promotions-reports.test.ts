/**
 * The GitOps Operator's products and promotions as the control plane stores and lists them (real
 * Postgres, the real app): a runtime's event batch with a Product and a Promotion, as its event
 * reporter summarizes them (runtime/agents/event-reporter/items.ts), is listed at
 * `GET /v1/tenants/:id/products` and `…/promotions` (filterable by phase), one by name with its
 * object, and a newer state of the Promotion replaces the older; another tenant sees none of it.
 * The CLI's `products` and `promotions` print them (a promotion's timeline, followed with --watch
 * until it ends).
 */
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';
import { batch } from '../../helpers/events.ts';
import { createKey } from '../../../provisioner/store/keys.ts';
import { summarize, upsertItem } from '../../../runtime/agents/event-reporter/items.ts';
import { EVENTS_PATH, type UpsertItem } from '../../../runtime/protocol/events.ts';
import { main } from '../../../provisioner/cli/main.ts';
import { until } from '../../../sandbox/processes.ts';
import { cliAgainst } from '../../helpers/cli.ts';
import { shopDryRun } from '../../helpers/promotions.ts';

const api = await createTestApi();
t.teardown(() => api.close());

const product = {
  apiVersion: 'promotions.hosted-runtimes.io/v1alpha1',
  kind: 'Product',
  metadata: { name: 'shop', namespace: 'argocd', uid: 'uid-shop', resourceVersion: '10', generation: 1 },
  spec: { repository: 'https://git.example/config.git', branch: 'main', template: 'release', flow: 'dev-to-prod' },
  status: {
    environments: [
      { environment: 'dev', release: '1.2.0' },
      { environment: 'staging', release: '1.2.0' },
      { environment: 'prod', release: '1.1.0' },
    ],
  },
};
const promotion = (rv: number, phase: string, steps: unknown[]) => ({
  apiVersion: 'promotions.hosted-runtimes.io/v1alpha1',
  kind: 'Promotion',
  metadata: {
    name: 'shop-1-2-0-ab12cd34',
    namespace: 'argocd',
    uid: 'uid-p',
    resourceVersion: String(rv),
    generation: 1,
  },
  spec: { product: 'shop', release: '1.2.0', requestedBy: 'trigger' },
  status: { phase, release: '1.2.0', steps },
});

/** The item the event reporter makes of an object (its own code). */
const item = (kind: 'Product' | 'Promotion' | 'PromotionPreview', obj: Record<string, unknown>): UpsertItem => {
  const it = upsertItem(kind, obj);
  if (!it) throw new Error('no item');
  t.same(it.summary, summarize(kind, obj));
  return it;
};

t.test('reported, stored and listed; a newer state replaces the older', async (t) => {
  const tenant = await api.signup();
  const other = await api.signup();
  const key = (
    await createKey(api.db.pool, { role: 'runtime', tenantId: tenant.tenantId, name: 'reporter', createdBy: 'test' })
  ).key;
  const post = async (items: UpsertItem[]) => {
    const res = await api.request('POST', EVENTS_PATH, { key, body: batch('reporter-0', items) });
    t.equal(res.statusCode, 200, `the batch is accepted: ${res.body.slice(0, 200)}`);
  };
  await post([
    item('Product', product),
    item('Promotion', promotion(11, 'Running', [{ environment: 'staging', phase: 'Syncing', commit: 'abc' }])),
  ]);
  const list = async (path: 'products' | 'promotions', id = tenant.tenantId, phase?: string) => {
    const res = await api.client.request(`GET /v1/tenants/:id/${path}`, {
      params: { id },
      ...(phase ? { query: { phase } } : {}),
    });
    t.equal(res.status, 200, `GET ${path}`);
    if (!res.ok) throw new Error(`precondition: GET ${path}`);
    return res.body;
  };
  const products = await list('products');
  t.same(
    products.items.map((i) => [
      i.kind,
      i.name,
      (i.summary.environments as Array<{ release: string }>).map((e) => e.release),
    ]),
    [['Product', 'shop', ['1.2.0', '1.2.0', '1.1.0']]],
    'the product with its release in each environment',
  );
  const running = await list('promotions');
  t.same(
    running.items.map((i) => [i.name, i.phase, i.summary.release]),
    [['shop-1-2-0-ab12cd34', 'Running', '1.2.0']],
    'the promotion, running',
  );
  await post([
    item(
      'Promotion',
      promotion(12, 'Succeeded', [
        { environment: 'staging', phase: 'Succeeded', commit: 'abc' },
        { environment: 'prod', phase: 'Succeeded', commit: 'def' },
      ]),
    ),
  ]);
  const detail = await api.client.call('GET /v1/tenants/:id/promotions/:namespace/:name', {
    params: { id: tenant.tenantId, namespace: 'argocd', name: 'shop-1-2-0-ab12cd34' },
  });
  t.equal(detail.phase, 'Succeeded', 'the newer state replaced the older');
  t.same(
    (detail.summary.steps as Array<{ environment: string; commit: string }>).map((s) => [s.environment, s.commit]),
    [
      ['staging', 'abc'],
      ['prod', 'def'],
    ],
    'each step with its commit',
  );
  t.match(detail.object, { spec: { product: 'shop' } }, 'with the object');
  t.same((await list('promotions', tenant.tenantId, 'Running')).items, [], 'none Running any more');
  t.same((await list('promotions', tenant.tenantId, 'Succeeded')).items.length, 1, 'one Succeeded');
  t.same((await list('promotions', other.tenantId)).items, [], 'another tenant sees none of it');
});

t.test('the CLI: products with their releases, promotions with their timeline, --watch until it ends', async (t) => {
  const url = await api.app.listen({ port: 0, host: '127.0.0.1' });
  const tenant = await api.signup();
  const key = (
    await createKey(api.db.pool, { role: 'runtime', tenantId: tenant.tenantId, name: 'reporter', createdBy: 'test' })
  ).key;
  let rv = 100;
  const post = async (items: UpsertItem[]) => {
    const res = await api.request('POST', EVENTS_PATH, { key, body: batch('reporter-0', items) });
    t.equal(res.statusCode, 200, `the batch is accepted: ${res.body.slice(0, 200)}`);
  };
  const at = (m: number) => `2026-11-29T01:${String(m).padStart(2, '0')}:00Z`;
  const running = () => ({
    ...promotion(++rv, 'Running', [
      {
        environment: 'staging',
        phase: 'PostAction',
        commit: 'c0ffee0123456789',
        startedAt: at(0),
        postAction: { workflow: 'promotion-post-staging-1a2b', phase: 'Running' },
      },
      { environment: 'prod', phase: 'Pending' },
    ]),
  });
  const failed = () => {
    const p = promotion(++rv, 'Failed', [
      { environment: 'staging', phase: 'Succeeded', commit: 'c0ffee0123456789', startedAt: at(0), finishedAt: at(2) },
      {
        environment: 'prod',
        phase: 'Failed',
        startedAt: at(2),
        finishedAt: at(3),
        message: 'the pre-action failed: smoke tests failed: 2 of 14 checks',
        preAction: { workflow: 'promotion-pre-prod-3c4d', phase: 'Failed' },
      },
    ]);
    return {
      ...p,
      status: { ...p.status, message: 'prod: the pre-action failed', startedAt: at(0), finishedAt: at(3) },
    };
  };
  await post([item('Product', { ...product, metadata: { ...product.metadata, resourceVersion: String(++rv) } })]);
  await post([item('Promotion', running())]);

  const cli = cliAgainst(url, tenant.apiKey);
  const products = await cli(['products', 'list', tenant.tenantId]);
  t.equal(products.code, 0, products.err);
  t.match(products.out, /argocd\s+shop\s+dev-to-prod\s+dev=1\.2\.0 staging=1\.2\.0 prod=1\.1\.0/, 'each release');
  const shop = await cli(['products', 'get', tenant.tenantId, 'shop']);
  t.equal(shop.code, 0, shop.err);
  t.match(shop.out, /ENVIRONMENT\s+RELEASE[\s\S]*prod\s+1\.1\.0/, 'the environments side by side');
  t.match(shop.out, /shop-1-2-0-ab12cd34\s+1\.2\.0\s+Running\s+staging:PostAction prod:Pending/, 'its promotions');
  const missing = await cli(['products', 'get', tenant.tenantId, 'nope']);
  t.equal(missing.code, 1, 'a product never reported is an error');
  t.match(missing.err, /no product 'nope'/, 'naming it');

  // --watch prints the timeline, then again at each change, and ends with the promotion.
  const out: string[] = [];
  const watching = main(
    ['--url', url, '--token', tenant.apiKey, 'promotions', 'get', tenant.tenantId, 'shop-1-2-0-ab12cd34', '--watch'],
    { out: (s) => out.push(s), err: (s) => out.push(s), env: {} },
  );
  await until('the first timeline', 10_000, async () => out.join('\n').includes('PostAction'));
  t.match(out.join('\n'), /promotion-post-staging-1a2b Running/, "the post-action's Workflow, running");
  await post([item('Promotion', failed())]);
  t.equal(await watching, 0, '--watch ends when the promotion does');
  const last = out.join('\n');
  t.match(last, /phase:\s+Failed — prod: the pre-action failed/, 'why it stopped');
  t.match(last, /took 3m00s/, 'how long it took');
  t.match(last, /prod\s+Failed\s+-\s+-\s+1m00s\s+promotion-pre-prod-3c4d Failed/, 'the failed gate on its step');
  t.match(last, /staging\s+Succeeded\s+c0ffee012345\s/, "the step's commit");

  const listed = await cli(['promotions', 'list', tenant.tenantId, '--phase', 'Failed', '--product', 'shop']);
  t.match(
    listed.out,
    /shop-1-2-0-ab12cd34\s+shop\s+1\.2\.0\s+Failed\s+staging:Succeeded prod:Failed\s+trigger\s+3m00s/,
  );
  const none = await cli(['promotions', 'list', tenant.tenantId, '--phase', 'Running']);
  t.notMatch(none.out, /shop-1-2-0/, 'filtered by phase');
  // Following a promotion just asked for: the runtime has not reported it yet; it is waited for.
  const later: string[] = [];
  const waitingFor = main(
    ['--url', url, '--token', tenant.apiKey, 'promotions', 'get', tenant.tenantId, 'shop-x7k2p', '--watch'],
    { out: (s) => later.push(s), err: (s) => later.push(s), env: {} },
  );
  await until('the CLI to say it waits', 10_000, async () => later.join('\n').includes('waiting for the runtime'));
  const p = promotion(++rv, 'Succeeded', [{ environment: 'staging', phase: 'Succeeded', commit: 'abc' }]);
  await post([item('Promotion', { ...p, metadata: { ...p.metadata, name: 'shop-x7k2p', uid: 'uid-x7k2p' } })]);
  t.equal(await waitingFor, 0, 'once reported and finished, --watch ends');
  t.match(later.join('\n'), /promotion:\s+argocd\/shop-x7k2p[\s\S]*phase:\s+Succeeded/, 'with its timeline');

  const offline = await cli(['promotions', 'retry', tenant.tenantId, 'shop-1-2-0-ab12cd34']);
  t.equal(offline.code, 1, 'retry needs the runtime');
  t.match(offline.err, /RUNTIME_UNREACHABLE/, 'and says it is not connected');
});

t.test(
  'a preview (kind PromotionPreview): stored with each environment’s changes, shown by the API and the CLI',
  async (t) => {
    // The server the CLI test listens on (it runs before this one).
    const url = api.app.server.listening
      ? `http://127.0.0.1:${(api.app.server.address() as { port: number }).port}`
      : await api.app.listen({ port: 0, host: '127.0.0.1' });
    const tenant = await api.signup();
    const key = (
      await createKey(api.db.pool, { role: 'runtime', tenantId: tenant.tenantId, name: 'reporter', createdBy: 'test' })
    ).key;
    const at = '2026-11-30T07:00:00Z';
    const p = promotion(200, 'Succeeded', [
      { environment: 'staging', phase: 'Succeeded', dryRun: shopDryRun('staging', { outside: false, at }) },
      { environment: 'prod', phase: 'Succeeded', dryRun: shopDryRun('prod', { outside: true, at }) },
    ]);
    const obj = {
      ...p,
      kind: 'PromotionPreview',
      metadata: { ...p.metadata, name: 'shop-dry1', uid: 'uid-dry1' },
      spec: { product: 'shop', requestedBy: 'key-9' },
    };
    const res = await api.request('POST', EVENTS_PATH, {
      key,
      body: batch('reporter-0', [item('Product', product), item('PromotionPreview', obj)]),
    });
    t.equal(res.statusCode, 200, res.body.slice(0, 200));
    const detail = await api.client.call('GET /v1/tenants/:id/promotionpreviews/:namespace/:name', {
      params: { id: tenant.tenantId, namespace: 'argocd', name: 'shop-dry1' },
    });
    t.equal(detail.kind, 'PromotionPreview', 'stored as its own kind');
    t.equal(detail.phase, 'Succeeded', 'its phase a column to filter on');
    const summary = detail.summary as { product?: string; steps: Array<{ dryRun?: { applications: unknown[] } }> };
    t.equal(summary.product, 'shop');
    t.equal(summary.steps[1]?.dryRun?.applications.length, 2, 'with each environment’s applications');
    const promotions = await api.client.call('GET /v1/tenants/:id/promotions', { params: { id: tenant.tenantId } });
    t.notOk(
      promotions.items.some((x) => x.name === 'shop-dry1'),
      'not among the promotions',
    );
    const cliOf = cliAgainst(url, tenant.apiKey);
    const listed = await cliOf(['promotions', 'list', tenant.tenantId, '--previews']);
    t.match(listed.out, /argocd\s+shop-dry1\s+shop/, '`promotions list --previews` lists it');
    const shown = await cliOf(['promotions', 'get', tenant.tenantId, 'shop-dry1']);
    t.equal(shown.code, 0, shown.err);
    t.match(
      shown.out,
      /preview:\s+argocd\/shop-dry1 \(dry run: nothing is changed\)/,
      'the CLI finds it by name and says so',
    );
    t.match(
      shown.out,
      /prod: the change \(shop\/prod\/release\.yaml\) previewed at scratch commit feedbeef0123/,
      'each environment’s change',
    );
    t.match(
      shown.out,
      /shop-prod-web\s+Deployment shop-prod\/web\s+modified\s+spec\.template\.spec\.containers\[name=web\]\.image\s+-/,
      'each resource with its fields',
    );
    t.match(
      shown.out,
      /shop-prod-api\s+ConfigMap shop-prod\/shop-api\s+modified\s+data\.color\s+not from the change: data\.color/,
      'and what the change does not cause',
    );
    t.match(shown.out, /shop-staging-api\s+-\s+unchanged/, 'an application without changes');
    const productShown = await cliOf(['products', 'get', tenant.tenantId, 'shop']);
    t.equal(productShown.code, 0, productShown.err);
    t.match(productShown.out, /no promotions reported/, 'the product page: no promotion');
    t.match(
      productShown.out,
      /PREVIEW \(DRY RUN\)[\s\S]*shop-dry1\s+\S+\s+Succeeded\s+staging:Succeeded prod:Succeeded/,
      '`products get` lists the product’s previews apart from its promotions',
    );
  },
);
