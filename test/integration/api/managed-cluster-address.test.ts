/**
 * A tenant's managed-cluster server in a refused range, at the API (real app, real PostgreSQL):
 * the refusal names the setting that governs managed clusters
 * (PROVISIONER_MANAGED_CLUSTER_ALLOWED_CIDRS, not the root clusters' one), and the IPv6 forms that
 * carry a refused IPv4 address are refused like it; nothing is stored.
 */
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';

const api = await createTestApi();
t.teardown(() => api.close());
const tenant = await api.signup();
const client = api.as(tenant.apiKey);

async function register(server: string): Promise<{ status: number; code?: string; message: string }> {
  const res = await client.request('POST /v1/tenants/:id/managed-clusters', {
    params: { id: tenant.tenantId },
    body: { name: 'edge', server, token: 'some-token', namespaces: ['apps'] },
  });
  if (res.ok) return { status: res.status, message: '' };
  return { status: res.status, code: res.body.error.code, message: res.body.error.message };
}

t.test('a private address names PROVISIONER_MANAGED_CLUSTER_ALLOWED_CIDRS', async (t) => {
  const res = await register('https://10.0.0.1:6443');
  t.equal(res.status, 400, `refused (${res.code}: ${res.message})`);
  t.match(res.message, /PROVISIONER_MANAGED_CLUSTER_ALLOWED_CIDRS/, 'names the managed clusters setting');
  t.notMatch(res.message, /PROVISIONER_CLUSTER_ALLOWED_CIDRS/, "not the root clusters' setting");
});

t.test('IPv4-compatible, 6to4 and Teredo forms of loopback are refused', async (t) => {
  for (const server of [
    'https://[::7f00:1]:6443',
    'https://[2002:7f00:1::]:6443',
    'https://[2001:0:cb00:7105:0:f227:80ff:fffe]:6443',
  ]) {
    const res = await register(server);
    t.equal(res.status, 400, `${server}: refused (${res.code}: ${res.message})`);
    t.match(res.message, /127\.0\.0\.1, a loopback address/, `${server}: names the loopback address it carries`);
  }
  const listed = await client.call('GET /v1/tenants/:id/managed-clusters', { params: { id: tenant.tenantId } });
  t.same(listed.items, [], 'nothing was registered');
});
