/**
 * The tunnel directory: which provisioner replica holds each runtime's tunnel, kept in Postgres
 * (table `runtime_tunnels`) so that every replica can show a tenant's tunnel in its status and
 * relay requests for that runtime to the replica that holds it.
 *
 * - A tunnel that connects here is written as this replica's row (last writer wins) and
 *   announced on NOTIFY `runtime_tunnel`; a tunnel that closes deletes its row.
 * - One tunnel per runtime across replicas: a replica that sees (by notification, or at its next
 *   renewal) that a newer connection of a runtime it holds was written elsewhere closes its own
 *   with CloseCode.replaced, as it does for a newer connection to itself.
 * - Every `renewMs` the replica renews `seen_at` of its rows and repairs the difference between
 *   the table and its tunnels (rows lost, rows left behind). A row not renewed within
 *   TUNNEL_LEASE_SECONDS (its replica died) is ignored by readers and later swept.
 *
 * The tunnel server itself stays free of the database; this module follows its events.
 */
import type pg from 'pg';
import pino, { type BaseLogger } from 'pino';
import type { Notifications, Unsubscribe } from '../db/notifications.ts';
import {
  deleteReplicaTunnels,
  deleteTunnel,
  liveTunnelOwner,
  renewReplicaTunnels,
  sweepTunnels,
  tunnelRow,
  TUNNEL_CHANNEL,
  writeTunnel,
} from '../store/tunnels.ts';
import type { TunnelInfo, TunnelServer } from './server.ts';
import { LoopHealth } from '../loops/manager.ts';

/** The replica holding a runtime's tunnel, as the table says. */
export interface TunnelOwner {
  replicaId: string;
  /** Where that replica serves the API, e.g. http://10.0.3.7:8080. */
  url: string;
  since: Date;
}

export interface TunnelDirectoryOptions {
  pool: pg.Pool;
  /** The process's notifications hub: the directory hears `runtime_tunnel` through it. */
  notifications: Notifications;
  tunnel: TunnelServer;
  /** This replica's id (unique per process). */
  replicaId: string;
  /** This replica's API address for other replicas; read when a tunnel connects. */
  advertiseUrl: () => string;
  /** Renewal interval (default 10 s; must stay well below the lease). */
  renewMs?: number;
  logger?: BaseLogger;
}

interface Local {
  connectionId: string;
  since: Date;
  /** The row of this connection is committed (until then a notification cannot replace it). */
  written: boolean;
}

export class TunnelDirectory {
  readonly #options: TunnelDirectoryOptions;
  readonly #log: BaseLogger;
  readonly #local = new Map<string, Local>();
  /** Writes per tenant run in order (connect, then disconnect of the same connection). */
  readonly #queue = new Map<string, Promise<void>>();
  #unsubscribe: Unsubscribe | undefined;
  #timer: NodeJS.Timeout | undefined;
  #renewing: Promise<void> | undefined;
  #stopped = false;
  /** Its renewals as rounds (the loop manager reports them). */
  readonly health = new LoopHealth('tunnel-directory');

  readonly #onConnect = (_id: unknown, info: TunnelInfo): void => {
    this.#local.set(info.tenantId, { connectionId: info.connectionId, since: info.since, written: false });
    this.#enqueue(info.tenantId, () => this.#write(info));
  };

  readonly #onDisconnect = (_id: unknown, _code: number, _reason: string, info: TunnelInfo): void => {
    if (this.#local.get(info.tenantId)?.connectionId === info.connectionId) this.#local.delete(info.tenantId);
    this.#enqueue(info.tenantId, () => this.#remove(info.tenantId, info.connectionId));
  };

  constructor(opts: TunnelDirectoryOptions) {
    this.#options = opts;
    this.#log = opts.logger ?? pino({ enabled: false });
  }

  get replicaId(): string {
    return this.#options.replicaId;
  }

  async start(): Promise<void> {
    this.#options.tunnel.events.on('connect', this.#onConnect);
    this.#options.tunnel.events.on('disconnect', this.#onDisconnect);
    // Notifications sent while the hub was disconnected are lost: compare the table with our tunnels then.
    this.#unsubscribe = this.#options.notifications.subscribe(
      TUNNEL_CHANNEL,
      (tenantId) => this.#check(tenantId),
      () => this.#renewSoon(),
    );
    const every = this.#options.renewMs ?? 10_000;
    this.#timer = setInterval(() => this.#renewSoon(), every);
    this.#timer.unref();
  }

  /** Call after the tunnel server closed its tunnels: waits for pending writes, deletes this replica's rows. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#timer);
    this.#options.tunnel.events.off('connect', this.#onConnect);
    this.#options.tunnel.events.off('disconnect', this.#onDisconnect);
    this.#unsubscribe?.();
    this.#unsubscribe = undefined;
    await this.#renewing;
    await Promise.all([...this.#queue.values()]);
    try {
      await deleteReplicaTunnels(this.#options.pool, this.#options.replicaId);
    } catch (err) {
      this.#log.warn(
        { err: message(err) },
        'could not remove this replica from the tunnel directory; its rows expire with the lease',
      );
    }
  }

  /** The other replica holding the tenant's tunnel, if any holds it within the lease. */
  async owner(tenantId: string): Promise<TunnelOwner | undefined> {
    const row = await liveTunnelOwner(this.#options.pool, tenantId);
    if (!row || row.replica_id === this.#options.replicaId) return undefined;
    return { replicaId: row.replica_id, url: row.replica_url, since: row.connected_at };
  }

  /** Waits for pending writes, renews now and waits for the repairs it started. */
  async renew(): Promise<void> {
    await Promise.all([...this.#queue.values()]);
    await this.#renewing;
    this.#renewSoon();
    await this.#renewing;
    await Promise.all([...this.#queue.values()]);
  }

  #enqueue(tenantId: string, task: () => Promise<void>): void {
    const prev = this.#queue.get(tenantId) ?? Promise.resolve();
    const next = prev.then(task).catch((err: unknown) => {
      this.#log.warn({ tenantId, err: message(err) }, 'tunnel directory write failed; the next renewal repairs it');
    });
    this.#queue.set(tenantId, next);
    void next.then(() => {
      if (this.#queue.get(tenantId) === next) this.#queue.delete(tenantId);
    });
  }

  /** Writes this replica's row for a connection (replacing any other) and announces it. */
  async #write(info: TunnelInfo): Promise<void> {
    const local = this.#local.get(info.tenantId);
    if (local?.connectionId !== info.connectionId) return; // closed before it was written
    await writeTunnel(this.#options.pool, {
      tenantId: info.tenantId,
      connectionId: info.connectionId,
      replicaId: this.#options.replicaId,
      replicaUrl: this.#options.advertiseUrl(),
      since: info.since,
    });
    local.written = true;
  }

  async #remove(tenantId: string, connectionId: string): Promise<void> {
    await deleteTunnel(this.#options.pool, tenantId, connectionId);
  }

  /** A row of `tenantId` was written somewhere: if we hold that runtime's tunnel and the row is no longer ours, close ours. */
  #check(tenantId: string): void {
    const local = this.#local.get(tenantId);
    if (!local?.written || this.#stopped) return;
    this.#enqueue(tenantId, async () => {
      this.#closeIfSuperseded(tenantId, local, await tunnelRow(this.#options.pool, tenantId));
    });
  }

  #closeIfSuperseded(
    tenantId: string,
    local: Local,
    row: { connection_id: string; replica_id: string } | undefined,
  ): boolean {
    if (!row || row.connection_id === local.connectionId || this.#local.get(tenantId) !== local) return false;
    if (this.#options.tunnel.closeReplaced(tenantId, local.connectionId)) {
      this.#log.info(
        { tenantId, connectionId: local.connectionId, newReplica: row.replica_id },
        'tunnel replaced by a newer connection of the runtime to another replica',
      );
    }
    return true;
  }

  #renewSoon(): void {
    if (this.#stopped || this.#renewing) return;
    this.#renewing = this.#renewOnce()
      .then(() => this.health.succeed())
      .catch((err: unknown) => {
        this.health.fail(err);
        this.#log.warn({ err: message(err) }, 'tunnel directory renewal failed; retrying at the next interval');
      })
      .finally(() => {
        this.#renewing = undefined;
      });
  }

  /** Renews our rows, then repairs: rows of tunnels we no longer hold go, tunnels without a row get one (or close if replaced). */
  async #renewOnce(): Promise<void> {
    const pool = this.#options.pool;
    const held = await renewReplicaTunnels(pool, this.#options.replicaId);
    for (const [tenantId, connectionId] of held) {
      if (this.#local.get(tenantId)?.connectionId !== connectionId && !this.#queue.has(tenantId)) {
        this.#enqueue(tenantId, () => this.#remove(tenantId, connectionId));
      }
    }
    for (const info of this.#options.tunnel.connections()) {
      const local = this.#local.get(info.tenantId);
      if (
        !local ||
        local.connectionId !== info.connectionId ||
        !local.written ||
        held.get(info.tenantId) === info.connectionId
      )
        continue;
      this.#enqueue(info.tenantId, async () => {
        const row = await tunnelRow(pool, info.tenantId);
        // Another replica wrote a newer connection of this runtime: ours is replaced.
        if (row?.fresh && this.#closeIfSuperseded(info.tenantId, local, row)) return;
        // The row is gone (or expired while this replica could not renew): write it again.
        this.#log.info({ tenantId: info.tenantId }, 'tunnel directory row was missing; writing it again');
        await this.#write(info);
      });
    }
    await sweepTunnels(pool);
  }
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
