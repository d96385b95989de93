/**
 * The runtime version catalog: every runtime version the product can install, the component
 * versions it pins, and the upgrade and rollback rules between versions. The provisioner
 * validates specs and upgrades with it; the tenants/ program installs what a version pins.
 *
 * This module is the interface the rest of the code depends on. The versions themselves live in
 * runtime/versions.ts; `validateCatalog` checks them and runs in the unit tests.
 *
 * Rules for a direct upgrade from F to a newer T (all must hold):
 *  - F >= T.upgrade.minFrom (when set);
 *  - no version S with F < S < T is a mandatory stepping stone (S.upgrade.steppingStone);
 *  - the vcluster chart moves at most one minor version (vcluster supports one minor at a time).
 * When a direct hop is refused, `upgradePath` returns the shortest chain of allowed hops.
 *
 * Rules for a rollback from F to an older T (`canRollback`):
 *  - every version V with T < V <= F allows going back past it (V.rollback.allowed !== false);
 *  - F and T run the same vcluster minor and the same Kubernetes minor (vcluster and the
 *    Kubernetes datastore do not support downgrades across minors).
 */
import { VERSIONS, type Channel, type ComponentPins, type RuntimeVersion } from './versions.ts';

export type UpgradeAnswer = { allowed: true; path: string[] } | { allowed: false; reason: string; path: string[] };

export type RollbackAnswer = { allowed: true } | { allowed: false; reason: string };

export interface Catalog {
  readonly versions: readonly RuntimeVersion[];
  get(version: string): RuntimeVersion | undefined;
  /** Newest version on a channel (the stable channel is the signup default). */
  defaultVersion(channel?: Channel): string;
  /**
   * Can a tenant go from `from` to `to` directly? When not, `path` lists the versions to go
   * through, in order, ending with `to` (empty when no path exists). A move to an older version
   * is answered with the rollback rules (path `[to]` when allowed).
   */
  upgradePath(from: string, to: string): UpgradeAnswer;
  /** Whether the catalog allows going back from `from` to the older `to`. */
  canRollback(from: string, to: string): boolean;
  /** Like `canRollback`, with the reason when refused. */
  rollbackAnswer(from: string, to: string): RollbackAnswer;
}

const SEMVER = /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$/;
const KUBE_VERSION = /^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$/;

/** An image digest as the release pipeline records it: `sha256:` and 64 lower-case hex digits. */
export const IMAGE_DIGEST = /^sha256:[0-9a-f]{64}$/;
/** An image registry and path without tag or digest (`registry.example.com:5000/hosted-runtimes`). */
export const IMAGE_REGISTRY = /^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]{1,5})?(\/[a-z0-9]+([._-][a-z0-9]+)*)*$/;

/** What is wrong with a release's recorded images (registry, digests), one line each. */
export function releaseImagesProblems(v: Pick<RuntimeVersion, 'version' | 'images'>): string[] {
  const images = v.images;
  if (images === undefined) return [];
  const out: string[] = [];
  if (images.registry !== undefined && !IMAGE_REGISTRY.test(images.registry))
    out.push(`version ${v.version}: images.registry '${images.registry}' is not a registry and path without tag`);
  for (const group of ['agents', 'charts'] as const)
    for (const [image, digest] of Object.entries(images[group] ?? {}))
      if (!IMAGE_DIGEST.test(digest))
        out.push(`version ${v.version}: images.${group}['${image}'] = '${digest}' is not sha256: and 64 hex digits`);
  return out;
}

/** Semver comparison for x.y.z (pre-release tags are not used in the catalog). */
export function compareVersions(a: string, b: string): number {
  const pa = a.replace(/^v/, '').split('.').map(Number);
  const pb = b.replace(/^v/, '').split('.').map(Number);
  for (let i = 0; i < 3; i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

/** `major.minor` of a version (a leading `v` is ignored). */
export function minorOf(version: string): { major: number; minor: number } {
  const [major = 0, minor = 0] = version.replace(/^v/, '').split('.').map(Number);
  return { major, minor };
}

/** Number of minor versions from `a` to `b` (Infinity across majors). */
function minorDistance(a: string, b: string): number {
  const ma = minorOf(a);
  const mb = minorOf(b);
  if (ma.major !== mb.major) return Number.POSITIVE_INFINITY;
  return Math.abs(mb.minor - ma.minor);
}

const series = (version: string): string => {
  const { major, minor } = minorOf(version);
  return `${major}.${minor}.x`;
};

export class CatalogError extends Error {
  override name = 'CatalogError';
}

/**
 * Checks a list of versions and throws a CatalogError naming every problem: duplicate or
 * malformed versions, missing or malformed pins, constraints that refer to unknown versions,
 * constraints that make a version unreachable (a cycle or a minimum newer than the version),
 * vcluster moving more than one minor between consecutive versions, no stable version.
 */
export function validateCatalog(versions: readonly RuntimeVersion[]): void {
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const v of versions) {
    if (!SEMVER.test(v.version)) problems.push(`version '${v.version}' is not x.y.z`);
    if (seen.has(v.version)) problems.push(`version ${v.version} is listed twice`);
    seen.add(v.version);
    if (!/^\d{4}-\d{2}-\d{2}$/.test(v.releaseDate) || Number.isNaN(Date.parse(v.releaseDate))) {
      problems.push(`version ${v.version}: releaseDate '${v.releaseDate}' is not YYYY-MM-DD`);
    }
    const pins: Record<keyof ComponentPins, RegExp> = {
      vcluster: SEMVER,
      kubernetes: KUBE_VERSION,
      argoCd: SEMVER,
      argoWorkflows: SEMVER,
      argoRollouts: SEMVER,
      argoEvents: SEMVER,
      agents: SEMVER,
    };
    problems.push(...releaseImagesProblems(v));
    for (const [key, shape] of Object.entries(pins) as [keyof ComponentPins, RegExp][]) {
      const pin = (v.components as Partial<ComponentPins>)[key];
      if (pin === undefined || pin === '') problems.push(`version ${v.version}: pin '${key}' is missing`);
      else if (!shape.test(pin))
        problems.push(
          `version ${v.version}: pin '${key}' = '${pin}' is not ${key === 'kubernetes' ? 'vX.Y.Z' : 'X.Y.Z'}`,
        );
    }
  }
  for (const v of versions) {
    const min = v.upgrade.minFrom;
    if (min === undefined) continue;
    if (!seen.has(min)) problems.push(`version ${v.version}: upgrade.minFrom ${min} is not in the catalog`);
    else if (compareVersions(min, v.version) >= 0) {
      problems.push(
        `version ${v.version}: upgrade.minFrom ${min} is not older than the version (a cycle: it could never be reached)`,
      );
    }
  }
  const sorted = [...versions].sort((a, b) => compareVersions(a.version, b.version));
  for (let i = 1; i < sorted.length; i++) {
    const prev = sorted[i - 1]!;
    const cur = sorted[i]!;
    if (compareVersions(cur.components.vcluster, prev.components.vcluster) < 0) {
      problems.push(
        `version ${cur.version}: vcluster ${cur.components.vcluster} is older than ${prev.components.vcluster} in ${prev.version}`,
      );
    } else if (minorDistance(prev.components.vcluster, cur.components.vcluster) > 1) {
      problems.push(
        `version ${cur.version}: vcluster moves from ${prev.components.vcluster} (in ${prev.version}) to ${cur.components.vcluster}, more than one minor at a time`,
      );
    }
  }
  if (!versions.some((v) => v.channel === 'stable')) problems.push('no version is on the stable channel');
  if (problems.length === 0) {
    // Every version must be reachable from the oldest one through allowed hops.
    const catalog = buildCatalog(versions);
    const oldest = sorted[0];
    for (const v of sorted.slice(1)) {
      if (oldest && !catalog.upgradePath(oldest.version, v.version).path.length) {
        problems.push(`version ${v.version} cannot be reached from ${oldest.version} by any path`);
      }
    }
  }
  if (problems.length > 0) throw new CatalogError(`runtime catalog is invalid:\n  - ${problems.join('\n  - ')}`);
}

function buildCatalog(versions: readonly RuntimeVersion[]): Catalog {
  const sorted = [...versions].sort((a, b) => compareVersions(a.version, b.version));
  const byVersion = new Map(sorted.map((v) => [v.version, v]));

  /** Why a direct upgrade from `from` to the newer `to` is refused; undefined when allowed. */
  const blocker = (from: string, to: RuntimeVersion): string | undefined => {
    const min = to.upgrade.minFrom;
    if (min !== undefined && compareVersions(from, min) < 0) return min;
    const stone = sorted.find(
      (s) =>
        s.upgrade.steppingStone && compareVersions(s.version, from) > 0 && compareVersions(s.version, to.version) < 0,
    );
    if (stone) return stone.version;
    const source = byVersion.get(from);
    if (source && minorDistance(source.components.vcluster, to.components.vcluster) > 1) {
      // The oldest version whose vcluster is one minor above the source's.
      const next = sorted.find(
        (s) =>
          compareVersions(s.version, from) > 0 &&
          minorDistance(source.components.vcluster, s.components.vcluster) === 1,
      );
      return next?.version ?? to.version;
    }
    return undefined;
  };

  const rollbackAnswer = (from: string, to: string): RollbackAnswer => {
    const source = byVersion.get(from);
    const target = byVersion.get(to);
    if (!target) return { allowed: false, reason: `runtime version ${to} is not in the catalog` };
    if (!source) return { allowed: false, reason: `runtime version ${from} is not in the catalog` };
    if (compareVersions(to, from) >= 0)
      return { allowed: false, reason: `runtime version ${to} is not older than ${from}` };
    const refusing = sorted.filter(
      (v) =>
        compareVersions(v.version, to) > 0 && compareVersions(v.version, from) <= 0 && v.rollback?.allowed === false,
    );
    if (refusing.length > 0) {
      const first = refusing[0]!;
      return {
        allowed: false,
        reason: `runtime version ${from} cannot be rolled back to ${to}: ${first.version} cannot be undone${first.rollback?.reason ? ` (${first.rollback.reason})` : ''}`,
      };
    }
    if (minorDistance(source.components.vcluster, target.components.vcluster) !== 0) {
      return {
        allowed: false,
        reason: `runtime version ${from} cannot be rolled back to ${to}: vcluster ${source.components.vcluster} cannot be downgraded to ${target.components.vcluster}`,
      };
    }
    if (minorDistance(source.components.kubernetes, target.components.kubernetes) !== 0) {
      return {
        allowed: false,
        reason: `runtime version ${from} cannot be rolled back to ${to}: Kubernetes ${source.components.kubernetes} cannot be downgraded to ${target.components.kubernetes}`,
      };
    }
    return { allowed: true };
  };

  return {
    versions: sorted,
    get: (v) => byVersion.get(v),
    defaultVersion(channel: Channel = 'stable') {
      const on = sorted.filter((v) => v.channel === channel || (channel === 'latest' && v.channel === 'stable'));
      const newest = on.at(-1) ?? sorted.at(-1);
      if (!newest) throw new CatalogError('runtime catalog is empty');
      return newest.version;
    },
    canRollback: (from, to) => rollbackAnswer(from, to).allowed,
    rollbackAnswer,
    upgradePath(from, to) {
      const target = byVersion.get(to);
      if (!target) return { allowed: false, reason: `runtime version ${to} is not in the catalog`, path: [] };
      if (from === to) return { allowed: true, path: [to] };
      if (compareVersions(to, from) < 0) {
        const back = rollbackAnswer(from, to);
        return back.allowed ? { allowed: true, path: [to] } : { allowed: false, reason: back.reason, path: [] };
      }
      const firstBlocker = blocker(from, target);
      if (firstBlocker === undefined) return { allowed: true, path: [to] };
      // Shortest path by breadth-first search over allowed direct hops, trying newer versions first.
      const prev = new Map<string, string>();
      const queue = [from];
      const seen = new Set([from]);
      while (queue.length > 0) {
        const cur = queue.shift()!;
        for (const next of [...sorted].reverse()) {
          if (
            seen.has(next.version) ||
            compareVersions(next.version, cur) <= 0 ||
            compareVersions(next.version, to) > 0
          )
            continue;
          if (blocker(cur, next) !== undefined) continue;
          seen.add(next.version);
          prev.set(next.version, cur);
          queue.push(next.version);
        }
      }
      const reachable = prev.has(to);
      const path: string[] = [];
      if (reachable)
        for (let v: string | undefined = to; v !== undefined && v !== from; v = prev.get(v)) path.unshift(v);
      const first = reachable ? path[0]! : firstBlocker;
      return {
        allowed: false,
        reason:
          `runtime version ${to} cannot be reached from ${from}: upgrade to ${series(first)} first` +
          (reachable ? ` (path: ${path.join(' -> ')})` : ''),
        path,
      };
    },
  };
}

/** Builds a catalog after validating it (throws CatalogError with every problem found). */
export function createCatalog(versions: readonly RuntimeVersion[]): Catalog {
  validateCatalog(versions);
  return buildCatalog(versions);
}

export const catalog: Catalog = createCatalog(VERSIONS);
