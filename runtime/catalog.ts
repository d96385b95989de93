/**
 * The runtime version catalog: every runtime version the product can install, the component
 * versions it pins, and the upgrade rules between versions. The provisioner validates specs and
 * upgrades with it; the tenants/ program installs what a version pins.
 *
 * This module is the interface the rest of the code depends on. The versions themselves live in
 * runtime/versions.ts.
 */
import { VERSIONS } from './versions.ts';

export type Channel = 'stable' | 'latest';

/** Chart (and image) versions a runtime version pins. */
export interface ComponentPins {
  /** vcluster Helm chart version. */
  vcluster: string;
  /** Kubernetes version of the virtual cluster (controlPlane.distro.k8s.version). */
  kubernetes: string;
  argoCd: string;
  argoWorkflows: string;
  argoRollouts: string;
  argoEvents: string;
  /** Image tag of the runtime agents (tunnel client, request router, app-proxy, event reporter). */
  agents: string;
}

export interface RuntimeVersion {
  version: string;
  releaseDate: string;
  channel: Channel;
  components: ComponentPins;
  /** Upgrade rules into this version. */
  upgrade: {
    /** Oldest version a tenant may upgrade from directly (inclusive). */
    minFrom?: string;
  };
}

export type UpgradeAnswer =
  | { allowed: true; path: string[] }
  | { allowed: false; reason: string; path: string[] };

export interface Catalog {
  readonly versions: readonly RuntimeVersion[];
  get(version: string): RuntimeVersion | undefined;
  /** Newest version on a channel (the stable channel is the signup default). */
  defaultVersion(channel?: Channel): string;
  /**
   * Can a tenant go from `from` to `to` directly? When not, `path` lists the versions to go
   * through, in order, ending with `to` (empty when no path exists).
   */
  upgradePath(from: string, to: string): UpgradeAnswer;
}

/** Semver comparison for x.y.z (pre-release tags are not used in the catalog). */
export function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < 3; i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

export function createCatalog(versions: readonly RuntimeVersion[]): Catalog {
  const sorted = [...versions].sort((a, b) => compareVersions(a.version, b.version));
  const byVersion = new Map(sorted.map((v) => [v.version, v]));
  const direct = (from: string, to: string): boolean => {
    const target = byVersion.get(to);
    if (!target) return false;
    const min = target.upgrade.minFrom;
    return min === undefined || compareVersions(from, min) >= 0 || compareVersions(from, to) > 0;
  };
  return {
    versions: sorted,
    get: (v) => byVersion.get(v),
    defaultVersion(channel: Channel = 'stable') {
      const on = sorted.filter((v) => v.channel === channel || (channel === 'latest' && v.channel === 'stable'));
      const newest = on.at(-1) ?? sorted.at(-1);
      if (!newest) throw new Error('runtime catalog is empty');
      return newest.version;
    },
    upgradePath(from, to) {
      if (!byVersion.has(to)) return { allowed: false, reason: `runtime version ${to} is not in the catalog`, path: [] };
      if (from === to) return { allowed: true, path: [to] };
      if (direct(from, to)) return { allowed: true, path: [to] };
      // Shortest path by breadth-first search over allowed direct hops, preferring newer stepping stones.
      const prev = new Map<string, string>();
      const queue = [from];
      const seen = new Set([from]);
      while (queue.length > 0) {
        const cur = queue.shift()!;
        for (const next of [...sorted].reverse()) {
          if (seen.has(next.version) || compareVersions(next.version, cur) <= 0 || !direct(cur, next.version)) continue;
          seen.add(next.version);
          prev.set(next.version, cur);
          queue.push(next.version);
        }
      }
      const path: string[] = [];
      for (let v: string | undefined = to; v !== undefined && v !== from; v = prev.get(v)) path.unshift(v);
      const min = byVersion.get(to)?.upgrade.minFrom;
      const reachable = prev.has(to);
      const first = reachable ? path[0] : min;
      return {
        allowed: false,
        reason: `runtime version ${to} cannot be reached from ${from}` +
          (first ? `: upgrade to ${first} first` : '') +
          (reachable ? ` (path: ${path.join(' -> ')})` : ''),
        path: reachable ? path : [],
      };
    },
  };
}

export const catalog: Catalog = createCatalog(VERSIONS);
