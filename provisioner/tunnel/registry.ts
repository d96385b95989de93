/**
 * The connected tunnels of this process: at most one per key, the tenant's id for its hosted
 * runtime (the default) or a hybrid runtime's id (`keyOf`). Registering a tunnel for a key that
 * already has one closes the older connection with CloseCode.replaced.
 */
import { CloseCode } from '../../runtime/protocol/frames.ts';
import type { Mux } from '../../runtime/protocol/mux.ts';

export interface TunnelConnection {
  /** Unique per connection; tells a tenant's successive tunnels apart across replicas. */
  connectionId: string;
  tenantId: string;
  /** A hybrid runtime's tunnel: the runtime's id (absent for the tenant's hosted runtime). */
  runtimeId?: string | undefined;
  keyId: string;
  /** When the tunnel became ready. */
  since: Date;
  remoteAddress: string | undefined;
  mux: Mux;
}

export class TunnelRegistry {
  readonly #byTenant = new Map<string, TunnelConnection>();
  /** Replaced connections finishing their open requests. */
  readonly #replaced = new Set<TunnelConnection>();
  readonly #drainMs: number;
  readonly #keyOf: (conn: TunnelConnection) => string;

  /**
   * `drainMs`: how long a replaced connection may finish its open requests (0: closed at once);
   * `keyOf`: what one tunnel is held per (default the tenant).
   */
  constructor(drainMs = 0, keyOf: (conn: TunnelConnection) => string = (conn) => conn.tenantId) {
    this.#drainMs = drainMs;
    this.#keyOf = keyOf;
  }

  get(key: string): TunnelConnection | undefined {
    return this.#byTenant.get(key);
  }

  /**
   * Makes `conn` the tenant's tunnel; returns the connection it replaced. New requests go to
   * `conn` at once; the old one is told (goaway, no reconnect) and finishes its open requests for
   * at most `drainMs`, then closes with CloseCode.replaced — at once when it has none, or when its
   * runtime does not understand goaway.
   */
  set(conn: TunnelConnection): TunnelConnection | undefined {
    const old = this.#byTenant.get(this.#keyOf(conn));
    this.#byTenant.set(this.#keyOf(conn), conn);
    if (old && old !== conn) {
      const reason = 'replaced by a newer connection of the same runtime';
      if (
        this.#drainMs > 0 &&
        old.mux.goAway(reason, { reconnect: false, closeCode: CloseCode.replaced, closeReason: reason })
      ) {
        this.#replaced.add(old);
        const timer = setTimeout(() => old.mux.close(CloseCode.replaced, reason), this.#drainMs);
        timer.unref();
        old.mux.once('close', () => {
          clearTimeout(timer);
          this.#replaced.delete(old);
        });
      } else {
        old.mux.close(CloseCode.replaced, reason);
      }
      return old;
    }
    return undefined;
  }

  /** Forgets `conn` if it is still the tenant's tunnel. */
  delete(conn: TunnelConnection): boolean {
    if (this.#byTenant.get(this.#keyOf(conn)) !== conn) return false;
    this.#byTenant.delete(this.#keyOf(conn));
    return true;
  }

  /**
   * Closes the tenant's tunnel if it is still connection `connectionId` (the runtime connected
   * again, to another replica); returns whether it did.
   */
  closeReplaced(
    tenantId: string,
    connectionId: string,
    reason = 'replaced by a newer connection of the same runtime (to another replica)',
  ): boolean {
    const conn = this.#byTenant.get(tenantId);
    // A draining tunnel closes once its requests are done (the runtime has already moved on).
    if (!conn || conn.connectionId !== connectionId || conn.mux.draining) return false;
    this.#byTenant.delete(tenantId);
    conn.mux.close(CloseCode.replaced, reason);
    return true;
  }

  /** Closes every tunnel authenticated with API key `keyId` (revoked); returns how many. */
  disconnectKey(keyId: string, reason = 'runtime token revoked'): number {
    let n = 0;
    for (const conn of [...this.#byTenant.values()]) {
      if (conn.keyId !== keyId) continue;
      this.#byTenant.delete(this.#keyOf(conn));
      conn.mux.close(CloseCode.revoked, reason);
      n++;
    }
    return n;
  }

  /** Closes the tenant's tunnels (tenant suspended or deleted, all keys revoked); returns how many. */
  disconnectTenant(tenantId: string, reason = 'runtime access revoked'): number {
    let n = 0;
    for (const conn of [...this.#byTenant.values()]) {
      if (conn.tenantId !== tenantId) continue;
      this.#byTenant.delete(this.#keyOf(conn));
      conn.mux.close(CloseCode.revoked, reason);
      n++;
    }
    return n;
  }

  all(): TunnelConnection[] {
    return [...this.#byTenant.values()];
  }

  closeAll(code: number, reason: string): void {
    for (const conn of [...this.all(), ...this.#replaced]) conn.mux.close(code, reason);
    this.#byTenant.clear();
    this.#replaced.clear();
  }
}
