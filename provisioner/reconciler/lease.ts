/**
 * Leases: which worker may reconcile a tenant. A lease is (lease_owner, lease_expires_at) on the
 * tenant row. Claiming takes due tenants whose lease is free or expired with FOR UPDATE SKIP
 * LOCKED; a heartbeat renews the leases a worker holds; the transaction that records an
 * outcome releases the lease. Every write after the claim is fenced by `lease_owner = $owner`.
 * The statements are store/leases.ts's; this module decides what a claim takes.
 */
import type pg from 'pg';
import { withTx } from '../db/tx.ts';
import {
  countClusterLoad,
  lockClusters,
  rescheduleWaiting,
  selectDueTenants,
  takeLeases,
  type ClaimedTenant,
  type DueRow,
} from '../store/leases.ts';
import { appendWaitLines } from '../store/operations.ts';
import type { Condition } from '../store/states.ts';
import { waitLine, waitingStatus, type WaitBackoff } from './outcome.ts';
import { choosePlacement, type ClusterLoad } from './placement.ts';

export interface ClaimOptions {
  owner: string;
  limit: number;
  leaseTtlMs: number;
  clusterParallelism: number;
  /** 0 turns periodic resync off. */
  resyncMs: number;
  /** Retry delays of a tenant no cluster can take. */
  noCapacityWait: WaitBackoff;
  /** Set while this process's engine is unavailable: due tenants wait (EngineUnavailable) instead of being leased. */
  engineUnavailable?: { message: string; wait: WaitBackoff };
}

/** What a claim did: the tenants it leased, and how many due tenants it found waiting and rescheduled. */
export interface Claim {
  leased: ClaimedTenant[];
  waiting: number;
}

/**
 * Claims up to `limit` due tenants in one transaction: selects them (SKIP LOCKED), respects the
 * per-cluster parallelism, places unplaced tenants, and takes the leases. Tenants whose cluster
 * is busy stay unclaimed (still due). Tenants that cannot run yet (no cluster can take them, or
 * the engine is unavailable) are rescheduled in the same transaction without a lease.
 */
export async function claimDueTenants(pool: pg.Pool, o: ClaimOptions): Promise<Claim> {
  if (o.limit <= 0) return { leased: [], waiting: 0 };
  return withTx(pool, async (client) => {
    // Look a little further than the free slots: some candidates may sit on busy clusters.
    const due = await selectDueTenants(client, o.limit * 3, o.resyncMs);
    if (due.length === 0) return { leased: [], waiting: 0 };
    const waiting: Array<{ id: string; conditions: Condition[]; retryInMs: number }> = [];
    const waitLines: Array<{ tenantId: string; line: string }> = [];
    const wait = (d: DueRow, reason: 'NoCapacity' | 'EngineUnavailable', message: string, w: WaitBackoff) => {
      waiting.push({ id: d.id, ...waitingStatus(d.conditions, reason, message, w) });
      const line = waitLine(d.conditions, reason, message);
      if (line) waitLines.push({ tenantId: d.id, line });
    };
    // Without an engine only deletes of never-placed tenants (nothing to destroy) can run.
    const engine = o.engineUnavailable;
    const runnable = engine
      ? due.filter((d) => {
          if (d.deleted && d.cluster_id === null) return true;
          wait(d, 'EngineUnavailable', engine.message, engine.wait);
          return false;
        })
      : due;
    const needPlacement = runnable.some((d) => d.cluster_id === null && !d.deleted);
    const placedIds = [...new Set(runnable.flatMap((d) => (d.cluster_id ? [d.cluster_id] : [])))];
    const clusters = placedIds.length > 0 || needPlacement ? await lockClusters(client, placedIds, needPlacement) : [];
    const load =
      clusters.length > 0
        ? await countClusterLoad(
            client,
            clusters.map((c) => c.id),
          )
        : new Map<string, { leases: number; tenants: number }>();
    const loads: ClusterLoad[] = clusters.map((c) => ({
      ...c,
      leases: load.get(c.id)?.leases ?? 0,
      tenants: load.get(c.id)?.tenants ?? 0,
    }));
    const byId = new Map(loads.map((c) => [c.id, c]));

    const picks: Array<{ id: string; clusterId: string | null; placement: ClaimedTenant['placement'] }> = [];
    for (const d of runnable) {
      if (d.cluster_id !== null) {
        if (picks.length >= o.limit) continue; // no free worker: stays due
        const c = byId.get(d.cluster_id);
        if (c && c.leases >= o.clusterParallelism) continue; // busy: stays due
        if (c) c.leases += 1;
        picks.push({ id: d.id, clusterId: null, placement: 'placed' });
      } else if (d.deleted) {
        if (picks.length >= o.limit) continue;
        picks.push({ id: d.id, clusterId: null, placement: 'none-needed' }); // never placed: nothing to destroy
      } else {
        const decision = choosePlacement(loads, { plan: d.plan, region: d.region }, o.clusterParallelism);
        if (decision.kind === 'no-capacity') {
          wait(d, 'NoCapacity', decision.message, o.noCapacityWait);
          continue;
        }
        if (decision.kind === 'busy' || picks.length >= o.limit) continue;
        const c = byId.get(decision.clusterId)!;
        c.leases += 1;
        c.tenants += 1;
        picks.push({ id: d.id, clusterId: decision.clusterId, placement: 'placed' });
      }
    }
    await rescheduleWaiting(client, waiting);
    await appendWaitLines(client, waitLines);
    const taken = await takeLeases(
      client,
      o.owner,
      o.leaseTtlMs,
      picks.map((p) => ({ id: p.id, clusterId: p.clusterId })),
    );
    const pickById = new Map(picks.map((p) => [p.id, p]));
    return { leased: taken.map((t) => ({ ...t, placement: pickById.get(t.id)!.placement })), waiting: waiting.length };
  });
}
