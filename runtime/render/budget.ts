/**
 * What a plan's runtime reserves in the tenant namespace: every container the vcluster, the Argo
 * releases and the agents run, with its replicas, from the plan's resource budgets
 * (tenants/plans.ts), and the sums against the plan's ResourceQuota. docs/operations.md's
 * per-plan table is `budgetTable()`'s output; the conformance check (test/unit/chart-conformance)
 * compares these sums with what the charts actually render.
 */
import { agentsAt, RUNTIME_AGENTS } from '../component/agents.ts';
import type { ContainerResources } from '../component/resources.ts';
import type { Plan } from '../../tenants/plans.ts';
import { bytes, formatCpu, formatMemory, milliCpu } from './quantity.ts';

export interface BudgetLine {
  /** Release (`vcluster`, `argo-cd`, …) or `agents`. */
  release: string;
  /** Workload and container, e.g. `argocd-repo-server/repo-server`. */
  container: string;
  replicas: number;
  resources: ContainerResources;
  /** Runs only during an install or upgrade (a Helm hook Job), not alongside the rest. */
  transient?: boolean;
}

export interface Totals {
  /** Millicores. */
  requestsCpu: number;
  /** Bytes. */
  requestsMemory: number;
  limitsCpu: number;
  limitsMemory: number;
  pods: number;
}

/**
 * Every long-running container of a tenant's runtime on `plan`, and the install-time Job: of a
 * runtime at `version` (its agents, agentsAt), or without one of the largest any version installs
 * (every agent: what the plan's quota must hold).
 */
export function planBudget(plan: Plan, version?: string): BudgetLine[] {
  const r = plan.runtime;
  const line = (release: string, container: string, resources: ContainerResources, replicas = 1): BudgetLine => ({
    release,
    container,
    replicas,
    resources,
  });
  return [
    line('vcluster', 'vcluster/syncer', { requests: plan.controlPlane.requests, limits: plan.controlPlane.limits }),
    line('vcluster', 'coredns/coredns (inside the vcluster)', plan.coreDns),
    line('argo-cd', 'argocd-application-controller/application-controller', r.argoCd.applicationController),
    line('argo-cd', 'argocd-repo-server/repo-server', r.argoCd.repoServer),
    line('argo-cd', 'argocd-server/server', r.argoCd.server),
    line('argo-cd', 'argocd-redis/redis', r.argoCd.redis),
    line('argo-cd', 'argocd-applicationset-controller/applicationset-controller', r.argoCd.applicationSet),
    line('argo-cd', 'argocd-notifications-controller/notifications-controller', r.argoCd.notifications),
    {
      ...line('argo-cd', 'argocd-redis-secret-init/secret-init (hook Job)', r.argoCd.redisSecretInit),
      transient: true,
    },
    line('argo-workflows', 'argo-workflows-workflow-controller/controller', r.argoWorkflows.controller),
    line('argo-workflows', 'argo-workflows-server/argo-server', r.argoWorkflows.server),
    line('argo-rollouts', 'argo-rollouts/argo-rollouts', r.argoRollouts.controller, r.argoRollouts.replicas),
    line('argo-events', 'argo-events-controller-manager/controller-manager', r.argoEvents.controller),
    ...(version === undefined ? RUNTIME_AGENTS : agentsAt(version)).map((a) =>
      line('agents', `${a.name}/${a.name}`, r.agents[a.name], a.replicas),
    ),
  ];
}

/** Sums over lines (replicas counted); transient lines are included unless `steadyOnly`. */
export function totals(lines: readonly BudgetLine[], steadyOnly = false): Totals {
  const t: Totals = { requestsCpu: 0, requestsMemory: 0, limitsCpu: 0, limitsMemory: 0, pods: 0 };
  for (const l of lines) {
    if (steadyOnly && l.transient) continue;
    t.requestsCpu += l.replicas * milliCpu(l.resources.requests.cpu);
    t.requestsMemory += l.replicas * bytes(l.resources.requests.memory);
    t.limitsCpu += l.replicas * milliCpu(l.resources.limits.cpu);
    t.limitsMemory += l.replicas * bytes(l.resources.limits.memory);
    t.pods += l.replicas;
  }
  return t;
}

/** The plan's ResourceQuota as totals. */
export function quotaTotals(plan: Plan): Totals {
  return {
    requestsCpu: milliCpu(plan.quota.cpu),
    requestsMemory: bytes(plan.quota.memory),
    limitsCpu: milliCpu(plan.quota.limits.cpu),
    limitsMemory: bytes(plan.quota.limits.memory),
    pods: plan.quota.pods,
  };
}

/** The plan's stated headroom (what must stay free for the tenant's own pods) as totals. */
export function headroomTotals(plan: Plan): Totals {
  const h = plan.tenantHeadroom;
  return {
    requestsCpu: milliCpu(h.cpu),
    requestsMemory: bytes(h.memory),
    limitsCpu: milliCpu(h.limits.cpu),
    limitsMemory: bytes(h.limits.memory),
    pods: h.pods,
  };
}

export const TOTAL_FIELDS: readonly { key: keyof Totals; quota: string; format: (n: number) => string }[] = [
  { key: 'requestsCpu', quota: 'requests.cpu', format: formatCpu },
  { key: 'requestsMemory', quota: 'requests.memory', format: formatMemory },
  { key: 'limitsCpu', quota: 'limits.cpu', format: formatCpu },
  { key: 'limitsMemory', quota: 'limits.memory', format: formatMemory },
  { key: 'pods', quota: 'pods', format: String },
];

/**
 * Where the runtime (transient Job included) does not leave the plan's headroom under its quota:
 * one sentence per quota field, empty when it fits.
 */
export function budgetProblems(plan: Plan, runtime: Totals): string[] {
  const quota = quotaTotals(plan);
  const headroom = headroomTotals(plan);
  return TOTAL_FIELDS.filter((f) => runtime[f.key] + headroom[f.key] > quota[f.key]).map(
    (f) =>
      `plan ${plan.name}: the runtime's ${f.quota} (${f.format(runtime[f.key])}) leaves ` +
      `${f.format(quota[f.key] - runtime[f.key])} of the quota's ${f.format(quota[f.key])}, less than the ` +
      `${f.format(headroom[f.key])} the plan keeps for the tenant's own pods`,
  );
}

/** The per-plan table of docs/operations.md (Markdown). */
export function budgetTable(plans: readonly Plan[]): string {
  const rows: string[] = [
    `| container (per replica) | ${plans.map((p) => `${p.name}: requests / limits`).join(' | ')} |`,
    `| --- | ${plans.map(() => '---').join(' | ')} |`,
  ];
  const perPlan = plans.map((p) => planBudget(p));
  const first = perPlan[0] ?? [];
  first.forEach((l, i) => {
    const cells = perPlan.map((lines) => {
      const x = lines[i]!;
      const n = x.replicas > 1 ? ` ×${x.replicas}` : '';
      return `${x.resources.requests.cpu}, ${x.resources.requests.memory} / ${x.resources.limits.cpu}, ${x.resources.limits.memory}${n}`;
    });
    rows.push(`| ${l.release}: ${l.container} | ${cells.join(' | ')} |`);
  });
  const sums = perPlan.map((lines) => totals(lines));
  const quotas = plans.map(quotaTotals);
  const heads = plans.map(headroomTotals);
  const row = (label: string, f: (i: number) => string) =>
    rows.push(`| **${label}** | ${plans.map((_, i) => f(i)).join(' | ')} |`);
  row('runtime total (requests / limits, pods)', (i) => {
    const s = sums[i]!;
    return `${formatCpu(s.requestsCpu)}, ${formatMemory(s.requestsMemory)} / ${formatCpu(s.limitsCpu)}, ${formatMemory(s.limitsMemory)}, ${s.pods} pods`;
  });
  row('ResourceQuota', (i) => {
    const q = quotas[i]!;
    return `${formatCpu(q.requestsCpu)}, ${formatMemory(q.requestsMemory)} / ${formatCpu(q.limitsCpu)}, ${formatMemory(q.limitsMemory)}, ${q.pods} pods`;
  });
  row("left for the tenant's pods", (i) => {
    const s = sums[i]!;
    const q = quotas[i]!;
    return `${formatCpu(q.requestsCpu - s.requestsCpu)}, ${formatMemory(q.requestsMemory - s.requestsMemory)} / ${formatCpu(q.limitsCpu - s.limitsCpu)}, ${formatMemory(q.limitsMemory - s.limitsMemory)}, ${q.pods - s.pods} pods`;
  });
  row('stated headroom (at least)', (i) => {
    const h = heads[i]!;
    return `${formatCpu(h.requestsCpu)}, ${formatMemory(h.requestsMemory)} / ${formatCpu(h.limitsCpu)}, ${formatMemory(h.limitsMemory)}, ${h.pods} pods`;
  });
  return rows.join('\n');
}
