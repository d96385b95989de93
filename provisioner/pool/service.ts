/**
 * The warm pool (docs/operations.md "Warm pool"): runtimes provisioned ahead of signups, so that a
 * new tenant is Ready at signup instead of a cold start's minute.
 *
 * The `warm-pool` loop keeps, per root cluster and per plan of PROVISIONER_WARM_POOL, that many
 * unclaimed entries at the catalog's default version, on every cluster that would take a new
 * tenant of the plan (placement's rules, reconciler/placement.ts: not cordoned, the plan allowed,
 * room left; a region takes no part: every region gets its entries). An entry is a tenant row with
 * no customer (store/pool.ts), pinned to its cluster when added, that the reconciler provisions
 * like any tenant (capacity, the engine's budgets). The loop adds at most
 * PROVISIONER_WARM_POOL_PARALLELISM entries in flight at once, all clusters and plans together (the
 * refill's CPU budget), the emptiest (cluster, plan) first; it deletes the entries of another
 * version or plan (a new default, a withdrawn version) so the pool follows the catalog, and those
 * on a cluster that takes no new tenant of their plan any more (cordoned, the plan no longer
 * allowed). A signup of a pooled plan claims one Ready entry in its transaction and exchanges its
 * runtime key (tenant-api/service.ts); without one it takes the cold path as before.
 */
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { WarmPoolConfig } from '../config.ts';
import { withTx } from '../db/tx.ts';
import { PeriodicLoop } from '../../runtime/loops/periodic.ts';
import { writeAudit, type Actor } from '../store/audit.ts';
import { countClusterLoad, lockClusters } from '../store/leases.ts';
import {
  insertPoolEntry,
  poolCounts,
  stalePoolEntries,
  tryPoolLock,
  type PoolEntryCounts,
  type StalePoolEntry,
} from '../store/pool.ts';
import { changeSpec } from '../store/tenants.ts';
import { ineligibility, type ClusterLoad } from '../reconciler/placement.ts';

const ACTOR: Actor = { id: 'warm-pool', role: 'system' };

export interface WarmPoolOptions {
  pool: pg.Pool;
  config: WarmPoolConfig;
  /** The version new entries get: the catalog's default now (runtime-versions/service.ts). */
  defaultVersion: () => Promise<string>;
  /** Whether this process runs the loop (default true; off where no reconciler runs). */
  enabled?: boolean;
  logger?: Logger | undefined;
}

export interface PoolRound {
  added: number;
  recycled: number;
}

/** Why an entry is recycled, for its delete operation and the log. */
function recycleReason(
  row: StalePoolEntry,
  failed: boolean,
  keep: ReadonlyArray<{ plan: string; runtimeVersion: string }>,
): string {
  if (failed) return 'warm pool entry recycled: it failed to provision';
  const kept = keep.some((k) => k.plan === row.plan && k.runtimeVersion === row.runtime_version);
  if (!kept)
    return `warm pool entry recycled: the pool keeps ${keep.length ? keep.map((k) => `${k.plan} at ${k.runtimeVersion}`).join(', ') : 'nothing'}`;
  if (row.cluster_name === null) return 'warm pool entry recycled: it is pinned to no root cluster';
  if (row.cluster_cordoned) return `warm pool entry recycled: its root cluster ${row.cluster_name} is cordoned`;
  return `warm pool entry recycled: its root cluster ${row.cluster_name} no longer allows plan ${row.plan}`;
}

/** The key of a (cluster, plan) pair. */
const pairKey = (clusterId: string | null, plan: string) => `${clusterId ?? '-'}/${plan}`;

export class WarmPool {
  readonly loop: PeriodicLoop;
  readonly #o: WarmPoolOptions;
  /** The last round's counts (metrics). */
  counts: PoolEntryCounts[] = [];

  constructor(o: WarmPoolOptions) {
    this.#o = o;
    const sized = Object.values(o.config.size).some((n) => n > 0);
    this.loop = new PeriodicLoop({
      name: 'warm-pool',
      enabled: o.enabled !== false && sized,
      round: async () => {
        await this.refill();
      },
      intervalMs: () => o.config.checkSeconds * 1000 * (0.9 + Math.random() * 0.2),
      logger: o.logger,
    });
  }

  /**
   * One round, in one transaction under an advisory lock (replicas take turns, so two never both
   * add the last missing entry): recycle the stale entries, then add entries up to each plan's size
   * on each cluster that takes it, within the parallelism. The root clusters are locked as a
   * reconciler's claim locks them (store/leases.ts lockClusters), so an entry and a cold tenant
   * placed at once do not both take a cluster's last place.
   */
  async refill(): Promise<PoolRound> {
    const version = await this.#o.defaultVersion();
    const sizes = this.#o.config.size;
    const keep = Object.entries(sizes)
      .filter(([, n]) => n > 0)
      .map(([plan]) => ({ plan, runtimeVersion: version }));
    const round = await withTx(this.#o.pool, async (tx) => {
      if (!(await tryPoolLock(tx))) return { added: 0, recycled: 0 };
      let recycled = 0;
      /** (cluster, plan) pairs one of whose entries failed: no new entry there this round (a create that always fails must not churn). */
      const failedPairs = new Set<string>();
      for (const row of await stalePoolEntries(tx, keep, 20)) {
        const failed = row.stalled || row.phase === 'Failed';
        if (failed) {
          failedPairs.add(pairKey(row.cluster_id, row.plan));
          this.#o.logger?.warn(
            { tenantId: row.id, plan: row.plan, runtimeVersion: row.runtime_version, cluster: row.cluster_name },
            'warm pool entry failed to provision: recycled; its operation log says why',
          );
        }
        const op = await changeSpec(tx, row, { deleted: true }, 'delete', recycleReason(row, failed, keep));
        await writeAudit(tx, ACTOR, {
          action: 'warm_pool.recycle',
          targetType: 'tenant',
          targetId: row.id,
          after: {
            plan: row.plan,
            runtimeVersion: row.runtime_version,
            cluster: row.cluster_name,
            operationId: op.id,
            failed,
          },
        });
        recycled += 1;
      }
      let added = 0;
      if (keep.length > 0) {
        const counts = await poolCounts(tx);
        let inFlight = counts.reduce((n, c) => n + c.provisioning, 0);
        const clusters = await lockClusters(tx, [], true);
        const load = await countClusterLoad(
          tx,
          clusters.map((c) => c.id),
        );
        const loads: ClusterLoad[] = clusters.map((c) => ({ ...c, leases: 0, tenants: load.get(c.id)?.tenants ?? 0 }));
        /** What each (cluster, plan) pair has now (Ready and provisioning entries at the kept version) and wants. */
        const pairs = loads.flatMap((cluster) =>
          keep.map(({ plan }) => {
            const c = counts.find(
              (x) => x.plan === plan && x.runtime_version === version && x.cluster_id === cluster.id,
            );
            return { cluster, plan, have: (c?.ready ?? 0) + (c?.provisioning ?? 0), want: sizes[plan]! };
          }),
        );
        while (inFlight < this.#o.config.parallelism) {
          // The emptiest pair of a cluster that takes a new tenant of its plan now, the least loaded cluster first.
          const next = pairs
            .filter(
              (p) =>
                p.have < p.want &&
                !failedPairs.has(pairKey(p.cluster.id, p.plan)) &&
                ineligibility(p.cluster, { plan: p.plan, region: null }) === undefined,
            )
            .sort(
              (a, b) =>
                a.have / a.want - b.have / b.want ||
                a.cluster.tenants / Math.max(1, a.cluster.capacity) -
                  b.cluster.tenants / Math.max(1, b.cluster.capacity) ||
                a.cluster.name.localeCompare(b.cluster.name) ||
                a.plan.localeCompare(b.plan),
            )[0];
          if (!next) break;
          const { plan, cluster } = next;
          const entry = await insertPoolEntry(tx, plan, version, randomBytes(4).toString('hex'), cluster.id);
          await writeAudit(tx, ACTOR, {
            action: 'warm_pool.add',
            targetType: 'tenant',
            targetId: entry.id,
            after: { plan, runtimeVersion: version, cluster: cluster.name, operationId: entry.operationId },
          });
          next.have += 1;
          cluster.tenants += 1;
          inFlight += 1;
          added += 1;
        }
      }
      this.counts = await poolCounts(tx);
      return { added, recycled };
    });
    if (round.added + round.recycled > 0) this.#o.logger?.info(round, 'warm pool refilled');
    return round;
  }
}
