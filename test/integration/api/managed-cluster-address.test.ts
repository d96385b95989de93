/**
 * A tenant's managed-cluster server in a refused range, at the API (real HTTP, real PostgreSQL):
 * the refusal names the setting that governs managed clusters
 * (PROVISIONER_MANAGED_CLUSTER_ALLOWED_CIDRS, not the root clusters' one), and the IPv6 forms that
 * carry a refused IPv4 address are refused like it; nothing is stored.
 */
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';

const api = await createTestApi();
t.teardown(() => api.close());
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
const tenant = await api.signup();

async function register(server: string): Promise<{ status: number; code?: string; message: string }> {
  const res = await fetch(`${base}/v1/tenants/${tenant.tenantId}/managed-clusters`, {
    method: 'POST',
    headers: { authorization: `Bearer ${tenant.apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'edge', server, token: 'some-token', namespaces: ['apps'] }),
  });
  const body = (await res.json()) as { error?: { code: string; message: string } };
  return { status: res.status, ...(body.error ? { code: body.error.code } : {}), message: body.error?.message ?? '' };
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
  const listed = await api.request('GET', `/v1/tenants/${tenant.tenantId}/managed-clusters`, { key: tenant.apiKey });
  t.same(listed.json<{ items: unknown[] }>().items, [], 'nothing was registered');
});
