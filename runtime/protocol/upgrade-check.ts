/**
 * What the in-cluster upgrader accepts in a plan: the changes a version upgrade makes to an object
 * it runs, nothing else. A plan comes over the network; whoever could change it in transit, or
 * the control plane's own bug, must not be able to use the upgrader's `patch` to run another
 * image, under another ServiceAccount, with the credentials Secret mounted or on the host's
 * network. So before applying anything the upgrader reads each object of the plan (and of its
 * rollback) from the API server and compares the two with `planDifferences`; one difference and
 * the whole plan is refused unapplied.
 *
 * A version upgrade may change, and nothing else:
 *  - a container's image within its repository: the registry and path the running container
 *    uses, only the tag or digest moves (`repositoryOf`);
 *  - the value of the version variables (VERSION_ENV) in a container's environment;
 *  - a container's `resources`;
 *  - the `data` of the versions ConfigMap.
 *
 * Every other field the plan states must equal the running object's (it may leave out fields the
 * API server defaulted or someone else set: a server-side apply leaves those as they are). The
 * fields that decide what a pod may reach are compared both ways (PINNED_POD, PINNED_CONTAINER):
 * the plan must state them exactly as the object runs them, since leaving out a field the
 * upgrader's own earlier apply set would remove it (a dropped securityContext, a dropped
 * readOnly). The containers and init containers are the same, by name and in order.
 *
 * Pure and importing nothing but the protocol's shapes: the upgrader's image holds
 * runtime/protocol/, and the control plane's tests check its own plans with the same function
 * (runtime/hybrid/upgrader.ts re-exports it).
 */
import type { PlannedObject } from './upgrade.ts';

/** The environment variables a version upgrade changes (the event reporter reports the runtime's version). */
export const VERSION_ENV: readonly string[] = ['RUNTIME_VERSION'];

/** One field where a plan's object and the running one differ beyond a version upgrade. */
export interface PlanDifference {
  /** `Deployment hosted-runtime/app-proxy` */
  object: string;
  /** `spec.template.spec.serviceAccountName` */
  field: string;
  /** What differs: `differs`, or more where it helps (an image's repository). */
  why: string;
}

/**
 * Pod spec fields compared both ways: what the pod runs as, what it mounts, where it runs and
 * next to whom. (The containers are compared by name, each with PINNED_CONTAINER.)
 */
export const PINNED_POD: readonly string[] = [
  'serviceAccountName',
  'automountServiceAccountToken',
  'volumes',
  'securityContext',
  'hostNetwork',
  'hostPID',
  'hostIPC',
  'hostUsers',
  'hostAliases',
  'nodeName',
  'nodeSelector',
  'affinity',
  'tolerations',
  'priorityClassName',
  'runtimeClassName',
  'shareProcessNamespace',
  'imagePullSecrets',
  'dnsConfig',
  'os',
  'resourceClaims',
  'schedulingGates',
  'topologySpreadConstraints',
];

/** Container fields compared both ways (image, env and resources have their own rules). */
export const PINNED_CONTAINER: readonly string[] = [
  'command',
  'args',
  'envFrom',
  'volumeMounts',
  'volumeDevices',
  'securityContext',
  'ports',
  'workingDir',
  'lifecycle',
  'stdin',
  'stdinOnce',
  'tty',
  'restartPolicy',
];

const CONTAINER_LISTS = ['initContainers', 'containers', 'ephemeralContainers'] as const;

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const absent = (v: unknown): boolean => v === undefined || v === null;

/** `registry/path/name` of an image reference, without its tag or digest. */
export function repositoryOf(image: string): string {
  const at = image.indexOf('@');
  const name = at >= 0 ? image.slice(0, at) : image;
  const colon = name.lastIndexOf(':');
  return colon > name.lastIndexOf('/') ? name.slice(0, colon) : name;
}

/** What may follow the repository in an image reference: a tag, a digest, or both, in their documented shapes. */
const TAG_AND_DIGEST = /^(:\w[\w.-]{0,127})?(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$/;

/** A version variable's value: a catalog version. */
const VERSION_VALUE = /^\d{1,9}\.\d{1,9}\.\d{1,9}$/;

/**
 * Fields the API server fills in with a default when a manifest leaves them out, within the
 * pinned fields: the same whether the plan states them or not.
 */
function withoutDefaults(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(withoutDefaults);
  if (!isObj(v)) return v;
  const out: Obj = {};
  for (const [k, x] of Object.entries(v)) {
    if (absent(x)) continue;
    if (k === 'defaultMode' && x === 420) continue; // secret, configMap, projected, downwardAPI volumes
    if (k === 'protocol' && x === 'TCP') continue; // ports
    if (k === 'scheme' && x === 'HTTP') continue; // lifecycle httpGet
    if (k === 'expirationSeconds' && x === 3600 && 'path' in v) continue; // projected serviceAccountToken
    if (k === 'divisor' && (x === '0' || x === 0)) continue; // resourceFieldRef
    if (k === 'apiVersion' && x === 'v1' && 'fieldPath' in v) continue; // fieldRef
    if (k === 'type' && x === '' && 'path' in v) continue; // hostPath
    out[k] = withoutDefaults(x);
  }
  return out;
}

/** Deep equality of JSON values, key order aside. */
function same(a: unknown, b: unknown): boolean {
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    return a.every((x, i) => same(x, b[i]));
  }
  if (isObj(a) || isObj(b)) {
    if (!isObj(a) || !isObj(b)) return false;
    const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
    return [...keys].every((k) => same(a[k], b[k]));
  }
  return a === b || (absent(a) && absent(b));
}

/** Both ways, server defaults aside; empty and absent are the same (the API server defaults a pod's securityContext to {}). */
function samePinned(planned: unknown, running: unknown): boolean {
  const empty = (v: unknown) =>
    absent(v) ||
    (Array.isArray(v) && v.length === 0) ||
    (isObj(v) && Object.keys(withoutDefaults(v) as Obj).length === 0);
  if (empty(planned) && empty(running)) return true;
  return same(withoutDefaults(planned), withoutDefaults(running));
}

/**
 * The fields where `planned` states something `running` does not have as stated: every key of
 * the plan must be in the running object with the same value; lists match element by element.
 */
function subset(planned: unknown, running: unknown, path: string, out: string[]): void {
  if (absent(planned)) return;
  if (Array.isArray(planned)) {
    if (!Array.isArray(running) || running.length !== planned.length) {
      out.push(path);
      return;
    }
    planned.forEach((x, i) => subset(x, running[i], `${path}[${i}]`, out));
    return;
  }
  if (isObj(planned)) {
    if (!isObj(running)) {
      out.push(path);
      return;
    }
    for (const [k, x] of Object.entries(planned)) subset(x, running[k], `${path}.${k}`, out);
    return;
  }
  if (planned !== running) out.push(path);
}

const nameOf = (v: unknown): string => (isObj(v) && typeof v.name === 'string' ? v.name : '');

/** One container of the plan against the running one of the same name. */
function compareContainer(p: Obj, r: Obj, path: string, diff: (field: string, why?: string) => void): void {
  if (typeof p.image !== 'string' || typeof r.image !== 'string') diff(`${path}.image`);
  else if (repositoryOf(p.image) !== repositoryOf(r.image))
    diff(`${path}.image`, `is outside the repository it runs from (${repositoryOf(r.image)})`);
  else if (!TAG_AND_DIGEST.test(p.image.slice(repositoryOf(p.image).length)))
    diff(`${path}.image`, 'has a tag or digest of another shape');

  const pe: unknown[] = Array.isArray(p.env) ? p.env : [];
  const re: unknown[] = Array.isArray(r.env) ? r.env : [];
  if (!same(pe.map(nameOf), re.map(nameOf))) diff(`${path}.env`, 'names other variables');
  else
    pe.forEach((x, i) => {
      const name = nameOf(x);
      const field = `${path}.env[${name}]`;
      const y = re[i];
      if (VERSION_ENV.includes(name) && isObj(x) && isObj(y)) {
        const { value: pv, ...prest } = x;
        const { value: rv, ...rrest } = y;
        if (!same(withoutDefaults(prest), withoutDefaults(rrest)) || typeof pv !== 'string' || typeof rv !== 'string')
          diff(field);
        else if (!VERSION_VALUE.test(pv)) diff(field, 'is not a version');
      } else if (!samePinned(x, y)) diff(field);
    });

  for (const key of PINNED_CONTAINER) if (!samePinned(p[key], r[key])) diff(`${path}.${key}`);

  const rest: string[] = [];
  for (const [k, x] of Object.entries(p))
    if (!['name', 'image', 'env', 'resources', ...PINNED_CONTAINER].includes(k)) subset(x, r[k], `${path}.${k}`, rest);
  for (const field of rest) diff(field);
}

/** The pod template's spec of the plan against the running one. */
function comparePodSpec(p: Obj, r: Obj, path: string, diff: (field: string, why?: string) => void): void {
  for (const list of CONTAINER_LISTS) {
    const pc = Array.isArray(p[list]) ? (p[list] as unknown[]) : [];
    const rc = Array.isArray(r[list]) ? (r[list] as unknown[]) : [];
    if (!same(pc.map(nameOf), rc.map(nameOf))) {
      diff(
        `${path}.${list}`,
        `names other containers (${pc.map(nameOf).join(', ') || 'none'}; it runs ${rc.map(nameOf).join(', ') || 'none'})`,
      );
      continue;
    }
    pc.forEach((c, i) => {
      const field = `${path}.${list}[${nameOf(c)}]`;
      const running = rc[i];
      if (!isObj(c) || !isObj(running)) diff(field);
      else compareContainer(c, running, field, diff);
    });
  }
  for (const key of PINNED_POD) if (!samePinned(p[key], r[key])) diff(`${path}.${key}`);
  // Deprecated alias of serviceAccountName, which the API server copies into it.
  if (!absent(p.serviceAccount) && p.serviceAccount !== r.serviceAccountName) diff(`${path}.serviceAccount`);
  const rest: string[] = [];
  for (const [k, x] of Object.entries(p))
    if (![...CONTAINER_LISTS, ...PINNED_POD, 'serviceAccount'].includes(k)) subset(x, r[k], `${path}.${k}`, rest);
  for (const field of rest) diff(field);
}

const text = (v: unknown): string => (typeof v === 'string' ? v : (JSON.stringify(v) ?? ''));
const describe = (o: { kind?: unknown; metadata?: { namespace?: unknown; name?: unknown } }) =>
  `${text(o.kind)} ${o.metadata?.namespace ? `${text(o.metadata.namespace)}/` : ''}${text(o.metadata?.name)}`;

/**
 * Where `planned` changes `running` (the object as the API server answers it, or undefined when it
 * is not there) beyond what a version upgrade changes; [] when it changes nothing else. Only
 * Deployments and ConfigMaps are upgraded in place; `versionsConfigMap` names the ConfigMap whose
 * data may change.
 */
export function planDifferences(planned: PlannedObject, running: unknown, versionsConfigMap: string): PlanDifference[] {
  const object = describe(planned);
  const out: PlanDifference[] = [];
  const diff = (field: string, why = 'differs') => out.push({ object, field, why });
  if (!isObj(planned.metadata)) {
    diff('metadata', 'is missing');
    return out;
  }
  if (!isObj(running)) {
    diff('metadata.name', 'is not in the cluster (the upgrader creates nothing)');
    return out;
  }
  const r = running as Obj & { metadata?: Obj; spec?: Obj };
  if (planned.apiVersion !== r.apiVersion) diff('apiVersion');
  if (planned.kind !== r.kind) diff('kind');
  const rest: string[] = [];
  subset(planned.metadata, r.metadata, 'metadata', rest);

  if (planned.kind === 'Deployment' && planned.apiVersion === 'apps/v1') {
    const spec = planned.spec;
    const template = isObj(spec) && isObj(spec.template) ? spec.template : undefined;
    const rTemplate = isObj(r.spec) && isObj(r.spec.template) ? r.spec.template : undefined;
    if (!template || !isObj(template.spec) || !rTemplate || !isObj(rTemplate.spec)) diff('spec.template.spec');
    else comparePodSpec(template.spec, rTemplate.spec, 'spec.template.spec', diff);
    if (isObj(spec)) {
      const { template: _t, ...specRest } = spec;
      subset(specRest, r.spec, 'spec', rest);
      if (template) {
        const { spec: _s, ...templateRest } = template;
        subset(templateRest, rTemplate, 'spec.template', rest);
      }
    }
    for (const [k, x] of Object.entries(planned))
      if (!['apiVersion', 'kind', 'metadata', 'spec'].includes(k)) subset(x, r[k], k, rest);
  } else if (planned.kind === 'ConfigMap' && planned.apiVersion === 'v1') {
    if (planned.metadata.name !== versionsConfigMap)
      diff('metadata.name', `is not the versions ConfigMap ${versionsConfigMap}`);
    for (const [k, x] of Object.entries(planned))
      if (!['apiVersion', 'kind', 'metadata', 'data'].includes(k)) subset(x, r[k], k, rest);
    if (!absent(planned.data) && !isObj(planned.data)) diff('data');
    else if (isObj(planned.data) && Object.values(planned.data).some((v) => typeof v !== 'string')) diff('data');
  } else diff('kind', 'is not one a version upgrade changes in place');
  for (const field of rest) diff(field);
  return out;
}

/** `Deployment hosted-runtime/app-proxy: spec.template.spec.serviceAccountName differs` */
export const formatDifference = (d: PlanDifference): string => `${d.object}: ${d.field} ${d.why}`;

/**
 * Why the upgrader refuses a plan, or undefined when every object of it (to apply and to roll
 * back) changes what runs only as a version upgrade does. `running(o)` answers the object as the
 * API server has it (undefined: not there). Names up to five differences.
 */
export function planRefusal(
  objects: readonly PlannedObject[],
  running: (o: PlannedObject) => unknown,
  versionsConfigMap: string,
): string | undefined {
  const found = objects.flatMap((o) => planDifferences(o, running(o), versionsConfigMap));
  const unique = [...new Map(found.map((d) => [formatDifference(d), d])).keys()];
  if (unique.length === 0) return undefined;
  const more = unique.length > 5 ? `; and ${unique.length - 5} more` : '';
  return `the plan changes more than a version upgrade does: ${unique.slice(0, 5).join('; ')}${more}`;
}
