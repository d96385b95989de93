/**
 * What a tenant's own key reads of its tenant differs from an operator's in one thing: conditions
 * whose message tells an operator what to do about the platform (register a root cluster, raise a
 * capacity, install the Pulumi CLI, run scripts/toolchain.sh) carry a plain line instead, since
 * nothing there is the tenant's to do. Their reason stays (NoCapacity, EngineUnavailable), and so do
 * the conditions that name the tenant's own actions (ActionRequired: connect a managed cluster).
 */
import type { Condition } from '../store/states.ts';

/** Reasons whose message is addressed to the platform's operators. */
export const OPERATOR_ONLY_REASONS: ReadonlySet<string> = new Set(['NoCapacity', 'EngineUnavailable']);

/** What a tenant reads instead. */
export const PROVISIONING_MESSAGE = 'The service is provisioning your runtime; no action is needed from you.';

/** The conditions as a tenant's own key sees them. */
export function conditionsForTenant(conditions: readonly Condition[]): Condition[] {
  return conditions.map((c) => (OPERATOR_ONLY_REASONS.has(c.reason) ? { ...c, message: PROVISIONING_MESSAGE } : c));
}

/** The reconciler's line for a tenant that starts waiting (reconciler/outcome.ts waitLine): the reason, then the operator's text. */
const WAIT_LINE = /^(waiting for a root cluster \(NoCapacity\)|waiting for the Pulumi engine \(EngineUnavailable\)): /;

/** A line of the operation log as a tenant's own key reads it: a wait line without the operator's text. */
export function logLineForTenant<L extends { stream: string; line: string }>(l: L): L {
  if (l.stream !== 'reconciler') return l;
  const wait = WAIT_LINE.exec(l.line);
  return wait ? { ...l, line: `${wait[1]}: ${PROVISIONING_MESSAGE} It retries by itself.` } : l;
}

/**
 * Whether the tenant's runtime tunnel is connected, to any replica, and since when: this process
 * knows its own tunnels exactly (`here`); another replica's comes from the directory row read with
 * the tenant (a row of this replica is ignored: it may be a close not yet written).
 */
export function tunnelView(
  here: { connected: boolean; since?: string | undefined },
  row: { tunnel_replica?: string | null; tunnel_since?: Date | null },
  replicaId: string,
): { connected: boolean; since: string | null } {
  if (here.connected) return { connected: true, since: here.since ?? null };
  if (row.tunnel_replica != null && row.tunnel_replica !== replicaId && row.tunnel_since != null)
    return { connected: true, since: row.tunnel_since.toISOString() };
  return { connected: false, since: null };
}
