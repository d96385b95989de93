/**
 * The tenant's byte budget of application history (PROVISIONER_APP_HISTORY_MAX_BYTES_PER_TENANT,
 * migration 032's `size_bytes`), real Postgres and the real app: large entries (a long commit
 * message, many changed resources) push the tenant's oldest entries out once their bytes pass the
 * budget, the newest that fit stay, another tenant's history is untouched, and small entries are
 * kept by the hundred under the same budget.
 */
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';
import { application, batch } from '../../helpers/events.ts';
import { createKey } from '../../../provisioner/store/keys.ts';
import { EVENTS_PATH, type UpsertItem } from '../../../runtime/protocol/events.ts';
import type { ApplicationChange } from '../../../runtime/protocol/sources.ts';
import { historyBytes } from '../../helpers/runtime-objects.ts';

const BUDGET = 1024 * 1024; // the smallest the setting allows
const api = await createTestApi({
  env: {
    PROVISIONER_APP_HISTORY_MAX_BYTES_PER_TENANT: String(BUDGET),
    // One change per batch, sent back to back.
    PROVISIONER_RUNTIME_EVENT_BATCHES_PER_SECOND: '10000',
  },
});
t.teardown(() => api.close());

const sha = (n: number | string) => String(n).padStart(40, '0').slice(-40);
const runtimeKey = async (tenantId: string) =>
  (await createKey(api.db.pool, { role: 'runtime', tenantId, name: 'event reporter', createdBy: 'test' })).key;
const ingest = async (key: string, items: UpsertItem[]) => {
  const res = await api.request('POST', EVENTS_PATH, { key, body: batch('reporter-0', items) });
  if (res.statusCode !== 200) throw new Error(`POST ${EVENTS_PATH}: ${res.statusCode} ${res.body}`);
};

/** A change of about `resources` × 250 bytes and a 2,000-character message. */
function change(changeRevision: string, resources: number): ApplicationChange {
  return {
    revision: changeRevision,
    changeRevision,
    commit: { revision: changeRevision, author: 'Ada <ada@example.com>', message: 'm'.repeat(2000), tags: [] },
    resources: Array.from({ length: resources }, (_, i) => ({
      group: 'apps',
      kind: 'Deployment',
      namespace: 'default',
      name: `web-${i}`,
      action: 'modified' as const,
      fields: [`spec.template.spec.containers[name=web-${i}].image`, 'spec.replicas', 'metadata.labels.version'],
    })),
    images: [],
    truncated: false,
  };
}

const report = (name: string, rv: number, c: ApplicationChange): UpsertItem => {
  const item = application(name, rv);
  return { ...item, summary: { ...item.summary, syncStatus: 'OutOfSync' }, change: c };
};
const history = async (tenantId: string, name: string) => {
  const page = await api.client.call('GET /v1/tenants/:id/applications/:namespace/:name/history', {
    params: { id: tenantId, namespace: 'argocd', name },
    query: { limit: 200 },
  });
  return page.items.map((i) => i.changeRevision);
};
const bytes = async (tenantId: string) => historyBytes(api.db.pool, tenantId);

t.test('large entries: the oldest go once the bytes pass the budget, the newest that fit stay', async (t) => {
  const tenant = await api.signup();
  const other = await api.signup();
  const key = await runtimeKey(tenant.tenantId);
  const otherKey = await runtimeKey(other.tenantId);
  await ingest(otherKey, [report('web', 1, change(sha('f0'), 80))]);
  const n = 60;
  for (let i = 1; i <= n; i++) await ingest(key, [report('web', 100 + i, change(sha(`a${i}`), 80))]);

  const kept = await history(tenant.tenantId, 'web');
  const size = await bytes(tenant.tenantId);
  t.ok(size <= BUDGET, `the tenant's history holds ${size} bytes, within the ${BUDGET}-byte budget`);
  t.ok(kept.length < n, `some entries went: ${kept.length} of ${n} stay`);
  t.ok(kept.length > n / 4, 'not more than the budget needed');
  t.same(
    kept,
    Array.from({ length: kept.length }, (_, i) => sha(`a${n - i}`)),
    'the newest stay, in order, without gaps',
  );
  const one = size / kept.length;
  t.ok(BUDGET - size < 2 * one, 'the budget is used up to about one entry');
  t.same(await history(other.tenantId, 'web'), [sha('f0')], "another tenant's entry is untouched");
});

t.test('small entries: hundreds kept under the same budget', async (t) => {
  const tenant = await api.signup();
  const key = await runtimeKey(tenant.tenantId);
  for (let i = 1; i <= 150; i++) await ingest(key, [report('small', 100 + i, change(sha(`b${i}`), 1))]);
  t.equal((await history(tenant.tenantId, 'small')).length, 150, 'all 150 stay (the count budget is 10,000)');
});
