/**
 * The drift rule: which changes a refresh found are drift, and what the update after it changed.
 *
 * Drift is what the next update would change in the live objects: a managed object that is gone,
 * or a field the program sets whose live value is no longer what the program applied. A refresh
 * also records changes that are not drift — status written by controllers (a ResourceQuota's
 * `status.used`), fields the server sets (`metadata.resourceVersion`, `managedFields`), fields
 * other managers own, and anything about objects the program only reads (`.get` of an existing
 * object) — and the engine counts those as `update` too. Reads are never drift, and never
 * corrections: every update reads them again. Pure functions over the engine's resource steps.
 */
import type { ResourceStep } from '../engine/engine.ts';

/** A managed object the refresh found gone, or whose program-set fields changed. */
export interface Drift {
  kind: string;
  /** `namespace/name` (or the name of a cluster-scoped object). */
  name: string;
  change: 'deleted' | 'changed';
  /** The program-set fields that changed (for `changed`), shortened to two levels (`spec.hard`). */
  fields: string[];
}

/** A change a refresh recorded in the state that is not drift, and why. */
export interface StateOnlyChange {
  kind: string;
  name: string;
  why: 'read' | 'not-set-by-program';
  /** Output fields that changed, shortened to two levels (`status.used`). */
  fields: string[];
}

export interface RefreshFindings {
  drift: Drift[];
  stateOnly: StateOnlyChange[];
}

/** What an update changed in a managed object. */
export interface Correction {
  kind: string;
  name: string;
  /** create, update, replace, delete (the engine's step). */
  op: string;
  fields: string[];
}

/** Changes a refresh found, split into drift and state-only changes. */
export function refreshFindings(steps: readonly ResourceStep[]): RefreshFindings {
  const out: RefreshFindings = { drift: [], stateOnly: [] };
  for (const s of steps) {
    if (!isManagedObject(s) || s.op === 'same' || s.op === 'read') continue;
    const kind = kindOf(s.type);
    const name = nameOf(s);
    if (s.external) {
      out.stateOnly.push({ kind, name, why: 'read', fields: shorten(changedPaths(s.old?.outputs, s.new?.outputs)) });
    } else if (s.op === 'delete' || !s.new) {
      out.drift.push({ kind, name, change: 'deleted', fields: [] });
    } else {
      const changed = changedPaths(s.old?.outputs, s.new.outputs);
      const inputs = s.old?.inputs ?? {};
      const programSet = changed.filter((p) => setByProgram(inputs, p));
      if (programSet.length > 0) out.drift.push({ kind, name, change: 'changed', fields: shorten(programSet) });
      else out.stateOnly.push({ kind, name, why: 'not-set-by-program', fields: shorten(changed) });
    }
  }
  return out;
}

/** What an update changed in managed objects (reads and unchanged resources left out). */
export function corrections(steps: readonly ResourceStep[]): Correction[] {
  const out: Correction[] = [];
  for (const s of steps) {
    if (!isManagedObject(s) || s.external || !CHANGING_OPS.has(s.op)) continue;
    out.push({ kind: kindOf(s.type), name: nameOf(s), op: s.op, fields: shorten(s.diffs.map(parsePath)) });
  }
  return out;
}

const CHANGING_OPS = new Set([
  'create',
  'update',
  'replace',
  'delete',
  'create-replacement',
  'delete-replaced',
  'discard',
  'import',
  'import-replacement',
]);

/** `ResourceQuota tenant-x/quota: spec.hard changed`, `… : deleted`. */
export function describeDrift(d: Drift): string {
  return `${d.kind} ${d.name}: ${d.change === 'deleted' ? 'deleted' : `${d.fields.join(', ')} changed`}`;
}

/** `Secret tenant-x/vc-vcluster (read by the program): metadata.resourceVersion`. */
export function describeStateOnly(c: StateOnlyChange): string {
  const why = c.why === 'read' ? ' (read by the program)' : '';
  return `${c.kind} ${c.name}${why}: ${c.fields.length ? c.fields.join(', ') : 'no field named'}`;
}

/** `ResourceQuota tenant-x/quota: created`, `Deployment tenant-x/agent: updated (spec.template)`. */
export function describeCorrection(c: Correction): string {
  const verb = { create: 'created', update: 'updated', replace: 'replaced', delete: 'deleted' }[c.op] ?? c.op;
  return `${c.kind} ${c.name}: ${verb}${c.op === 'update' && c.fields.length ? ` (${c.fields.join(', ')})` : ''}`;
}

/** Custom resources other than providers: components and provider resources never drift. */
function isManagedObject(s: ResourceStep): boolean {
  return s.custom && !s.type.startsWith('pulumi:providers:');
}

/** `kubernetes:core/v1:ResourceQuota` → `ResourceQuota`; `kubernetes:helm.sh/v3:Release` → `Release`. */
export function kindOf(type: string): string {
  return type.split(':').at(-1) ?? type;
}

/** The object's id (`namespace/name` for the Kubernetes provider), else the URN's resource name. */
function nameOf(s: ResourceStep): string {
  return s.old?.id || s.new?.id || (s.urn.split('::').at(-1) ?? s.urn);
}

type Path = (string | number)[];

/** Leaf paths at which two JSON values differ (added, removed or changed). */
export function changedPaths(a: unknown, b: unknown, prefix: Path = []): Path[] {
  if (isObject(a) && isObject(b)) {
    const out: Path[] = [];
    for (const k of new Set([...Object.keys(a), ...Object.keys(b)]))
      out.push(...changedPaths(a[k], b[k], [...prefix, k]));
    return out;
  }
  if (Array.isArray(a) && Array.isArray(b)) {
    const out: Path[] = [];
    for (let i = 0; i < Math.max(a.length, b.length); i++) out.push(...changedPaths(a[i], b[i], [...prefix, i]));
    return out;
  }
  return equalLeaf(a, b) ? [] : [prefix];
}

function equalLeaf(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (isObject(a) || isObject(b) || Array.isArray(a) || Array.isArray(b))
    return JSON.stringify(a) === JSON.stringify(b);
  return false;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Whether the program sets the field at `path`: the inputs hold a value there, or a value at a
 * prefix of it that is not an object or array (a whole value the program replaces).
 */
export function setByProgram(inputs: Record<string, unknown>, path: Path): boolean {
  let v: unknown = inputs;
  for (const seg of path) {
    if (typeof seg === 'number' ? Array.isArray(v) : isObject(v)) {
      v = (v as Record<string | number, unknown>)[seg];
      if (v === undefined) return false;
    } else {
      return v !== undefined;
    }
  }
  return true;
}

/** `spec.hard["requests.cpu"]` → `['spec', 'hard', 'requests.cpu']` (the engine's property paths). */
export function parsePath(s: string): Path {
  const out: Path = [];
  const re = /([^.[\]]+)|\[(\d+)\]|\["((?:[^"\\]|\\.)*)"\]/g;
  for (const m of s.matchAll(re)) {
    if (m[1] !== undefined) out.push(m[1]);
    else if (m[2] !== undefined) out.push(Number(m[2]));
    else if (m[3] !== undefined) out.push(m[3].replace(/\\(.)/g, '$1'));
  }
  return out;
}

/** Paths shortened to their first two names (`spec.hard`), without repeats, in order. */
function shorten(paths: readonly Path[]): string[] {
  const seen = new Set<string>();
  for (const p of paths) {
    const names = p.filter((seg): seg is string => typeof seg === 'string').slice(0, 2);
    if (names.length) seen.add(names.map((n) => (/^[A-Za-z_$][\w$-]*$/.test(n) ? n : `"${n}"`)).join('.'));
  }
  return [...seen];
}
