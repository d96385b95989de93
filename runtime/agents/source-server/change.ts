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
 * A multi-source Application: the same per Git source (gitSources: a path, or a `ref` other sources
 * read value files through), the newest change revision of them the application's, its manifests
 * asked with every source pinned (#multiSourceChange). Helm chart repositories and non-http
 * sources are not followed; an Application with no other source answers `unsupported: 'not-git'`.
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
  type ApplicationPreview,
  type CommitInfo,
  MAX_CHANGED_RESOURCES,
  MAX_COMMIT_MESSAGE_CHARS,
} from '../../protocol/sources.ts';
import { type ArgoApplication, ArgoCdClient, ArgoCdError, type ArgoSource, type ManagedResource } from './argocd.ts';
import { ByteLruCache, cacheKey } from './cache.ts';
import {
  boundChange,
  boundDiff,
  compareResources,
  type KubeObject,
  manifestsByKey,
  previewResources,
  resourceId,
  resourceKey,
} from './diff.ts';
import { GitError, type GitMirrors, isHttpGitUrl, redactUrl, sourcePathspec } from './git.ts';
import { localReferences, MAX_FOLDERS, type RepositoryTree } from './local-references.ts';
import { annotationOf, MAX_PATHS, refFiles, sourceManifestPaths } from './manifest-paths.ts';

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
    if (isMultiSource(application)) return this.#multiSourceChange(namespace, name, application, revision);
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
    return this.#changeAt(namespace, name, key, {
      revision: sha,
      repoURL: source.repoURL,
      changeRevision,
      previousChangeRevision,
      at: (commitSha) => ({ kind: 'single', source, sha: commitSha }),
    });
  }

  /**
   * A multi-source Application's change: each Git source followed (gitSources) has its own change
   * revision in its repository; the application's is the newest of them (by committer date; in
   * one repository within the same second, the descendant; else the first source), with its
   * commit and what it changed — the manifests with every source at its change revision against
   * the same with that one source at its previous change revision, the others held. Asked at a revision (the reporter's synced one), every source is
   * taken at its synced revision (status.sync.revisions); without, at the head of its targetRevision.
   */
  async #multiSourceChange(
    namespace: string,
    name: string,
    application: ArgoApplication,
    revision: string | undefined,
  ): Promise<ApplicationChange> {
    const synced = application.status?.sync?.revisions ?? [];
    const followed = gitSources(application);
    const asked = revision ?? synced[0] ?? '';
    if (followed.length === 0)
      return {
        revision: asked,
        resources: [],
        images: [],
        truncated: false,
        unsupported: 'not-git',
      };
    const shas = await Promise.all(
      followed.map((s) => {
        const pinned = revision !== undefined ? synced[s.index] : undefined;
        return this.#git.resolve(s.repoURL, pinned !== undefined && pinned !== '' ? pinned : s.targetRevision, {
          fresh: revision === undefined,
        });
      }),
    );
    const key = cacheKey(
      'change',
      application.metadata?.uid ?? `${namespace}/${name}`,
      JSON.stringify(followed.map((s, k) => [s.index, shas[k]])),
      asked,
      followed[0]!.specHash,
    );
    const hit = this.cache.get(key);
    if (hit?.kind === 'change') return hit.change;

    const logs = await Promise.all(
      followed.map(async (s, k) => {
        const paths = await this.#pathsAt(s, shas[k]!);
        const [last, previous] = await this.#git.pathLog(s.repoURL, shas[k]!, paths);
        return { last, previous, paths };
      }),
    );
    // The newest change revision among the sources: by committer date; within one second, in one
    // repository, the descendant (commits pushed together share their second).
    let chosen = -1;
    let newest = -Infinity;
    for (let k = 0; k < followed.length; k++) {
      const last = logs[k]!.last;
      if (last === undefined) continue;
      const time = await this.#git.commitTime(followed[k]!.repoURL, last);
      const best = chosen >= 0 ? logs[chosen]!.last! : undefined;
      const newer =
        time > newest ||
        (time === newest &&
          best !== undefined &&
          best !== last &&
          redactUrl(followed[chosen]!.repoURL) === redactUrl(followed[k]!.repoURL) &&
          (await this.#git.isAncestor(followed[k]!.repoURL, best, last)));
      if (newer) {
        newest = time;
        chosen = k;
      }
    }
    const revisionField = revision ?? (followed[0]!.index === 0 ? shas[0]! : asked);
    if (chosen < 0)
      return {
        revision: revisionField,
        resources: [],
        images: [],
        truncated: false,
        error: `no commit changes the paths of any of the Application's Git sources (${followed
          .map(
            (s, k) =>
              `${redactUrl(s.repoURL)} at ${shas[k]}: ${(logs[k]!.paths ?? ['.']).map((p) => `'${p}'`).join(', ')}`,
          )
          .join('; ')})`,
      };
    const source = followed[chosen]!;
    const changeRevision = logs[chosen]!.last!;
    const previousChangeRevision = logs[chosen]!.previous;
    return this.#changeAt(namespace, name, key, {
      revision: revisionField,
      repoURL: source.repoURL,
      sourceIndex: source.index,
      changeRevision,
      previousChangeRevision,
      at: (revisionOfChosen) => ({
        kind: 'multi',
        specHash: source.specHash,
        pins: pinsOf(
          application,
          followed,
          (k) => (k === chosen ? revisionOfChosen : (logs[k]!.last ?? shas[k]!)),
          synced,
        ),
      }),
    });
  }

  /**
   * The change whose change revision is known: its commit (Argo CD's RevisionMetadata, of the
   * source `sourceIndex` of a multi-source Application, else Git's own) and what the manifests at
   * `at(changeRevision)` changed against those at `at(previousChangeRevision)`; kept under `key`
   * unless it carries an error.
   */
  async #changeAt(
    namespace: string,
    name: string,
    key: string,
    o: {
      revision: string;
      repoURL: string;
      sourceIndex?: number;
      changeRevision: string;
      previousChangeRevision: string | undefined;
      at: (sha: string) => Target;
    },
  ): Promise<ApplicationChange> {
    const commit = boundCommit(
      (await this.#argo.revisionMetadata(namespace, name, o.changeRevision, o.sourceIndex)) ??
        (await this.#git.commitInfo(o.repoURL, o.changeRevision)),
    );
    const change = await this.#changeOf(
      namespace,
      name,
      {
        revision: o.revision,
        changeRevision: o.changeRevision,
        ...(o.previousChangeRevision !== undefined ? { previousChangeRevision: o.previousChangeRevision } : {}),
        commit,
      },
      o.at(o.changeRevision),
      o.previousChangeRevision === undefined ? undefined : o.at(o.previousChangeRevision),
    );
    if (change.error === undefined)
      this.cache.set(key, { kind: 'change', change }, Buffer.byteLength(JSON.stringify(change)));
    return change;
  }

  /** What the manifests at `after` changed compared with those at `before` (none: every resource added). */
  async #changeOf(
    namespace: string,
    name: string,
    base: Pick<ApplicationChange, 'revision' | 'changeRevision' | 'previousChangeRevision' | 'commit'>,
    after: Target,
    before: Target | undefined,
  ): Promise<ApplicationChange> {
    let afterTexts: string[];
    try {
      afterTexts = await this.#manifests(namespace, name, after);
    } catch (err) {
      if (err instanceof ArgoCdError && err.failure === 'failed')
        return { ...base, resources: [], images: [], truncated: false, error: cutText(err.message, MAX_ERROR_CHARS) };
      throw err;
    }
    const beforeTexts = before === undefined ? [] : await this.#manifestsOrNone(namespace, name, before);
    const { resources, images } = compareResources(manifestsByKey(beforeTexts), manifestsByKey(afterTexts));
    const namespaceOf = await this.#namespacesOf(
      namespace,
      name,
      resources.some((r) => r.namespace === ''),
    );
    return boundChange({
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
  }

  async diff(namespace: string, name: string, revision?: string): Promise<ApplicationDiff> {
    const application = await this.#argo.application(namespace, name);
    if (revision === undefined) return this.#liveDiff(namespace, name, application);
    let sha: string;
    let last: string | undefined;
    let previous: string | undefined;
    let at: (commitSha: string) => Target;
    if (isMultiSource(application)) {
      const found = await this.#multiSourceCommit(application, revision);
      ({ sha, last, previous } = found);
      const synced = application.status?.sync?.revisions ?? [];
      const followed = found.followed;
      at = (commitSha) => ({
        kind: 'multi',
        specHash: found.source.specHash,
        pins: pinsOf(application, followed, (k) => (k === found.k ? commitSha : found.held[k]!), synced),
      });
    } else {
      const source = gitSource(application);
      if (source instanceof UnsupportedSource) throw source;
      sha = await this.#git.resolve(source.repoURL, revision);
      [last, previous] = await this.#git.pathLog(source.repoURL, sha, await this.#pathsAt(source, sha));
      at = (commitSha) => ({ kind: 'single', source, sha: commitSha });
    }
    // The change revision before `sha`: when `sha` itself changed the path, the one before it; else
    // the last one that did (and the diff is empty: this commit did not change the application).
    const baseRevision = last === sha ? previous : last;
    let after: string[];
    try {
      after = await this.#manifests(namespace, name, at(sha));
    } catch (err) {
      if (err instanceof ArgoCdError && err.failure === 'failed') throw new ManifestGenerationFailed(err.message);
      throw err;
    }
    const before = baseRevision === undefined ? [] : await this.#manifestsOrNone(namespace, name, at(baseRevision));
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
   * What a sync to `revision` would change in what runs now (protocol ApplicationPreview): the
   * manifests Argo CD generates at that commit against the managed resources' live state, each
   * change checked against the Git change from the synced revision. A multi-source Application's
   * preview moves the source `revision` is a commit of (the one whose followed paths it changed,
   * as for a change revision) and holds the others at their synced revisions; `revision` and
   * `current` then name that source's commits.
   */
  async preview(namespace: string, name: string, revision: string): Promise<ApplicationPreview> {
    const application = await this.#argo.application(namespace, name);
    let sha: string;
    let synced: string;
    let after: Target;
    let now: (() => Promise<Target>) | undefined;
    if (isMultiSource(application)) {
      const found = await this.#multiSourceCommit(application, revision);
      const revisions = application.status?.sync?.revisions ?? [];
      const pins = (revisionOf: (k: number) => string): Target => ({
        kind: 'multi',
        specHash: found.source.specHash,
        pins: pinsOf(application, found.followed, revisionOf, revisions),
      });
      sha = found.sha;
      synced = revisions[found.source.index] ?? '';
      after = pins((k) => found.held[k]!);
      const syncedHere = synced;
      // What runs was made from every source at its synced revision: without one for the source
      // that moves, nothing is known to run from it.
      if (syncedHere !== '')
        now = async () => {
          const from = await this.#git.resolve(found.source.repoURL, syncedHere);
          return pins((k) => (k === found.k ? from : found.held[k]!));
        };
    } else {
      const source = gitSource(application);
      if (source instanceof UnsupportedSource) throw source;
      sha = await this.#git.resolve(source.repoURL, revision);
      synced = application.status?.sync?.revision ?? '';
      after = { kind: 'single', source, sha };
      const syncedHere = synced;
      if (syncedHere !== '')
        now = async () => ({ kind: 'single', source, sha: await this.#git.resolve(source.repoURL, syncedHere) });
    }
    let afterTexts: string[];
    try {
      afterTexts = await this.#manifests(namespace, name, after);
    } catch (err) {
      if (err instanceof ArgoCdError && err.failure === 'failed') throw new ManifestGenerationFailed(err.message);
      throw err;
    }
    const currentTexts = now === undefined ? [] : await this.#manifestsOrNone(namespace, name, await now());
    const items = await this.#argo.managedResources(namespace, name);
    const live = new Map<string, KubeObject>();
    const where = new Map<string, string>();
    for (const item of items) {
      if (item.hook) continue;
      const id = {
        group: item.group ?? '',
        kind: item.kind ?? '',
        namespace: item.namespace ?? '',
        name: item.name ?? '',
      };
      where.set(`${id.group}/${id.kind}/${id.name}`, id.namespace);
      const state = parseState(item.normalizedLiveState) ?? parseState(item.liveState);
      if (state) live.set(resourceKey(id), withKey(state, item));
    }
    // Manifests name no namespace for what Argo CD puts in the destination's: keyed as it did.
    const destination = application.spec?.destination?.namespace ?? '';
    const keyed = (texts: string[]) => {
      const out = new Map<string, KubeObject>();
      for (const obj of manifestsByKey(texts).values()) {
        const id = resourceId(obj);
        if (id.namespace === '')
          id.namespace =
            where.get(`${id.group}/${id.kind}/${id.name}`) ?? (CLUSTER_KINDS.has(id.kind) ? '' : destination);
        out.set(resourceKey(id), obj);
      }
      return out;
    };
    const resources = previewResources(live, keyed(currentTexts), keyed(afterTexts));
    return {
      application: { namespace, name },
      revision: sha,
      current: synced,
      resources: resources.slice(0, MAX_CHANGED_RESOURCES),
      truncated: resources.length > MAX_CHANGED_RESOURCES || resources.some((r) => r.fieldsTruncated === true),
    };
  }

  /**
   * Which Git source of a multi-source Application `revision` is a commit of: the one whose
   * followed paths it changed, else the first whose repository has it (several sources can share
   * one repository). The other sources are held at their synced revisions (status.sync.revisions),
   * else at the head of their targetRevision.
   */
  async #multiSourceCommit(application: ArgoApplication, revision: string) {
    const followed = gitSources(application);
    if (followed.length === 0)
      throw new UnsupportedSource('not-git', "none of the Application's sources is a Git repository over http(s)");
    const synced = application.status?.sync?.revisions ?? [];
    let first: { k: number; sha: string; last?: string; previous?: string } | undefined;
    let notFound: unknown;
    for (let k = 0; k < followed.length; k++) {
      const s = followed[k]!;
      let sha: string;
      try {
        sha = await this.#git.resolve(s.repoURL, revision);
      } catch (err) {
        if (err instanceof GitError && err.failure === 'revision-not-found') {
          notFound = err;
          continue;
        }
        throw err;
      }
      const [last, previous] = await this.#git.pathLog(s.repoURL, sha, await this.#pathsAt(s, sha));
      const candidate = { k, sha, last, previous };
      if (last === sha) {
        first = candidate;
        break;
      }
      first ??= candidate;
    }
    if (first === undefined) throw notFound;
    const held = await Promise.all(
      followed.map(async (s, k) => {
        if (k === first.k) return first.sha;
        const pinned = synced[s.index];
        return this.#git.resolve(s.repoURL, pinned !== undefined && pinned !== '' ? pinned : s.targetRevision);
      }),
    );
    return { ...first, followed, source: followed[first.k]!, held };
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

  /** What Argo CD generates for `target`, cached: what it generates at given commits does not change. */
  async #manifests(namespace: string, name: string, target: Target): Promise<string[]> {
    const key =
      target.kind === 'single'
        ? cacheKey('manifests', target.source.repoURL, target.sha, target.source.path ?? '', target.source.specHash)
        : cacheKey('manifests-multi', JSON.stringify(target.pins), target.specHash);
    const hit = this.cache.get(key);
    if (hit?.kind === 'manifests') return hit.texts;
    const { manifests } =
      target.kind === 'single'
        ? await this.#argo.manifests(namespace, name, target.sha)
        : await this.#argo.multiSourceManifests(namespace, name, target.pins);
    this.cache.set(
      key,
      { kind: 'manifests', texts: manifests },
      manifests.reduce((n, m) => n + m.length, 0),
    );
    return manifests;
  }

  /** The manifests at an earlier revision; none when Argo CD cannot generate them there (that commit was broken). */
  async #manifestsOrNone(namespace: string, name: string, target: Target): Promise<string[]> {
    try {
      return await this.#manifests(namespace, name, target);
    } catch (err) {
      if (!(err instanceof ArgoCdError && err.failure === 'failed')) throw err;
      this.#log?.info(
        { namespace, name, revision: target.kind === 'single' ? target.sha : target.pins, reason: err.message },
        'no manifests at the earlier revision',
      );
      return [];
    }
  }
}

/** Kinds that are never namespaced (a manifest without a namespace is not put in the destination's). */
const CLUSTER_KINDS = new Set([
  'Namespace',
  'ClusterRole',
  'ClusterRoleBinding',
  'CustomResourceDefinition',
  'PersistentVolume',
  'StorageClass',
  'PriorityClass',
  'IngressClass',
  'ValidatingWebhookConfiguration',
  'MutatingWebhookConfiguration',
  'APIService',
]);

/** What Argo CD is asked the manifests of: a source at a commit, or a multi-source Application's sources pinned. */
type Target =
  | { kind: 'single'; source: GitSource; sha: string }
  | { kind: 'multi'; specHash: string; pins: Array<{ position: number; revision: string }> };

/**
 * Every source of a multi-source Application pinned to a revision, for Argo CD's manifests: the
 * followed ones (`followed[k]`) to `revisionOf(k)`, the others to their synced revision when Argo
 * CD reported one (a chart's version), else left at their targetRevision.
 */
function pinsOf(
  application: ArgoApplication,
  followed: ReadonlyArray<GitSource & { index: number }>,
  revisionOf: (k: number) => string,
  synced: readonly string[],
): Array<{ position: number; revision: string }> {
  const pins: Array<{ position: number; revision: string }> = [];
  (application.spec?.sources ?? []).forEach((_, index) => {
    const k = followed.findIndex((s) => s.index === index);
    const revision = k >= 0 ? revisionOf(k) : synced[index];
    if (revision !== undefined && revision !== '') pins.push({ position: index + 1, revision });
  });
  return pins;
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
  const src: ArgoSource = spec.source ?? {};
  const followed = followedSource(src, annotationOf(application), []);
  if (followed instanceof UnsupportedSource) return followed;
  return { ...followed, specHash: specHashOf({ source: { ...src, targetRevision: undefined } }, spec, followed.paths) };
}

/** Whether the Application has several sources (`spec.sources`). */
export function isMultiSource(application: ArgoApplication): boolean {
  return Array.isArray(application.spec?.sources) && application.spec.sources.length > 0;
}

/**
 * The Git sources of a multi-source Application the Source Server follows, by index in
 * `spec.sources`: each one a path of a Git repository over http(s), or one whose `ref` other
 * sources read value files through (refFiles). Helm chart repositories, other kinds of
 * repository and a `ref` no source reads are not followed.
 */
export function gitSources(application: ArgoApplication): Array<GitSource & { index: number }> {
  const spec = application.spec ?? {};
  const sources = spec.sources ?? [];
  const annotation = annotationOf(application);
  // What every source's manifests depend on: the others' specs too (a value file read through a ref).
  const shared = sources.map((s) => ({ ...s, targetRevision: undefined }));
  const out: Array<GitSource & { index: number }> = [];
  sources.forEach((src, index) => {
    const ref = typeof src.ref === 'string' && src.ref !== '' ? src.ref : undefined;
    const refs = ref !== undefined ? refFiles(sources, ref) : [];
    const hasPath = typeof src.path === 'string' && src.path !== '';
    if (ref !== undefined && !hasPath && refs.length === 0) return;
    const followed = followedSource(src, annotation, refs);
    if (followed instanceof UnsupportedSource) return;
    out.push({ ...followed, index, specHash: specHashOf({ sources: shared }, spec, followed.paths) });
  });
  return out;
}

/** One source as the Source Server follows it (its specHash is the caller's). */
function followedSource(
  src: ArgoSource,
  annotation: string | undefined,
  refs: string[],
): Omit<GitSource, 'specHash'> | UnsupportedSource {
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
  const followed = sourceManifestPaths(src, annotation, refs);
  return {
    repoURL: src.repoURL,
    path: sourcePathspec(typeof src.path === 'string' ? src.path : undefined),
    paths: followed.paths,
    discover: followed.from === 'source',
    targetRevision: typeof src.targetRevision === 'string' ? src.targetRevision : 'HEAD',
  };
}

/** What else shapes the manifests Argo CD generates (the sources without their revisions, the destination, the paths followed). */
function specHashOf(
  sources: Record<string, unknown>,
  spec: NonNullable<ArgoApplication['spec']>,
  paths: string[] | undefined,
): string {
  return createHash('sha256')
    .update(JSON.stringify({ ...sources, destination: spec.destination ?? {}, paths: paths ?? null }))
    .digest('hex')
    .slice(0, 32);
}
