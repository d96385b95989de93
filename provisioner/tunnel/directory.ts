/**
 * The tunnel directory: which provisioner replica holds each runtime's tunnel, kept in Postgres
 * (table `runtime_tunnels` for tenants' hosted runtimes, `hybrid_runtime_tunnels` for hybrid
 * runtimes, one tunnel per runtime) so that every replica can show a runtime's tunnel and relay
 * requests for that runtime to the replica that holds it. Both kinds follow the same rules below.
 *
 * - A tunnel that connects here is written as this replica's row (last writer wins) and
 *   announced on NOTIFY `runtime_tunnel`; a tunnel that closes deletes its row.
 * - One tunnel per runtime across replicas: a replica that sees (by notification, or at its next
 *   renewal) that a newer connection of a runtime it holds was written elsewhere closes its own
 *   with CloseCode.replaced, as it does for a newer connection to itself.
 * - Every `renewMs` the replica renews `seen_at` of its rows and repairs the difference between
 *   the table and its tunnels (rows lost, rows left behind). A row not renewed within
 *   TUNNEL_LEASE_SECONDS (its replica died) is ignored by readers and later swept. The renewals
 *   are the rounds of the `tunnel-directory` loop (runtime/loops/periodic.ts, under the loop
 *   manager): one at a time, at once after the notifications' catch-up, and a stop waits for the
 *   one in flight before it deletes this replica's rows.
 *
 * The tunnel server itself stays free of the database; this module follows its events.
 */
import type pg from 'pg';
import pino, { type BaseLogger } from 'pino';
import type { Notifications, Unsubscribe } from '../db/notifications.ts';
import {
  channelOf,
  deleteReplicaTunnels,
  deleteTunnel,
  liveTunnelOwner,
  renewReplicaTunnels,
  sweepTunnels,
  tunnelRow,
  TUNNEL_KINDS,
  type TunnelKind,
  writeTunnel,
} from '../store/tunnels.ts';
import type { TunnelInfo, TunnelServer } from './server.ts';
import type { LoopHealth, LoopStatus, Runnable } from '../../runtime/loops/health.ts';
import { PeriodicLoop } from '../../runtime/loops/periodic.ts';

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

/** One tunnel as the directory tracks it: a hosted runtime's (id: the tenant's) or a hybrid runtime's (id: the runtime's). */
interface Key {
  kind: TunnelKind;
  id: string;
}
const keyOf = (info: TunnelInfo): Key =>
  info.runtimeId !== undefined ? { kind: 'hybrid', id: info.runtimeId } : { kind: 'hosted', id: info.tenantId };
/** A tunnel's log fields. */
const logged = (key: Key): Record<string, string> =>
  key.kind === 'hosted' ? { tenantId: key.id } : { runtimeId: key.id };
/** The maps' key. */
const slot = (kind: TunnelKind, id: string): string => `${kind}:${id}`;

interface Local {
  connectionId: string;
  since: Date;
  /** The row of this connection is committed (until then a notification cannot replace it). */
  written: boolean;
}

export class TunnelDirectory implements Runnable {
  readonly name = 'tunnel-directory';
  readonly #options: TunnelDirectoryOptions;
  readonly #log: BaseLogger;
  /** This replica's tunnels, by slot(). */
  readonly #local = new Map<string, Local>();
  /** Writes per tunnel (slot()) run in order (connect, then disconnect of the same connection). */
  readonly #queue = new Map<string, Promise<void>>();
  #unsubscribe: Unsubscribe[] = [];
  #started = false;
  #stopped = false;
  #stopping: Promise<void> | undefined;
  /** The renewals: a round every renewMs, at once when kicked. */
  readonly loop: PeriodicLoop;

  readonly #onConnect = (_id: unknown, info: TunnelInfo): void => {
    const key = keyOf(info);
    this.#local.set(slot(key.kind, key.id), { connectionId: info.connectionId, since: info.since, written: false });
    this.#enqueue(key, () => this.#write(key, info));
  };

  readonly #onDisconnect = (_id: unknown, _code: number, _reason: string, info: TunnelInfo): void => {
    const key = keyOf(info);
    if (this.#local.get(slot(key.kind, key.id))?.connectionId === info.connectionId)
      this.#local.delete(slot(key.kind, key.id));
    this.#enqueue(key, () => deleteTunnel(this.#options.pool, key.kind, key.id, info.connectionId));
  };

  constructor(opts: TunnelDirectoryOptions) {
    this.#options = opts;
    this.#log = opts.logger ?? pino({ enabled: false });
    const every = () => opts.renewMs ?? 10_000;
    this.loop = new PeriodicLoop({
      name: this.name,
      round: () => this.#renewOnce(),
      firstDelayMs: every,
      intervalMs: every,
      retryMs: every,
      onFailure: (err) =>
        this.#log.warn({ err: message(err) }, 'tunnel directory renewal failed; retrying at the next interval'),
    });
  }

  /** Its renewals as rounds (the loop manager reports them). */
  get health(): LoopHealth {
    return this.loop.health;
  }

  status(): LoopStatus {
    return this.loop.status();
  }

  get replicaId(): string {
    return this.#options.replicaId;
  }

  async start(signal?: AbortSignal): Promise<void> {
    if (this.#started || this.#stopped) return;
    this.#started = true;
    const events = this.#options.tunnel.events;
    events.on('connect', this.#onConnect);
    events.on('disconnect', this.#onDisconnect);
    events.on('hybrid-connect', this.#onConnect);
    events.on('hybrid-disconnect', this.#onDisconnect);
    // Notifications sent while the hub was disconnected are lost: compare the table with our tunnels then.
    this.#unsubscribe = TUNNEL_KINDS.map((kind) =>
      this.#options.notifications.subscribe(
        channelOf(kind),
        (id) => this.#check(kind, id),
        () => this.#renewSoon(),
      ),
    );
    await this.loop.start(signal);
  }

  /** Call after the tunnel server closed its tunnels: waits for the renewal and writes in flight, deletes this replica's rows. */
  stop(): Promise<void> {
    this.#stopping ??= this.#stop();
    return this.#stopping;
  }

  async #stop(): Promise<void> {
    this.#stopped = true;
    const events = this.#options.tunnel.events;
    events.off('connect', this.#onConnect);
    events.off('disconnect', this.#onDisconnect);
    events.off('hybrid-connect', this.#onConnect);
    events.off('hybrid-disconnect', this.#onDisconnect);
    for (const unsubscribe of this.#unsubscribe) unsubscribe();
    this.#unsubscribe = [];
    await this.loop.stop();
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

  /** The other replica holding the tenant's (hosted runtime's) tunnel, if any holds it within the lease. */
  owner(tenantId: string): Promise<TunnelOwner | undefined> {
    return this.#owner('hosted', tenantId);
  }

  /** The other replica holding a hybrid runtime's tunnel, if any holds it within the lease. */
  runtimeOwner(runtimeId: string): Promise<TunnelOwner | undefined> {
    return this.#owner('hybrid', runtimeId);
  }

  async #owner(kind: TunnelKind, id: string): Promise<TunnelOwner | undefined> {
    const row = await liveTunnelOwner(this.#options.pool, kind, id);
    if (!row || row.replica_id === this.#options.replicaId) return undefined;
    return { replicaId: row.replica_id, url: row.replica_url, since: row.connected_at };
  }

  /** Waits for pending writes, renews now and waits for the repairs it started. */
  async renew(): Promise<void> {
    await Promise.all([...this.#queue.values()]);
    if (!this.#stopped) await this.loop.runNow();
    await Promise.all([...this.#queue.values()]);
  }

  #enqueue(key: Key, task: () => Promise<void>): void {
    const at = slot(key.kind, key.id);
    const prev = this.#queue.get(at) ?? Promise.resolve();
    const next = prev.then(task).catch((err: unknown) => {
      this.#log.warn(
        { ...logged(key), err: message(err) },
        'tunnel directory write failed; the next renewal repairs it',
      );
    });
    this.#queue.set(at, next);
    void next.then(() => {
      if (this.#queue.get(at) === next) this.#queue.delete(at);
    });
  }

  /** Writes this replica's row for a connection (replacing any other) and announces it. */
  async #write(key: Key, info: TunnelInfo): Promise<void> {
    const local = this.#local.get(slot(key.kind, key.id));
    if (local?.connectionId !== info.connectionId) return; // closed before it was written
    await writeTunnel(this.#options.pool, key.kind, {
      id: key.id,
      tenantId: info.tenantId,
      connectionId: info.connectionId,
      replicaId: this.#options.replicaId,
      replicaUrl: this.#options.advertiseUrl(),
      since: info.since,
    });
    local.written = true;
  }

  /** A row of `id` was written somewhere: if we hold that runtime's tunnel and the row is no longer ours, close ours. */
  #check(kind: TunnelKind, id: string): void {
    const local = this.#local.get(slot(kind, id));
    if (!local?.written || this.#stopped) return;
    const key: Key = { kind, id };
    this.#enqueue(key, async () => {
      this.#closeIfSuperseded(key, local, await tunnelRow(this.#options.pool, kind, id));
    });
  }

  #closeIfSuperseded(key: Key, local: Local, row: { connection_id: string; replica_id: string } | undefined): boolean {
    if (!row || row.connection_id === local.connectionId || this.#local.get(slot(key.kind, key.id)) !== local)
      return false;
    const tunnel = this.#options.tunnel;
    const closed =
      key.kind === 'hosted'
        ? tunnel.closeReplaced(key.id, local.connectionId)
        : tunnel.closeReplacedRuntime(key.id, local.connectionId);
    if (closed) {
      this.#log.info(
        {
          ...logged(key),
          connectionId: local.connectionId,
          newReplica: row.replica_id,
        },
        'tunnel replaced by a newer connection of the runtime to another replica',
      );
    }
    return true;
  }

  /** A renewal now (or right after the one under way), unless the directory stops. */
  #renewSoon(): void {
    if (!this.#stopped) this.loop.kick();
  }

  /** Renews our rows, then repairs: rows of tunnels we no longer hold go, tunnels without a row get one (or close if replaced). */
  async #renewOnce(): Promise<void> {
    const pool = this.#options.pool;
    const tunnel = this.#options.tunnel;
    for (const kind of TUNNEL_KINDS) {
      const held = await renewReplicaTunnels(pool, kind, this.#options.replicaId);
      for (const [id, connectionId] of held) {
        if (this.#local.get(slot(kind, id))?.connectionId !== connectionId && !this.#queue.has(slot(kind, id))) {
          this.#enqueue({ kind, id }, () => deleteTunnel(pool, kind, id, connectionId));
        }
      }
      for (const info of kind === 'hosted' ? tunnel.connections() : tunnel.runtimeConnections()) {
        const key = keyOf(info);
        const local = this.#local.get(slot(kind, key.id));
        if (
          !local ||
          local.connectionId !== info.connectionId ||
          !local.written ||
          held.get(key.id) === info.connectionId
        )
          continue;
        this.#enqueue(key, async () => {
          const row = await tunnelRow(pool, kind, key.id);
          // Another replica wrote a newer connection of this runtime: ours is replaced.
          if (row?.fresh && this.#closeIfSuperseded(key, local, row)) return;
          // The row is gone (or expired while this replica could not renew): write it again.
          this.#log.info(logged(key), 'tunnel directory row was missing; writing it again');
          await this.#write(key, info);
        });
      }
    }
    await sweepTunnels(pool);
  }
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
