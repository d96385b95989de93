/**
 * Who suspended decides who may resume: a tenant lifts only its own suspension; an operator's
 * (for non-payment or abuse, with a reason) needs an operator.
 */
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';

const api = await createTestApi();
t.teardown(() => api.close());

t.test('a tenant resumes its own suspension', async (t) => {
  const tenant = await api.signup();
  t.equal(
    (await api.request('POST', `/v1/tenants/${tenant.tenantId}/suspend`, { key: tenant.apiKey })).statusCode,
    202,
  );
  const got = (await api.request('GET', `/v1/tenants/${tenant.tenantId}`, { key: tenant.apiKey })).json();
  t.same(got.status.suspension, { by: 'tenant', reason: null }, 'the tenant sees its own suspension');
  t.equal((await api.request('POST', `/v1/tenants/${tenant.tenantId}/resume`, { key: tenant.apiKey })).statusCode, 202);
  const after = (await api.request('GET', `/v1/tenants/${tenant.tenantId}`, { key: tenant.apiKey })).json();
  t.equal(after.spec.suspended, false);
  t.notOk('suspension' in after.status, 'no suspension once resumed');
});

t.test("a tenant cannot resume an operator's suspension: 403 with the reason; an operator can", async (t) => {
  const tenant = await api.signup();
  const suspend = await api.request('POST', `/v1/tenants/${tenant.tenantId}/suspend`, {
    key: api.operatorKey,
    body: { reason: 'invoice 2026-11 unpaid' },
  });
  t.equal(suspend.statusCode, 202);
  for (const [method, url, body] of [
    ['POST', `/v1/tenants/${tenant.tenantId}/resume`, undefined],
    ['PATCH', `/v1/tenants/${tenant.tenantId}`, { suspended: false }],
  ] as const) {
    const res = await api.request(method, url, { key: tenant.apiKey, ...(body ? { body } : {}) });
    t.equal(res.statusCode, 403, `${method} ${url}: 403`);
    t.equal(res.json().error.code, 'SUSPENDED_BY_OPERATOR', `${method}: the code says why`);
    t.match(res.json().error.message, /invoice 2026-11 unpaid/, `${method}: the message gives the operator's reason`);
  }
  const got = (await api.request('GET', `/v1/tenants/${tenant.tenantId}`, { key: tenant.apiKey })).json();
  t.equal(got.spec.suspended, true, 'still suspended');
  t.same(got.status.suspension, { by: 'operator', reason: 'invoice 2026-11 unpaid' });
  t.equal(
    (await api.request('POST', `/v1/tenants/${tenant.tenantId}/resume`, { key: api.operatorKey })).statusCode,
    202,
    'an operator resumes it',
  );
  t.equal((await api.request('GET', `/v1/tenants/${tenant.tenantId}`)).json().spec.suspended, false);
});

t.test("an operator's suspension takes over a tenant's own; a tenant cannot give a reason", async (t) => {
  const tenant = await api.signup();
  t.equal(
    (await api.request('POST', `/v1/tenants/${tenant.tenantId}/suspend`, { key: tenant.apiKey })).statusCode,
    202,
  );
  t.equal(
    (
      await api.request('POST', `/v1/tenants/${tenant.tenantId}/suspend`, {
        key: api.operatorKey,
        body: { reason: 'abuse report 42' },
      })
    ).statusCode,
    202,
  );
  const res = await api.request('POST', `/v1/tenants/${tenant.tenantId}/resume`, { key: tenant.apiKey });
  t.equal(res.statusCode, 403, 'the operator now holds the suspension');
  const withReason = await api.request('POST', `/v1/tenants/${tenant.tenantId}/suspend`, {
    key: tenant.apiKey,
    body: { reason: 'x' },
  });
  t.equal(withReason.statusCode, 400);
  t.equal(withReason.json().error.field, 'reason');
  const audit = await api.db.pool.query<{ after: { suspendedBy?: string; reason?: string } }>(
    `SELECT after FROM audit_log WHERE target_id = $1 AND action = 'tenant.suspend' ORDER BY id`,
    [tenant.tenantId],
  );
  t.equal(audit.rows[0]?.after.suspendedBy, 'tenant', 'the audit row says who suspended');
});
