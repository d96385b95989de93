/**
 * What the Source Server answers about an Application (runtime/protocol/sources.ts), from Argo
 * CD (manifests, revision metadata, managed resources) and Git (which commit changed the path).
 *
 * Change (`change()`), for a single-source Application whose source is a path of a Git
 * repository over http(s):
 *  1. the revision: the one asked for, else the Application's targetRevision resolved in the
 *     mirror (branch, tag, HEAD or SHA) after a fetch;
 *  2. the change revision: the last commit at or before it that changed one of the paths its
 *     manifests are generated from (manifest-paths.ts: the source path and the Helm value files it
 *     names, the folders outside it its kustomization or Chart.yaml builds on (local-references.ts),
 *     or Argo CD's manifest-generate-paths annotation; `git log -2 -- <paths>`, the whole
 *     repository for `.`), and the one before it. A commit elsewhere in a monorepo moves the branch
 *     head but not this: the application's change revision stays;
 *  3. the commit: Argo CD's RevisionMetadata of the change revision, else Git's own;
 *  4. what changed: Argo CD's manifests at the previous change revision against those at the
 *     change revision (diff.ts); without a previous one, every resource is `added`. When Argo CD
 *     cannot generate the manifests at the change revision, `error` is its message.
 * Multi-source Applications answer `unsupported: 'multi-source'`, Helm chart repositories and
 * non-http sources `unsupported: 'not-git'`.
 *
 * Diff (`diff()`): with a revision, what that commit changed in the application's manifests
 * (see ApplicationDiff); without, Git against the cluster from Argo CD's managed resources.
 *
 * Argo CD's manifests are cached by (repository, revision SHA, path, source spec) — what Argo CD
 * generates for one commit does not change — and change answers by (application, revision, path,
 * repository, source spec); both in one byte-bounded LRU (cache.ts). Answers carrying an error
 * are not cached: the next report asks again.
 */
import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import {
  type ApplicationChange,
  type ApplicationDiff,
  type CommitInfo,
  MAX_COMMIT_MESSAGE_CHARS,
} from '../../protocol/sources.ts';
import { type ArgoApplication, ArgoCdClient, ArgoCdError, type ArgoSource, type ManagedResource } from './argocd.ts';
import { ByteLruCache, cacheKey } from './cache.ts';
import { boundChange, boundDiff, compareResources, type KubeObject, manifestsByKey, resourceKey } from './diff.ts';
import { type GitMirrors, isHttpGitUrl, redactUrl, sourcePathspec } from './git.ts';
import { localReferences, MAX_FOLDERS, type RepositoryTree } from './local-references.ts';
import { MAX_PATHS, manifestPaths } from './manifest-paths.ts';

const MAX_AUTHOR_CHARS = 256;
const MAX_TAGS = 20;
const MAX_TAG_CHARS = 256;
const MAX_SIGNATURE_CHARS = 1024;
/** Longest error message kept in a change (Argo CD's messages quote tool output). */
const MAX_ERROR_CHARS = 4000;

/** A request the application's kind of source cannot answer (409 on the diff route). */
export class UnsupportedSource extends Error {
  readonly reason: 'multi-source' | 'not-git';
  constructor(reason: 'multi-source' | 'not-git', message: string) {
    super(message);
    this.name = 'UnsupportedSource';
    this.reason = reason;
  }
}

/** Argo CD could not generate the manifests at the revision asked for (422 on the diff route). */
export class ManifestGenerationFailed extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ManifestGenerationFailed';
  }
}

type Cached =
  | { kind: 'manifests'; texts: string[] }
  | { kind: 'change'; change: ApplicationChange }
  | { kind: 'paths'; paths: string[] }
  | { kind: 'text'; text: string };

export interface SourceServiceOptions {
  argo: ArgoCdClient;
  git: GitMirrors;
  cacheMaxBytes: number;
  log?: Logger;
}

interface GitSource {
  repoURL: string;
  path: string | undefined;
  /** The paths whose commits change its manifests (manifest-paths.ts); undefined: the whole repository. */
  paths: string[] | undefined;
  /** Whether the folders its kustomization or Chart.yaml names are followed too (no annotation says what to follow). */
  discover: boolean;
  targetRevision: string;
  /** What else shapes the manifests Argo CD generates (Helm values, Kustomize options, destination). */
  specHash: string;
}

function cutText(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}…`;
}

function boundCommit(c: CommitInfo): CommitInfo {
  return {
    revision: c.revision,
    ...(c.author !== undefined ? { author: cutText(c.author, MAX_AUTHOR_CHARS) } : {}),
    ...(c.date !== undefined ? { date: c.date } : {}),
    ...(c.message !== undefined ? { message: cutText(c.message, MAX_COMMIT_MESSAGE_CHARS) } : {}),
    tags: (c.tags ?? []).slice(0, MAX_TAGS).map((t) => cutText(t, MAX_TAG_CHARS)),
    ...(c.signatureInfo !== undefined ? { signatureInfo: cutText(c.signatureInfo, MAX_SIGNATURE_CHARS) } : {}),
  };
}

function parseState(text: string | undefined): KubeObject | undefined {
  if (text === undefined || text === '' || text === 'null') return undefined;
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as KubeObject) : undefined;
  } catch {
    return undefined;
  }
}

export class SourceService {
  readonly #argo: ArgoCdClient;
  readonly #git: GitMirrors;
  readonly cache: ByteLruCache<Cached>;
  readonly #log: Logger | undefined;

  constructor(opts: SourceServiceOptions) {
    this.#argo = opts.argo;
    this.#git = opts.git;
    this.cache = new ByteLruCache<Cached>(opts.cacheMaxBytes);
    this.#log = opts.log;
  }

  async change(namespace: string, name: string, revision?: string): Promise<ApplicationChange> {
    const application = await this.#argo.application(namespace, name);
    const syncRevision = application.status?.sync?.revision ?? '';
    const source = gitSource(application);
    if (source instanceof UnsupportedSource)
      return {
        revision: revision ?? syncRevision,
        resources: [],
        images: [],
        truncated: false,
        unsupported: source.reason,
      };
    // Without a revision the question is what the head of targetRevision is now: fetched afresh.
    const sha = await this.#git.resolve(source.repoURL, revision ?? source.targetRevision, {
      fresh: revision === undefined,
    });
    const key = cacheKey(
      'change',
      application.metadata?.uid ?? `${namespace}/${name}`,
      sha,
      source.path ?? '',
      source.repoURL,
      source.specHash,
    );
    const hit = this.cache.get(key);
    if (hit?.kind === 'change') return hit.change;

    const paths = await this.#pathsAt(source, sha);
    const [changeRevision, previousChangeRevision] = await this.#git.pathLog(source.repoURL, sha, paths);
    if (changeRevision === undefined)
      return {
        revision: sha,
        resources: [],
        images: [],
        truncated: false,
        error: `no commit at or before ${sha} changes ${(paths ?? ['.']).map((p) => `'${p}'`).join(', ')} in ${redactUrl(source.repoURL)}`,
      };
    const commit = boundCommit(
      (await this.#argo.revisionMetadata(namespace, name, changeRevision)) ??
        (await this.#git.commitInfo(source.repoURL, changeRevision)),
    );
    const base = {
      revision: sha,
      changeRevision,
      ...(previousChangeRevision !== undefined ? { previousChangeRevision } : {}),
      commit,
    };
    let after: string[];
    try {
      after = await this.#manifests(namespace, name, source, changeRevision);
    } catch (err) {
      if (err instanceof ArgoCdError && err.failure === 'failed')
        return { ...base, resources: [], images: [], truncated: false, error: cutText(err.message, MAX_ERROR_CHARS) };
      throw err;
    }
    const before =
      previousChangeRevision === undefined
        ? []
        : await this.#manifestsOrNone(namespace, name, source, previousChangeRevision);
    const { resources, images } = compareResources(manifestsByKey(before), manifestsByKey(after));
    const namespaceOf = await this.#namespacesOf(
      namespace,
      name,
      resources.some((r) => r.namespace === ''),
    );
    const change = boundChange({
      ...base,
      resources: resources.map(({ before: _b, after: _a, ...r }) =>
        r.namespace === '' ? { ...r, namespace: namespaceOf(r.group, r.kind, r.name) } : r,
      ),
      images: images.map((i) => {
        const [kind = '', ns = '', ...rest] = i.resource.split('/');
        if (ns !== '') return i;
        const resourceName = rest.join('/');
        const group = resources.find((r) => r.kind === kind && r.name === resourceName)?.group ?? '';
        return { ...i, resource: `${kind}/${namespaceOf(group, kind, resourceName)}/${resourceName}` };
      }),
      truncated: false,
    });
    this.cache.set(key, { kind: 'change', change }, Buffer.byteLength(JSON.stringify(change)));
    return change;
  }

  async diff(namespace: string, name: string, revision?: string): Promise<ApplicationDiff> {
    const application = await this.#argo.application(namespace, name);
    if (revision === undefined) return this.#liveDiff(namespace, name, application);
    const source = gitSource(application);
    if (source instanceof UnsupportedSource) throw source;
    const sha = await this.#git.resolve(source.repoURL, revision);
    const [last, previous] = await this.#git.pathLog(source.repoURL, sha, await this.#pathsAt(source, sha));
    // The change revision before `sha`: when `sha` itself changed the path, the one before it; else
    // the last one that did (and the diff is empty: this commit did not change the application).
    const baseRevision = last === sha ? previous : last;
    let after: string[];
    try {
      after = await this.#manifests(namespace, name, source, sha);
    } catch (err) {
      if (err instanceof ArgoCdError && err.failure === 'failed') throw new ManifestGenerationFailed(err.message);
      throw err;
    }
    const before = baseRevision === undefined ? [] : await this.#manifestsOrNone(namespace, name, source, baseRevision);
    const { resources } = compareResources(manifestsByKey(before), manifestsByKey(after));
    const bounded = boundDiff(resources);
    return {
      application: { namespace, name },
      revision: sha,
      base: baseRevision ?? '',
      resources: bounded.resources,
      truncated: bounded.truncated,
    };
  }

  /**
   * The paths whose commits change the application's manifests at `sha`: manifest-paths.ts's,
   * and, without the annotation, the folders and files outside its source path that its
   * kustomization or Chart.yaml names at that commit (local-references.ts). Cached by commit;
   * the files read, by object id.
   */
  async #pathsAt(source: GitSource, sha: string): Promise<string[] | undefined> {
    if (!source.discover || source.path === undefined || source.paths === undefined) return source.paths;
    const key = cacheKey('paths', source.repoURL, sha, source.path);
    const hit = this.cache.get(key);
    if (hit?.kind === 'paths') return mergePaths(source.paths, hit.paths);
    const repoURL = source.repoURL;
    const tree: RepositoryTree = {
      entries: (paths) => this.#git.treeEntries(repoURL, sha, paths),
      text: async (oid) => {
        const textKey = cacheKey('text', repoURL, oid);
        const cached = this.cache.get(textKey);
        if (cached?.kind === 'text') return cached.text;
        const text = await this.#git.blobText(repoURL, oid);
        this.cache.set(textKey, { kind: 'text', text }, Buffer.byteLength(text));
        return text;
      },
    };
    const found = await localReferences(tree, [source.path], source.paths);
    if (found.truncated)
      this.#log?.warn(
        { repository: redactUrl(repoURL), path: source.path, revision: sha, followed: found.paths.length },
        `more than ${MAX_FOLDERS} folders named by kustomizations: the rest are not followed`,
      );
    this.cache.set(
      key,
      { kind: 'paths', paths: found.paths },
      found.paths.reduce((n, p) => n + p.length + 8, 64),
    );
    return mergePaths(source.paths, found.paths);
  }

  /**
   * Where Argo CD put the application's resources whose manifests name no namespace (it applies
   * those of namespaced kinds in the destination namespace; which kinds are namespaced only the
   * cluster knows): from its managed resources, by group, kind and name. Best effort: when Argo
   * CD cannot say, or `needed` is false, the namespace stays empty.
   */
  async #namespacesOf(
    namespace: string,
    name: string,
    needed: boolean,
  ): Promise<(group: string, kind: string, resourceName: string) => string> {
    const found = new Map<string, string>();
    if (needed) {
      try {
        for (const item of await this.#argo.managedResources(namespace, name))
          if (item.namespace) found.set(`${item.group ?? ''}/${item.kind ?? ''}/${item.name ?? ''}`, item.namespace);
      } catch (err) {
        this.#log?.debug({ err }, 'managed resources unavailable: namespaces left as the manifests have them');
      }
    }
    return (group, kind, resourceName) => found.get(`${group}/${kind}/${resourceName}`) ?? '';
  }

  async #liveDiff(namespace: string, name: string, application: ArgoApplication): Promise<ApplicationDiff> {
    const items = await this.#argo.managedResources(namespace, name);
    const live = new Map<string, KubeObject>();
    const target = new Map<string, KubeObject>();
    const modified = new Map<string, boolean>();
    for (const item of items) {
      if (item.hook) continue;
      const key = resourceKey({
        group: item.group ?? '',
        kind: item.kind ?? '',
        namespace: item.namespace ?? '',
        name: item.name ?? '',
      });
      const l = parseState(item.normalizedLiveState) ?? parseState(item.liveState);
      // Argo CD's predicted live state is Git applied to the cluster's object (defaults the API
      // server filled in are on both sides, so they are not differences); its target state otherwise.
      const t = parseState(item.predictedLiveState) ?? parseState(item.targetState);
      if (l) live.set(key, withKey(l, item));
      if (t) target.set(key, withKey(t, item));
      if (typeof item.modified === 'boolean') modified.set(key, item.modified);
    }
    const { resources } = compareResources(live, target, { modified: (key) => modified.get(key) });
    const bounded = boundDiff(resources);
    return {
      application: { namespace, name },
      revision: application.status?.sync?.revision ?? '',
      base: 'live',
      resources: bounded.resources,
      truncated: bounded.truncated,
    };
  }

  async #manifests(namespace: string, name: string, source: GitSource, sha: string): Promise<string[]> {
    const key = cacheKey('manifests', source.repoURL, sha, source.path ?? '', source.specHash);
    const hit = this.cache.get(key);
    if (hit?.kind === 'manifests') return hit.texts;
    const { manifests } = await this.#argo.manifests(namespace, name, sha);
    this.cache.set(
      key,
      { kind: 'manifests', texts: manifests },
      manifests.reduce((n, m) => n + m.length, 0),
    );
    return manifests;
  }

  /** The manifests at an earlier revision; none when Argo CD cannot generate them there (that commit was broken). */
  async #manifestsOrNone(namespace: string, name: string, source: GitSource, sha: string): Promise<string[]> {
    try {
      return await this.#manifests(namespace, name, source, sha);
    } catch (err) {
      if (!(err instanceof ArgoCdError && err.failure === 'failed')) throw err;
      this.#log?.info({ namespace, name, revision: sha, reason: err.message }, 'no manifests at the earlier revision');
      return [];
    }
  }
}

/** The followed paths and those found, sorted and without repeats, at most MAX_PATHS. */
function mergePaths(paths: readonly string[], found: readonly string[]): string[] {
  return [...new Set([...paths, ...found])].sort().slice(0, MAX_PATHS);
}

/** The resource identity Argo CD gives an item, on its state (a target state may lack its namespace). */
function withKey(obj: KubeObject, item: ManagedResource): KubeObject {
  const metadata = typeof obj.metadata === 'object' && obj.metadata !== null ? (obj.metadata as KubeObject) : {};
  if (metadata.namespace !== undefined || !item.namespace) return obj;
  return { ...obj, metadata: { ...metadata, namespace: item.namespace } };
}

/** The Application's Git source, or why it has none the Source Server can follow. */
export function gitSource(application: ArgoApplication): GitSource | UnsupportedSource {
  const spec = application.spec ?? {};
  if (Array.isArray(spec.sources) && spec.sources.length > 0)
    return new UnsupportedSource(
      'multi-source',
      'the Application has several sources: change revisions and commit diffs follow single-source Applications only',
    );
  const src: ArgoSource = spec.source ?? {};
  if (typeof src.repoURL !== 'string' || src.repoURL === '')
    return new UnsupportedSource('not-git', 'the Application has no source repository');
  if (typeof src.chart === 'string' && src.chart !== '')
    return new UnsupportedSource(
      'not-git',
      `the Application's source is the Helm chart '${src.chart}', not a Git path`,
    );
  if (!isHttpGitUrl(src.repoURL))
    return new UnsupportedSource(
      'not-git',
      `the Application's source ${redactUrl(src.repoURL)} is not a Git repository over http(s)`,
    );
  const followed = manifestPaths(application);
  const specHash = createHash('sha256')
    .update(
      JSON.stringify({
        source: { ...src, targetRevision: undefined },
        destination: spec.destination ?? {},
        paths: followed.paths ?? null,
      }),
    )
    .digest('hex')
    .slice(0, 32);
  return {
    repoURL: src.repoURL,
    path: sourcePathspec(typeof src.path === 'string' ? src.path : undefined),
    paths: followed.paths,
    discover: false && followed.from === 'source',
    targetRevision: typeof src.targetRevision === 'string' ? src.targetRevision : 'HEAD',
    specHash,
  };
}
