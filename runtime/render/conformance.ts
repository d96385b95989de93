/**
 * The conformance of a rendered runtime (render.ts) with what a real cluster admits, without a
 * cluster:
 *  - Pod Security: every pod template of every release and agent, evaluated at `restricted:latest`
 *    by the upstream evaluator (the `pod-security` chart tool);
 *  - RBAC: every object a root-cluster release creates in the tenant namespace, and every rule of
 *    its Roles, against the provisioner's grants from infra/ (RBAC refuses a Role that grants what
 *    its creator does not hold; no `escalate`);
 *  - resources: explicit requests and limits on every container (init containers included), and
 *    the sums, with each pod's replicas, equal to the plan's budget table and leaving the plan's
 *    headroom under its ResourceQuota.
 * Each problem is one line naming runtime version, plan, release, object and field.
 */
import { PROVISIONER_TENANT_RULES } from '../../infra/provisioner-rbac.ts';
import type { PolicyRule } from '../../tenants/root-permissions.ts';
import { budgetProblems, planBudget, TOTAL_FIELDS, totals, type Totals } from './budget.ts';
import { bytes, milliCpu } from './quantity.ts';
import { planNamed, run, type KubeObject, type RenderedRuntime } from './render.ts';

interface Container {
  name: string;
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
}
interface PodSpec {
  containers?: Container[];
  initContainers?: Container[];
}

/** A pod template of an object, where it sits, and how many pods of it run. */
interface PodTemplate {
  spec: PodSpec;
  path: string;
  replicas: number;
}

const WORKLOADS = new Set(['Deployment', 'StatefulSet', 'ReplicaSet', 'DaemonSet', 'Job', 'CronJob', 'Pod']);

function podTemplate(o: KubeObject): PodTemplate | undefined {
  const spec = o.spec as Record<string, unknown> | undefined;
  if (!spec || !WORKLOADS.has(o.kind)) return undefined;
  switch (o.kind) {
    case 'Pod':
      return { spec: spec, path: 'spec', replicas: 1 };
    case 'CronJob': {
      const job = (spec.jobTemplate as { spec?: { template?: { spec?: PodSpec } } } | undefined)?.spec;
      return { spec: job?.template?.spec ?? {}, path: 'spec.jobTemplate.spec.template.spec', replicas: 1 };
    }
    case 'Job':
      return {
        spec: (spec.template as { spec?: PodSpec } | undefined)?.spec ?? {},
        path: 'spec.template.spec',
        replicas: typeof spec.parallelism === 'number' ? spec.parallelism : 1,
      };
    default:
      return {
        spec: (spec.template as { spec?: PodSpec } | undefined)?.spec ?? {},
        path: 'spec.template.spec',
        replicas: typeof spec.replicas === 'number' ? spec.replicas : 1,
      };
  }
}

const describe = (o: KubeObject) => `${o.kind} ${o.metadata.name}`;

/** Every object of a render with the release (or `root`, `agents`) it belongs to. */
function everyObject(r: RenderedRuntime): { release: string; object: KubeObject }[] {
  return [
    ...r.releases.flatMap((rel) => rel.objects.map((object) => ({ release: rel.release, object }))),
    ...r.root.map((object) => ({ release: 'root-cluster objects', object })),
    ...r.agents.map((object) => ({ release: 'agents', object })),
  ];
}

interface PodSecurityResult {
  index: number;
  kind: string;
  name: string;
  allowed: boolean;
  forbidden: { reason: string; detail?: string }[];
}

/** Pod Security `restricted:latest` for every pod template, by the upstream evaluator. */
export async function podSecurityProblems(r: RenderedRuntime, podSecurity: string): Promise<string[]> {
  const objects = everyObject(r).filter((x) => podTemplate(x.object));
  if (objects.length === 0) return [];
  const input = objects.map((x) => JSON.stringify(x.object)).join('\n---\n');
  const { code, stdout, stderr } = await run(podSecurity, ['-level', 'restricted', '-version', 'latest'], input);
  if (code !== 0) throw new Error(`pod-security failed (exit code ${code}): ${stderr.trim()}`);
  const results = JSON.parse(stdout) as PodSecurityResult[];
  const problems: string[] = [];
  for (const res of results) {
    if (res.allowed) continue;
    const x = objects[res.index]!;
    for (const f of res.forbidden) {
      problems.push(
        `${prefix(r, x.release)}: ${describe(x.object)}: Pod Security restricted refuses it: ${f.reason}${f.detail ? ` (${f.detail})` : ''}`,
      );
    }
  }
  return problems;
}

const prefix = (r: RenderedRuntime, release: string) => `runtime ${r.version}, plan ${r.plan}, release ${release}`;

const groupOf = (apiVersion: string) => (apiVersion.includes('/') ? apiVersion.split('/')[0]! : '');

/** The resource (plural, lower case) of a kind, for the kinds charts create. */
export function resourceOf(kind: string): string {
  const k = kind.toLowerCase();
  if (k === 'endpoints') return k;
  if (k.endsWith('y')) return `${k.slice(0, -1)}ies`;
  if (k.endsWith('s')) return `${k}es`;
  return `${k}s`;
}

const has = (list: readonly string[] | undefined, value: string) =>
  !!list && (list.includes('*') || list.includes(value));

/** Whether `grants` allow `verb` on group/resource (for the named objects, when given). */
export function granted(
  grants: readonly PolicyRule[],
  group: string,
  resource: string,
  verb: string,
  names: readonly string[] = [],
): boolean {
  return grants.some(
    (g) =>
      has(g.apiGroups, group) &&
      has(g.resources, resource) &&
      has(g.verbs, verb) &&
      (!g.resourceNames?.length || (names.length > 0 && names.every((n) => g.resourceNames!.includes(n)))),
  );
}

/**
 * What the provisioner could not do with `grants` (default: infra's tenant ClusterRole, bound in
 * each tenant namespace) when installing the root-cluster releases: create an object, or create a
 * Role with a rule it does not hold itself.
 */
export function rbacProblems(
  r: RenderedRuntime,
  grants: readonly PolicyRule[] = PROVISIONER_TENANT_RULES as PolicyRule[],
): string[] {
  const problems: string[] = [];
  for (const rel of r.releases.filter((x) => x.cluster === 'root')) {
    for (const o of rel.objects) {
      const group = groupOf(o.apiVersion);
      const resource = resourceOf(o.kind);
      if (
        o.kind.startsWith('Cluster') ||
        (o.metadata.namespace !== undefined && o.metadata.namespace !== r.namespace)
      ) {
        problems.push(
          `${prefix(r, rel.release)}: ${describe(o)}: outside the tenant namespace ${r.namespace}; the provisioner's grants cover only tenant namespaces`,
        );
        continue;
      }
      if (!granted(grants, group, resource, 'create')) {
        problems.push(
          `${prefix(r, rel.release)}: ${describe(o)}: the provisioner's grants (infra/provisioner-rbac.ts PROVISIONER_TENANT_RULES) do not allow create ${resource}${group ? `.${group}` : ''}`,
        );
      }
      if (o.kind !== 'Role') continue;
      ((o.rules as PolicyRule[] | undefined) ?? []).forEach((rule, i) => {
        const missing: string[] = [];
        for (const g of rule.apiGroups ?? [''])
          for (const res of rule.resources ?? [])
            for (const verb of rule.verbs ?? [])
              if (!granted(grants, g, res, verb, rule.resourceNames ?? []))
                missing.push(`${verb} ${g ? `${res}.${g}` : res}`);
        if (missing.length > 0) {
          problems.push(
            `${prefix(r, rel.release)}: ${describe(o)}: rules[${i}] grants ${missing.join(', ')}, which the provisioner ` +
              `does not hold (infra/provisioner-rbac.ts PROVISIONER_TENANT_RULES): RBAC refuses to create the Role without escalate`,
          );
        }
      });
    }
  }
  return problems;
}

type Amounts = Pick<Totals, 'requestsCpu' | 'requestsMemory' | 'limitsCpu' | 'limitsMemory'>;
const ZERO: Amounts = { requestsCpu: 0, requestsMemory: 0, limitsCpu: 0, limitsMemory: 0 };

function amounts(c: Container): Amounts {
  const q = c.resources ?? {};
  return {
    requestsCpu: milliCpu(q.requests?.cpu ?? 0),
    requestsMemory: bytes(q.requests?.memory ?? 0),
    limitsCpu: milliCpu(q.limits?.cpu ?? 0),
    limitsMemory: bytes(q.limits?.memory ?? 0),
  };
}

/** A pod's effective amounts: the containers' sum, or the largest init container where larger. */
function podAmounts(spec: PodSpec): Amounts {
  const sum = { ...ZERO };
  const init = { ...ZERO };
  for (const c of spec.containers ?? []) {
    const a = amounts(c);
    for (const k of Object.keys(sum) as (keyof Amounts)[]) sum[k] += a[k];
  }
  for (const c of spec.initContainers ?? []) {
    const a = amounts(c);
    for (const k of Object.keys(init) as (keyof Amounts)[]) init[k] = Math.max(init[k], a[k]);
  }
  const out = { ...ZERO };
  for (const k of Object.keys(out) as (keyof Amounts)[]) out[k] = Math.max(sum[k], init[k]);
  return out;
}

/** CoreDNS inside the vcluster: the syncer deploys it from the vcluster values (not a chart template). */
function coreDnsContainer(r: RenderedRuntime): Container | undefined {
  const values = r.releases.find((x) => x.chart === 'vcluster')?.values as
    | { controlPlane?: { coredns?: { enabled?: boolean; deployment?: { resources?: Container['resources'] } } } }
    | undefined;
  const coredns = values?.controlPlane?.coredns;
  if (!coredns || coredns.enabled === false) return undefined;
  return { name: 'coredns', ...(coredns.deployment?.resources ? { resources: coredns.deployment.resources } : {}) };
}

/** Explicit requests and limits everywhere; the sums equal to the plan's table and within its quota. */
export function resourceProblems(r: RenderedRuntime): string[] {
  const plan = planNamed(r.plan);
  const problems: string[] = [];
  const sum: Totals = { ...ZERO, pods: 0 };
  const add = (a: Amounts, replicas: number) => {
    for (const k of Object.keys(ZERO) as (keyof Amounts)[]) sum[k] += replicas * a[k];
    sum.pods += replicas;
  };
  const missing = (release: string, what: string, c: Container, field: string) => {
    for (const kind of ['requests', 'limits'] as const)
      for (const res of ['cpu', 'memory'] as const)
        if (c.resources?.[kind]?.[res] === undefined)
          problems.push(
            `${prefix(r, release)}: ${what}: ${field}[${c.name}].resources.${kind}.${res} is not set (the LimitRange default would apply)`,
          );
  };
  for (const { release, object } of everyObject(r)) {
    const t = podTemplate(object);
    if (!t) continue;
    if (object.kind === 'DaemonSet') {
      problems.push(
        `${prefix(r, release)}: ${describe(object)}: a DaemonSet's pod count is the node count; the runtime budgets none`,
      );
      continue;
    }
    for (const c of t.spec.containers ?? []) missing(release, describe(object), c, `${t.path}.containers`);
    for (const c of t.spec.initContainers ?? []) missing(release, describe(object), c, `${t.path}.initContainers`);
    add(podAmounts(t.spec), t.replicas);
  }
  const coreDns = coreDnsContainer(r);
  if (coreDns) {
    missing('vcluster', 'CoreDNS (deployed by the syncer)', coreDns, 'values controlPlane.coredns.deployment');
    add(amounts(coreDns), 1);
  }
  const table = totals(planBudget(plan, r.version));
  for (const f of TOTAL_FIELDS) {
    if (sum[f.key] !== table[f.key]) {
      problems.push(
        `runtime ${r.version}, plan ${r.plan}: the rendered runtime's ${f.quota} is ${f.format(sum[f.key])}, the plan's budget ` +
          `table (tenants/plans.ts, docs/operations.md) says ${f.format(table[f.key])}: a container is missing from the table or has other resources`,
      );
    }
  }
  problems.push(...budgetProblems(plan, sum).map((p) => `runtime ${r.version}, ${p}`));
  return problems;
}

/** Every problem of a render: Pod Security, RBAC, resources. */
export async function conformanceProblems(r: RenderedRuntime, podSecurity: string): Promise<string[]> {
  return [...(await podSecurityProblems(r, podSecurity)), ...rbacProblems(r), ...resourceProblems(r)];
}
