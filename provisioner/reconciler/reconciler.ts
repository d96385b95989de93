/**
 * The reconcile loop of one provisioner process. It claims due tenants (lease.ts) up to its
 * worker count, runs one attempt per tenant through the engine, renews its leases by heartbeat,
 * and records each outcome in the transaction that releases the lease (outcome.ts).
 * LISTEN `tenant_due` wakes it at once; polling every `pollMs` is the truth.
 *
 * Cancellation: when a running tenant's spec turns to deleted (seen by NOTIFY or heartbeat) the
 * engine is aborted and the attempt recorded as cancelled; the delete then runs. When the lease
 * is lost (another process took the tenant over after this one stalled) the engine is aborted
 * and nothing is written. Shutdown: stop claiming, wait up to a grace period, then abort what
 * still runs and hand the leases back (the next owner recovers the stack first).
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type pg from 'pg';
import pino from 'pino';
import type { SecretBox } from '../crypto.ts';
import { DatabaseHealth, healthOf, isConnectionError } from '../db/availability.ts';
import { withTx } from '../db/tx.ts';
import type { Notifications, Unsubscribe } from '../db/notifications.ts';
import { PeriodicLoop, type RoundResult } from '../../runtime/loops/periodic.ts';
import { wait } from '../../runtime/loops/wait.ts';
import type { LoopStatus, Runnable } from '../../runtime/loops/health.ts';
import { getClusterKubeconfig } from '../store/clusters.ts';
import { appendLog } from '../store/operations.ts';
import { TENANT_CHANNEL, wakeWaiters } from '../store/tenants.ts';
import {
  EngineError,
  engineErrorOf,
  pendingChanges,
  type Engine,
  type EngineResult,
  type RunOptions,
  type StackInput,
} from '../engine/engine.ts';
import { describeRepair, kubeRecordStore, repairHelmReleases } from '../engine/helm-recovery.ts';
import {
  pinKubeconfig,
  KubeconfigPolicyError,
  STRICT_KUBECONFIG_POLICY,
  type KubeconfigPolicy,
} from '../../kubeconfig-policy/policy.ts';
import { recoveryPlan } from '../engine/pulumi-plan.ts';
import { startAttempt, type StartedAttempt } from './attempt.ts';
import { backoffMs, type BackoffOptions } from './backoff.ts';
import { corrections, describeCorrection, describeDrift, describeStateOnly, refreshFindings } from './drift.ts';
import { claimDueTenants } from './lease.ts';
import { readSpecMarkers, releaseLeases, renewLeases, type ClaimedTenant } from '../store/leases.ts';
import { LogWriter, kubeconfigSecrets } from './log-writer.ts';
import { recordCancelled, recordFailure, recordSuccess, recordWaiting } from './outcome.ts';
import { runtimeTokenFor } from './runtime-token.ts';
import { maskSecrets, secretList, tenantVisible } from './visible-text.ts';
import { DEFAULT_RECONCILER_SETTINGS as DEFAULTS } from './settings.ts';
import { defaultEngineMemoryMb, MemoryBudget } from './memory-budget.ts';

export type ReconcilerLog = Pick<pino.Logger, 'info' | 'warn' | 'error' | 'debug'>;

export interface ReconcilerOptions {
  /** Durable pool: claims, heartbeats, hand-backs. */
  pool: pg.Pool;
  /**
   * Pool for attempt bookkeeping (start, logs, outcomes); default `pool`. createWritePool() gives
   * one with synchronous_commit=off (see write-pool.ts for why that is safe).
   */
  writePool?: pg.Pool;
  engine: Engine;
  /** Decrypts root-cluster kubeconfigs and runtime tokens. */
  box: SecretBox;
  /** Lease owner id; default `<host>:<pid>:<random>`. */
  owner?: string;
  // Defaults of the settings below: DEFAULT_RECONCILER_SETTINGS (settings.ts).
  /** Concurrent attempts in this process. */
  workers?: number;
  /**
   * Memory budget of this process's engine runs in MiB (memory-budget.ts): runs are admitted by
   * it as well as by `workers`. Default: `workers` runs at the largest per-run estimate; 0: none.
   */
  engineMemoryMb?: number;
  /** Concurrent attempts per root cluster across all processes. */
  clusterParallelism?: number;
  leaseTtlMs?: number;
  /** Default: a third of the lease TTL. */
  heartbeatMs?: number;
  pollMs?: number;
  /** Resync interval of Ready/Suspended tenants; 0 turns it off. */
  resyncMs?: number;
  maxFailures?: number;
  backoff?: BackoffOptions;
  /** Retry delay of a tenant no cluster can take. */
  noCapacityRetryMs?: number;
  /** Retry delay while the engine is unavailable, and how often the engine is re-checked. */
  engineRetryMs?: number;
  /** Longest retry delay of a tenant waiting for capacity or for the engine (default 1 h; the freeing event wakes it sooner). */
  waitCapMs?: number;
  /** The process's notifications hub: LISTEN for `tenant_due` through it. Without one, polling alone still finds everything. */
  notifications?: Notifications;
  logFlushMs?: number;
  logger?: ReconcilerLog;
  /** Values masked in every operation log besides each tenant's own secrets (backend passwords, the passphrase). */
  logSecrets?: string[];
  /** What a stored root-cluster kubeconfig may hold; checked again on every load (default strict). */
  kubeconfigPolicy?: KubeconfigPolicy;
  /** A tenant's managed clusters with their credentials, for its program (default: none). */
  managedClusters?: (tenantId: string) => Promise<NonNullable<StackInput['managedClusters']>>;
  random?: () => number;
  /** Reachability of the database (default: the one `pool` reports to). */
  health?: DatabaseHealth;
  /** How long running attempts may finish when the loop manager stops the reconciler (stop() without graceMs). */
  shutdownGraceMs?: number;
}

/** Longest wait between claims while the database is unreachable. */
const PAUSED_RETRY_MS = 2_000;

type AbortReason = 'deleted' | 'lease-lost' | 'shutdown';

interface ActiveRun {
  tenant: ClaimedTenant;
  controller: AbortController;
  reason: AbortReason | undefined;
  operationId: string | undefined;
  done: Promise<void>;
}

export interface ReconcilerStats {
  /** Every look for due tenants that reached the database (polls, wake-ups, catch-ups). */
  polls: number;
  /** Claim transactions that returned at least one tenant. */
  claims: number;
  /** Milliseconds spent in claim transactions. */
  claimMs: number;
  claimed: number;
  succeeded: number;
  failed: number;
  cancelled: number;
  waiting: number;
  leaseLost: number;
  handedBack: number;
  /** Resyncs whose refresh found drift, and the drifted objects by `kind` and `change` (deleted, changed). */
  resyncsWithDrift: number;
  drift: Map<string, { kind: string; change: string; count: number }>;
}

/** How an operation this process ran ended (metrics). */
export type OperationResult = 'succeeded' | 'failed' | 'cancelled';

export class Reconciler implements Runnable {
  readonly name = 'reconciler';
  readonly owner: string;
  /** Called once per operation this process finished: its kind, result and how long the attempt ran (seconds). */
  onOperation: ((kind: string, result: OperationResult, seconds: number) => void) | undefined;
  readonly #settings: Required<
    Omit<
      ReconcilerOptions,
      'owner' | 'logger' | 'random' | 'heartbeatMs' | 'writePool' | 'health' | 'notifications' | 'engineMemoryMb'
    >
  > & { heartbeatMs: number };
  readonly #writePool: pg.Pool;
  readonly #log: ReconcilerLog;
  readonly #random: () => number;
  readonly #health: DatabaseHealth;
  /**
   * A connection made or a query answered: claim now. Only a claim that reaches the database
   * resumes the claims: a connection opened as the server went away can report `up` after the
   * outage was seen, and would unpause a reconciler whose every worker is busy.
   */
  readonly #onDatabaseUp = (): void => this.kick();
  /**
   * The outage as seen by any user of the pool (the API, the heartbeat, a run writing its outcome)
   * pauses the claims too: with every worker busy retrying its outcome no claim runs to notice it.
   */
  readonly #onDatabaseDown = (reason: string): void => this.#pause(reason);
  #paused = false;
  readonly #active = new Map<string, ActiveRun>();
  readonly #memory: MemoryBudget;
  readonly stats: ReconcilerStats = {
    polls: 0,
    claims: 0,
    claimMs: 0,
    claimed: 0,
    succeeded: 0,
    failed: 0,
    cancelled: 0,
    waiting: 0,
    leaseLost: 0,
    handedBack: 0,
    resyncsWithDrift: 0,
    drift: new Map(),
  };
  readonly #notifications: Notifications | undefined;
  #unsubscribe: Unsubscribe | undefined;
  /** The claim loop (runtime/loops/periodic.ts): a claim round every pollMs, at once when kicked. */
  readonly #loop: PeriodicLoop;
  /**
   * The lease heartbeat: renews the running attempts' leases every heartbeatMs (a round at most
   * every heartbeatMs, never two at once: a slow renewal delays the next instead of overlapping
   * it). Started by start(), stopped by stop() once the leases are handed back; listed by the
   * loop manager before the reconciler, so it outlives the reconciler's grace period.
   */
  readonly heartbeat: PeriodicLoop;
  /**
   * The engine re-check: while the engine is unavailable, starts it again every engineRetryMs and,
   * once it is available, wakes the tenants waiting for it. Started by start() after the engine's
   * first start, stopped first by stop().
   */
  readonly engineCheck: PeriodicLoop;
  #stopping = false;
  /** The engine's first start left it unavailable, and no re-check has found it since. */
  #engineMissing = false;
  #lastRenewOk = Date.now();
  readonly #kubeconfigs = new Map<string, { name: string; kubeconfig: string; until: number }>();

  constructor(opts: ReconcilerOptions) {
    const leaseTtlMs = opts.leaseTtlMs ?? DEFAULTS.leaseTtlMs;
    this.owner = opts.owner ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
    this.#settings = {
      logSecrets: opts.logSecrets ?? [],
      kubeconfigPolicy: opts.kubeconfigPolicy ?? STRICT_KUBECONFIG_POLICY,
      managedClusters: opts.managedClusters ?? (() => Promise.resolve([])),
      pool: opts.pool,
      engine: opts.engine,
      box: opts.box,
      workers: opts.workers ?? DEFAULTS.workers,
      clusterParallelism: opts.clusterParallelism ?? DEFAULTS.clusterParallelism,
      leaseTtlMs,
      heartbeatMs: opts.heartbeatMs ?? Math.max(50, Math.floor(leaseTtlMs / 3)),
      pollMs: opts.pollMs ?? DEFAULTS.pollMs,
      resyncMs: opts.resyncMs ?? DEFAULTS.resyncMs,
      maxFailures: opts.maxFailures ?? DEFAULTS.maxFailures,
      backoff: opts.backoff ?? DEFAULTS.backoff,
      noCapacityRetryMs: opts.noCapacityRetryMs ?? DEFAULTS.noCapacityRetryMs,
      engineRetryMs: opts.engineRetryMs ?? DEFAULTS.engineRetryMs,
      waitCapMs: opts.waitCapMs ?? DEFAULTS.waitCapMs,
      logFlushMs: opts.logFlushMs ?? DEFAULTS.logFlushMs,
      shutdownGraceMs: opts.shutdownGraceMs ?? DEFAULTS.shutdownGraceMs,
    };
    this.#writePool = opts.writePool ?? opts.pool;
    this.#notifications = opts.notifications;
    this.#log = opts.logger ?? pino({ level: 'silent' });
    this.#random = opts.random ?? Math.random;
    this.#health = opts.health ?? healthOf(opts.pool);
    this.#memory = new MemoryBudget(opts.engineMemoryMb ?? defaultEngineMemoryMb(this.#settings.workers));
    this.#loop = new PeriodicLoop({
      name: this.name,
      round: () => this.#claimRound(),
      intervalMs: () => this.#settings.pollMs,
      retryMs: (failures, err) => Math.min(isConnectionError(err) ? PAUSED_RETRY_MS : 10_000, 100 * 2 ** failures),
      onFailure: (err, retryInMs) => this.#claimFailed(err, retryInMs),
      secrets: () => this.#settings.logSecrets,
    });
    let beganAt = 0;
    // A fixed rate as a timer would keep, less the round's own time; never two renewals at once.
    const nextBeat = () => Math.max(0, this.#settings.heartbeatMs - (performance.now() - beganAt));
    this.heartbeat = new PeriodicLoop({
      name: 'lease-heartbeat',
      round: () => {
        beganAt = performance.now();
        return this.#beat();
      },
      firstDelayMs: () => this.#settings.heartbeatMs,
      intervalMs: nextBeat,
      retryMs: nextBeat,
      onFailure: () => {}, // said by #beat (or by the database health, once per outage)
      secrets: () => this.#settings.logSecrets,
    });
    this.engineCheck = new PeriodicLoop({
      name: 'engine-check',
      round: () => this.#recheckEngine(),
      firstDelayMs: () => this.#settings.engineRetryMs,
      intervalMs: () => this.#settings.engineRetryMs,
      retryMs: () => this.#settings.engineRetryMs,
      onFailure: (err) => this.#log.error({ err: String(err) }, 'engine start failed'),
      secrets: () => this.#settings.logSecrets,
    });
  }

  status(): LoopStatus {
    return this.#loop.status();
  }

  /** True while the database is unreachable: no claims; retried every second or two until it answers. */
  get paused(): boolean {
    return this.#paused;
  }

  /** Whether the engine can run now (the last start or re-check found the CLI and plugins). */
  get engineAvailable(): boolean {
    return this.#settings.engine.availability().available;
  }

  /** The engine memory budget (MiB; 0: none) and what the running attempts reserve of it. */
  get memory(): { budgetMb: number; inUseMb: number } {
    return { budgetMb: this.#memory.budgetMb, inUseMb: this.#memory.inUseMb };
  }

  /** Tenants this process is reconciling now. */
  get running(): string[] {
    return [...this.#active.keys()];
  }

  get listening(): boolean {
    return this.#unsubscribe !== undefined && (this.#notifications?.listening(TENANT_CHANNEL) ?? false);
  }

  /** Starts the engine (CLI check, plugins), the subscription to `tenant_due`, the heartbeat and the loop. */
  async start(signal?: AbortSignal): Promise<void> {
    if (this.#stopping) return;
    await this.#startEngine();
    // Whenever notifications may have been missed (the hub reconnected): claim now.
    this.#unsubscribe = this.#notifications?.subscribe(
      TENANT_CHANNEL,
      (id) => this.#onNotify(id),
      () => this.kick(),
    );
    await this.heartbeat.start();
    await this.engineCheck.start();
    this.#health.on('up', this.#onDatabaseUp);
    this.#health.on('down', this.#onDatabaseDown);
    await this.#loop.start(signal);
    this.#log.info(
      { owner: this.owner, workers: this.#settings.workers, engine: this.#settings.engine.name },
      'reconciler started',
    );
  }

  async #startEngine(): Promise<void> {
    try {
      await this.#settings.engine.start();
    } catch (err) {
      this.#log.error({ err: String(err) }, 'engine start failed');
    }
    const a = this.#settings.engine.availability();
    if (a.available) return;
    this.#engineMissing = true;
    this.#log.warn(
      { message: a.message },
      'engine unavailable: due tenants get condition EngineUnavailable; re-checking periodically',
    );
  }

  /** A round of the engine re-check: nothing once the engine was found; else start it again. */
  async #recheckEngine(): Promise<void> {
    const engine = this.#settings.engine;
    if (this.#stopping || !this.#engineMissing) return;
    // A throw is a failed round: said by the loop ('engine start failed'), tried again after engineRetryMs.
    await engine.start();
    if (engine.availability().available) {
      this.#engineMissing = false;
      const woken = await wakeWaiters(this.#settings.pool, 'EngineUnavailable').catch(() => 0);
      this.#log.info({ woken }, 'engine available again');
      this.kick();
    }
  }

  /** Wakes the loop to claim now. */
  kick(): void {
    this.#loop.kick();
  }

  /** One claim round: as many due tenants as workers and memory admit; 'again' when there may be more now. */
  async #claimRound(): Promise<RoundResult> {
    // Idle workers, as far as the memory budget admits more runs (memory-budget.ts).
    const free = this.#memory.freeSlots(this.#settings.workers - this.#active.size);
    if (free <= 0) return;
    const began = performance.now();
    const availability = this.#settings.engine.availability();
    const { leased: list, waiting } = await claimDueTenants(this.#settings.pool, {
      owner: this.owner,
      limit: free,
      leaseTtlMs: this.#settings.leaseTtlMs,
      clusterParallelism: this.#settings.clusterParallelism,
      resyncMs: this.#settings.resyncMs,
      noCapacityWait: { firstMs: this.#settings.noCapacityRetryMs, capMs: this.#settings.waitCapMs },
      ...(availability.available
        ? {}
        : {
            engineUnavailable: {
              message: tenantVisible(availability.message, secretList(this.#settings.logSecrets)),
              wait: { firstMs: this.#settings.engineRetryMs, capMs: this.#settings.waitCapMs },
            },
          }),
    });
    this.stats.polls += 1;
    this.#resume();
    this.stats.waiting += waiting;
    if (list.length > 0 || waiting > 0) {
      this.stats.claims += 1;
      this.stats.claimMs += performance.now() - began;
    }
    this.stats.claimed += list.length;
    for (const t of list) this.#launch(t);
    return list.length === free || waiting > 0 ? 'again' : undefined;
  }

  #claimFailed(err: unknown, retryInMs: number): void {
    if (isConnectionError(err)) {
      // An outage: pause (one line), try again soon; a reconnect anywhere in the process wakes it.
      this.#health.down(err);
      this.#pause(String(err));
      return;
    }
    this.#log.error({ err: String(err), retryInMs }, 'claiming due tenants failed');
  }

  #resume(): void {
    if (!this.#paused) return;
    this.#paused = false;
    this.#log.info('database reachable: reconciler resumed');
  }

  /** Pauses the claims (one line per outage); the next claim that reaches the database resumes them. */
  #pause(reason: string): void {
    if (this.#paused || this.#stopping) return;
    this.#paused = true;
    this.#log.warn(
      { err: reason },
      'database unreachable: reconciler paused; running attempts keep their leases until the lease TTL',
    );
  }

  #launch(t: ClaimedTenant): void {
    const run: ActiveRun = {
      tenant: t,
      controller: new AbortController(),
      reason: undefined,
      operationId: undefined,
      done: Promise.resolve(),
    };
    this.#active.set(t.id, run);
    this.#memory.reserve(t.id);
    run.done = this.#attempt(run)
      .catch((err: unknown) => this.#log.error({ err: String(err), tenant: t.id }, 'reconcile attempt crashed'))
      .finally(() => {
        if (this.#active.get(t.id) === run) {
          this.#active.delete(t.id);
          this.#memory.release(t.id);
        }
        this.kick();
      });
  }

  #onNotify(tenantId: string): void {
    const run = this.#active.get(tenantId);
    if (!run) {
      this.kick();
      return;
    }
    if (run.tenant.deleted || run.reason) return;
    readSpecMarkers(this.#settings.pool, tenantId).then(
      (m) => {
        if (m?.deleted) this.#abort(run, 'deleted');
      },
      () => {},
    );
  }

  #abort(run: ActiveRun, reason: AbortReason): void {
    if (run.reason) return;
    run.reason = reason;
    this.#log.info({ tenant: run.tenant.id, reason }, 'aborting the running engine');
    run.controller.abort(new Error(reason));
  }

  /** A round of the lease heartbeat: renews the running attempts' leases; aborts the runs whose lease is gone. */
  async #beat(): Promise<void> {
    const ids = [...this.#active.keys()];
    if (ids.length === 0) {
      this.#lastRenewOk = Date.now();
      return;
    }
    try {
      const rows = await renewLeases(this.#settings.pool, this.owner, ids, this.#settings.leaseTtlMs);
      this.#lastRenewOk = Date.now();
      const held = new Map(rows.map((r) => [r.id, r]));
      for (const id of ids) {
        const run = this.#active.get(id);
        if (!run || run.reason) continue;
        const m = held.get(id);
        if (!m) {
          // Only abort if the attempt had started: a run that just released its lease is finishing.
          if (run.operationId !== undefined) this.#abort(run, 'lease-lost');
        } else if (m.deleted && !run.tenant.deleted) {
          this.#abort(run, 'deleted');
        }
      }
    } catch (err) {
      if (isConnectionError(err))
        this.#health.down(err); // said once, by the health
      else this.#log.warn({ err: String(err) }, 'lease heartbeat failed');
      if (Date.now() - this.#lastRenewOk > this.#settings.leaseTtlMs) {
        // The leases have expired by now: another process may own these tenants.
        for (const run of this.#active.values()) this.#abort(run, 'lease-lost');
      }
      throw err; // a failed round of the heartbeat loop (its status, /metrics)
    }
  }

  /**
   * Writes an attempt's outcome, retrying while the database is unreachable and this process may
   * still hold the tenant's lease (its last renewal is younger than the lease TTL): an engine run
   * that succeeded just as the database went away is recorded once it is back, instead of being
   * run a second time by the next owner. Gives up (throws) once the lease may have expired, or
   * when the run is aborted (lease lost, shutdown).
   */
  async #whileLeaseHeld<T>(run: ActiveRun, write: () => Promise<T>): Promise<T> {
    for (let delay = 100; ; delay = Math.min(delay * 2, 2000)) {
      try {
        return await write();
      } catch (err) {
        const leaseAge = Date.now() - this.#lastRenewOk;
        if (!isConnectionError(err) || run.reason || this.#stopping || leaseAge + delay >= this.#settings.leaseTtlMs)
          throw err;
        await wait(delay);
      }
    }
  }

  async #attempt(run: ActiveRun): Promise<void> {
    const t = run.tenant;
    const { engine, box } = this.#settings;
    const pool = this.#writePool;
    // The engine became unavailable after the claim (the claim reschedules while it is).
    const availability = engine.availability();
    if (!availability.available && t.placement !== 'none-needed') {
      const message = tenantVisible(availability.message, secretList(this.#settings.logSecrets));
      await recordWaiting(pool, this.owner, t, 'EngineUnavailable', message, {
        firstMs: this.#settings.engineRetryMs,
        capMs: this.#settings.waitCapMs,
      });
      this.stats.waiting += 1;
      return;
    }
    // A delete passes the stored token (the stack config must stay valid for destroy) and never
    // mints a new one; a tenant deleted before its first attempt has no stack worth a token.
    const needsToken = t.placement === 'placed' && (!t.deleted || t.runtime_token_enc !== null);
    const { token, newKey } = needsToken
      ? runtimeTokenFor(box, t.id, t.runtime_token_enc)
      : { token: t.deleted ? 'deleted-tenant-has-no-runtime-token' : '', newKey: undefined };
    // One transaction (one commit) for the reads and writes that start the attempt.
    const started = await withTx(pool, (tx) => startAttempt(tx, t, this.owner, newKey));
    if (!started) {
      this.stats.leaseLost += 1;
      return;
    }
    run.operationId = started.operationId;
    // Reserved at the largest estimate until now: a smaller kind may leave room for another run.
    if (this.#memory.settle(t.id, started.kind)) this.kick();
    const began = performance.now();
    const finished = (result: OperationResult): void =>
      this.onOperation?.(started.kind, result, (performance.now() - began) / 1000);
    let log: LogWriter | undefined;
    let secrets = secretList(this.#settings.logSecrets);
    try {
      const input = t.placement === 'placed' ? await this.#stackInput(t, token) : undefined;
      secrets = secretList([
        ...this.#settings.logSecrets,
        ...(input ? [input.runtimeToken, ...kubeconfigSecrets(input.rootKubeconfig)] : []),
        ...(input?.managedClusters ?? []).flatMap(({ config: c }) =>
          [c.bearerToken, c.password, c.tlsClientConfig?.keyData].filter((v): v is string => !!v),
        ),
      ]);
      log = new LogWriter(pool, started.operationId, { flushMs: this.#settings.logFlushMs, secrets });
      this.#describe(log, t, started);
      const opts: RunOptions = {
        onOutput: (text) => log!.output(text),
        onEvent: (e) => log!.line(e.message, 'event'),
        signal: run.controller.signal,
      };
      let result: EngineResult = { outputs: {}, changes: {}, steps: [] };
      if (!input) {
        log.line('the tenant was never placed on a root cluster: nothing to destroy');
      } else {
        if (started.interrupted) await this.#recover(log, input, opts, started, run);
        if (t.deleted) {
          result = await engine.destroy(input, opts);
          log.line('stack destroyed and removed; API keys of the tenant revoked');
        } else if (started.kind === 'resync' && !t.resync_reason && !(await this.#resyncHasWork(log, input, opts))) {
          // A periodic resync that a preview against the live objects found nothing for: no
          // refresh, no update, no state written; the stored outputs are the status.
          result = { outputs: await engine.outputs(input), changes: {}, steps: [] };
        } else if (started.kind === 'resync') {
          const refreshed = await engine.refresh(input, opts);
          this.#logDrift(log, t, refreshFindings(refreshed.steps));
          result = await engine.up(input, opts);
          const corrected = corrections(result.steps);
          for (const c of corrected) log.line(`drift corrected: ${describeCorrection(c)}`);
          if (corrected.length === 0) log.line('nothing to correct');
        } else {
          result = await engine.up(input, opts);
        }
      }
      log.line(`operation succeeded (generation ${t.generation})`);
      await log.close();
      const success = {
        tenant: t,
        operationId: started.operationId,
        outputs: result.outputs,
        conditions: started.conditions,
        // The key this run gave the runtime: its success revokes a claimed entry's pool credential.
        installedKey: input ? (newKey?.enc ?? t.runtime_token_enc) : null,
      };
      if (await this.#whileLeaseHeld(run, () => recordSuccess(pool, this.owner, success))) {
        this.stats.succeeded += 1;
        finished('succeeded');
      } else this.stats.leaseLost += 1;
    } catch (err) {
      const reason = run.reason;
      const full = engineErrorOf(err);
      // The tenant reads the operation log, the operation's error and its conditions: the
      // engine's error in its tenant-visible form there; the whole text (secrets masked) in the server log.
      const error = { code: full.code, message: tenantVisible(full.message, secrets) };
      if (reason === 'lease-lost') {
        this.stats.leaseLost += 1;
        await log?.close();
        return;
      }
      if (reason === 'shutdown') {
        log?.line(
          'the provisioner is shutting down: engine stopped; the lease is handed back and the next owner recovers the stack',
        );
        await log?.close();
        return;
      }
      if (reason === 'deleted') {
        const message = 'cancelled: the tenant was deleted while this operation ran; the delete runs next';
        log?.line(message);
        await log?.close();
        if (await recordCancelled(pool, this.owner, t, started.operationId, message)) {
          this.stats.cancelled += 1;
          finished('cancelled');
        }
        return;
      }
      this.#log.warn(
        { tenant: t.id, operation: started.operationId, code: full.code, err: maskSecrets(full.message, secrets) },
        'operation failed',
      );
      log?.line(`operation failed: ${error.code}: ${error.message}`);
      await log?.close();
      if (!log)
        await appendLog(pool, started.operationId, [
          { stream: 'reconciler', line: `operation failed: ${error.code}: ${error.message}` },
        ]).catch(() => {});
      const out = await recordFailure(pool, this.owner, {
        tenant: t,
        operationId: started.operationId,
        error,
        maxFailures: this.#settings.maxFailures,
        backoffMs: (n) => backoffMs(n, this.#settings.backoff, this.#random),
      });
      if (out) {
        this.stats.failed += 1;
        finished('failed');
      } else this.stats.leaseLost += 1;
    }
  }

  /** The refresh's findings in the operation log, the process log and the drift counters. */
  #logDrift(log: LogWriter, t: ClaimedTenant, found: ReturnType<typeof refreshFindings>): void {
    for (const d of found.drift) log.line(`drift detected: ${describeDrift(d)}`);
    if (found.drift.length === 0) log.line('no drift detected by refresh');
    if (found.stateOnly.length > 0) {
      log.line(
        `refresh recorded changes that are not drift (status, server-set or other managers' fields, reads): ${found.stateOnly.map(describeStateOnly).join('; ')}`,
      );
    }
    if (found.drift.length === 0) return;
    this.stats.resyncsWithDrift += 1;
    for (const d of found.drift) {
      const key = `${d.kind}\t${d.change}`;
      const entry = this.stats.drift.get(key) ?? { kind: d.kind, change: d.change, count: 0 };
      entry.count += 1;
      this.stats.drift.set(key, entry);
    }
    this.#log.info({ tenantId: t.id, drift: found.drift.map(describeDrift) }, 'drift detected');
  }

  /**
   * Whether a periodic resync has anything to do: a preview with refresh (the live objects read,
   * the program run, nothing written) shows what an update would change — drift or a program
   * change. About half the CPU of refresh + update when the answer is nothing (docs/benchmarks.md
   * "A cheaper resync with nothing to change"); when there is something, refresh + update follow
   * as for a resync the watch asked for.
   */
  async #resyncHasWork(log: LogWriter, input: StackInput, opts: RunOptions): Promise<boolean> {
    const preview = await this.#settings.engine.preview(input, { ...opts, refresh: true });
    const pending = pendingChanges(preview.changes);
    log.line(
      pending.length === 0
        ? 'preview with refresh: nothing to change (no drift, no program change); no update'
        : `preview with refresh: ${pending.join(', ')}; refresh + update follow`,
    );
    return pending.length > 0;
  }

  #describe(log: LogWriter, t: ClaimedTenant, s: StartedAttempt): void {
    const action = t.deleted ? 'destroy' : s.kind === 'resync' ? 'refresh + update (resync)' : 'update';
    log.line(
      `attempt ${s.attempt} of ${s.kind} operation ${s.operationId}: ${action} for generation ${t.generation} (runtime ${t.runtime_version}, plan ${t.plan}${t.suspended ? ', suspended' : t.sleeping ? ', asleep' : ''}) by ${this.owner}`,
    );
    if (s.superseded.length > 0)
      log.line(`coalesced ${s.superseded.length} older operation(s) into this one: ${s.superseded.join(', ')}`);
    if (s.kind === 'resync' && !t.deleted && t.resync_reason)
      log.line(`resync requested by the root-cluster watch: ${t.resync_reason}`);
    else if (s.kind === 'resync' && !t.deleted && s.attempt === 1 && this.#settings.resyncMs > 0)
      log.line(
        `periodic resync (every ${formatPeriod(this.#settings.resyncMs)}, the safety net behind the root-cluster watch)`,
      );
  }

  async #recover(
    log: LogWriter,
    input: StackInput,
    opts: RunOptions,
    s: StartedAttempt,
    run: ActiveRun,
  ): Promise<void> {
    const prev = s.interruptedOperation;
    log.line(
      `recovery: operation ${prev?.id ?? '?'} (owner ${prev?.owner ?? 'unknown'}) did not finish and its lease is gone`,
    );
    for (const step of recoveryPlan()) {
      log.line(`recovery: ${step.step}${step.step === 'refresh' ? ' --clear-pending-creates' : ''}: ${step.why}`);
      if (step.step === 'cancel') {
        try {
          await this.#settings.engine.cancel(input);
        } catch (err) {
          // No lock to clear (the stack may not exist yet) is not an error worth failing for.
          log.line(`recovery: cancel reported: ${tenantVisible(engineErrorOf(err).message)}`);
        }
      } else if (step.step === 'release-helm') {
        // A release that cannot be repaired here fails the next up with Helm's own message and
        // is retried with backoff; it does not stop the rest of the recovery.
        try {
          const pending = await this.#settings.engine.interrupted(input);
          log.line(
            `recovery: ${pending.length} pending operation(s) in the stack${pending.length ? ': ' + pending.map((p) => `${p.operation} ${p.type} ${p.urn.split('::').at(-1)}`).join(', ') : ''}`,
          );
          const policy = this.#settings.kubeconfigPolicy;
          for (const repair of await repairHelmReleases(pending, (kubeconfig) => kubeRecordStore(kubeconfig, policy)))
            log.line(`recovery: ${describeRepair(repair)}`);
        } catch (err) {
          log.line(
            `recovery: could not read the stack's pending operations: ${tenantVisible(engineErrorOf(err).message)}`,
          );
        }
      } else {
        try {
          await this.#settings.engine.refresh(input, { ...opts, clearPendingCreates: true });
        } catch (err) {
          if (run.controller.signal.aborted) throw err;
          // A vcluster whose API server does not answer (asleep, suspended, or killed half-way
          // through a wake, before its control plane ran again) fails a refresh of its objects.
          // The root cluster's part is what the next run needs read: it brings the control plane
          // back first, and the objects inside keep their stored state as in any wake.
          log.line(
            `recovery: refresh failed (${tenantVisible(engineErrorOf(err).message).slice(-300)}): refreshing the root cluster's resources only; the vcluster's objects keep their stored state`,
          );
          await this.#settings.engine.refresh(input, { ...opts, clearPendingCreates: true, rootClusterOnly: true });
        }
      }
    }
    log.line('recovery: done');
  }

  /**
   * Root-cluster kubeconfigs, decrypted and checked by the kubeconfig policy (the engine only gets
   * the sanitised copy), kept for a short while (a rotation shows within 30 s). A stored
   * kubeconfig the policy refuses fails the operation before anything uses it.
   */
  async #kubeconfig(clusterId: string): Promise<{ name: string; kubeconfig: string }> {
    const hit = this.#kubeconfigs.get(clusterId);
    if (hit && hit.until > Date.now()) return hit;
    const cluster = await getClusterKubeconfig(this.#settings.pool, clusterId);
    if (!cluster) throw new Error(`root cluster ${clusterId} of the tenant is not registered`);
    let checked;
    try {
      checked = await pinKubeconfig(
        this.#settings.box.decrypt(cluster.enc, `cluster/${cluster.name}`).toString('utf8'),
        this.#settings.kubeconfigPolicy,
      );
    } catch (err) {
      if (!(err instanceof KubeconfigPolicyError)) throw err;
      throw new EngineError(
        'ProgramFailed',
        `the kubeconfig of root cluster '${cluster.name}' is refused: ${err.message}; nothing was run against the cluster (register the cluster with an inline-credential kubeconfig)`,
      );
    }
    const entry = { name: cluster.name, kubeconfig: checked.text, until: Date.now() + 30_000 };
    this.#kubeconfigs.set(clusterId, entry);
    return entry;
  }

  async #stackInput(t: ClaimedTenant, runtimeToken: string): Promise<StackInput> {
    const cluster = await this.#kubeconfig(t.cluster_id!);
    // A deleted tenant's stack is destroyed: its registrations are gone with it.
    const managedClusters = t.deleted ? [] : await this.#settings.managedClusters(t.id);
    return {
      tenantId: t.id,
      organization: t.organization,
      plan: t.plan,
      runtimeVersion: t.runtime_version,
      // A sleeping tenant is suspended as far as the program goes: the same run scales the
      // virtual cluster's control plane to zero and deletes the pods it synced (provisioner/sleep/).
      suspended: t.suspended || t.sleeping,
      clusterName: cluster.name,
      rootKubeconfig: cluster.kubeconfig,
      runtimeToken,
      ...(managedClusters.length ? { managedClusters } : {}),
    };
  }

  /**
   * Graceful stop: no new claims; running attempts get `graceMs` to finish; the rest are aborted
   * and their leases handed back (their operations stay `running`, so the next owner recovers
   * the stack before running it again).
   */
  async stop(opts: { graceMs?: number } = {}): Promise<void> {
    if (this.#stopping) return;
    this.#stopping = true;
    this.#health.off('up', this.#onDatabaseUp);
    this.#health.off('down', this.#onDatabaseDown);
    await this.engineCheck.stop();
    await this.#loop.stop();
    const grace = opts.graceMs ?? this.#settings.shutdownGraceMs;
    const pending = [...this.#active.values()];
    if (pending.length > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.all(pending.map((r) => r.done)),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, grace);
        }),
      ]);
      clearTimeout(timer);
    }
    const left = [...this.#active.values()];
    for (const run of left) this.#abort(run, 'shutdown');
    await Promise.all(left.map((r) => r.done));
    const handed = await releaseLeases(
      this.#settings.pool,
      this.owner,
      left.map((r) => r.tenant.id),
    ).catch(() => 0);
    this.stats.handedBack += handed;
    if (handed > 0) this.#log.info({ handed }, 'leases handed back at shutdown');
    await this.heartbeat.stop();
    this.#unsubscribe?.();
    this.#unsubscribe = undefined;
    await this.#settings.engine.close();
  }
}

/** Creates and starts a reconciler. */
export async function startReconciler(opts: ReconcilerOptions): Promise<Reconciler> {
  const r = new Reconciler(opts);
  await r.start();
  return r;
}

/** A resync period for the log: `24 h`, `30 min`, `45 s`. */
export function formatPeriod(ms: number): string {
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000} h`;
  if (ms % 60_000 === 0) return `${ms / 60_000} min`;
  return `${Math.round(ms / 1000)} s`;
}
