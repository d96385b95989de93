/**
 * The warm pool (docs/operations.md "Warm pool"): runtimes provisioned ahead of signups, so that a
 * new tenant is Ready at signup instead of a cold start's minute.
 *
 * The `warm-pool` loop keeps, per plan of PROVISIONER_WARM_POOL, that many unclaimed entries at the
 * catalog's default version: an entry is a tenant row with no customer (store/pool.ts) that the
 * reconciler provisions like any tenant (placement, capacity, the engine's budgets). It adds at most
 * PROVISIONER_WARM_POOL_PARALLELISM entries in flight at once (the refill's CPU budget), and
 * deletes the entries of another version or plan (a new default, a withdrawn version) so the pool
 * follows the catalog. A signup of a pooled plan claims one Ready entry in its transaction
 * (tenant-api/service.ts); without one it takes the cold path as before.
 */
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { WarmPoolConfig } from '../config.ts';
import { withTx } from '../db/tx.ts';
import { PeriodicLoop } from '../../runtime/loops/periodic.ts';
import { writeAudit, type Actor } from '../store/audit.ts';
import { insertPoolEntry, poolCounts, stalePoolEntries, tryPoolLock, type PoolEntryCounts } from '../store/pool.ts';
import { changeSpec } from '../store/tenants.ts';

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
   * within the parallelism.
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
      /** Plans one of whose entries failed: no new entry for them this round (a create that always fails must not churn). */
      const failedPlans = new Set<string>();
      for (const row of await stalePoolEntries(tx, keep, 20)) {
        const failed = row.stalled || row.phase === 'Failed';
        if (failed) {
          failedPlans.add(row.plan);
          this.#o.logger?.warn(
            { tenantId: row.id, plan: row.plan, runtimeVersion: row.runtime_version },
            'warm pool entry failed to provision: recycled; its operation log says why',
          );
        }
        const op = await changeSpec(
          tx,
          row,
          { deleted: true },
          'delete',
          failed
            ? 'warm pool entry recycled: it failed to provision'
            : `warm pool entry recycled: the pool keeps ${keep.length ? keep.map((k) => `${k.plan} at ${k.runtimeVersion}`).join(', ') : 'nothing'}`,
        );
        await writeAudit(tx, ACTOR, {
          action: 'warm_pool.recycle',
          targetType: 'tenant',
          targetId: row.id,
          after: { plan: row.plan, runtimeVersion: row.runtime_version, operationId: op.id, failed },
        });
        recycled += 1;
      }
      const counts = await poolCounts(tx);
      let inFlight = counts.reduce((n, c) => n + c.provisioning, 0);
      let added = 0;
      for (const { plan, runtimeVersion } of keep) {
        if (failedPlans.has(plan)) continue;
        const c = counts.find((x) => x.plan === plan && x.runtime_version === runtimeVersion);
        let have = (c?.ready ?? 0) + (c?.provisioning ?? 0);
        while (have < sizes[plan]! && inFlight < this.#o.config.parallelism) {
          const entry = await insertPoolEntry(tx, plan, runtimeVersion, randomBytes(4).toString('hex'));
          await writeAudit(tx, ACTOR, {
            action: 'warm_pool.add',
            targetType: 'tenant',
            targetId: entry.id,
            after: { plan, runtimeVersion, operationId: entry.operationId },
          });
          have += 1;
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
