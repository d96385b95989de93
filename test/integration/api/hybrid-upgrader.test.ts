/**
 * The control plane's side of the in-cluster upgrader (upgrades: agent), through the real app and
 * Postgres: an upgrade the upgrader may apply is left to it (appliedBy agent, phase pending); its
 * runtime key pulls the plan and reports the phases, each audited; a rolled-back upgrade restores
 * the version before; reports about an upgrade no longer asked are refused; a version change waits
 * while it applies; an upgrade with Argo charts is the customer's, with the reason; keys of other
 * runtimes and roles are refused. The phases go in order (over real HTTP on loopback): a report
 * out of order is refused with the phase and the ones allowed next, and each phase is audited.
 * The upgrader itself, on a real cluster: test/e2e/hybrid-upgrader.test.ts, and its refusal of a
 * plan that changes more than an upgrade: test/integration/runtime/hybrid-upgrader-plan.test.ts.
 */
import t from 'tap';
import type { AddressInfo } from 'node:net';
import { createTestApi } from '../../helpers/api.ts';
import { auditRows } from '../../helpers/audit.ts';
import type { AnswerOf, ApiResult, RouteKey } from '../../../provisioner/http/api-client.ts';
import type { Runtime } from '../../../provisioner/api/types.ts';
import type { UpgraderAssignment } from '../../../runtime/protocol/upgrade.ts';

const api = await createTestApi({ env: { PROVISIONER_PUBLIC_URL: 'https://cp.example.test' } });
t.teardown(() => api.close());

type ErrorAnswer = { error: { code: string; field?: string; message: string } };
/** The upgrader's own routes (outside the route map): the raw request, its body read as either answer. */
async function call<T>(method: 'GET' | 'POST', url: string, key: string | null, body?: unknown) {
  const res = await api.request(method, url, { key, ...(body !== undefined ? { body } : {}) });
  return { status: res.statusCode, body: res.json<T & ErrorAnswer>() };
}
/** The client's answer, its body read as the route's answer or its error (the assertions read either). */
async function answer<K extends RouteKey>(res: Promise<ApiResult<K>>) {
  const r = await res;
  return { status: r.status, body: r.body as AnswerOf<K> & ErrorAnswer };
}

const tenant = await api.signup();
const client = api.as(tenant.apiKey);

/** Registers an installed runtime; answers its runtime key. */
async function hybrid(
  name: string,
  o: { upgrades: 'agent' | 'customer'; argo?: 'new' | 'existing'; version?: string },
) {
  const reg = await answer(
    client.request('POST /v1/tenants/:id/runtimes', {
      params: { id: tenant.tenantId },
      body: {
        name,
        mode: 'hybrid',
        access: 'tunnel',
        argo: o.argo ?? 'existing',
        ...((o.argo ?? 'existing') === 'existing' ? { argoNamespace: 'argocd' } : {}),
        upgrades: o.upgrades,
        version: o.version ?? '1.4.1',
      },
    }),
  );
  if (reg.status !== 201) throw new Error(`registration answered ${reg.status}: ${JSON.stringify(reg.body)}`);
  const res = await api.as(reg.body.bootstrapToken).request('POST /v1/runtimes/bootstrap', { body: {} });
  if (res.status !== 200 || !res.ok) throw new Error(`bootstrap answered ${res.status}`);
  return { registered: reg.body, key: res.body.runtimeToken };
}

const upgrade = (name: string, version: string) =>
  answer(
    client.request('POST /v1/tenants/:id/runtimes/:name/upgrade', {
      params: { id: tenant.tenantId, name },
      body: { version },
    }),
  );
const runtime = (name: string) =>
  client.call('GET /v1/tenants/:id/runtimes/:name', { params: { id: tenant.tenantId, name } });
const pull = (key: string) => call<UpgraderAssignment>('GET', '/v1/runtime/upgrade', key);
const report = (key: string, to: string, phase: string, message?: string) =>
  call<{ runtime: Runtime }>('POST', '/v1/runtime/upgrade', key, { to, phase, ...(message ? { message } : {}) });
const audits = async (runtimeId: string) => auditRows(api.db.pool, { targetId: runtimeId });

t.test('opted in: the upgrader gets the upgrade, pulls its plan, and reports it through to success', async (t) => {
  const { registered, key } = await hybrid('plant-a', { upgrades: 'agent' });
  t.match(registered.install.manifests, /name: runtime-upgrader/, 'the install bundle has the upgrader');
  const idle = await pull(key);
  t.equal(idle.status, 200);
  t.same(idle.body, { version: '1.4.1', upgrade: null }, 'nothing to do before an upgrade is asked');

  const asked = await upgrade('plant-a', '1.5.0');
  t.equal(asked.status, 200, JSON.stringify(asked.body).slice(0, 300));
  t.equal(asked.body.appliedBy, 'agent', 'the upgrader applies it');
  t.equal(asked.body.customerActionReason, null);
  t.match(asked.body.runtime.upgrade, { from: '1.4.1', to: '1.5.0', phase: 'pending' });
  t.match(
    asked.body.runtime.conditions.find((c) => c.type === 'Upgraded'),
    { status: 'False', reason: 'Pending' },
    'Upgraded False, Pending',
  );

  const plan = await pull(key);
  t.equal(plan.body.version, '1.5.0');
  t.equal(plan.body.upgrade?.phase, 'pending');
  const applied = plan.body.upgrade?.apply ?? [];
  t.same(
    applied.map((o) => `${o.kind} ${o.metadata.name}`).sort(),
    asked.body.upgrade.changes.objects.map((c) => `${c.kind} ${c.name}`).sort(),
    'the plan applies the objects the upgrade changes',
  );
  t.equal(plan.body.upgrade?.rollback.length, applied.length, 'and can roll each back');
  t.match(JSON.stringify(applied), /app-proxy:1\.5\.0/, 'at the new version');
  t.match(JSON.stringify(plan.body.upgrade?.rollback), /app-proxy:1\.4\.1/, 'the rollback at the version before');

  t.equal((await report(key, '1.5.0', 'applying', 'applying 6 objects')).status, 200, 'applying');
  t.equal((await pull(key)).body.upgrade?.phase, 'applying', 'the plan is still answered while applying');
  const busy = await upgrade('plant-a', '1.6.0');
  t.equal(busy.status, 409, 'no other version while the upgrader applies');
  t.equal(busy.body.error.code, 'RUNTIME_UPGRADE_IN_PROGRESS');
  const done = await report(key, '1.5.0', 'succeeded', 'runs 1.5.0');
  t.equal(done.status, 200);
  t.match(done.body.runtime.upgrade, { phase: 'succeeded', message: 'runs 1.5.0' });
  t.same((await pull(key)).body, { version: '1.5.0', upgrade: null }, 'nothing more to do');
  const r = await runtime('plant-a');
  t.equal(r.version, '1.5.0');
  t.match(
    r.conditions.find((c) => c.type === 'Upgraded'),
    { status: 'True', reason: 'Succeeded' },
  );

  const late = await report(key, '1.5.0', 'rolled-back', 'too late');
  t.equal(late.status, 409, 'a report about an ended upgrade is refused');
  t.equal(late.body.error.code, 'UPGRADE_SUPERSEDED');
  t.match(late.body.error.message, /already ended \(succeeded\)/);
  t.same(
    (await audits(registered.runtime.id))
      .filter((a) => a.action.startsWith('runtime.upgrade'))
      .map((a) => [a.action, a.actorRole]),
    [
      ['runtime.upgrade', 'tenant'],
      ['runtime.upgrade.applying', 'runtime'],
      ['runtime.upgrade.succeeded', 'runtime'],
    ],
    'the request and each phase are audited, the phases with the runtime key as actor',
  );
});

t.test('a rolled-back upgrade restores the version before; a failed one stays failed', async (t) => {
  const { key } = await hybrid('plant-b', { upgrades: 'agent' });
  await upgrade('plant-b', '1.5.0');
  await report(key, '1.5.0', 'applying');
  const back = await report(key, '1.5.0', 'rolled-back', 'Deployment app-proxy did not roll out: FailedCreate');
  t.equal(back.status, 200);
  t.equal(back.body.runtime.version, '1.4.1', 'the runtime is to run the version before again');
  t.equal(back.body.runtime.previousVersion, null, 'and the one before that is restored too (none)');
  t.match(back.body.runtime.upgrade, { from: '1.4.1', to: '1.5.0', phase: 'rolled-back' });
  t.match(
    back.body.runtime.conditions.find((c) => c.type === 'Upgraded'),
    { status: 'False', reason: 'RolledBack', message: /put 1\.4\.1 back: Deployment app-proxy did not roll out/ },
  );
  const again = await upgrade('plant-b', '1.5.0');
  t.equal(again.status, 200, 'the same upgrade may be asked again');
  t.equal(again.body.changed, true);
  t.equal(again.body.runtime.upgrade?.phase, 'pending');
  const failed = await report(key, '1.5.0', 'failed', 'the rollback failed too');
  t.equal(failed.status, 200, 'a pending upgrade may end failed (the plan was refused unapplied)');
  t.equal(failed.body.runtime.version, '1.5.0', 'failed: the version stays the one asked');
  t.match(
    failed.body.runtime.conditions.find((c) => c.type === 'Upgraded'),
    { reason: 'Failed' },
  );
});

t.test('a pending upgrade is replaced by another version change; reports about it are refused', async (t) => {
  const { key } = await hybrid('plant-c', { upgrades: 'agent', version: '1.4.0' });
  await upgrade('plant-c', '1.4.1');
  const back = await upgrade('plant-c', '1.4.0');
  t.equal(
    back.status,
    200,
    `a rollback to the version before while pending: ${JSON.stringify(back.body).slice(0, 300)}`,
  );
  t.equal(back.body.appliedBy, 'agent');
  t.match(back.body.runtime.upgrade, { from: '1.4.1', to: '1.4.0', phase: 'pending' });
  const stale = await report(key, '1.4.1', 'applying');
  t.equal(stale.status, 409);
  t.equal(stale.body.error.code, 'UPGRADE_SUPERSEDED');
  t.match(stale.body.error.message, /not the one asked now \(1\.4\.0, pending\)/);
  const bad = await call('POST', '/v1/runtime/upgrade', key, { to: '1.4.0', phase: 'pending' });
  t.equal(bad.status, 400, 'the upgrader cannot report pending');
  t.equal(bad.body.error.field, 'phase');
});

t.test('an upgrade the upgrader may not apply is the customer’s, with the reason', async (t) => {
  const { key } = await hybrid('plant-d', { upgrades: 'agent', argo: 'new' });
  const asked = await upgrade('plant-d', '1.5.0');
  t.equal(asked.status, 200);
  t.equal(asked.body.appliedBy, 'customer', 'argo=new: the Argo charts change');
  t.match(asked.body.customerActionReason, /Argo charts argocd/);
  t.equal(asked.body.runtime.upgrade, null, 'nothing for the upgrader');
  t.same((await pull(key)).body, { version: '1.5.0', upgrade: null }, 'its pull finds nothing to apply');
  const audit = (await audits(asked.body.runtime.id)).find((a) => a.action === 'runtime.upgrade');
  t.match(audit?.after, { appliedBy: 'customer', customerActionReason: /Argo charts/ }, 'audited with the reason');
});

t.test('only the key of an opted-in hybrid runtime may pull or report', async (t) => {
  const { key } = await hybrid('plant-e', { upgrades: 'customer' });
  const refused = await pull(key);
  t.equal(refused.status, 403);
  t.equal(refused.body.error.code, 'UPGRADER_NOT_OPTED_IN');
  t.match(refused.body.error.message, /did not opt in .*upgrades: customer/);
  const asked = await upgrade('plant-e', '1.5.0');
  t.equal(asked.body.appliedBy, 'customer', 'upgrades: customer: the customer applies');
  t.equal(asked.body.customerActionReason, null, 'which needs no reason');
  const tenantKey = await pull(tenant.apiKey);
  t.equal(tenantKey.status, 403, 'a tenant key may not');
  const operator = await call('POST', '/v1/runtime/upgrade', api.operatorKey, { to: '1.5.0', phase: 'succeeded' });
  t.equal(operator.status, 403, 'nor an operator key');
  const admin = await pull(api.adminKey);
  t.equal(admin.status, 403, 'an admin key has no runtime');
  t.equal(admin.body.error.code, 'UPGRADER_NOT_OPTED_IN');
});

t.test(
  'the phases go in order over real HTTP: succeeded straight from pending is refused; each phase is audited',
  async (t) => {
    await api.app.listen({ port: 0, host: '127.0.0.1' });
    const url = `http://127.0.0.1:${(api.app.server.address() as AddressInfo).port}/v1/runtime/upgrade`;
    const post = async (key: string, body: unknown) => {
      const res = await fetch(url, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      return {
        status: res.status,
        body: (await res.json()) as { runtime: Runtime } & ErrorAnswer & { error: { details?: unknown } },
      };
    };
    const { registered, key } = await hybrid('plant-f', { upgrades: 'agent' });
    t.equal((await upgrade('plant-f', '1.5.0')).body.runtime.upgrade?.phase, 'pending', 'the upgrade is pending');

    for (const phase of ['succeeded', 'rolled-back']) {
      const early = await post(key, { to: '1.5.0', phase, message: 'runs 1.5.0' });
      t.equal(early.status, 409, `${phase} straight from pending is refused`);
      t.equal(early.body.error.code, 'UPGRADE_PHASE_OUT_OF_ORDER', `${phase}: the code says the order`);
      t.equal(early.body.error.field, 'phase', `${phase}: the field named is phase`);
      t.match(
        early.body.error.message,
        new RegExp(`the upgrade to 1\\.5\\.0 is pending: its next report is applying or failed, not ${phase}`),
        `${phase}: the message names the current phase and the ones allowed next`,
      );
      t.same(
        early.body.error.details,
        { phase: 'pending', allowed: ['applying', 'failed'] },
        `${phase}: details say the same`,
      );
    }
    t.match((await runtime('plant-f')).upgrade, { phase: 'pending', message: null }, 'nothing was recorded');

    t.equal((await post(key, { to: '1.5.0', phase: 'applying' })).status, 200, 'applying');
    const again = await post(key, { to: '1.5.0', phase: 'applying' });
    t.equal(again.status, 200, 'a repeated applying (a retried report) is answered');
    t.equal(again.body.runtime.upgrade?.phase, 'applying', 'and changes nothing');
    t.equal((await post(key, { to: '1.5.0', phase: 'succeeded', message: 'runs 1.5.0' })).status, 200, 'succeeded');

    const rows = (await audits(registered.runtime.id)).filter((a) => a.action.startsWith('runtime.upgrade'));
    t.same(
      rows.map((a) => [a.action, a.actorRole, (a.after as { phase?: string }).phase]),
      [
        ['runtime.upgrade', 'tenant', undefined],
        ['runtime.upgrade.applying', 'runtime', 'applying'],
        ['runtime.upgrade.succeeded', 'runtime', 'succeeded'],
      ],
      'one audit row per phase, with the runtime key as actor; none for the refused reports or the repeat',
    );
  },
);
