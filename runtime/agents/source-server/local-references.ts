/**
 * The paths outside an application's source path that its manifests are built from, found by
 * reading the files that name them, as Kustomize and Helm do:
 *
 *  - a `kustomization.yaml` (or `.yml`, `Kustomization`) names bases, resources, components,
 *    patches, generators' files and transformers' configurations by path, relative to its folder:
 *    an overlay at `apps/web/overlays/prod` built on `../../base` changes when `apps/web/base`
 *    does, and a base shared by several applications (`bases/web`) changes each of them;
 *  - a `Chart.yaml` names local chart dependencies (`repository: file://../common`).
 *
 * A folder found is read the same way (a base built on another base), at most MAX_FOLDERS
 * folders per application. What is not a path of the repository at that commit — remote bases
 * (`github.com/org/repo//path?ref=v1`, `https://…`), paths climbing out of it, names that do not
 * exist — is left out; so is what lies inside a path already followed.
 *
 * It reads the tree at the commit asked for (the one whose change revision is computed): a base
 * the kustomization named only in the past is not followed. Argo CD's manifest-generate-paths
 * annotation, when set, is the customer's own list and replaces all of this (manifest-paths.ts).
 */
import { posix } from 'node:path';
import { parse } from 'yaml';
import { inRepository } from './manifest-paths.ts';

/** Folders read per application at most (each one `git ls-tree` and, when it has one, a blob). */
export const MAX_FOLDERS = 32;
/** Largest kustomization or Chart.yaml read (bytes): a larger one is not followed. */
export const MAX_FILE_BYTES = 256 * 1024;

const KUSTOMIZATION_FILES = ['kustomization.yaml', 'kustomization.yml', 'Kustomization'];
const CHART_FILE = 'Chart.yaml';

/** What the folder reader needs of a repository at one commit (GitMirrors, by repository and SHA). */
export interface RepositoryTree {
  /** The entries at these repository-relative paths, by path; absent paths are left out. */
  entries(paths: readonly string[]): Promise<Map<string, { type: 'blob' | 'tree'; oid: string }>>;
  /** A blob's text by object id. */
  text(oid: string): Promise<string>;
}

export interface LocalReferences {
  /** Repository-relative paths outside `covered`, sorted, without repeats. */
  paths: string[];
  /** Folders were left unread because there were more than MAX_FOLDERS. */
  truncated: boolean;
}

/** Whether `path` is `prefix` or inside it ('' covers everything). */
function within(path: string, prefix: string): boolean {
  return prefix === '' || path === prefix || path.startsWith(`${prefix}/`);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function strings(v: unknown): string[] {
  if (typeof v === 'string') return [v];
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [];
}

/** The paths a kustomization names, relative to its folder (Kustomize v5's fields, and the older ones it still reads). */
export function kustomizationReferences(doc: unknown): string[] {
  if (!isObject(doc)) return [];
  const out: string[] = [];
  for (const field of [
    'resources',
    'bases',
    'components',
    'crds',
    'patchesStrategicMerge',
    'configurations',
    'generators',
    'transformers',
    'validators',
  ])
    // Inline patches are YAML text, not paths: a path has no line break.
    out.push(...strings(doc[field]).filter((s) => !s.includes('\n')));
  for (const field of ['patches', 'patchesJson6902', 'replacements'])
    if (Array.isArray(doc[field])) for (const p of doc[field]) if (isObject(p)) out.push(...strings(p.path));
  for (const field of ['configMapGenerator', 'secretGenerator'])
    if (Array.isArray(doc[field]))
      for (const g of doc[field])
        if (isObject(g)) {
          // `files` entries are `path` or `key=path`.
          for (const f of strings(g.files)) out.push(f.includes('=') ? f.slice(f.indexOf('=') + 1) : f);
          out.push(...strings(g.envs), ...strings(g.env));
        }
  if (isObject(doc.helmGlobals)) out.push(...strings(doc.helmGlobals.chartHome));
  if (isObject(doc.openapi)) out.push(...strings(doc.openapi.path));
  return out;
}

/** The local chart dependencies a Chart.yaml names (`repository: file://<path>`), relative to its folder. */
export function chartReferences(doc: unknown): string[] {
  if (!isObject(doc) || !Array.isArray(doc.dependencies)) return [];
  const out: string[] = [];
  for (const d of doc.dependencies)
    if (isObject(d) && typeof d.repository === 'string' && d.repository.startsWith('file://'))
      out.push(d.repository.slice('file://'.length));
  return out;
}

/** `name` in a repository-relative folder ('' the root). */
function joinPath(folder: string, name: string): string {
  return folder === '' ? name : posix.join(folder, name);
}

function parseYaml(text: string): unknown {
  if (Buffer.byteLength(text) > MAX_FILE_BYTES) return undefined;
  try {
    return parse(text, { maxAliasCount: 100, uniqueKeys: false });
  } catch {
    // Not YAML Kustomize or Helm could read either: Argo CD says so when it generates the manifests.
    return undefined;
  }
}

/**
 * The paths outside `covered` that the folders `roots` (repository-relative, '' the root) build
 * on, read from `tree` (see the module's comment).
 */
export async function localReferences(
  tree: RepositoryTree,
  roots: readonly string[],
  covered: readonly string[],
): Promise<LocalReferences> {
  const found = new Set<string>();
  const seen = new Set<string>(roots);
  const queue = [...roots];
  let read = 0;
  const isCovered = (p: string) => covered.some((c) => within(p, c)) || [...found].some((f) => within(p, f));
  while (queue.length > 0) {
    if (read >= MAX_FOLDERS) return { paths: [...found].sort(), truncated: true };
    const folder = queue.shift() as string;
    read++;
    const names = [...KUSTOMIZATION_FILES, CHART_FILE].map((n) => joinPath(folder, n));
    const files = await tree.entries(names);
    const references: string[] = [];
    const kustomization = KUSTOMIZATION_FILES.map((n) => files.get(joinPath(folder, n))).find(
      (e) => e?.type === 'blob',
    );
    if (kustomization) references.push(...kustomizationReferences(parseYaml(await tree.text(kustomization.oid))));
    const chart = files.get(joinPath(folder, CHART_FILE));
    if (chart?.type === 'blob') references.push(...chartReferences(parseYaml(await tree.text(chart.oid))));
    const paths = [
      ...new Set(
        references.map((r) => inRepository(folder, r)).filter((p): p is string => p !== undefined && p !== ''),
      ),
    ];
    if (paths.length === 0) continue;
    const entries = await tree.entries(paths);
    for (const path of paths) {
      const entry = entries.get(path);
      if (!entry) continue;
      if (!isCovered(path)) {
        // A folder found replaces the paths found inside it.
        for (const f of found) if (within(f, path)) found.delete(f);
        found.add(path);
      }
      if (entry.type === 'tree' && !seen.has(path)) {
        seen.add(path);
        queue.push(path);
      }
    }
  }
  return { paths: [...found].sort(), truncated: false };
}
