/**
 * Which paths of its repository shape an Application's manifests: the paths whose commits move its
 * change revision (change.ts). A monorepo application's manifests often depend on files outside
 * its source path — Helm value files shared by environments (`../../values/prod.yaml`), a
 * `fileParameters` file — and a commit there changes what Argo CD generates for it although its
 * source path did not move.
 *
 *  - With Argo CD's `argocd.argoproj.io/manifest-generate-paths` annotation on the Application, its
 *    paths and nothing else, as Argo CD reads them (its webhook handler and manifest cache): a
 *    semicolon-separated list, each path relative to the source path (`.` is the source path) or,
 *    starting with `/`, to the repository's root. The annotation is how the customer says what
 *    their application depends on (a Kustomize base elsewhere, a shared chart); it wins.
 *  - Otherwise the source path, and the Helm value files and file parameters the source names
 *    that are in the repository (relative to the source path, or from its root with a leading
 *    `/`). Remote value files (`https://…`) and paths leaving the repository are not Git paths
 *    of this repository: left out. A value file another source reads through a multi-source
 *    Application's `ref` (`$values/envs/prod.yaml`) is a path of the ref's source (refFiles).
 *
 * Answers repository-relative pathspecs, sorted and without repeats, or undefined for the whole
 * repository (a source path of `.`, or `/` in the annotation). At most MAX_PATHS (the rest is
 * dropped, said by `truncated`).
 */
import { posix } from 'node:path';
import type { ArgoApplication, ArgoSource } from './argocd.ts';
import { sourcePathspec } from './git.ts';

/** Argo CD's annotation listing the paths an Application's manifests are generated from. */
export const MANIFEST_PATHS_ANNOTATION = 'argocd.argoproj.io/manifest-generate-paths';
/** Paths followed per Application at most (a `git log` pathspec each). */
export const MAX_PATHS = 64;
/** Longest path followed (characters): a longer one is not a path of a real repository. */
const MAX_PATH_CHARS = 1024;

export interface ManifestPaths {
  /** Repository-relative pathspecs; undefined: the whole repository. */
  paths: string[] | undefined;
  /** Where they come from. */
  from: 'annotation' | 'source';
  /** Entries left out because there were more than MAX_PATHS. */
  truncated: boolean;
}

/**
 * `entry` (relative to `base`, or to the root with a leading `/`) as a repository-relative path:
 * '' for the root, undefined when it is not a path of the repository.
 */
export function inRepository(base: string, entry: string): string | undefined {
  const text = entry.trim();
  if (text === '' || text.length > MAX_PATH_CHARS || text.includes('\0')) return undefined;
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(text) || text.startsWith('$')) return undefined;
  const relative = text.startsWith('/') ? text.replace(/^\/+/, '') : posix.join(base, text);
  // Argo CD refuses paths that climb out of the repository (`../../x` from `apps/a/..`); so does this.
  if (climbsOut(relative)) return undefined;
  const normal = posix.normalize(relative).replace(/\/+$/, '');
  return normal === '.' ? '' : normal;
}

/** Whether a relative path's `..` segments climb above its start. */
function climbsOut(path: string): boolean {
  let depth = 0;
  for (const segment of path.split('/')) {
    if (segment === '' || segment === '.') continue;
    depth += segment === '..' ? -1 : 1;
    if (depth < 0) return true;
  }
  return false;
}

/** The paths whose commits change `application`'s manifests (see the module's comment). */
export function manifestPaths(application: ArgoApplication): ManifestPaths {
  return sourceManifestPaths(application.spec?.source ?? {}, annotationOf(application));
}

/** Argo CD's manifest-generate-paths annotation of the Application, when set. */
export function annotationOf(application: ArgoApplication): string | undefined {
  const annotation = application.metadata?.annotations?.[MANIFEST_PATHS_ANNOTATION];
  return typeof annotation === 'string' && annotation.trim() !== '' ? annotation : undefined;
}

/**
 * The value files and file parameters the sources of a multi-source Application name in the
 * source whose `ref` is `ref` (`$values/envs/prod.yaml` for `ref: values`), as paths from that
 * repository's root (`/envs/prod.yaml`).
 */
export function refFiles(sources: readonly ArgoSource[], ref: string): string[] {
  const prefix = `$${ref}/`;
  const out: string[] = [];
  for (const src of sources) {
    const helm = isObject(src.helm) ? src.helm : {};
    const named: unknown[] = [
      ...(Array.isArray(helm.valueFiles) ? (helm.valueFiles as unknown[]) : []),
      ...(Array.isArray(helm.fileParameters) ? helm.fileParameters.map((p) => (isObject(p) ? p.path : undefined)) : []),
    ];
    for (const f of named) if (typeof f === 'string' && f.startsWith(prefix)) out.push(`/${f.slice(prefix.length)}`);
  }
  return out;
}

/**
 * The paths of one source (the Application's, or one of a multi-source Application's). `refs`:
 * for a source with a `ref`, the files other sources name through it (refFiles); a source with a
 * `ref` and no path generates no manifests itself and follows those files only. The annotation
 * applies to a source with a path, relative to it, as Argo CD applies it to each source.
 */
export function sourceManifestPaths(
  src: ArgoSource,
  annotation: string | undefined,
  refs: string[] = [],
): ManifestPaths {
  const base = sourcePathspec(typeof src.path === 'string' ? src.path : undefined) ?? '';
  const refOnly = refs.length > 0 && (typeof src.path !== 'string' || src.path === '');
  const entries: string[] = [...refs];
  let from: ManifestPaths['from'] = 'source';
  if (refOnly) {
    // Only the files other sources read through its ref.
  } else if (annotation !== undefined) {
    from = 'annotation';
    entries.push(...annotation.split(';'));
  } else {
    entries.push('.');
    const helm = isObject(src.helm) ? src.helm : {};
    if (Array.isArray(helm.valueFiles)) for (const f of helm.valueFiles) if (typeof f === 'string') entries.push(f);
    if (Array.isArray(helm.fileParameters))
      for (const p of helm.fileParameters) if (isObject(p) && typeof p.path === 'string') entries.push(p.path);
  }
  const found = new Set<string>();
  for (const entry of entries) {
    const path = inRepository(base, entry);
    if (path === undefined) continue;
    if (path === '') return { paths: undefined, from, truncated: false };
    found.add(path);
  }
  const sorted = [...found].sort();
  // An empty annotation list (only remote or outside paths): the source path, as without one.
  if (sorted.length === 0) return { paths: base === '' ? undefined : [base], from, truncated: false };
  return { paths: sorted.slice(0, MAX_PATHS), from, truncated: sorted.length > MAX_PATHS };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
