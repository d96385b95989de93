/**
 * The plan of a fleet upgrade, as data (no database): which selected tenants can go to the target
 * version and by which path (each hop a separate upgrade, as the catalog's path rules say), which
 * wave each falls into, and the tenants that cannot be upgraded, each with the reason. The same
 * function answers `?dryRun=1` and writes the rows of a started fleet upgrade.
 */
import type { Catalog } from '../../runtime/catalog.ts';
import { compareVersions } from '../../runtime/catalog.ts';
import type { Freeze } from './windows.ts';
import type { Candidate, PlannedWave } from '../store/fleet-upgrades.ts';

export type { PlannedWave };

/** One wave as asked for: the first is the canary (`count` 1–5); the others by `count` or cumulative `percent`. */
export interface WaveSpec {
  /** Tenants in this wave. */
  count?: number | undefined;
  /** Share of all the upgradeable tenants reached at the end of this wave (cumulative: 5, 25, 100). */
  percent?: number | undefined;
  maxConcurrency?: number | undefined;
  maxUnavailable?: number | undefined;
  soakSeconds?: number | undefined;
  maxFailures?: number | undefined;
  maxFailurePercent?: number | undefined;
}

/** A type, not an interface, so that it is a JSON object (`Record<string, unknown>`) as the API's FleetUpgrade schema types it. */
export type FleetOptions = {
  waves: WaveSpec[];
  maxConcurrency: number;
  /** Default: maxConcurrency. */
  maxUnavailable?: number | undefined;
  soakSeconds: number;
  gateTimeoutSeconds: number;
  /** Halt when more than `maxFailures` tenants, or more than `maxPercent` % of a wave, fail (either may be left out). */
  failureBudget: { maxFailures?: number | undefined; maxPercent?: number | undefined };
  gate: { tunnel: boolean; applications: boolean };
  /** Deny periods of this fleet upgrade (fleet/windows.ts): no tenant starts in one; they win over every window. */
  freezes?: Freeze[] | undefined;
  /** How long a wave waits for its tenants' windows, from its start; then they are skipped (outside-window). */
  windowWaitSeconds?: number | undefined;
  /** The expected duration of a hop whose edge has no upgrade history (the duration-fits rule). */
  defaultUpgradeSeconds?: number | undefined;
};

/** A wave waits this long for its tenants' windows by default: a weekly window opens within it. */
export const DEFAULT_WINDOW_WAIT_SECONDS = 8 * 86400;
/** The expected duration of a hop with no history, by default. */
export const DEFAULT_UPGRADE_SECONDS = 1800;

export const DEFAULT_OPTIONS: FleetOptions = {
  waves: [{ count: 1 }, { percent: 25 }, { percent: 100 }],
  maxConcurrency: 2,
  soakSeconds: 300,
  gateTimeoutSeconds: 1800,
  failureBudget: { maxFailures: 0 },
  gate: { tunnel: true, applications: true },
};

export interface PlannedTenant {
  tenantId: string;
  organization: string;
  cluster: string | null;
  fromVersion: string;
  path: string[];
  wave: number;
  position: number;
  /** With windows or freezes: when it may start first (null: now) and the expected seconds its path takes. */
  earliestStart?: string | null | undefined;
  expectedSeconds?: number | undefined;
}

export interface ExcludedTenant {
  tenantId: string;
  organization: string;
  version: string;
  reason: string;
  /**
   * Excluded for its maintenance windows only: the wave it is judged again in (the driver takes it
   * back when a window opens before that wave's deadline, or on an override) and its path. Not in the API's answer.
   */
  wave?: number | undefined;
  path?: string[] | undefined;
}

export interface Plan {
  targetVersion: string;
  waves: PlannedWave[];
  tenants: PlannedTenant[];
  excluded: ExcludedTenant[];
}

/** Why a tenant cannot be part of the upgrade, or its path. */
export function pathFor(
  catalog: Catalog,
  target: string,
  c: Candidate,
  memo = new Map<string, ReturnType<Catalog['upgradePath']>>(),
): { path: string[] } | { reason: string } {
  if (c.inFleetUpgrade) return { reason: `part of fleet upgrade ${c.inFleetUpgrade}, which is not finished` };
  if (c.phase === 'Deleting' || c.phase === 'Deleted') return { reason: 'being deleted' };
  if (c.suspended) return { reason: 'suspended' };
  if (c.stalled) return { reason: 'stalled: retry or fix it first' };
  if (c.actualVersion === null) return { reason: 'not provisioned yet' };
  if (c.actualVersion !== c.version)
    return { reason: `a version change is under way (spec ${c.version}, running ${c.actualVersion})` };
  if (c.version === target) return { reason: `already on ${target}` };
  if (compareVersions(target, c.version) < 0)
    return { reason: `${target} is older than ${c.version}: a fleet upgrade only moves forward` };
  let answer = memo.get(c.version);
  if (!answer) {
    answer = catalog.upgradePath(c.version, target);
    memo.set(c.version, answer);
  }
  if (answer.allowed) return { path: [...answer.path] };
  if (answer.path.length > 0) return { path: [...answer.path] };
  return { reason: `no upgrade path: ${answer.reason}` };
}

/** Wave sizes for `n` upgradeable tenants: the canary, then each wave; what the waves leave over forms a last wave. */
export function waveSizes(n: number, waves: readonly WaveSpec[]): number[] {
  const sizes: number[] = [];
  let assigned = 0;
  for (const w of waves) {
    if (assigned >= n) break;
    let size: number;
    if (w.count !== undefined) size = w.count;
    else size = Math.ceil((n * (w.percent ?? 100)) / 100) - assigned;
    size = Math.min(Math.max(size, 0), n - assigned);
    if (size === 0) continue;
    sizes.push(size);
    assigned += size;
  }
  if (assigned < n) sizes.push(n - assigned);
  return sizes;
}

/** Plans the fleet upgrade of `candidates` (in the order given: the canary is the first upgradeable). */
export function planFleetUpgrade(
  catalog: Catalog,
  target: string,
  candidates: readonly Candidate[],
  options: FleetOptions,
): Plan {
  const memo = new Map<string, ReturnType<Catalog['upgradePath']>>();
  const upgradeable: Array<{ c: Candidate; path: string[] }> = [];
  const excluded: ExcludedTenant[] = [];
  for (const c of candidates) {
    const p = pathFor(catalog, target, c, memo);
    if ('reason' in p)
      excluded.push({ tenantId: c.id, organization: c.organization, version: c.version, reason: p.reason });
    else upgradeable.push({ c, path: p.path });
  }
  const sizes = waveSizes(upgradeable.length, options.waves);
  const waves: PlannedWave[] = sizes.map((size, wave) => {
    const spec = options.waves[wave] ?? {};
    const maxConcurrency = Math.min(spec.maxConcurrency ?? options.maxConcurrency, size);
    return {
      wave,
      size,
      maxConcurrency,
      maxUnavailable: spec.maxUnavailable ?? options.maxUnavailable ?? maxConcurrency,
      soakSeconds: spec.soakSeconds ?? options.soakSeconds,
      maxFailures: spec.maxFailures ?? options.failureBudget.maxFailures ?? null,
      maxFailurePercent: spec.maxFailurePercent ?? options.failureBudget.maxPercent ?? null,
    };
  });
  const tenants: PlannedTenant[] = [];
  let wave = 0;
  let inWave = 0;
  for (const [position, u] of upgradeable.entries()) {
    while (inWave >= (sizes[wave] ?? Infinity)) {
      wave += 1;
      inWave = 0;
    }
    tenants.push({
      tenantId: u.c.id,
      organization: u.c.organization,
      cluster: u.c.cluster,
      fromVersion: u.c.version,
      path: u.path,
      wave,
      position,
    });
    inWave += 1;
  }
  return { targetVersion: target, waves, tenants, excluded };
}
