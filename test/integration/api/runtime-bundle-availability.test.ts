/**
 * A hybrid runtime's bundle is refused for a version its upgrade would be refused for (real app,
 * real Postgres): a withdrawn version for any key, a deprecated one for a tenant key unless the
 * runtime runs it; the version the runtime runs and available versions still answer.
 */
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';

const api = await createTestApi({ env: { PROVISIONER_PUBLIC_URL: 'https://cp.example.test' } });
t.teardown(() => api.close());

const tenant = await api.signup({ runtimeVersion: '1.4.1' });
const reg = await api.as(tenant.apiKey).request('POST /v1/tenants/:id/runtimes', {
  params: { id: tenant.tenantId },
  body: { name: 'plant', mode: 'hybrid', access: 'tunnel', argo: 'new', version: '1.4.1' },
});
if (reg.status !== 201) throw new Error(`registration answered ${reg.status}`);

const operator = api.as(api.operatorKey);
const availability = async (version: string, value: 'available' | 'deprecated' | 'withdrawn') => {
  const res = await operator.request('PUT /v1/runtime-versions/:version/availability', {
    params: { version },
    body: { availability: value },
  });
  if (res.status !== 200) throw new Error(`availability of ${version} answered ${res.status}`);
};
const bundle = (version: string | undefined, key: string) =>
  api.as(key).request('GET /v1/tenants/:id/runtimes/:name/bundle', {
    params: { id: tenant.tenantId, name: 'plant' },
    query: version ? { version } : {},
  });

t.test("a withdrawn version's bundle is refused, for a tenant key and an operator key", async (t) => {
  await availability('1.5.0', 'withdrawn');
  t.teardown(() => availability('1.5.0', 'available'));
  for (const [who, key] of [
    ['tenant', tenant.apiKey],
    ['operator', api.operatorKey],
  ] as const) {
    const res = await bundle('1.5.0', key);
    t.equal(res.status, 422, `${who} key: refused with 422`);
    t.match(
      res.body,
      { error: { code: 'RUNTIME_VERSION_UNAVAILABLE', field: 'version', message: /'1\.5\.0' is withdrawn/ } },
      `${who} key: naming the version and the field`,
    );
  }
  const own = await bundle(undefined, tenant.apiKey);
  t.equal(own.status, 200, 'the bundle of the version the runtime runs still answers (it is not withdrawn)');
});

t.test("a deprecated version's bundle: refused for a tenant key unless the runtime runs it", async (t) => {
  await availability('1.5.0', 'deprecated');
  await availability('1.4.1', 'deprecated');
  t.teardown(async () => {
    await availability('1.5.0', 'available');
    await availability('1.4.1', 'available');
  });
  const tenantAsks = await bundle('1.5.0', tenant.apiKey);
  t.equal(tenantAsks.status, 422, 'a tenant key cannot have a deprecated version it does not run');
  t.match(tenantAsks.body, { error: { code: 'RUNTIME_VERSION_UNAVAILABLE', field: 'version' } }, 'naming the field');
  const operatorAsks = await bundle('1.5.0', api.operatorKey);
  t.equal(operatorAsks.status, 200, 'an operator key can (as it can upgrade to it)');
  const runs = await bundle(undefined, tenant.apiKey);
  t.equal(runs.status, 200, 'the deprecated version the runtime runs still answers for a tenant key');
});
