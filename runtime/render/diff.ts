/**
 * What an upgrade changes: two renders (render.ts) compared per release and object, objects keyed
 * by kind, namespace and name; each changed object with the fields that differ (leaf paths).
 */
import { parse as parseYaml } from 'yaml';
import type { KubeObject, RenderedRuntime } from './render.ts';

export interface FieldChange {
  /** `spec.template.spec.containers[0].image` */
  path: string;
  from?: unknown;
  to?: unknown;
}

export interface ObjectChange {
  object: string;
  fields: FieldChange[];
}

export interface ReleaseDiff {
  /** Release name, or `root-cluster` / `agents`. */
  release: string;
  /** Chart and version on each side (absent for the program's own objects). */
  from?: string;
  to?: string;
  added: string[];
  removed: string[];
  changed: ObjectChange[];
}

/** `Deployment argocd/argocd-server` (cluster-scoped: no namespace). */
export function objectKey(o: KubeObject, defaultNamespace?: string): string {
  const ns = o.metadata.namespace ?? defaultNamespace;
  const group = o.apiVersion.includes('/') ? `.${o.apiVersion.split('/')[0]}` : '';
  return `${o.kind}${group} ${ns && !CLUSTER_SCOPED.has(o.kind) ? `${ns}/` : ''}${o.metadata.name}`;
}

const CLUSTER_SCOPED = new Set([
  'Namespace',
  'ClusterRole',
  'ClusterRoleBinding',
  'CustomResourceDefinition',
  'PriorityClass',
  'StorageClass',
  'ValidatingWebhookConfiguration',
  'MutatingWebhookConfiguration',
  'APIService',
]);

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Leaf differences between two JSON values. */
export function fieldChanges(a: unknown, b: unknown, path = ''): FieldChange[] {
  if (isObject(a) && isObject(b)) {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    return keys.flatMap((k) => fieldChanges(a[k], b[k], path ? `${path}.${k}` : k));
  }
  if (Array.isArray(a) && Array.isArray(b)) {
    const out: FieldChange[] = [];
    for (let i = 0; i < Math.max(a.length, b.length); i++) out.push(...fieldChanges(a[i], b[i], `${path}[${i}]`));
    return out;
  }
  if (JSON.stringify(a) === JSON.stringify(b)) return [];
  return [{ path, ...(a !== undefined ? { from: a } : {}), ...(b !== undefined ? { to: b } : {}) }];
}

/**
 * A data value as ops read it: a Secret's base64 decoded when it is UTF-8 text, and a value that
 * holds a YAML or JSON mapping (a config file such as vcluster's `config.yaml`) parsed, so that a
 * changed setting shows as its own path (`data.config.yaml.controlPlane.distro.k8s.image.tag`)
 * instead of two opaque strings.
 */
function readableValue(value: unknown, base64: boolean): unknown {
  if (typeof value !== 'string') return value;
  let text = value;
  if (base64) {
    const bytes = Buffer.from(value, 'base64');
    const decoded = bytes.toString('utf8');
    if (Buffer.from(decoded, 'utf8').equals(bytes) && !decoded.includes('\u0000')) text = decoded;
    else return value;
  }
  if (!text.includes('\n') && !text.trimStart().startsWith('{')) return text;
  try {
    const parsed: unknown = parseYaml(text);
    return isObject(parsed) ? parsed : text;
  } catch {
    return text;
  }
}

/** The object with its Secret or ConfigMap data made readable (readableValue); others as they are. */
function readable(o: KubeObject): unknown {
  if (o.kind !== 'Secret' && o.kind !== 'ConfigMap') return o;
  const data = (o as { data?: unknown }).data;
  if (!isObject(data)) return o;
  const base64 = o.kind === 'Secret';
  return { ...o, data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, readableValue(v, base64)])) };
}

function diffObjects(
  release: string,
  a: readonly KubeObject[],
  b: readonly KubeObject[],
  ns?: string,
): Omit<ReleaseDiff, 'from' | 'to'> {
  const left = new Map(a.map((o) => [objectKey(o, ns), o]));
  const right = new Map(b.map((o) => [objectKey(o, ns), o]));
  const changed: ObjectChange[] = [];
  for (const [key, o] of left) {
    const other = right.get(key);
    if (!other) continue;
    const fields = fieldChanges(readable(o), readable(other));
    if (fields.length > 0) changed.push({ object: key, fields });
  }
  return {
    release,
    added: [...right.keys()].filter((k) => !left.has(k)).sort(),
    removed: [...left.keys()].filter((k) => !right.has(k)).sort(),
    changed: changed.sort((x, y) => x.object.localeCompare(y.object)),
  };
}

/** Per release (then the root-cluster objects and the agents): added, removed and changed objects. */
export function diffRuntimes(from: RenderedRuntime, to: RenderedRuntime): ReleaseDiff[] {
  const out: ReleaseDiff[] = [];
  const names = [...new Set([...from.releases, ...to.releases].map((r) => r.release))];
  for (const name of names) {
    const a = from.releases.find((r) => r.release === name);
    const b = to.releases.find((r) => r.release === name);
    out.push({
      ...diffObjects(name, a?.objects ?? [], b?.objects ?? [], (a ?? b)!.namespace),
      ...(a ? { from: `${a.chart} ${a.chartVersion}` } : {}),
      ...(b ? { to: `${b.chart} ${b.chartVersion}` } : {}),
    });
  }
  out.push(diffObjects('root-cluster', from.root, to.root), diffObjects('agents', from.agents, to.agents));
  return out;
}

const show = (v: unknown): string => {
  if (v === undefined) return '(none)';
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  return s.length > 100 ? `${s.slice(0, 97)}...` : s;
};

/** The diff as text: one block per release, `+`/`-`/`~` per object, changed fields below (at most `maxFields` each). */
export function formatDiff(diffs: readonly ReleaseDiff[], maxFields = 25): string[] {
  const lines: string[] = [];
  for (const d of diffs) {
    const versions = d.from || d.to ? ` (${d.from ?? 'none'} -> ${d.to ?? 'none'})` : '';
    const count = d.added.length + d.removed.length + d.changed.length;
    lines.push(
      `${d.release}${versions}: ${count === 0 ? 'no change' : `${d.added.length} added, ${d.removed.length} removed, ${d.changed.length} changed`}`,
    );
    for (const a of d.added) lines.push(`  + ${a}`);
    for (const r of d.removed) lines.push(`  - ${r}`);
    for (const c of d.changed) {
      lines.push(`  ~ ${c.object}`);
      for (const f of c.fields.slice(0, maxFields)) lines.push(`      ${f.path}: ${show(f.from)} -> ${show(f.to)}`);
      if (c.fields.length > maxFields)
        lines.push(`      … and ${c.fields.length - maxFields} more fields (--json lists all)`);
    }
  }
  return lines;
}
