/**
 * The connected tunnels of this process: at most one per tenant. Registering a tunnel for a
 * tenant that already has one closes the older connection with CloseCode.replaced.
 */
import { CloseCode } from '../../runtime/protocol/frames.ts';
import type { Mux } from '../../runtime/protocol/mux.ts';

export interface TunnelConnection {
  /** Unique per connection; tells a tenant's successive tunnels apart across replicas. */
  connectionId: string;
  tenantId: string;
  keyId: string;
  /** When the tunnel became ready. */
  since: Date;
  remoteAddress: string | undefined;
  mux: Mux;
}

export class TunnelRegistry {
  readonly #byTenant = new Map<string, TunnelConnection>();

  get(tenantId: string): TunnelConnection | undefined {
    return this.#byTenant.get(tenantId);
  }

  /** Makes `conn` the tenant's tunnel; returns the connection it replaced, already closed. */
  set(conn: TunnelConnection): TunnelConnection | undefined {
    const old = this.#byTenant.get(conn.tenantId);
    this.#byTenant.set(conn.tenantId, conn);
    if (old && old !== conn) {
      old.mux.close(CloseCode.replaced, 'replaced by a newer connection of the same runtime');
      return old;
    }
    return undefined;
  }

  /** Forgets `conn` if it is still the tenant's tunnel. */
  delete(conn: TunnelConnection): boolean {
    if (this.#byTenant.get(conn.tenantId) !== conn) return false;
    this.#byTenant.delete(conn.tenantId);
    return true;
  }

  /**
   * Closes the tenant's tunnel if it is still connection `connectionId` (the runtime connected
   * again, to another replica); returns whether it did.
   */
  closeReplaced(tenantId: string, connectionId: string, reason = 'replaced by a newer connection of the same runtime (to another replica)'): boolean {
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
      this.#byTenant.delete(conn.tenantId);
      conn.mux.close(CloseCode.revoked, reason);
      n++;
    }
    return n;
  }

  /** Closes the tenant's tunnel (tenant suspended or deleted, all keys revoked); returns how many. */
  disconnectTenant(tenantId: string, reason = 'runtime access revoked'): number {
    const conn = this.#byTenant.get(tenantId);
    if (!conn) return 0;
    this.#byTenant.delete(tenantId);
    conn.mux.close(CloseCode.revoked, reason);
    return 1;
  }

  all(): TunnelConnection[] {
    return [...this.#byTenant.values()];
  }

  closeAll(code: number, reason: string): void {
    for (const conn of this.all()) conn.mux.close(code, reason);
    this.#byTenant.clear();
  }
}
