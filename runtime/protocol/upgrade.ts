/**
 * The in-cluster upgrader's exchange with the control plane (a hybrid runtime with `upgrades:
 * agent`): it pulls the upgrade it is to apply and reports how it went, with the runtime key, over
 * the same outbound https the event reporter uses. The names and shapes both ends share. It
 * imports nothing.
 */

/** GET: the upgrade to apply (UpgraderAssignment); POST: a report (UpgraderReportBody). Runtime keys only. */
export const UPGRADER_PATH = '/v1/runtime/upgrade';

/** Name of the upgrader's Deployment, ServiceAccount, Role and RoleBinding in the runtime's namespace. */
export const UPGRADER = 'runtime-upgrader';

/** The ConfigMap recording the runtime's version and its components' (the one ConfigMap the upgrader may patch). */
export const VERSIONS_CONFIGMAP = 'runtime-versions';

/** The phases of an upgrade the upgrader applies (migration 027). */
export type UpgraderPhase = 'pending' | 'applying' | 'succeeded' | 'rolled-back' | 'failed';
/** What the upgrader reports: `applying` once it starts, then one of the three ends. */
export type UpgraderReport = Exclude<UpgraderPhase, 'pending'>;
export const UPGRADER_REPORTS: readonly UpgraderReport[] = ['applying', 'succeeded', 'rolled-back', 'failed'];

/**
 * The reports each phase of an upgrade in progress may be followed by, in order: `applying`
 * before any object is applied, then one end. `failed` straight from `pending` is a plan the
 * upgrader refused before applying anything (upgrade-check.ts). A repeated `applying` (a retried
 * report) changes nothing.
 */
export const UPGRADER_NEXT: Readonly<Record<'pending' | 'applying', readonly UpgraderReport[]>> = {
  pending: ['applying', 'failed'],
  applying: ['succeeded', 'rolled-back', 'failed'],
};

/** A Kubernetes object as the plan carries it (server-side applied as is). */
export interface PlannedObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; [key: string]: unknown };
  [key: string]: unknown;
}

/** The answer to GET UPGRADER_PATH. */
export interface UpgraderAssignment {
  /** The catalog version the runtime is to run. */
  version: string;
  /** The upgrade to apply now, or null (none asked, or it ended). */
  upgrade: {
    from: string;
    to: string;
    phase: 'pending' | 'applying';
    /** Server-side applied in this order; the upgrader's own Deployment, when it changes, is last. */
    apply: PlannedObject[];
    /** The same objects as the version before had them: applied when the rollout fails. */
    rollback: PlannedObject[];
  } | null;
}

/** The body of POST UPGRADER_PATH. */
export interface UpgraderReportBody {
  /** The version the upgrade moves to (the report is refused, 409, when that is no longer the upgrade asked). */
  to: string;
  phase: UpgraderReport;
  /** What happened, for the runtime's condition (at most 2,000 characters). */
  message?: string;
}
