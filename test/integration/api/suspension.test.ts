/**
 * Who suspended decides who may resume: a tenant lifts only its own suspension; an operator's
 * (for non-payment or abuse, with a reason) needs an operator.
 */
import t from 'tap';
import type { BodyOf } from '../../../provisioner/http/api-client.ts';
import { createTestApi, type TestApi } from '../../helpers/api.ts';
import { auditRows } from '../../helpers/audit.ts';

const api = await createTestApi();
t.teardown(() => api.close());

/** A signed-up tenant's routes, with its own key or another's. */
function routesOf(tenant: Awaited<ReturnType<TestApi['signup']>>, key: string | null = tenant.apiKey) {
  const client = api.as(key);
  const params = { id: tenant.tenantId };
  return {
    get: () => client.call('GET /v1/tenants/:id', { params }),
    suspend: (reason?: string) =>
      client.request('POST /v1/tenants/:id/suspend', { params, ...(reason !== undefined ? { body: { reason } } : {}) }),
    resume: () => client.request('POST /v1/tenants/:id/resume', { params }),
    patch: (body: BodyOf<'PATCH /v1/tenants/:id'>) => client.request('PATCH /v1/tenants/:id', { params, body }),
  };
}

t.test('a tenant resumes its own suspension', async (t) => {
  const tenant = await api.signup();
  const own = routesOf(tenant);
  t.equal((await own.suspend()).status, 202);
  const got = await own.get();
  t.same(got.status.suspension, { by: 'tenant', reason: null }, 'the tenant sees its own suspension');
  t.equal((await own.resume()).status, 202);
  const after = await own.get();
  t.equal(after.spec.suspended, false);
  t.notOk('suspension' in after.status, 'no suspension once resumed');
});

t.test("a tenant cannot resume an operator's suspension: 403 with the reason; an operator can", async (t) => {
  const tenant = await api.signup();
  const own = routesOf(tenant);
  const operator = routesOf(tenant, api.operatorKey);
  const suspend = await operator.suspend('invoice 2026-11 unpaid');
  t.equal(suspend.status, 202);
  for (const [name, res] of [
    ['POST /v1/tenants/:id/resume', await own.resume()],
    ['PATCH /v1/tenants/:id', await own.patch({ suspended: false })],
  ] as const) {
    t.equal(res.status, 403, `${name}: 403`);
    t.match(res.body, { error: { code: 'SUSPENDED_BY_OPERATOR' } }, `${name}: the code says why`);
    t.match(
      res.body,
      { error: { message: /invoice 2026-11 unpaid/ } },
      `${name}: the message gives the operator's reason`,
    );
  }
  const got = await own.get();
  t.equal(got.spec.suspended, true, 'still suspended');
  t.same(got.status.suspension, { by: 'operator', reason: 'invoice 2026-11 unpaid' });
  t.equal((await operator.resume()).status, 202, 'an operator resumes it');
  t.equal((await routesOf(tenant, api.adminKey).get()).spec.suspended, false);
});

t.test("an operator's suspension takes over a tenant's own; a tenant cannot give a reason", async (t) => {
  const tenant = await api.signup();
  const own = routesOf(tenant);
  t.equal((await own.suspend()).status, 202);
  t.equal((await routesOf(tenant, api.operatorKey).suspend('abuse report 42')).status, 202);
  const res = await own.resume();
  t.equal(res.status, 403, 'the operator now holds the suspension');
  const withReason = await own.suspend('x');
  t.equal(withReason.status, 400);
  t.match(withReason.body, { error: { field: 'reason' } });
  const audit = await auditRows(api.db.pool, { targetId: tenant.tenantId, action: 'tenant.suspend' });
  t.equal(audit[0]?.after?.suspendedBy, 'tenant', 'the audit row says who suspended');
});
