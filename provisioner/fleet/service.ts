/**
 * Fleet upgrades on the API side: the plan (dry run), the start (the plan written with its waves
 * and tenants, audited, in one transaction), reads, and the operator's pause, resume, abort and
 * skip of a tenant's gate checks. The driver (driver.ts) carries a started fleet upgrade out.
 */
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { withTx, pgCode, pgConstraint, type Queryable } from '../db/tx.ts';
import { errors, AppError } from '../errors.ts';
import { writeAudit, type Requester } from '../store/audit.ts';
import { availabilityMap } from '../store/versions.ts';
import { hybridRuntimesBehind, type HybridRuntimeBehind } from '../store/runtimes.ts';
import type { Catalog } from '../../runtime/catalog.ts';
import {
  DEFAULT_OPTIONS,
  DEFAULT_UPGRADE_SECONDS,
  DEFAULT_WINDOW_WAIT_SECONDS,
  planFleetUpgrade,
  type ExcludedTenant,
  type FleetOptions,
  type Plan,
  type WaveSpec,
} from './plan.ts';
import {
  ACTIVE_FLEET_STATES,
  addGateSkip,
  edgeDurations,
  edgeKey,
  fleetEvents,
  fleetTenantRow,
  fleetTenantRows,
  finishAbortIfIdle,
  fleetUpgradesOfTenant,
  getFleetRow,
  insertFleetUpgrade,
  notifyFleetUpgrade,
  pauseFleetUpgrade,
  recordEvent,
  listFleetRows,
  resumeFleetUpgrade,
  selectCandidates,
  setWindowsOverride,
  startAbort,
  stateCounts,
  waveRows,
  type FleetEvent,
  type FleetRow,
  type FleetTenantRow,
  type GateCheck,
  type GateSkip,
  type WaveRow,
  type WindowsOverride,
  type Selector,
} from '../store/fleet-upgrades.ts';
import { keyLabels, type KeyLabel } from '../store/keys.ts';
import type { FleetState, FleetTenantState, SkippableGateCheck } from '../store/states.ts';
import { skippedFor } from './gate.ts';
import { checkFreezes, explainNoFit, nextFit, type Freeze } from './windows.ts';

export interface FleetUpgradeRequest {
  targetVersion: string;
  selector: Selector;
  waves?: WaveSpec[] | undefined;
  maxConcurrency?: number | undefined;
  maxUnavailable?: number | undefined;
  soakSeconds?: number | undefined;
  gateTimeoutSeconds?: number | undefined;
  failureBudget?: { maxFailures?: number | undefined; maxPercent?: number | undefined } | undefined;
  gate?: { tunnel?: boolean | undefined; applications?: boolean | undefined } | undefined;
  freezes?: Freeze[] | undefined;
  windowWaitSeconds?: number | undefined;
  defaultUpgradeSeconds?: number | undefined;
  /** Ignore the tenants' maintenance windows and the duration-fits rule (not the freezes); the reason is audited. */
  overrideWindows?: { reason: string } | undefined;
}

export interface PlanView {
  targetVersion: string;
  waves: Array<Plan['waves'][number] & { tenants: string[] }>;
  tenants: Plan['tenants'];
  excluded: ExcludedTenant[];
  counts: { selected: number; upgradeable: number; excluded: number };
}

type Counts = Record<FleetTenantState, number>;

export interface FleetUpgradeView {
  id: string;
  targetVersion: string;
  state: FleetState;
  stateReason: string | null;
  selector: Selector;
  options: FleetOptions;
  currentWave: number;
  abortRollback: boolean;
  createdBy: string;
  /** The API key that started it, by name and role; null: not a key (or one since deleted). */
  createdByKey: KeyLabel | null;
  createdAt: string;
  updatedAt: string;
  finishedAt: string | null;
  /** The operator's override of the maintenance windows, with the reason and the key's name; null: the windows hold. */
  windowsOverride: (WindowsOverride & { byKey: KeyLabel | null }) | null;
  counts: Counts;
  /** Seconds until the last wave settles, from the pace so far; null before anything finished or once finished. */
  etaSeconds: number | null;
  waves: Array<{
    wave: number;
    name: string;
    size: number;
    state: WaveRow['state'];
    maxConcurrency: number;
    maxUnavailable: number;
    soakSeconds: number;
    maxFailures: number | null;
    maxFailurePercent: number | null;
    startedAt: string | null;
    settledAt: string | null;
    completedAt: string | null;
    counts: Counts;
  }>;
  tenants?: Array<{
    tenantId: string;
    organization: string;
    wave: number | null;
    state: FleetTenantState;
    fromVersion: string;
    path: string[];
    hop: number;
    step: { from: string; to: string; operationId: string | null; startedAt: string | null } | null;
    gate: FleetTenantRow['gate'];
    /** A step under way whose gate has not passed: what it waits on, since when, the time left. */
    gateWait: GateWait | null;
    /** Every skip of gate checks an operator made for this tenant in this fleet upgrade, oldest first. */
    gateSkipped: GateSkipView[];
    rolledBack: boolean;
    reason: string | null;
    /** Pending, its window closed: when the next window that fits opens. */
    deferredUntil: string | null;
    startedAt: string | null;
    finishedAt: string | null;
  }>;
  /** With `tenants`: the selected tenants' hybrid runtimes their customers must upgrade. */
  customerActionNeeded?: CustomerAction[];
  /** With `tenants`: the selected tenants' hybrid runtimes their in-cluster upgraders move (upgrades=agent). */
  upgradedByAgent?: AgentUpgrade[];
}

/**
 * A tenant's step (a hop, an automatic rollback, a rollback after an abort) waiting on its health
 * gate (gate.ts): the checks not passing yet, the gate's clock (it starts with the step), and what
 * happens when it runs out, so that an operator sees why the fleet upgrade does not move and what
 * is left to decide (wait, skip the checks of the runtime's agents, pause, abort).
 */
export interface GateWait {
  step: 'upgrade' | 'rollback' | 'revert';
  /** The checks not passing at the last judgment, less those an operator skipped since; empty before the first one. */
  waitingOn: GateCheck[];
  /** When the step started: the gate is judged, and its timeout counted, from then. */
  since: string;
  timeoutAt: string;
  /** Seconds until the timeout; 0 once it passed (the driver's next round fails the gate). */
  secondsLeft: number;
  /** What the driver does when the gate times out. */
  onTimeout: string;
}

/** An operator's skip of gate checks for one step of a tenant, as the API answers it. */
export interface GateSkipView {
  step: { kind: GateSkip['step']; from: string; to: string };
  checks: SkippableGateCheck[];
  reason: string;
  by: string;
  /** The API key that skipped them, by name and role; null: one since deleted. */
  byKey: KeyLabel | null;
  at: string;
}

/** A hybrid runtime a fleet upgrade moves through its in-cluster upgrader: after its tenant's hosted runtime, in its wave. */
export interface AgentUpgrade {
  tenantId: string;
  runtime: string;
  version: string;
  reportedVersion: string | null;
  /** `waiting`: for its tenant's hosted runtime to reach the target; then the upgrader's phase. */
  phase: 'waiting' | 'pending' | 'applying' | 'succeeded';
  message: string;
}

/** Fleet tenant states in which the tenant's hosted runtime may still reach the target (its hybrid runtimes then follow). */
const STILL_MOVING = new Set(['pending', 'upgrading', 'rolling_back']);

/** Splits the hybrid runtimes behind the target into those the upgrader moves and those needing their customer. */
export function hybridRuntimesOf(
  rows: HybridRuntimeBehind[],
  target: string,
): { customerActionNeeded: CustomerAction[]; upgradedByAgent: AgentUpgrade[] } {
  const byAgent: AgentUpgrade[] = [];
  const customer: HybridRuntimeBehind[] = [];
  for (const r of rows) {
    if (r.upgrades !== 'agent') {
      customer.push(r);
      continue;
    }
    const base = { tenantId: r.tenant_id, runtime: r.name, version: r.version, reportedVersion: r.reported_version };
    const phase = r.upgrade_to === target ? r.upgrade_phase : null;
    if (phase === 'pending' || phase === 'applying' || phase === 'succeeded')
      byAgent.push({
        ...base,
        phase,
        message:
          phase === 'succeeded'
            ? `its in-cluster upgrader applied ${target}${r.upgrade_message ? `: ${r.upgrade_message}` : ''}`
            : `its in-cluster upgrader ${phase === 'pending' ? 'is to apply' : 'applies'} ${target}`,
      });
    else if (phase === null && r.version !== target && STILL_MOVING.has(r.tenant_state))
      byAgent.push({
        ...base,
        phase: 'waiting',
        message: `its in-cluster upgrader is asked for ${target} once its tenant's hosted runtime reaches it in its wave`,
      });
    else customer.push(r);
  }
  return { customerActionNeeded: customerActions(customer, target), upgradedByAgent: byAgent };
}

/** A hybrid runtime a fleet upgrade does not move: its customer applies the upgrade (docs/hybrid.md "Upgrades"). */
export interface CustomerAction {
  tenantId: string;
  runtime: string;
  version: string;
  reportedVersion: string | null;
  /** What is left: asking for the target version (`upgrade`), or applying its bundle (`apply`). */
  action: 'upgrade' | 'apply';
  message: string;
}

/** Why an opted-in runtime's upgrader does not move it: its outcome, or that the fleet upgrade did not ask it. */
function upgraderNote(r: HybridRuntimeBehind, target: string): string {
  if (r.upgrades !== 'agent') return '';
  if (r.upgrade_to === target && (r.upgrade_phase === 'rolled-back' || r.upgrade_phase === 'failed'))
    return ` (its in-cluster upgrader ${r.upgrade_phase === 'failed' ? 'failed' : 'rolled it back'}: ${r.upgrade_message ?? 'no message'})`;
  return ` (its in-cluster upgrader was not asked: its tenant is ${r.tenant_state} in this fleet upgrade, or the upgrade is not one the upgrader may apply: the answer of the upgrade says why)`;
}

export function customerActions(rows: HybridRuntimeBehind[], target: string): CustomerAction[] {
  return rows.map((r) => {
    const asked = r.version === target;
    return {
      tenantId: r.tenant_id,
      runtime: r.name,
      version: r.version,
      reportedVersion: r.reported_version,
      action: asked ? 'apply' : 'upgrade',
      message: asked
        ? `version ${target} was asked for; its customer applies the upgrade bundle (GET /v1/tenants/${r.tenant_id}/runtimes/${r.name}/bundle)` +
          (r.reported_version
            ? `: its agents report ${r.reported_version}`
            : ': its agents have not reported a version') +
          upgraderNote(r, target)
        : `a hybrid runtime at ${r.version}: ask for ${target} (provisioner runtimes upgrade ${r.tenant_id} ${r.name} --runtime-version ${target}) and its customer applies the bundle` +
          upgraderNote(r, target),
    };
  });
}

export interface FleetServiceDeps {
  pool: pg.Pool;
  catalog: Catalog;
  /** The clock the plan judges maintenance windows by (ms since the epoch; tests inject it). */
  now?: () => number;
}

const iso = (d: Date | null): string | null => (d ? d.toISOString() : null);

function emptyCounts(): Counts {
  return {
    excluded: 0,
    pending: 0,
    upgrading: 0,
    succeeded: 0,
    rolling_back: 0,
    quarantined: 0,
    interrupted: 0,
    cancelled: 0,
    reverting: 0,
    reverted: 0,
    left: 0,
    skipped: 0,
  };
}

/** The request's options with the defaults filled in, checked beyond what the schema says. */
export function fleetOptions(r: FleetUpgradeRequest): FleetOptions {
  const waves = r.waves ?? DEFAULT_OPTIONS.waves;
  waves.forEach((w, i) => {
    if ((w.count === undefined) === (w.percent === undefined))
      throw errors.validation(`waves[${i}] must have either count or percent`, `waves.${i}`);
  });
  const canary = waves[0]!;
  if (canary.count === undefined || canary.count < 1 || canary.count > 5)
    throw errors.validation('the first wave is the canary: give it a count of 1 to 5 tenants', 'waves.0.count');
  return {
    waves,
    maxConcurrency: r.maxConcurrency ?? DEFAULT_OPTIONS.maxConcurrency,
    ...(r.maxUnavailable !== undefined ? { maxUnavailable: r.maxUnavailable } : {}),
    soakSeconds: r.soakSeconds ?? DEFAULT_OPTIONS.soakSeconds,
    gateTimeoutSeconds: r.gateTimeoutSeconds ?? DEFAULT_OPTIONS.gateTimeoutSeconds,
    failureBudget:
      r.failureBudget && (r.failureBudget.maxFailures !== undefined || r.failureBudget.maxPercent !== undefined)
        ? {
            ...(r.failureBudget.maxFailures !== undefined ? { maxFailures: r.failureBudget.maxFailures } : {}),
            ...(r.failureBudget.maxPercent !== undefined ? { maxPercent: r.failureBudget.maxPercent } : {}),
          }
        : DEFAULT_OPTIONS.failureBudget,
    gate: {
      tunnel: r.gate?.tunnel ?? DEFAULT_OPTIONS.gate.tunnel,
      applications: r.gate?.applications ?? DEFAULT_OPTIONS.gate.applications,
    },
    freezes: checkFreezes(r.freezes ?? []),
    windowWaitSeconds: r.windowWaitSeconds ?? DEFAULT_WINDOW_WAIT_SECONDS,
    defaultUpgradeSeconds: r.defaultUpgradeSeconds ?? DEFAULT_UPGRADE_SECONDS,
  };
}

/**
 * The expected seconds of each tenant's path: the sum over its hops of the p95 of that edge's
 * past upgrades (the default for an edge with no history), and what it is made of, in words.
 */
export async function expectedDurations(
  db: Queryable,
  tenants: ReadonlyArray<{ fromVersion: string; path: readonly string[] }>,
  defaultSeconds: number,
): Promise<(t: { fromVersion: string; path: readonly string[] }) => { seconds: number; what: string }> {
  const edges = new Map<string, [string, string]>();
  for (const t of tenants) {
    let from = t.fromVersion;
    for (const to of t.path) {
      edges.set(edgeKey(from, to), [from, to]);
      from = to;
    }
  }
  const known = await edgeDurations(db, [...edges.values()]);
  return (t) => {
    let seconds = 0;
    const what: string[] = [];
    let from = t.fromVersion;
    for (const to of t.path) {
      const d = known.get(edgeKey(from, to));
      seconds += d ? d.p95Seconds : defaultSeconds;
      what.push(
        d
          ? `p95 of ${from} -> ${to} over ${d.samples} upgrades ${Math.ceil(d.p95Seconds / 60)} min`
          : `${from} -> ${to} has no history: default ${Math.ceil(defaultSeconds / 60)} min`,
      );
      from = to;
    }
    return { seconds: Math.ceil(seconds), what: what.join('; ') };
  };
}

function checkSelector(s: Selector): void {
  const filters = ['versions', 'plans', 'regions', 'clusters', 'tenantIds'] as const;
  const given = filters.filter((k) => s[k] !== undefined);
  if (s.all === true && given.length > 0)
    throw errors.validation(
      'selector.all takes every tenant: leave out the other selector fields, or all',
      'selector.all',
    );
  if (s.all !== true && given.length === 0)
    throw errors.validation(
      'the selector takes no tenant: give all: true, or versions, plans, regions, clusters or tenantIds',
      'selector',
    );
  for (const k of given)
    if (s[k]!.length === 0)
      throw errors.validation(`selector.${k} is empty: leave it out or name at least one`, `selector.${k}`);
}

export class FleetUpgradeService {
  readonly #deps: FleetServiceDeps;

  constructor(deps: FleetServiceDeps) {
    this.#deps = deps;
  }

  async #plan(
    db: Queryable,
    r: FleetUpgradeRequest,
  ): Promise<{ plan: Plan; options: FleetOptions; unknown: ExcludedTenant[] }> {
    const { catalog } = this.#deps;
    if (!catalog.get(r.targetVersion)) throw errors.unknownVersion(r.targetVersion, 'targetVersion');
    checkSelector(r.selector);
    const options = fleetOptions(r);
    const availability = await availabilityMap(db);
    if ((availability.get(r.targetVersion) ?? 'available') === 'withdrawn')
      throw errors.versionUnavailable(r.targetVersion, 'withdrawn', 'targetVersion');
    const { candidates, unknownIds } = await selectCandidates(db, r.selector);
    const plan = planFleetUpgrade(catalog, r.targetVersion, candidates, options);
    // A hop through a withdrawn version cannot be made: such tenants are listed, not planned.
    const withdrawn = (v: string) => (availability.get(v) ?? 'available') === 'withdrawn';
    const blocked = new Map(
      plan.tenants
        .filter((t) => t.path.some(withdrawn))
        .map((t) => [t.tenantId, `its path ${t.path.join(' -> ')} goes through withdrawn ${t.path.find(withdrawn)}`]),
    );
    /** Tenants excluded for their windows only: judged again by the driver while their wave runs. */
    const outsideWindow = new Set<string>();
    // Windows and freezes: a tenant none of whose windows opens (with its expected duration left,
    // outside the freezes) within the wave deadline is listed, not planned.
    const windows = new Map(candidates.map((c) => [c.id, c.windows ?? []]));
    const override = r.overrideWindows !== undefined;
    const freezes = options.freezes ?? [];
    const starts = new Map<string, { earliestStart: string | null; expectedSeconds: number }>();
    if (freezes.length > 0 || (!override && plan.tenants.some((t) => (windows.get(t.tenantId) ?? []).length > 0))) {
      const expected = await expectedDurations(
        db,
        plan.tenants,
        options.defaultUpgradeSeconds ?? DEFAULT_UPGRADE_SECONDS,
      );
      const now = (this.#deps.now ?? Date.now)();
      const horizon = (options.windowWaitSeconds ?? DEFAULT_WINDOW_WAIT_SECONDS) * 1000;
      const memo = new Map<string, ReturnType<typeof nextFit>>();
      for (const t of plan.tenants) {
        if (blocked.has(t.tenantId)) continue;
        const tenantWindows = override ? [] : (windows.get(t.tenantId) ?? []);
        const need = expected(t);
        const needMs = override ? 0 : need.seconds * 1000;
        const key = `${needMs}|${JSON.stringify(tenantWindows)}`;
        let fit = memo.get(key);
        if (!fit) {
          fit = nextFit({ windows: tenantWindows, freezes }, now, needMs, horizon);
          memo.set(key, fit);
        }
        if (fit.at === null) {
          blocked.set(t.tenantId, explainNoFit(fit, needMs, need.what));
          outsideWindow.add(t.tenantId);
        } else
          starts.set(t.tenantId, {
            earliestStart: fit.at > now ? new Date(fit.at).toISOString() : null,
            expectedSeconds: need.seconds,
          });
      }
    }
    const annotate = (p: Plan): Plan => {
      if (starts.size > 0) for (const t of p.tenants) Object.assign(t, starts.get(t.tenantId) ?? {});
      return p;
    };
    if (blocked.size > 0) {
      const kept = candidates.filter((c) => !blocked.has(c.id));
      const again = planFleetUpgrade(catalog, r.targetVersion, kept, options);
      // A tenant excluded for its windows keeps a place in the wave it would have had (not the
      // canary, whose size is the operator's choice, unless it is the only wave), so that it can
      // be taken back while that wave runs.
      const planned = new Map(plan.tenants.map((t) => [t.tenantId, t]));
      const lastWave = again.waves.length - 1;
      for (const c of candidates)
        if (blocked.has(c.id)) {
          const p = outsideWindow.has(c.id) ? planned.get(c.id) : undefined;
          again.excluded.push({
            tenantId: c.id,
            organization: c.organization,
            version: c.version,
            reason: blocked.get(c.id)!,
            ...(p && lastWave >= 0 ? { wave: Math.min(Math.max(p.wave, 1), lastWave), path: p.path } : {}),
          });
        }
      return { plan: annotate(again), options, unknown: unknownOf(unknownIds) };
    }
    return { plan: annotate(plan), options, unknown: unknownOf(unknownIds) };
  }

  /** The plan of a fleet upgrade, written nowhere. */
  async plan(r: FleetUpgradeRequest): Promise<PlanView> {
    const { plan, unknown } = await this.#plan(this.#deps.pool, r);
    return planView(plan, unknown);
  }

  /** Starts a fleet upgrade: the plan, written with its waves and tenants, audited, and the drivers woken. */
  async create(r: FleetUpgradeRequest, by: Requester): Promise<{ fleetUpgrade: FleetUpgradeView; plan: PlanView }> {
    const id = randomUUID();
    try {
      const planned = await withTx(this.#deps.pool, async (tx) => {
        const { plan, options, unknown } = await this.#plan(tx, r);
        if (plan.tenants.length === 0)
          throw new AppError(
            'NOTHING_TO_UPGRADE',
            `none of the ${plan.excluded.length + unknown.length} selected tenants can be upgraded to ${r.targetVersion} (the dry run lists why)`,
            { field: 'selector', details: { excluded: plan.excluded.length + unknown.length } },
          );
        await insertFleetUpgrade(tx, { id, selector: r.selector, options, createdBy: by.actor.id, plan });
        await recordEvent(tx, id, 'start', null, {
          targetVersion: r.targetVersion,
          tenants: plan.tenants.length,
          waves: plan.waves.map((w) => w.size),
        });
        if (r.overrideWindows) await this.#override(tx, id, by, r.overrideWindows.reason);
        await writeAudit(tx, by.actor, {
          action: 'fleet_upgrade.start',
          targetType: 'fleet_upgrade',
          targetId: id,
          after: {
            targetVersion: r.targetVersion,
            selector: r.selector,
            options,
            tenants: plan.tenants.length,
            excluded: plan.excluded.length + unknown.length,
            waves: plan.waves.map((w) => w.size),
          },
          requestId: by.requestId,
        });
        await notifyFleetUpgrade(tx, id);
        return planView(plan, unknown);
      });
      return { fleetUpgrade: (await this.get(id, false))!, plan: planned };
    } catch (err) {
      // Another fleet upgrade took one of the tenants between the plan and the insert.
      if (pgCode(err) === '23505' && pgConstraint(err) === 'fleet_upgrade_tenants_one_active')
        throw new AppError(
          'FLEET_UPGRADE_CONFLICT',
          'another fleet upgrade took some of these tenants meanwhile: run the dry run again and retry',
        );
      throw err;
    }
  }

  /** Records the override of the windows (and the duration-fits rule) on the fleet upgrade: its row, an event, an audit row. */
  async #override(tx: Queryable, id: string, by: Requester, reason: string): Promise<void> {
    const override: WindowsOverride = { by: by.actor.id, reason, at: new Date().toISOString() };
    // Tenants waiting for a window may start now: what they waited for no longer holds.
    await setWindowsOverride(tx, id, override);
    await recordEvent(tx, id, 'override_windows', null, { by: by.actor.id, reason });
    await writeAudit(tx, by.actor, {
      action: 'fleet_upgrade.override_windows',
      targetType: 'fleet_upgrade',
      targetId: id,
      after: { reason, overrides: 'maintenance windows and the duration-fits rule (freezes still hold)' },
      requestId: by.requestId,
    });
  }

  /** Overrides the tenants' windows (not the freezes) for this fleet upgrade from now on, with the operator's reason. */
  async overrideWindows(id: string, by: Requester, reason: string): Promise<FleetUpgradeView> {
    await withTx(this.#deps.pool, async (tx) => {
      const row = await getFleetRow(tx, id, true);
      if (!row) throw errors.notFound('fleet upgrade', id);
      if (!['running', 'paused', 'halted'].includes(row.state))
        throw new AppError(
          'FLEET_UPGRADE_STATE',
          `fleet upgrade ${id} is ${row.state}: only a running, paused or halted fleet upgrade's windows can be overridden`,
          { details: { state: row.state } },
        );
      await this.#override(tx, id, by, reason);
      await notifyFleetUpgrade(tx, id);
    });
    return (await this.get(id, false))!;
  }

  async get(id: string, withTenants = true): Promise<FleetUpgradeView | undefined> {
    const row = await getFleetRow(this.#deps.pool, id);
    if (!row) return undefined;
    const [waves, counts, tenants, behind] = await Promise.all([
      waveRows(this.#deps.pool, id),
      stateCounts(this.#deps.pool, [id]),
      withTenants ? fleetTenantRows(this.#deps.pool, id) : Promise.resolve(undefined),
      withTenants ? hybridRuntimesBehind(this.#deps.pool, id, row.target_version) : Promise.resolve(undefined),
    ]);
    const out = view(row, waves, counts, tenants, await this.#viewContext([row], tenants));
    return behind ? { ...out, ...hybridRuntimesOf(behind, row.target_version) } : out;
  }

  /** What the answer puts next to the rows: the keys' names (of the tenants' gate skips too), the clock, the catalog. */
  async #viewContext(rows: readonly FleetRow[], tenants: readonly FleetTenantRow[] = []): Promise<ViewContext> {
    const labels = await keyLabels(this.#deps.pool, [
      ...rows.flatMap((r) => [r.created_by, ...(r.windows_override ? [r.windows_override.by] : [])]),
      ...tenants.flatMap((t) => t.gate_skips.map((s) => s.by)),
    ]);
    return { labels, nowMs: (this.#deps.now ?? Date.now)(), catalog: this.#deps.catalog };
  }

  /**
   * The fleet upgrades a tenant is part of (pending or under way in one, or finished in one still
   * running, paused, halted or aborting), newest first, each with that tenant alone as `tenants`.
   */
  async ofTenant(tenantId: string, limit: number): Promise<FleetUpgradeView[]> {
    const found = await fleetUpgradesOfTenant(this.#deps.pool, tenantId, limit);
    const context = await this.#viewContext(
      found.map((f) => f.fleet),
      found.map((f) => f.tenant),
    );
    const out: FleetUpgradeView[] = [];
    for (const { fleet, tenant } of found) {
      const [waves, counts] = await Promise.all([
        waveRows(this.#deps.pool, fleet.id),
        stateCounts(this.#deps.pool, [fleet.id]),
      ]);
      out.push(view(fleet, waves, counts, [tenant], context, false));
    }
    return out;
  }

  /** The fleet upgrade's events after `afterSeq`, oldest first (its progress stream). */
  events(id: string, afterSeq: number, limit: number): Promise<FleetEvent[]> {
    return fleetEvents(this.#deps.pool, id, afterSeq, limit);
  }

  async list(limit: number, state?: FleetState): Promise<FleetUpgradeView[]> {
    const rows = await listFleetRows(this.#deps.pool, limit, state);
    const counts = await stateCounts(
      this.#deps.pool,
      rows.map((r) => r.id),
    );
    const context = await this.#viewContext(rows);
    const out: FleetUpgradeView[] = [];
    for (const r of rows)
      out.push(
        view(
          r,
          await waveRows(this.#deps.pool, r.id),
          counts.filter((c) => c.fleet_upgrade_id === r.id),
          undefined,
          context,
        ),
      );
    return out;
  }

  /** Nothing new starts; steps under way finish and are judged. */
  pause(id: string, by: Requester, reason?: string): Promise<FleetUpgradeView> {
    return this.#transition(id, by, 'pause', ['running'], async (tx) => {
      await pauseFleetUpgrade(tx, id, reason ?? null);
    });
  }

  /** A paused or halted fleet upgrade goes on; after a halt the wave's failures so far are forgiven. */
  resume(id: string, by: Requester): Promise<FleetUpgradeView> {
    return this.#transition(id, by, 'resume', ['paused', 'halted'], async (tx, row) => {
      await resumeFleetUpgrade(tx, id, row.state === 'halted' ? row.current_wave : null);
    });
  }

  /** Stops the fleet upgrade: tenants not started are cancelled; with `rollback`, moved tenants go back in reverse wave order. */
  abort(id: string, by: Requester, o: { rollback: boolean; reason?: string | undefined }): Promise<FleetUpgradeView> {
    return this.#transition(
      id,
      by,
      'abort',
      ['running', 'paused', 'halted'],
      async (tx) => {
        await startAbort(tx, id, o.rollback, o.reason ?? null);
        // Nothing under way and nothing to roll back: aborted now (else the driver finishes it).
        if (await finishAbortIfIdle(tx, id, o.rollback)) await recordEvent(tx, id, 'aborted', null, {});
      },
      { rollback: o.rollback, ...(o.reason ? { reason: o.reason } : {}) },
    );
  }

  /**
   * Skips health-gate checks of the step a tenant's part of the fleet upgrade waits on, for that
   * step only: the driver's next judgment counts them as passed (gate.ts), on whichever replica
   * holds the lease, since the skip is stored on the tenant's row in the transaction that audits
   * it. Each check named must be one the step waits on at its last judgment; a repeat naming only
   * checks already skipped for the tenant's latest step changes nothing. Answers the fleet upgrade
   * with that tenant alone in `tenants`.
   */
  async skipGate(
    id: string,
    tenantId: string,
    by: Requester,
    r: { checks: readonly SkippableGateCheck[]; reason: string },
  ): Promise<FleetUpgradeView> {
    const checks = [...new Set(r.checks)];
    await withTx(this.#deps.pool, async (tx) => {
      // Waits for a driver's tick in progress (it holds the row): the tick after the commit reads the skip.
      const row = await getFleetRow(tx, id, true);
      if (!row) throw errors.notFound('fleet upgrade', id);
      const t = await fleetTenantRow(tx, id, tenantId);
      if (!t || t.state === 'excluded')
        throw new AppError('TENANT_NOT_FOUND', `tenant '${tenantId}' is not upgraded by fleet upgrade ${id}`);
      const done = skippedFor(t.gate_skips, t.generation);
      if (checks.every((c) => done.has(c))) return;
      if (!ACTIVE_FLEET_STATES.includes(row.state))
        throw new AppError(
          'FLEET_UPGRADE_STATE',
          `fleet upgrade ${id} is ${row.state}: its steps are no longer judged, so there is no gate to skip`,
          { details: { state: row.state } },
        );
      const step = STEP_OF[t.state];
      const who = `${t.organization} (${tenantId})`;
      if (!step || !t.step_from || !t.step_to || t.generation === null || t.gate?.passed)
        throw new AppError(
          'GATE_NOT_WAITING',
          `${who} is ${t.state.replace('_', ' ')} in fleet upgrade ${id}: no step of it waits on its health gate`,
          { details: { state: t.state, waitingOn: [] } },
        );
      const waiting = (t.gate?.checks ?? []).filter((c) => !c.ok && !done.has(c.name)).map((c) => c.name);
      const not = checks.filter((c) => !done.has(c) && !waiting.includes(c));
      if (not.length > 0)
        throw new AppError(
          'GATE_NOT_WAITING',
          `the ${step} ${t.step_from} -> ${t.step_to} of ${who} does not wait on ${not.join(' or ')}: ` +
            (waiting.length > 0
              ? `it waits on ${waiting.join(', ')}`
              : 'it waits on its first judgment (the driver judges it in its next round)'),
          { field: 'checks', details: { state: t.state, waitingOn: waiting } },
        );
      const skip: GateSkip = {
        generation: Number(t.generation),
        step,
        from: t.step_from,
        to: t.step_to,
        checks: checks.filter((c) => !done.has(c)),
        reason: r.reason,
        by: by.actor.id,
        at: new Date().toISOString(),
      };
      await addGateSkip(tx, id, tenantId, skip);
      const what = { checks: skip.checks, reason: skip.reason, step: { kind: step, from: skip.from, to: skip.to } };
      await recordEvent(tx, id, 'gate_skipped', tenantId, { ...what, by: by.actor.id });
      await writeAudit(tx, by.actor, {
        action: 'fleet_upgrade.gate_skipped',
        targetType: 'tenant',
        targetId: tenantId,
        before: { waitingOn: waiting },
        after: { fleetUpgradeId: id, ...what },
        requestId: by.requestId,
      });
      await notifyFleetUpgrade(tx, id);
    });
    return (await this.#withTenant(id, tenantId))!;
  }

  /** The fleet upgrade with one tenant alone in `tenants`. */
  async #withTenant(id: string, tenantId: string): Promise<FleetUpgradeView | undefined> {
    const [row, tenant] = await Promise.all([
      getFleetRow(this.#deps.pool, id),
      fleetTenantRow(this.#deps.pool, id, tenantId),
    ]);
    if (!row || !tenant) return undefined;
    const [waves, counts, context] = await Promise.all([
      waveRows(this.#deps.pool, id),
      stateCounts(this.#deps.pool, [id]),
      this.#viewContext([row], [tenant]),
    ]);
    return view(row, waves, counts, [tenant], context, false);
  }

  async #transition(
    id: string,
    by: Requester,
    action: 'pause' | 'resume' | 'abort',
    from: readonly FleetState[],
    apply: (tx: pg.PoolClient, row: FleetRow) => Promise<void>,
    extra: Record<string, unknown> = {},
  ): Promise<FleetUpgradeView> {
    await withTx(this.#deps.pool, async (tx) => {
      // Waits for a driver's tick in progress (it holds the row): the change applies to every later tick.
      const row = await getFleetRow(tx, id, true);
      if (!row) throw errors.notFound('fleet upgrade', id);
      if (!from.includes(row.state))
        throw new AppError(
          'FLEET_UPGRADE_STATE',
          `fleet upgrade ${id} is ${row.state}: only a ${from.join(' or ')} fleet upgrade can be ${action === 'abort' ? 'aborted' : action + 'd'}`,
          { details: { state: row.state } },
        );
      await recordEvent(tx, id, action, null, { by: by.actor.id, ...extra });
      await apply(tx, row);
      await writeAudit(tx, by.actor, {
        action: `fleet_upgrade.${action}`,
        targetType: 'fleet_upgrade',
        targetId: id,
        before: { state: row.state },
        after: { state: action === 'pause' ? 'paused' : action === 'resume' ? 'running' : 'aborting', ...extra },
        requestId: by.requestId,
      });
      await notifyFleetUpgrade(tx, id);
    });
    return (await this.get(id, false))!;
  }
}

function unknownOf(ids: string[]): ExcludedTenant[] {
  return ids.map((id) => ({
    tenantId: id,
    organization: '',
    version: '',
    reason: 'no such tenant (or it is deleted)',
  }));
}

function planView(plan: Plan, unknown: ExcludedTenant[]): PlanView {
  const byWave = new Map<number, string[]>();
  for (const t of plan.tenants) {
    const list = byWave.get(t.wave) ?? [];
    list.push(t.tenantId);
    byWave.set(t.wave, list);
  }
  const excluded = [...plan.excluded, ...unknown].map((e) => ({
    tenantId: e.tenantId,
    organization: e.organization,
    version: e.version,
    reason: e.reason,
  }));
  return {
    targetVersion: plan.targetVersion,
    waves: plan.waves.map((w) => ({ ...w, tenants: byWave.get(w.wave) ?? [] })),
    tenants: plan.tenants,
    excluded,
    counts: {
      selected: plan.tenants.length + excluded.length,
      upgradeable: plan.tenants.length,
      excluded: excluded.length,
    },
  };
}

interface ViewContext {
  labels: Map<string, KeyLabel>;
  nowMs: number;
  catalog: Catalog;
}

const STEP_OF: Partial<Record<FleetTenantState, GateWait['step']>> = {
  upgrading: 'upgrade',
  rolling_back: 'rollback',
  reverting: 'revert',
};

/** The step under way of a tenant's row, while its gate has not passed; null otherwise. */
export function gateWaitOf(
  t: FleetTenantRow,
  gateTimeoutSeconds: number,
  nowMs: number,
  catalog: Pick<Catalog, 'rollbackAnswer'>,
): GateWait | null {
  const step = STEP_OF[t.state];
  if (!step || !t.step_started_at || !t.step_from || !t.step_to || t.gate?.passed) return null;
  const timeoutMs = t.step_started_at.getTime() + gateTimeoutSeconds * 1000;
  let onTimeout: string;
  if (step === 'upgrade') {
    const back = catalog.rollbackAnswer(t.step_to, t.step_from);
    onTimeout = back.allowed
      ? `the hop fails (it counts against the wave's failure budget): the tenant is rolled back to ${t.step_from} automatically, then quarantined`
      : `the hop fails (it counts against the wave's failure budget): the tenant is quarantined at ${t.step_to}, not rolled back (${back.reason})`;
  } else if (step === 'rollback') onTimeout = `the automatic rollback to ${t.step_to} fails: the tenant is quarantined`;
  else onTimeout = `the rollback to ${t.step_to} after the abort fails: the tenant is left as it is`;
  // Checks skipped since the last judgment no longer hold the step (the next judgment passes them).
  const skipped = skippedFor(t.gate_skips, t.generation);
  return {
    step,
    waitingOn: (t.gate?.checks ?? []).filter((c) => !c.ok && !skipped.has(c.name)),
    since: t.step_started_at.toISOString(),
    timeoutAt: new Date(timeoutMs).toISOString(),
    secondsLeft: Math.max(0, Math.ceil((timeoutMs - nowMs) / 1000)),
    onTimeout,
  };
}

function view(
  row: FleetRow,
  waves: WaveRow[],
  counts: Array<{ wave: number | null; state: FleetTenantState; n: number }>,
  tenants: FleetTenantRow[] | undefined,
  context: ViewContext,
  /** False when `tenants` is not all of them (a tenant's fleet upgrades): no ETA from them. */
  allTenants = true,
): FleetUpgradeView {
  const gateTimeoutSeconds = Number(
    (row.options as { gateTimeoutSeconds?: number }).gateTimeoutSeconds ?? DEFAULT_OPTIONS.gateTimeoutSeconds,
  );
  const total = emptyCounts();
  const perWave = new Map<number, Counts>();
  for (const c of counts) {
    total[c.state] += c.n;
    if (c.wave === null) continue;
    const w = perWave.get(c.wave) ?? emptyCounts();
    w[c.state] += c.n;
    perWave.set(c.wave, w);
  }
  return {
    id: row.id,
    targetVersion: row.target_version,
    state: row.state,
    stateReason: row.state_reason,
    selector: row.selector,
    options: row.options as unknown as FleetOptions,
    currentWave: row.current_wave,
    abortRollback: row.abort_rollback,
    createdBy: row.created_by,
    createdByKey: context.labels.get(row.created_by) ?? null,
    createdAt: row.created_at.toISOString(),
    updatedAt: row.updated_at.toISOString(),
    finishedAt: iso(row.finished_at),
    windowsOverride: row.windows_override
      ? { ...row.windows_override, byKey: context.labels.get(row.windows_override.by) ?? null }
      : null,
    counts: total,
    etaSeconds: allTenants ? eta(row, waves, tenants) : null,
    waves: waves.map((w) => ({
      wave: w.wave,
      name: w.wave === 0 ? 'canary' : `wave ${w.wave}`,
      size: w.size,
      state: w.state,
      maxConcurrency: w.max_concurrency,
      maxUnavailable: w.max_unavailable,
      soakSeconds: w.soak_seconds,
      maxFailures: w.max_failures,
      maxFailurePercent: w.max_failure_percent,
      startedAt: iso(w.started_at),
      settledAt: iso(w.settled_at),
      completedAt: iso(w.completed_at),
      counts: perWave.get(w.wave) ?? emptyCounts(),
    })),
    ...(tenants
      ? {
          tenants: tenants.map((t) => ({
            tenantId: t.tenant_id,
            organization: t.organization,
            wave: t.wave,
            state: t.state,
            fromVersion: t.from_version,
            path: t.path,
            hop: t.hop,
            step:
              t.step_from && t.step_to
                ? { from: t.step_from, to: t.step_to, operationId: t.operation_id, startedAt: iso(t.step_started_at) }
                : null,
            gate: t.gate,
            gateWait: gateWaitOf(t, gateTimeoutSeconds, context.nowMs, context.catalog),
            gateSkipped: t.gate_skips.map((s) => ({
              step: { kind: s.step, from: s.from, to: s.to },
              checks: s.checks,
              reason: s.reason,
              by: s.by,
              byKey: context.labels.get(s.by) ?? null,
              at: s.at,
            })),
            rolledBack: t.rolled_back,
            reason: t.reason,
            deferredUntil: iso(t.deferred_until),
            startedAt: iso(t.started_at),
            finishedAt: iso(t.finished_at),
          })),
        }
      : {}),
  };
}

/**
 * Time left at the pace so far: the mean time a finished tenant took, times the tenants left,
 * divided by the wave's concurrency, plus the soaks still to come. Null until a tenant finished.
 */
function eta(row: FleetRow, waves: WaveRow[], tenants: FleetTenantRow[] | undefined): number | null {
  if (!ACTIVE_FLEET_STATES.includes(row.state) || row.state === 'aborting' || !tenants) return null;
  const finished = tenants.filter((t) => t.started_at && t.finished_at && t.state === 'succeeded');
  if (finished.length === 0) return null;
  const mean =
    finished.reduce((s, t) => s + (t.finished_at!.getTime() - t.started_at!.getTime()), 0) / finished.length / 1000;
  let seconds = 0;
  for (const w of waves) {
    if (w.state === 'completed') continue;
    const left = tenants.filter((t) => t.wave === w.wave && (t.state === 'pending' || t.state === 'upgrading')).length;
    seconds +=
      Math.ceil(left / Math.max(1, w.max_concurrency)) * mean + (w.wave < waves.length - 1 ? w.soak_seconds : 0);
  }
  return Math.round(seconds);
}
