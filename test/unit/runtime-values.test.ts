/**
 * The values the runtime passes to the Argo charts and the plans' resource budgets, without a
 * chart: the security contexts that make the charts' pods pass Pod Security `restricted`, the
 * provisioner's grant the vcluster chart's Role needs, and every plan's runtime against its quota.
 * test/unit/chart-conformance.test.ts checks the same against the rendered charts.
 */
import t from 'tap';
import { PROVISIONER_TENANT_RULES } from '../../infra/provisioner-rbac.ts';
import { RUNTIME_AGENTS } from '../../runtime/component/agents.ts';
import { ARGO_RELEASES, argoReleaseValues, mergeValues } from '../../runtime/component/argo-releases.ts';
import { budgetProblems, budgetTable, planBudget, totals } from '../../runtime/render/budget.ts';
import { bytes, milliCpu } from '../../runtime/render/quantity.ts';
import { PLANS, PLAN_NAMES } from '../../tenants/plans.ts';
import { grantedByRules, ROOT_CLUSTER_PERMISSIONS, type PolicyRule } from '../../tenants/root-permissions.ts';
import { readFileSync } from 'node:fs';

const values = (chart: string): Record<string, unknown> => ARGO_RELEASES.find((r) => r.chart === chart)!.values;
const RUNTIME_DEFAULT = { type: 'RuntimeDefault' };

void t.test("Argo Workflows' controller and server run with the runtime's seccomp profile, non-root", async (t) => {
  const v = values('argo-workflows');
  for (const component of ['controller', 'server'] as const) {
    const c = v[component] as {
      podSecurityContext: Record<string, unknown>;
      securityContext: Record<string, unknown>;
    };
    t.same(c.podSecurityContext.seccompProfile, RUNTIME_DEFAULT, `${component}.podSecurityContext.seccompProfile`);
    t.same(c.securityContext.seccompProfile, RUNTIME_DEFAULT, `${component}.securityContext.seccompProfile`);
    t.equal(c.securityContext.allowPrivilegeEscalation, false, `${component}.securityContext.allowPrivilegeEscalation`);
    t.same(c.securityContext.capabilities, { drop: ['ALL'] }, `${component}.securityContext.capabilities`);
    t.equal(c.securityContext.runAsNonRoot, true, `${component}.securityContext.runAsNonRoot`);
  }
});

void t.test("Argo Events' controller gets a restricted security context (the chart sets none)", async (t) => {
  const v = values('argo-events') as unknown as {
    global: { securityContext: Record<string, unknown> };
    controller: never;
  };
  t.match(
    v.global.securityContext,
    { runAsNonRoot: true, runAsUser: Number, seccompProfile: RUNTIME_DEFAULT },
    'global.securityContext (every Argo Events pod): non-root with a numeric user and the runtime seccomp profile',
  );
  t.same(
    (v.controller as { containerSecurityContext: unknown }).containerSecurityContext,
    {
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
      runAsNonRoot: true,
      seccompProfile: RUNTIME_DEFAULT,
    },
    'controller.containerSecurityContext',
  );
});

void t.test("the provisioner's tenant grants hold what the vcluster chart's Role grants its syncer", async (t) => {
  const rules = PROVISIONER_TENANT_RULES as PolicyRule[];
  for (const verb of ['patch', 'update'] as const) {
    const p = { verb, group: '', resource: 'pods/ephemeralcontainers', scope: 'bound' as const, why: '' };
    t.ok(grantedByRules(rules, p), `${verb} pods/ephemeralcontainers is granted in tenant namespaces`);
    t.ok(
      ROOT_CLUSTER_PERMISSIONS.some((x) => x.verb === verb && x.resource === 'pods/ephemeralcontainers'),
      `${verb} pods/ephemeralcontainers is among the permissions a root cluster's kubeconfig is checked for`,
    );
  }
});

void t.test("argoReleaseValues adds the plan's resources and leaves the shared values alone", async (t) => {
  const before = JSON.stringify(ARGO_RELEASES);
  for (const name of PLAN_NAMES) {
    const plan = PLANS[name]!;
    const wf = argoReleaseValues(
      ARGO_RELEASES.find((r) => r.chart === 'argo-workflows')!,
      plan.runtime,
    ) as never as {
      controller: { resources: unknown; securityContext: { seccompProfile: unknown } };
    };
    t.same(wf.controller.resources, plan.runtime.argoWorkflows.controller, `plan ${name}: controller.resources`);
    t.same(wf.controller.securityContext.seccompProfile, RUNTIME_DEFAULT, 'the security context is kept');
  }
  t.equal(JSON.stringify(ARGO_RELEASES), before, 'ARGO_RELEASES is not changed by building values');
  t.same(mergeValues({ a: { b: 1, c: [1] } }, { a: { c: [2], d: 3 } }), { a: { b: 1, c: [2], d: 3 } }, 'deep merge');
});

for (const name of PLAN_NAMES) {
  void t.test(`plan ${name}: the runtime's requests and limits fit the quota with the stated headroom`, async (t) => {
    const plan = PLANS[name]!;
    const lines = planBudget(plan);
    t.same(budgetProblems(plan, totals(lines)), [], 'no quota field is short of the headroom');
    for (const l of lines) {
      const { requests, limits } = l.resources;
      t.ok(
        milliCpu(requests.cpu) <= milliCpu(limits.cpu),
        `${l.container}: cpu request ${requests.cpu} <= limit ${limits.cpu}`,
      );
      t.ok(bytes(requests.memory) <= bytes(limits.memory), `${l.container}: memory request <= limit`);
      t.ok(
        milliCpu(limits.cpu) <= milliCpu(plan.container.max.cpu) &&
          bytes(limits.memory) <= bytes(plan.container.max.memory),
        `${l.container}: limits ${limits.cpu}/${limits.memory} within the LimitRange max ${plan.container.max.cpu}/${plan.container.max.memory}`,
      );
    }
    t.same(
      lines.filter((l) => l.release === 'agents').map((l) => l.container.split('/')[0]),
      RUNTIME_AGENTS.map((a) => a.name),
      'every agent of any runtime version is budgeted',
    );
  });
}

void t.test('a free tenant requests at most 1 vCPU and 2 GiB in all', async (t) => {
  const free = totals(planBudget(PLANS.free!));
  t.ok(free.requestsCpu <= 1000, `free plan's runtime requests ${free.requestsCpu}m CPU, at most 1000m`);
  t.ok(free.requestsMemory <= 2 * 2 ** 30, `free plan's runtime requests ${free.requestsMemory} bytes, at most 2 GiB`);
});

void t.test('a runtime larger than its quota is named per quota field', async (t) => {
  const plan = PLANS.free!;
  const problems = budgetProblems(plan, { ...totals(planBudget(plan)), limitsCpu: 7000 });
  t.equal(problems.length, 1, 'only limits.cpu is short');
  t.match(problems[0], /plan free: the runtime's limits\.cpu \(7\) leaves 1\.5 of the quota's 8\.5, less than the 3/);
});

void t.test("docs/operations.md's per-plan table is the plans' budget table", async (t) => {
  const doc = readFileSync(new URL('../../docs/operations.md', import.meta.url), 'utf8');
  t.ok(
    doc.includes(budgetTable(PLAN_NAMES.map((n) => PLANS[n]!))),
    'docs/operations.md contains budgetTable(every plan) verbatim (regenerate it when a plan changes)',
  );
});
