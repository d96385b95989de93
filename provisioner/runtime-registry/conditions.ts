/**
 * A hybrid runtime's conditions, as data: what its row says about its install, its tunnel, its
 * agents' reports, its version and the in-cluster upgrader's last upgrade (views.ts shows them).
 */
import { STALE_AFTER_SECONDS } from '../../runtime/protocol/events.ts';
import { RUNTIME_NAMESPACE } from '../../runtime/component/agents.ts';
import type { Condition } from '../store/states.ts';
import type { RuntimeRow } from '../store/runtimes.ts';

/**
 * A hybrid runtime's conditions, from its row: `Installed`; for access=tunnel `TunnelConnected`;
 * once installed `Reporting` (its agents' event batches: fresh while the newest is younger than
 * STALE_AFTER_SECONDS by the database's clock, as the hosted runtime's) and `Ready` (installed,
 * reporting, and for access=tunnel its tunnel connected); once its event reporter stated them
 * `VersionSkew` (the version it runs against the catalog version the bundle was made for) and
 * `ArgoCDReachable` (it lists and watches Argo CD Applications).
 */
export function hybridConditions(
  r: RuntimeRow,
  tunnel: { connected: boolean; since: string | null },
  now = new Date(),
): Condition[] {
  const at = (d: Date | null) => (d ?? r.created_at).toISOString();
  const ns = r.namespace ?? RUNTIME_NAMESPACE;
  const installed: Condition =
    r.state === 'removed'
      ? {
          type: 'Installed',
          status: 'False',
          reason: 'Removed',
          message: 'the runtime was removed: its key is revoked; run the remove command in your cluster',
          lastTransitionTime: at(r.removed_at),
        }
      : r.bootstrap_redeemed_at
        ? {
            type: 'Installed',
            status: 'True',
            reason: 'BootstrapRedeemed',
            message: "the install's bootstrap Job exchanged its token for the runtime key",
            lastTransitionTime: at(r.bootstrap_redeemed_at),
          }
        : r.bootstrap_expires_at && r.bootstrap_expires_at <= now
          ? {
              type: 'Installed',
              status: 'False',
              reason: 'BootstrapExpired',
              message: `the bootstrap token expired at ${r.bootstrap_expires_at.toISOString()} before it was redeemed: remove the runtime and register it again`,
              lastTransitionTime: at(r.bootstrap_expires_at),
            }
          : {
              type: 'Installed',
              status: 'False',
              reason: 'AwaitingInstall',
              message: `apply the install bundle in your cluster before ${r.bootstrap_expires_at?.toISOString() ?? 'the token expires'}`,
              lastTransitionTime: at(r.created_at),
            };
  const out = [installed];
  const tunnelCondition: Condition | undefined =
    r.access === 'tunnel' && r.state !== 'removed'
      ? tunnel.connected
        ? {
            type: 'TunnelConnected',
            status: 'True',
            reason: 'Connected',
            message:
              "the runtime's tunnel client is connected: requests reach it through /v1/tenants/:id/runtimes/:name/proxy/*",
            lastTransitionTime: tunnel.since ?? at(r.created_at),
          }
        : r.tunnel_lost_at
          ? {
              type: 'TunnelConnected',
              status: 'False',
              reason: 'ReplicaLost',
              message: `the control plane replica holding the runtime's tunnel stopped renewing it at ${r.tunnel_lost_at.toISOString()} (it stopped or cannot reach the database); the tunnel client reconnects to another replica`,
              lastTransitionTime: at(r.tunnel_lost_at),
            }
          : {
              type: 'TunnelConnected',
              status: 'False',
              reason: 'Disconnected',
              message: r.bootstrap_redeemed_at
                ? `the runtime's tunnel client is not connected: check the tunnel-client Deployment in namespace ${ns}`
                : 'the runtime is not installed yet',
              lastTransitionTime: at(r.bootstrap_redeemed_at ?? r.created_at),
            }
      : undefined;
  if (tunnelCondition) out.push(tunnelCondition);
  if (r.state !== 'installed') return out;

  const heard = r.last_heartbeat_at;
  const age = r.heartbeat_age_seconds;
  const reporting: Condition =
    heard === null || age === null
      ? {
          type: 'Reporting',
          status: 'False',
          reason: 'NeverReported',
          message: `the runtime's event reporter has not reported yet: check the event-reporter Deployment in namespace ${ns}`,
          lastTransitionTime: at(r.bootstrap_redeemed_at),
        }
      : age < STALE_AFTER_SECONDS
        ? {
            type: 'Reporting',
            status: 'True',
            reason: 'Heartbeat',
            message: `the runtime's agents reported ${Math.round(age)} s ago`,
            lastTransitionTime: heard.toISOString(),
          }
        : {
            type: 'Reporting',
            status: 'False',
            reason: 'Stale',
            message: `no report from the runtime's agents for ${Math.round(age)} s (last at ${heard.toISOString()}, stale after ${STALE_AFTER_SECONDS} s); stored application state may be out of date`,
            lastTransitionTime: new Date(heard.getTime() + STALE_AFTER_SECONDS * 1000).toISOString(),
          };
  out.push(reporting);
  const notReady =
    reporting.status !== 'True' ? reporting : tunnelCondition?.status === 'False' ? tunnelCondition : undefined;
  out.push(
    notReady
      ? {
          type: 'Ready',
          status: 'False',
          reason: notReady.type === 'Reporting' ? 'NotReporting' : 'TunnelDisconnected',
          message: notReady.message,
          lastTransitionTime: notReady.lastTransitionTime,
        }
      : {
          type: 'Ready',
          status: 'True',
          reason: 'Ready',
          message:
            r.access === 'tunnel'
              ? `runtime ${r.reported_version ?? r.version} is reporting and its tunnel is connected`
              : `runtime ${r.reported_version ?? r.version} is reporting`,
          lastTransitionTime: [reporting.lastTransitionTime, tunnelCondition?.lastTransitionTime ?? ''].sort().at(-1)!,
        },
  );
  if (r.reported_version !== null)
    out.push(
      r.reported_version !== r.version
        ? {
            type: 'VersionSkew',
            status: 'True',
            reason: 'VersionDiffers',
            message: `the runtime's agents run ${r.reported_version}; its bundle was made for ${r.version}: apply the bundle the control plane answers for this runtime`,
            lastTransitionTime: at(r.last_heartbeat_at),
          }
        : {
            type: 'VersionSkew',
            status: 'False',
            reason: 'VersionMatches',
            message: `the runtime's agents run ${r.version}, the version its bundle was made for`,
            lastTransitionTime: at(r.last_heartbeat_at),
          },
    );
  if (r.argo_cd_listed !== null)
    out.push(
      r.argo_cd_listed
        ? {
            type: 'ArgoCDReachable',
            status: 'True',
            reason: 'ApplicationsListed',
            message: `the event reporter lists and watches Argo CD Applications${r.argo === 'existing' ? ` in namespace ${r.argo_namespace}` : ''}`,
            lastTransitionTime: at(r.last_heartbeat_at),
          }
        : {
            type: 'ArgoCDReachable',
            status: 'False',
            reason: 'ApplicationsNotListed',
            message:
              r.argo === 'existing'
                ? `the event reporter cannot list Argo CD Applications in namespace ${r.argo_namespace}: check that Argo CD's CRDs are installed and the bundle's Role and RoleBinding ${ns}-event-reporter exist there`
                : "the event reporter cannot list Argo CD Applications: check that the bundle's Argo CD chart is installed (the install command)",
            lastTransitionTime: at(r.last_heartbeat_at),
          },
    );
  const upgraded = upgraderCondition(r);
  if (upgraded) out.push(upgraded);
  return out;
}

/** upgrades=agent: `Upgraded`, how the last upgrade the in-cluster upgrader was asked to apply went. */
function upgraderCondition(r: RuntimeRow): Condition | undefined {
  if (!r.upgrade_phase || !r.upgrade_updated_at) return undefined;
  const ns = r.namespace ?? RUNTIME_NAMESPACE;
  const at = r.upgrade_updated_at.toISOString();
  const step = `${r.upgrade_from} to ${r.upgrade_to}`;
  const said = r.upgrade_message ? `: ${r.upgrade_message}` : '';
  switch (r.upgrade_phase) {
    case 'pending':
      return {
        type: 'Upgraded',
        status: 'False',
        reason: 'Pending',
        message: `the upgrade from ${step} waits for the in-cluster upgrader (Deployment runtime-upgrader in namespace ${ns}) to pick it up`,
        lastTransitionTime: at,
      };
    case 'applying':
      return {
        type: 'Upgraded',
        status: 'False',
        reason: 'Applying',
        message: `the in-cluster upgrader applies the upgrade from ${step}${said}`,
        lastTransitionTime: at,
      };
    case 'succeeded':
      return {
        type: 'Upgraded',
        status: 'True',
        reason: 'Succeeded',
        message: `the in-cluster upgrader applied the upgrade from ${step}${said}`,
        lastTransitionTime: at,
      };
    case 'rolled-back':
      return {
        type: 'Upgraded',
        status: 'False',
        reason: 'RolledBack',
        message: `the upgrade from ${step} failed and the in-cluster upgrader put ${r.upgrade_from} back${said}`,
        lastTransitionTime: at,
      };
    case 'failed':
      return {
        type: 'Upgraded',
        status: 'False',
        reason: 'Failed',
        message: `the upgrade from ${step} failed and so did its rollback: look at the Deployments in namespace ${ns}${said}`,
        lastTransitionTime: at,
      };
  }
}
