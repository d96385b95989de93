/**
 * The GitOps Operator's products and promotions as the control plane stores and lists them (real
 * Postgres, the real app): a runtime's event batch with a Product and a Promotion, as its event
 * reporter summarizes them (runtime/agents/event-reporter/items.ts), is listed at
 * `GET /v1/tenants/:id/products` and `…/promotions` (filterable by phase), one by name with its
 * object, and a newer state of the Promotion replaces the older; another tenant sees none of it.
 */
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';
import { batch } from '../../helpers/events.ts';
import { createKey } from '../../../provisioner/store/keys.ts';
import { summarize, upsertItem } from '../../../runtime/agents/event-reporter/items.ts';
import { EVENTS_PATH, type UpsertItem } from '../../../runtime/protocol/events.ts';
import type { RuntimeObjectDetail, RuntimeObjectPage } from '../../../provisioner/http/api-types.ts';

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
const item = (kind: 'Product' | 'Promotion', obj: Record<string, unknown>): UpsertItem => {
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
  const list = async (path: string, id = tenant.tenantId) => {
    const res = await api.request('GET', `/v1/tenants/${id}/${path}`);
    t.equal(res.statusCode, 200, `GET ${path}`);
    return res.json<RuntimeObjectPage>();
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
  const one = await api.request('GET', `/v1/tenants/${tenant.tenantId}/promotions/argocd/shop-1-2-0-ab12cd34`);
  const detail = one.json<RuntimeObjectDetail>();
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
  t.same((await list('promotions?phase=Running')).items, [], 'none Running any more');
  t.same((await list('promotions?phase=Succeeded')).items.length, 1, 'one Succeeded');
  t.same((await list('promotions', other.tenantId)).items, [], 'another tenant sees none of it');
});
