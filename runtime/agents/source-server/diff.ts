/**
 * How two sets of Kubernetes manifests differ, per resource: the Source Server's own comparison
 * of what Argo CD generated (it never renders manifests itself).
 *
 *  - Resources are matched by group/kind/namespace/name: present on one side only is `added` or
 *    `removed`; on both, `modified` when a field differs (identical ones are left out).
 *  - Fields are named by the paths of the leaves that differ (`spec.replicas`,
 *    `spec.template.spec.containers[name=web].image`): list items by their `name` when every item
 *    of both lists has a distinct string `name` (containers, env, ports, volumes), else by index.
 *    A subtree present on one side only is named once, by its root.
 *  - What the API server or a client writes rather than Git is ignored: metadata.managedFields,
 *    resourceVersion, uid, generation, creationTimestamp, the last-applied-configuration
 *    annotation, and status.
 *  - Images: every container and init container image of a pod template (Deployment,
 *    StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, Argo Rollout, Pod), before → after.
 *  - Secret values never leave the Source Server: a Secret's `data` and `stringData` values are
 *    replaced by SECRET_MASK in the objects it answers; the keys whose values differ are still
 *    named (`data.PASSWORD`), computed before masking.
 */
import {
  type ApplicationChange,
  type ImageChange,
  type PreviewResource,
  MAX_CHANGE_BYTES,
  MAX_CHANGED_FIELDS,
  MAX_CHANGED_RESOURCES,
  MAX_DIFF_BYTES,
  MAX_IMAGE_CHANGES,
  type ResourceChange,
  type ResourceDiff,
} from '../../protocol/sources.ts';

export type KubeObject = Record<string, unknown>;

/** What replaces every value of a Secret's data and stringData. */
export const SECRET_MASK = '********';
/** A field path longer than this is cut (with `…`): a report names fields, it does not carry data. */
export const MAX_FIELD_PATH_CHARS = 512;

const LAST_APPLIED = 'kubectl.kubernetes.io/last-applied-configuration';
const IGNORED_METADATA = ['managedFields', 'resourceVersion', 'uid', 'generation', 'creationTimestamp'];

function isObject(v: unknown): v is KubeObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function str(v: unknown): string {
  return typeof v === 'string' ? v : '';
}

export interface ResourceId {
  group: string;
  kind: string;
  namespace: string;
  name: string;
}

export function resourceId(obj: KubeObject): ResourceId {
  const apiVersion = str(obj.apiVersion);
  const slash = apiVersion.indexOf('/');
  const metadata = isObject(obj.metadata) ? obj.metadata : {};
  return {
    group: slash < 0 ? '' : apiVersion.slice(0, slash),
    kind: str(obj.kind),
    namespace: str(metadata.namespace),
    name: str(metadata.name),
  };
}

export function resourceKey(id: ResourceId): string {
  return `${id.group}/${id.kind}/${id.namespace}/${id.name}`;
}

/**
 * Argo CD's manifests (JSON texts, one object each) by resource key. Lists (`kind: *List`) are
 * flattened; texts that are not JSON objects with a kind and a name are skipped.
 */
export function manifestsByKey(texts: readonly string[]): Map<string, KubeObject> {
  const out = new Map<string, KubeObject>();
  const add = (obj: unknown): void => {
    if (!isObject(obj)) return;
    if (Array.isArray(obj.items) && str(obj.kind).endsWith('List')) {
      for (const item of obj.items) add(item);
      return;
    }
    const id = resourceId(obj);
    if (id.kind === '' || id.name === '') return;
    out.set(resourceKey(id), obj);
  };
  for (const text of texts) {
    try {
      add(JSON.parse(text));
    } catch {
      // Not JSON: Argo CD's manifests always are; anything else is not a resource we can compare.
    }
  }
  return out;
}

/** A copy of `obj` without what Git does not hold (see the file comment). */
export function withoutServerFields(obj: KubeObject): KubeObject {
  const copy: KubeObject = { ...obj };
  delete copy.status;
  if (isObject(obj.metadata)) {
    const metadata: KubeObject = { ...obj.metadata };
    for (const f of IGNORED_METADATA) delete metadata[f];
    if (isObject(metadata.annotations)) {
      const annotations = { ...metadata.annotations };
      delete annotations[LAST_APPLIED];
      if (Object.keys(annotations).length === 0) delete metadata.annotations;
      else metadata.annotations = annotations;
    }
    copy.metadata = metadata;
  }
  return copy;
}

function isSecret(obj: KubeObject): boolean {
  return obj.kind === 'Secret' && (obj.apiVersion === 'v1' || obj.apiVersion === undefined);
}

/** A Secret with every data/stringData value replaced by SECRET_MASK; other objects as they are. */
export function maskSecret(obj: KubeObject): KubeObject {
  if (!isSecret(obj)) return obj;
  const copy: KubeObject = { ...obj };
  for (const field of ['data', 'stringData']) {
    const values = obj[field];
    if (isObject(values)) copy[field] = Object.fromEntries(Object.keys(values).map((k) => [k, SECRET_MASK]));
  }
  return copy;
}

const PLAIN_KEY = /^[A-Za-z0-9_-]+$/;

function keySegment(key: string): string {
  return PLAIN_KEY.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
}

function join(prefix: string, segment: string): string {
  if (prefix === '') return segment.startsWith('.') ? segment.slice(1) : segment;
  return prefix + segment;
}

function cut(path: string): string {
  return path.length <= MAX_FIELD_PATH_CHARS ? path : `${path.slice(0, MAX_FIELD_PATH_CHARS - 1)}…`;
}

/** Names of the items of both lists when every item has a string `name` and none repeats; else undefined. */
function namesOf(a: unknown[], b: unknown[]): { a: string[]; b: string[] } | undefined {
  const names = (list: unknown[]): string[] | undefined => {
    const out: string[] = [];
    for (const item of list) {
      if (!isObject(item) || typeof item.name !== 'string') return undefined;
      out.push(item.name);
    }
    return new Set(out).size === out.length ? out : undefined;
  };
  const na = names(a);
  const nb = names(b);
  return na && nb ? { a: na, b: nb } : undefined;
}

function nameSegment(name: string): string {
  return /^[A-Za-z0-9._-]+$/.test(name) ? `[name=${name}]` : `[name=${JSON.stringify(name)}]`;
}

/**
 * Paths of the fields that differ between `before` and `after` (see the file comment), in
 * document order; stops once it has `limit + 1` (the caller then knows there are more).
 */
export function changedFields(before: unknown, after: unknown, limit = Number.MAX_SAFE_INTEGER): string[] {
  const out: string[] = [];
  const walk = (a: unknown, b: unknown, path: string): void => {
    if (out.length > limit) return;
    if (isObject(a) && isObject(b)) {
      const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])];
      for (const k of keys) {
        const child = join(path, keySegment(k));
        if (!Object.hasOwn(a, k) || !Object.hasOwn(b, k)) out.push(cut(child));
        else walk(a[k], b[k], child);
        if (out.length > limit) return;
      }
      return;
    }
    if (Array.isArray(a) && Array.isArray(b)) {
      const named = namesOf(a, b);
      if (named) {
        const byName = new Map(b.map((item, i) => [named.b[i]!, item]));
        const seen = new Set<string>();
        a.forEach((item, i) => {
          const name = named.a[i]!;
          seen.add(name);
          const child = path + nameSegment(name);
          if (!byName.has(name)) out.push(cut(child));
          else walk(item, byName.get(name), child);
        });
        for (const name of named.b) if (!seen.has(name)) out.push(cut(path + nameSegment(name)));
        return;
      }
      const n = Math.max(a.length, b.length);
      for (let i = 0; i < n && out.length <= limit; i++) {
        const child = `${path}[${i}]`;
        if (i >= a.length || i >= b.length) out.push(cut(child));
        else walk(a[i], b[i], child);
      }
      return;
    }
    if (a !== b) out.push(cut(path === '' ? '.' : path));
  };
  walk(before, after, '');
  return out;
}

/** Where a workload kind keeps its pod spec. */
function podSpec(obj: KubeObject): KubeObject | undefined {
  const at = (...path: string[]): KubeObject | undefined => {
    let cur: unknown = obj;
    for (const p of path) cur = isObject(cur) ? cur[p] : undefined;
    return isObject(cur) ? cur : undefined;
  };
  switch (obj.kind) {
    case 'Pod':
      return at('spec');
    case 'CronJob':
      return at('spec', 'jobTemplate', 'spec', 'template', 'spec');
    case 'Deployment':
    case 'StatefulSet':
    case 'DaemonSet':
    case 'ReplicaSet':
    case 'Job':
    case 'Rollout':
      return at('spec', 'template', 'spec');
    default:
      return undefined;
  }
}

/** Container name → image of a workload (containers and init containers). */
function imagesOf(obj: KubeObject | null): Map<string, string> {
  const out = new Map<string, string>();
  const spec = obj ? podSpec(obj) : undefined;
  if (!spec) return out;
  for (const list of [spec.initContainers, spec.containers]) {
    if (!Array.isArray(list)) continue;
    for (const c of list) if (isObject(c) && typeof c.name === 'string') out.set(c.name, str(c.image));
  }
  return out;
}

/** The images that differ between two versions of one resource (either side may be absent). */
export function imageChanges(id: ResourceId, before: KubeObject | null, after: KubeObject | null): ImageChange[] {
  const a = imagesOf(before);
  const b = imagesOf(after);
  const resource = `${id.kind}/${id.namespace}/${id.name}`;
  const out: ImageChange[] = [];
  for (const container of new Set([...a.keys(), ...b.keys()])) {
    const x = a.get(container);
    const y = b.get(container);
    if (x === y) continue;
    out.push({
      resource,
      container,
      ...(x !== undefined ? { before: x } : {}),
      ...(y !== undefined ? { after: y } : {}),
    });
  }
  return out;
}

export interface ManifestComparison {
  /** Differing resources, sorted by key, with both sides whole (Secrets masked, server fields removed). */
  resources: ResourceDiff[];
  images: ImageChange[];
}

/**
 * Compares two sets of resources by key. `fieldLimit` bounds the paths named per resource
 * (`fieldsTruncated` when more); `modified` may say a pair is unchanged despite differing fields
 * (Argo CD's own verdict for Git against the cluster, where defaults the API server filled in
 * are not changes).
 */
export function compareResources(
  before: ReadonlyMap<string, KubeObject>,
  after: ReadonlyMap<string, KubeObject>,
  opts: { fieldLimit?: number; modified?: (key: string) => boolean | undefined } = {},
): ManifestComparison {
  const fieldLimit = opts.fieldLimit ?? MAX_CHANGED_FIELDS;
  const keys = [...new Set([...before.keys(), ...after.keys()])].sort();
  const resources: ResourceDiff[] = [];
  const images: ImageChange[] = [];
  for (const key of keys) {
    const rawA = before.get(key);
    const rawB = after.get(key);
    const a = rawA ? withoutServerFields(rawA) : null;
    const b = rawB ? withoutServerFields(rawB) : null;
    const id = resourceId((b ?? a)!);
    let action: ResourceChange['action'];
    let fields: string[] = [];
    if (a && b) {
      if (opts.modified?.(key) === false) continue;
      fields = changedFields(a, b, fieldLimit);
      if (fields.length === 0) continue;
      action = 'modified';
    } else action = a ? 'removed' : 'added';
    const fieldsTruncated = fields.length > fieldLimit;
    resources.push({
      ...id,
      action,
      fields: fields.slice(0, fieldLimit),
      ...(fieldsTruncated ? { fieldsTruncated: true } : {}),
      before: a ? maskSecret(a) : null,
      after: b ? maskSecret(b) : null,
    });
    images.push(...imageChanges(id, a, b));
  }
  return { resources, images };
}

function bytes(v: unknown): number {
  return Buffer.byteLength(JSON.stringify(v));
}

/**
 * The change's resources and images within the report limits: at most MAX_CHANGED_RESOURCES
 * resources and MAX_IMAGE_CHANGES images, and the whole change within MAX_CHANGE_BYTES of JSON:
 * field paths are dropped from the last resources first, then the last resources, then the last
 * images. `truncated` is set when anything was left out.
 */
export function boundChange(change: ApplicationChange): ApplicationChange {
  let truncated = change.truncated;
  let resources = change.resources.map((r) => ({ ...r, fields: [...r.fields] }));
  let images = change.images;
  if (resources.length > MAX_CHANGED_RESOURCES) {
    resources = resources.slice(0, MAX_CHANGED_RESOURCES);
    truncated = true;
  }
  if (images.length > MAX_IMAGE_CHANGES) {
    images = images.slice(0, MAX_IMAGE_CHANGES);
    truncated = true;
  }
  for (const r of resources) {
    if (r.fields.length > MAX_CHANGED_FIELDS) {
      r.fields = r.fields.slice(0, MAX_CHANGED_FIELDS);
      r.fieldsTruncated = true;
    }
  }
  const out: ApplicationChange = { ...change, resources, images, truncated };
  let size = bytes(out);
  // Each step accounts for what it removed (counting a comma per dropped item keeps the estimate
  // at or above the real size); the exact size is checked again at the end.
  for (let i = resources.length - 1; i >= 0 && size > MAX_CHANGE_BYTES; i--) {
    const r = resources[i]!;
    if (r.fields.length === 0) continue;
    const was = bytes(r);
    r.fields = [];
    r.fieldsTruncated = true;
    size += bytes(r) - was;
    out.truncated = true;
  }
  while (size > MAX_CHANGE_BYTES && resources.length > 0) {
    size -= bytes(resources.pop()) + 1;
    out.truncated = true;
  }
  while (size > MAX_CHANGE_BYTES && images.length > 0) {
    size -= bytes(images.pop()) + 1;
    out.truncated = true;
  }
  if (bytes(out) > MAX_CHANGE_BYTES) throw new Error('a change does not fit MAX_CHANGE_BYTES without its resources');
  return out;
}

/** Resources of a diff answer within MAX_DIFF_BYTES: past the bound, the objects of the last ones are left out. */
export function boundDiff(
  resources: ResourceDiff[],
  budget = MAX_DIFF_BYTES - 1024,
): { resources: ResourceDiff[]; truncated: boolean } {
  let size = 0;
  let truncated = false;
  const out = resources.map((r) => {
    const whole = bytes(r) + 1;
    if (!truncated && size + whole <= budget) {
      size += whole;
      return r;
    }
    truncated = true;
    const bare: ResourceDiff = { ...r, before: null, after: null };
    size += bytes(bare) + 1;
    return bare;
  });
  // The names alone of a very long list: drop the last resources entirely.
  while (size > budget && out.length > 0) size -= bytes(out.pop()) + 1;
  return { resources: out, truncated };
}

/**
 * Paths of the fields `desired` sets that `live` does not hold as set (missing or another value),
 * the way an apply would change them: fields only the live object has (what the API server or a
 * controller filled in) are not named. Lists are matched like changedFields (by `name`, else by
 * index); a list of another length, or named items only one side has, is named by its path.
 */
export function appliedFields(live: unknown, desired: unknown, limit = Number.MAX_SAFE_INTEGER): string[] {
  const out: string[] = [];
  const walk = (a: unknown, b: unknown, path: string): void => {
    if (out.length > limit) return;
    if (isObject(b)) {
      if (!isObject(a)) return void out.push(cut(path === '' ? '.' : path));
      for (const k of Object.keys(b)) {
        walk(a[k], b[k], join(path, keySegment(k)));
        if (out.length > limit) return;
      }
      return;
    }
    if (Array.isArray(b)) {
      if (!Array.isArray(a)) return void out.push(cut(path === '' ? '.' : path));
      const named = namesOf(a, b);
      if (named) {
        const byName = new Map(a.map((item, i) => [named.a[i]!, item]));
        const wanted = new Set(named.b);
        b.forEach((item, i) => {
          const name = named.b[i]!;
          const child = path + nameSegment(name);
          if (!byName.has(name)) out.push(cut(child));
          else walk(byName.get(name), item, child);
        });
        for (const name of named.a) if (!wanted.has(name)) out.push(cut(path + nameSegment(name)));
        return;
      }
      if (a.length !== b.length) return void out.push(cut(path === '' ? '.' : path));
      for (let i = 0; i < b.length && out.length <= limit; i++) walk(a[i], b[i], `${path}[${i}]`);
      return;
    }
    if (JSON.stringify(a) !== JSON.stringify(b)) out.push(cut(path === '' ? '.' : path));
  };
  walk(live, desired, '');
  return out;
}

/** Whether field path `a` is `b`, inside it, or holds it. */
function overlaps(a: string, b: string): boolean {
  if (a === b || a === '.' || b === '.') return true;
  const within = (x: string, y: string) => x.startsWith(y) && (x[y.length] === '.' || x[y.length] === '[');
  return within(a, b) || within(b, a);
}

/**
 * A preview's resources (protocol ApplicationPreview): what applying `after` (manifests at the
 * revision asked) changes in `live`, each change marked `notFromChange` unless the Git change from
 * `current` (the manifests at the synced revision) to `after` causes it. All three maps by
 * resource key; `live` holds the Application's managed resources (their normalized live state).
 */
export function previewResources(
  live: ReadonlyMap<string, KubeObject>,
  current: ReadonlyMap<string, KubeObject>,
  after: ReadonlyMap<string, KubeObject>,
  fieldLimit = MAX_CHANGED_FIELDS,
): PreviewResource[] {
  const out: PreviewResource[] = [];
  for (const key of [...new Set([...live.keys(), ...after.keys()])].sort()) {
    const l = live.get(key);
    const a = after.get(key);
    const c = current.get(key);
    // The key names the resource as the caller placed it (a manifest may omit its namespace).
    const [group = '', kind = '', namespace = '', ...name] = key.split('/');
    const id = { group, kind, namespace, name: name.join('/') };
    if (a && !l) {
      out.push({ ...id, action: 'added', fields: [], ...(c ? { notFromChange: ['.'] } : {}) });
      continue;
    }
    if (l && !a) {
      out.push({ ...id, action: 'removed', fields: [], ...(!c ? { notFromChange: ['.'] } : {}) });
      continue;
    }
    const fields = appliedFields(withoutServerFields(l!), withoutServerFields(a!));
    if (fields.length === 0) continue;
    // What the Git change moves in this resource: everything when the synced revision lacks it.
    const fromGit = c ? changedFields(withoutServerFields(c), withoutServerFields(a!)) : ['.'];
    const notFromChange = fields.filter((f) => !fromGit.some((g) => overlaps(f, g)));
    out.push({
      ...id,
      action: 'modified',
      fields: fields.slice(0, fieldLimit),
      ...(fields.length > fieldLimit ? { fieldsTruncated: true } : {}),
      ...(notFromChange.length > 0 ? { notFromChange: notFromChange.slice(0, fieldLimit) } : {}),
    });
  }
  return out;
}
