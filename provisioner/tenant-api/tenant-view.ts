/**
 * What a tenant's own key reads of its tenant differs from an operator's in one thing: conditions
 * whose message tells an operator what to do about the platform (register a root cluster, raise a
 * capacity, install the Pulumi CLI, run scripts/toolchain.sh) carry a plain line instead, since
 * nothing there is the tenant's to do. Their reason stays (NoCapacity, EngineUnavailable), and so do
 * the conditions that name the tenant's own actions (ActionRequired: connect a managed cluster).
 */
import { WAKE_CONNECT_GRACE_SECONDS } from '../store/sleep.ts';
import type { Condition } from '../store/states.ts';
import { RUNTIME_NAMESPACE } from '../../runtime/component/agents.ts';

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

/** Reasons of a `RuntimeConnected=False`: the runtime was provisioned, but does not answer or report. */
export const RUNTIME_NOT_CONNECTED_REASONS: ReadonlySet<string> = new Set([
  'TunnelNotConnected',
  'NeverReported',
  'ReportingStale',
]);

/** What a tenant reads instead of the operator's steps for a runtime that is not connected. */
export const NOT_CONNECTED_MESSAGE =
  "Your runtime is provisioned but not connected to the service yet, so its applications' state is not shown and requests to it fail; the service's operators see this too and no action is needed from you.";

/**
 * `RuntimeConnected`, computed at read time for a tenant whose phase is Ready (and whose spec is
 * neither suspended nor deleted): Ready says the runtime was provisioned; this says whether it
 * runs: its tunnel client connected to a replica and its event reporter heard from within the
 * stale window (store/reporting.ts). False names the first thing to check, so a provisioned
 * tenant whose runtime never came up is not shown as healthy anywhere (the console's badge and
 * "Why" column, `tenants list`, doctor). Undefined for other phases: their Ready condition says
 * what is going on.
 */
export function runtimeConnected(
  t: {
    spec: { suspended: boolean; deleted: boolean };
    status: {
      phase: string;
      conditions: readonly Condition[];
      reporting?: { lastHeartbeatAt: string; stale: boolean } | undefined;
      sleep?: { wokeAt: string | null } | undefined;
    };
  },
  tunnel: { connected: boolean; since: string | null },
  now = Date.now(),
): Condition | undefined {
  if (t.status.phase !== 'Ready' || t.spec.suspended || t.spec.deleted) return undefined;
  const wokeAt = t.status.sleep?.wokeAt;
  if (!tunnel.connected && wokeAt && now - Date.parse(wokeAt) < WAKE_CONNECT_GRACE_SECONDS * 1000)
    return {
      type: 'RuntimeConnected',
      status: 'False',
      reason: 'Waking',
      message: `the runtime was woken at ${wokeAt} and its pods are starting again; requests to it wait for it (or get 503 TENANT_WAKING with Retry-After) until its tunnel connects`,
      lastTransitionTime: wokeAt,
    };
  const readySince =
    t.status.conditions.find((c) => c.type === 'Ready')?.lastTransitionTime ?? new Date().toISOString();
  const reporting = t.status.reporting;
  const reporter = `the event-reporter Deployment in namespace ${RUNTIME_NAMESPACE} of the tenant's virtual cluster`;
  if (!tunnel.connected)
    return {
      type: 'RuntimeConnected',
      status: 'False',
      reason: 'TunnelNotConnected',
      message:
        `the runtime was provisioned but its tunnel client is not connected to any control plane replica, so requests to its Argo CD fail (503 RUNTIME_UNREACHABLE) and fleet upgrades wait on its tunnel gate: ` +
        `check the tunnel-client Deployment in namespace ${RUNTIME_NAMESPACE} of the tenant's virtual cluster (are its pods running? their log says why they cannot dial), ` +
        `then that its tunnel URL (the control plane's PROVISIONER_PUBLIC_URL) is reachable from the root cluster; ` +
        `it turns True as soon as the tunnel connects`,
      lastTransitionTime: reporting?.stale === false ? reporting.lastHeartbeatAt : readySince,
    };
  if (!reporting)
    return {
      type: 'RuntimeConnected',
      status: 'False',
      reason: 'NeverReported',
      message: `the runtime's tunnel is connected but its event reporter has never reported, so its applications are not shown: check ${reporter} (its log says why its batches are refused or not sent)`,
      lastTransitionTime: tunnel.since ?? readySince,
    };
  if (reporting.stale)
    return {
      type: 'RuntimeConnected',
      status: 'False',
      reason: 'ReportingStale',
      message: `the runtime's tunnel is connected but its event reporter stopped reporting (last heartbeat ${reporting.lastHeartbeatAt}), so the applications shown may be out of date: check ${reporter}`,
      lastTransitionTime: reporting.lastHeartbeatAt,
    };
  return {
    type: 'RuntimeConnected',
    status: 'True',
    reason: 'Connected',
    message: `the runtime's tunnel is connected${tunnel.since ? ` since ${tunnel.since}` : ''} and its event reporter reports`,
    lastTransitionTime: tunnel.since ?? reporting.lastHeartbeatAt,
  };
}

/**
 * The tenant's conditions as a reader sees them, with `RuntimeConnected` (runtimeConnected) when
 * it applies: a tenant's own key reads the plain lines (conditionsForTenant, NOT_CONNECTED_MESSAGE).
 */
export function conditionsWithRuntime(
  t: Parameters<typeof runtimeConnected>[0],
  tunnel: { connected: boolean; since: string | null },
  forTenant: boolean,
): Condition[] {
  const connected = runtimeConnected(t, tunnel);
  const all = connected ? [...t.status.conditions, connected] : [...t.status.conditions];
  if (!forTenant) return all;
  return conditionsForTenant(all).map((c) =>
    c.type === 'RuntimeConnected' && RUNTIME_NOT_CONNECTED_REASONS.has(c.reason)
      ? { ...c, message: NOT_CONNECTED_MESSAGE }
      : c,
  );
}
