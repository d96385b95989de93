/**
 * Runtimes as the API shows them (docs/api.md "Runtimes"): a tenant's hosted runtime is its tenant
 * row seen as a runtime, with the tunnel state of this replica or the one that holds it; a hybrid
 * runtime is its row with its conditions (conditions.ts). The reads: a tenant's runtimes, one by
 * name, and every tenant's a page at a time.
 */
import { errors } from '../errors.ts';
import { RUNTIME_NAMESPACE } from '../../runtime/component/agents.ts';
import {
  getRuntimeByName,
  listAllRuntimes,
  listTenantRuntimes,
  type RuntimeMode,
  type RuntimeRow,
} from '../store/runtimes.ts';
import { getTenantRows, toTenant, type TenantRow } from '../store/tenants.ts';
import { conditionsWithRuntime, tunnelView } from '../tenant-api/tenant-view.ts';
import type { Runtime } from '../api/types.ts';
import type { ProxiedRuntime } from '../tunnel/route.ts';
import { hybridConditions } from './conditions.ts';
import { iso, tenantOf, type Reader, type Runtimes } from './context.ts';

export async function tenantRuntimes(rt: Runtimes, tenantId: string, reader: Reader): Promise<Runtime[]> {
  const tenant = await tenantOf(rt, tenantId);
  const rows = await listTenantRuntimes(rt.deps.pool, tenantId);
  return rows.map((r) => runtimeView(rt, r, tenant, reader));
}

export async function runtimeNamed(rt: Runtimes, tenantId: string, name: string, reader: Reader): Promise<Runtime> {
  const tenant = await tenantOf(rt, tenantId);
  const row = await getRuntimeByName(rt.deps.pool, tenantId, name);
  if (!row) throw errors.notFound('runtime', name);
  return runtimeView(rt, row, tenant, reader);
}

/** Every tenant's runtimes in creation order, a page after `after`. */
export async function runtimesPage(
  rt: Runtimes,
  q: {
    after?: { ts: string; id: string } | undefined;
    limit: number;
    mode?: RuntimeMode | undefined;
  },
): Promise<{ items: Runtime[]; last: { ts: string; id: string } | undefined; more: boolean }> {
  const rows = await listAllRuntimes(rt.deps.pool, { ...q, limit: q.limit + 1 });
  const page = rows.slice(0, q.limit);
  const tenants = await getTenantRows(rt.deps.pool, [...new Set(page.map((r) => r.tenant_id))]);
  const last = page.at(-1);
  return {
    items: page.map((r) => runtimeView(rt, r, tenants.get(r.tenant_id)!, 'operator')),
    last: last ? { ts: last.cursor_ts, id: last.id } : undefined,
    more: rows.length > q.limit,
  };
}

/** A runtime row as the API shows it to `reader`. */
export function runtimeView(rt: Runtimes, r: RuntimeRow, tenantRow: TenantRow, reader: Reader): Runtime {
  const common = {
    id: r.id,
    tenantId: r.tenant_id,
    organization: tenantRow.organization,
    name: r.name,
    createdBy: r.created_by,
    createdAt: r.created_at.toISOString(),
    removedAt: iso(r.removed_at),
  };
  if (r.mode === 'hosted') {
    const t = toTenant(tenantRow);
    const tunnel = tunnelView(rt.deps.tunnelStatus(t.id), tenantRow, rt.deps.replicaId);
    const reported = t.status.runtimeVersion;
    return {
      ...common,
      mode: 'hosted',
      state: t.status.phase,
      version: t.spec.runtimeVersion,
      reportedVersion: reported,
      versionSkew: reported === null ? null : reported !== t.spec.runtimeVersion,
      previousVersion: tenantRow.previous_runtime_version,
      versionChangedAt: null,
      conditions: conditionsWithRuntime(t, tunnel, reader === 'tenant'),
      tunnel,
      access: null,
      ingressUrl: null,
      argo: null,
      argoNamespace: null,
      namespace: RUNTIME_NAMESPACE,
      upgrades: null,
      upgrade: null,
      bootstrapExpiresAt: null,
      installedAt: null,
      keyIssued: r.key_live,
      lastHeartbeatAt: t.status.reporting?.lastHeartbeatAt ?? null,
    };
  }
  // This replica knows its own tunnels; another's comes from the row it wrote and renews (within the lease).
  const tunnel =
    r.state === 'removed'
      ? { connected: false, since: null }
      : tunnelView(
          rt.deps.runtimeTunnelStatus(r.id),
          { tunnel_replica: r.tunnel_replica, tunnel_since: r.tunnel_connected_at },
          rt.deps.replicaId,
        );
  return {
    ...common,
    mode: 'hybrid',
    state: r.state!,
    version: r.version,
    reportedVersion: r.reported_version,
    versionSkew: r.reported_version === null ? null : r.reported_version !== r.version,
    previousVersion: r.previous_version,
    versionChangedAt: iso(r.version_changed_at),
    conditions: hybridConditions(r, tunnel),
    tunnel,
    access: r.access,
    ingressUrl: r.ingress_url,
    argo: r.argo,
    argoNamespace: r.argo_namespace,
    namespace: r.namespace ?? RUNTIME_NAMESPACE,
    upgrades: r.upgrades,
    upgrade:
      r.upgrade_phase && r.upgrade_from && r.upgrade_to && r.upgrade_updated_at
        ? {
            from: r.upgrade_from,
            to: r.upgrade_to,
            phase: r.upgrade_phase,
            message: r.upgrade_message,
            updatedAt: r.upgrade_updated_at.toISOString(),
          }
        : null,
    bootstrapExpiresAt: iso(r.bootstrap_expires_at),
    installedAt: iso(r.bootstrap_redeemed_at),
    keyIssued: r.key_live,
    lastHeartbeatAt: iso(r.last_heartbeat_at),
  };
}

/** A tenant's runtime of that name as the runtime proxy needs it (tunnel/route.ts), or undefined. */
export async function proxiedRuntime(
  rt: Runtimes,
  tenantId: string,
  name: string,
): Promise<ProxiedRuntime | undefined> {
  const row = await getRuntimeByName(rt.deps.pool, tenantId, name);
  return (
    row && {
      id: row.id,
      name: row.name,
      mode: row.mode,
      access: row.access,
      ingressUrl: row.ingress_url,
      state: row.state,
    }
  );
}
