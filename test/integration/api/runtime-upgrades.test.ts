/**
 * Upgrading a hybrid runtime through the real app (real keys and rows in Postgres): the upgrade
 * bundle and its diff, the version change checked as a tenant's own (paths, stepping stones,
 * rollback to the version before only, availability), recorded with its audit row, idempotent,
 * refused for the hosted runtime, a runtime not installed, another tenant's or a removed one.
 */
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';
import { insertCluster } from '../../../provisioner/store/clusters.ts';
import type { AnswerOf, ApiResult, BodyOf, RouteKey } from '../../../provisioner/http/api-client.ts';
import { markReconciled } from '../../helpers/tenants.ts';
import { settleTenantOperations } from '../../helpers/operations.ts';
import { auditCount, auditRows } from '../../helpers/audit.ts';

const api = await createTestApi({ env: { PROVISIONER_PUBLIC_URL: 'https://cp.example.test' } });
t.teardown(() => api.close());

type ErrorAnswer = { error: { code: string; field?: string; message: string; details?: Record<string, unknown> } };
/** The client's answer, its body read as the route's answer or its error (the assertions read either). */
async function answer<K extends RouteKey>(res: Promise<ApiResult<K>>) {
  const r = await res;
  return { status: r.status, body: r.body as AnswerOf<K> & ErrorAnswer };
}

const tenant = await api.signup({ runtimeVersion: '1.4.1' });
const other = await api.signup();
const operator = api.as(api.operatorKey);
const getRuntime = (name: string, key = tenant.apiKey) =>
  answer(api.as(key).request('GET /v1/tenants/:id/runtimes/:name', { params: { id: tenant.tenantId, name } }));
const getBundle = (name: string, key = tenant.apiKey, query: { version?: string; from?: string } = {}) =>
  answer(
    api.as(key).request('GET /v1/tenants/:id/runtimes/:name/bundle', { params: { id: tenant.tenantId, name }, query }),
  );
const upgrade = (name: string, body: BodyOf<'POST /v1/tenants/:id/runtimes/:name/upgrade'>, key = tenant.apiKey) =>
  answer(
    api.as(key).request('POST /v1/tenants/:id/runtimes/:name/upgrade', { params: { id: tenant.tenantId, name }, body }),
  );
const availability = (version: string, value: 'available' | 'deprecated') =>
  answer(
    operator.request('PUT /v1/runtime-versions/:version/availability', {
      params: { version },
      body: { availability: value },
    }),
  );

/** Registers a runtime at `version` and, unless `install` is false, redeems its token as the bundle's Job would. */
async function hybrid(name: string, version: string, o: { install?: boolean; argo?: 'new' | 'existing' } = {}) {
  const reg = await answer(
    api.as(tenant.apiKey).request('POST /v1/tenants/:id/runtimes', {
      params: { id: tenant.tenantId },
      body: {
        name,
        mode: 'hybrid',
        access: 'tunnel',
        argo: o.argo ?? 'new',
        ...(o.argo === 'existing' ? { argoNamespace: 'argocd' } : {}),
        version,
      },
    }),
  );
  if (reg.status !== 201)
    throw new Error(`registration of ${name} answered ${reg.status}: ${JSON.stringify(reg.body)}`);
  if (o.install !== false) {
    const res = await api.as(reg.body.bootstrapToken).request('POST /v1/runtimes/bootstrap', { body: {} });
    if (res.status !== 200) throw new Error(`bootstrap of ${name} answered ${res.status}`);
  }
  return reg.body;
}

t.test('the bundle of the version a runtime runs, and of another, with what changes', async (t) => {
  await hybrid('plant-a', '1.4.1');
  const same = await getBundle('plant-a');
  t.equal(same.status, 200, `GET …/bundle answers 200 (got ${JSON.stringify(same.body).slice(0, 300)})`);
  t.equal(same.body.from, '1.4.1', 'never changed: from its own version');
  t.equal(same.body.to, '1.4.1');
  t.same(same.body.changes, { objects: [], charts: [] }, 'no changes against itself');
  t.notOk(same.body.install.manifests.includes('hrth_'), 'no bootstrap token in a bundle fetched later');
  t.notOk(/kind: Job/.test(same.body.install.manifests), 'no bootstrap Job in it');

  const next = await getBundle('plant-a', tenant.apiKey, { version: '1.5.0' });
  t.equal(next.status, 200);
  t.equal(next.body.from, '1.4.1', 'compared with the version it runs');
  t.ok(
    next.body.changes.objects.some((o) => o.kind === 'Deployment' && o.name === 'app-proxy' && o.change === 'changed'),
    'the app-proxy Deployment changes',
  );
  t.match(next.body.diff, /app-proxy:1\.5\.0/, 'the diff shows the new app-proxy image');
  const runtime = await getRuntime('plant-a');
  t.equal(runtime.body.version, '1.4.1', 'fetching a bundle changes nothing');
  t.equal(runtime.body.previousVersion, null, 'never changed: no version before');
  const hosted = await getRuntime('hosted');
  t.equal(hosted.body.versionChangedAt, null, "the hosted runtime's versions are its tenant's");

  const unknown = await getBundle('plant-a', tenant.apiKey, { version: '9.9.9' });
  t.equal(unknown.status, 400, 'a version not in the catalog is refused');
  t.equal(unknown.body.error.field, 'version', 'naming the field');
  const bad = await getBundle('plant-a', tenant.apiKey, { from: 'latest' });
  t.equal(bad.status, 400, 'a from that is not a version is refused');
});

t.test(
  'an upgrade along the catalog: recorded, audited, answered with the bundle; repeated, nothing changes',
  async (t) => {
    const res = await upgrade('plant-a', { version: '1.5.0' });
    t.equal(res.status, 200, `the upgrade answers 200 (got ${JSON.stringify(res.body).slice(0, 300)})`);
    t.equal(res.body.changed, true, 'changed');
    t.equal(res.body.runtime.version, '1.5.0', "the runtime's version is the asked one");
    t.equal(res.body.upgrade.from, '1.4.1');
    t.equal(res.body.upgrade.to, '1.5.0');
    t.match(
      res.body.upgrade.install.command,
      /kubectl apply -f hybrid-runtime-plant-a-1\.5\.0\.yaml/,
      'the command applies it',
    );
    t.equal(res.body.runtime.versionSkew, null, 'no skew shown before the agents report a version');
    t.equal(res.body.runtime.previousVersion, '1.4.1', 'the version before is shown');
    t.ok(
      res.body.runtime.versionChangedAt !== null && Date.now() - Date.parse(res.body.runtime.versionChangedAt) < 60_000,
      'with when the change was asked for',
    );

    const audit = await auditRows(api.db.pool, { action: 'runtime.upgrade', targetId: res.body.runtime.id });
    t.same(
      audit.map((r) => [r.before, r.after]),
      [[{ version: '1.4.1' }, { version: '1.5.0', appliedBy: 'customer' }]],
      'one audit row with the versions before and after',
    );

    const again = await upgrade('plant-a', { version: '1.5.0' });
    t.equal(again.status, 200, 'the same version again answers 200');
    t.equal(again.body.changed, false, 'changed: false');
    t.equal(again.body.upgrade.from, '1.4.1', 'with the same bundle and diff as the change');
    t.equal(
      await auditCount(api.db.pool, { action: 'runtime.upgrade', targetId: res.body.runtime.id }),
      1,
      'and no second audit row',
    );

    const bundle = await getBundle('plant-a');
    t.equal(
      `${bundle.body.from} -> ${bundle.body.to}`,
      '1.4.1 -> 1.5.0',
      'GET …/bundle answers the last change by default',
    );
  },
);

t.test("the catalog's rules, as for a tenant's own upgrade", async (t) => {
  await hybrid('plant-b', '1.4.0');
  const jump = await upgrade('plant-b', { version: '1.6.0' });
  t.equal(jump.status, 422, 'jumping over the 1.5.0 stepping stone is refused');
  t.equal(jump.body.error.code, 'UPGRADE_PATH_REFUSED');
  t.same(jump.body.error.details?.path, ['1.5.0', '1.6.0'], 'naming the path to follow');

  // plant-a: 1.4.1 -> 1.5.0 above; 1.5.0 cannot be rolled back (Argo CD 3.0).
  const back = await upgrade('plant-a', { version: '1.4.1' });
  t.equal(back.status, 422, 'a rollback the catalog forbids is refused');
  t.match(back.body.error.message, /Argo CD 3\.0/, "with the catalog's reason");

  await hybrid('plant-c', '1.4.0');
  const up = await upgrade('plant-c', { version: '1.4.1' });
  t.equal(up.status, 200, '1.4.0 -> 1.4.1');
  const older = await upgrade('plant-c', { version: '1.3.0' });
  t.equal(older.status, 422, 'a rollback to a version it did not run before is refused');
  t.match(older.body.error.message, /only return to the version the runtime ran before \(1\.4\.0\)/);
  const rollback = await upgrade('plant-c', { version: '1.4.0' });
  t.equal(rollback.status, 200, 'back to the version before is allowed');
  t.equal(rollback.body.runtime.version, '1.4.0');

  const withdraw = await availability('1.4.1', 'deprecated');
  t.equal(withdraw.status, 200, 'an operator deprecates 1.4.1');
  const deprecated = await upgrade('plant-c', { version: '1.4.1' });
  t.equal(deprecated.status, 422, 'a tenant key cannot move to a deprecated version');
  t.equal(deprecated.body.error.code, 'RUNTIME_VERSION_UNAVAILABLE');
  const byOperator = await upgrade('plant-c', { version: '1.4.1' }, api.operatorKey);
  t.equal(byOperator.status, 200, 'an operator can');
  await availability('1.4.1', 'available');

  const unknown = await upgrade('plant-c', { version: '2.0.0' });
  t.equal(unknown.status, 400, 'a version not in the catalog is refused');
  t.equal(unknown.body.error.field, 'version');
});

t.test('refused: the hosted runtime, a runtime not installed, another tenant, a removed runtime', async (t) => {
  const hosted = await upgrade('hosted', { version: '1.5.0' });
  t.equal(hosted.status, 409, 'the hosted runtime is upgraded by the control plane');
  t.equal(hosted.body.error.code, 'HOSTED_RUNTIME_NO_BUNDLE');
  t.match(
    hosted.body.error.message,
    new RegExp(`POST /v1/tenants/${tenant.tenantId}/upgrade`),
    'naming the route that does',
  );
  const hostedBundle = await getBundle('hosted');
  t.equal(hostedBundle.body.error.code, 'HOSTED_RUNTIME_NO_BUNDLE', 'nor has it a bundle');

  await hybrid('plant-d', '1.4.0', { install: false });
  const pending = await upgrade('plant-d', { version: '1.4.1' });
  t.equal(pending.status, 409, 'a runtime whose install was not applied is not upgraded');
  t.equal(pending.body.error.code, 'RUNTIME_NOT_INSTALLED');

  const foreign = await upgrade('plant-a', { version: '1.6.0' }, other.apiKey);
  t.equal(foreign.status, 404, "another tenant's key finds no such tenant");
  const foreignBundle = await getBundle('plant-a', other.apiKey);
  t.equal(foreignBundle.status, 404, 'nor its bundle');

  const removed = await answer(
    api.as(tenant.apiKey).request('DELETE /v1/tenants/:id/runtimes/:name', {
      params: { id: tenant.tenantId, name: 'plant-d' },
    }),
  );
  t.equal(removed.status, 200, 'plant-d removed');
  const gone = await upgrade('plant-d', { version: '1.4.1' });
  t.equal(gone.status, 404, 'a removed runtime is not found');
  t.equal(gone.body.error.code, 'RUNTIME_NOT_FOUND');

  // A field the route's types refuse: the raw request.
  const extra = await api.request('POST', `/v1/tenants/${tenant.tenantId}/runtimes/plant-a/upgrade`, {
    key: tenant.apiKey,
    body: { version: '1.6.0', force: true },
  });
  t.equal(extra.statusCode, 400, 'an unknown field is refused');
});

t.test('a fleet upgrade of the tenant lists its hybrid runtimes as needing their customer', async (t) => {
  // The tenant made to look provisioned on a root cluster at 1.4.1, so that a fleet upgrade takes it.
  await insertCluster(api.db.pool, {
    name: 'upgrade-root',
    region: 'eu-1',
    labels: {},
    capacity: 10,
    plans: [],
    kubeconfigEnc: api.services.box.encrypt('x', 'cluster/upgrade-root'),
  });
  await markReconciled(api.db.pool, tenant.tenantId, { cluster: 'upgrade-root', readyCondition: true });
  await settleTenantOperations(api.db.pool, tenant.tenantId, { finishedNow: false });
  const start = await answer(
    operator.request('POST /v1/fleet-upgrades', {
      body: { targetVersion: '1.5.0', selector: { tenantIds: [tenant.tenantId] } },
    }),
  );
  t.equal(start.status, 201, `the fleet upgrade starts (got ${JSON.stringify(start.body).slice(0, 300)})`);
  if (!('fleetUpgrade' in start.body)) throw new Error('the start answered a plan only');
  const fleet = await operator.call('GET /v1/fleet-upgrades/:id', { params: { id: start.body.fleetUpgrade.id } });
  const actions = Object.fromEntries((fleet.customerActionNeeded ?? []).map((a) => [a.runtime, a]));
  t.same(
    Object.keys(actions).sort(),
    ['plant-a', 'plant-b', 'plant-c'],
    'every hybrid runtime not removed, none other',
  );
  t.equal(actions['plant-a']?.action, 'apply', 'plant-a was asked for 1.5.0: its customer applies the bundle');
  t.match(actions['plant-a']?.message, /have not reported a version/, 'and its agents report none yet');
  t.equal(actions['plant-b']?.action, 'upgrade', 'plant-b (1.4.0) is still to be asked');
  t.match(
    actions['plant-b']?.message,
    new RegExp(`provisioner runtimes upgrade ${tenant.tenantId} plant-b --runtime-version 1\\.5\\.0`),
    'with the command that asks',
  );
  t.equal(
    fleet.tenants?.some((x) => x.tenantId === tenant.tenantId),
    true,
    'the tenant itself (its hosted runtime) is in the fleet upgrade',
  );
  const list = await operator.call('GET /v1/fleet-upgrades');
  t.equal(list.items[0]?.customerActionNeeded, undefined, 'the list leaves them out, as it leaves out tenants');
});
