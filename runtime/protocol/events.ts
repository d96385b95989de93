/**
 * The event reporter's wire contract: what a runtime's event-reporter replicas send to the control
 * plane (`POST /v1/runtime/events`, runtime key, its own tenant only) and the rules both ends share
 * (which replica owns an object, which of two states of an object is newer).
 *
 * A request body is one `EventBatch`. Every item is idempotent: the control plane stores the latest
 * state per object (tenant, kind, namespace, name) and ignores an item that is not newer than what
 * it holds, so a batch can be retried whole after a timeout or a 5xx.
 */
import { hash } from 'node:crypto';
import { REPORTED_KIND_NAMES, type ReportedKind } from './kinds.ts';
import type { ApplicationChange } from './sources.ts';
import type { ProductSummary, PromotionPreviewSummary, PromotionSummary } from './promotions.ts';

export type { ProductSummary, PromotionPreviewSummary, PromotionSummary };

export const EVENTS_PATH = '/v1/runtime/events';
/** A batch holds at most this many items and this many bytes of JSON. */
export const MAX_BATCH_ITEMS = 500;
export const MAX_BATCH_BYTES = 1024 * 1024;
/** `object` is trimmed to at most this many bytes of JSON (then `truncated` is true). */
export const MAX_OBJECT_BYTES = 256 * 1024;
/**
 * A digest names at most this many members (the live replicas: two by default, twice that during
 * a rollout), and a batch holds at most one digest per kind.
 */
export const MAX_DIGEST_MEMBERS = 32;
export const MAX_DIGESTS = REPORTED_KIND_NAMES.length;
/** A replica sends a heartbeat this often; the control plane marks a runtime stale after two missed. */
export const HEARTBEAT_INTERVAL_SECONDS = 30;
export const STALE_AFTER_SECONDS = 2 * HEARTBEAT_INTERVAL_SECONDS;
/** A replica sends a digest of everything it owns this often, and after every (re)connect or relist. */
export const DIGEST_INTERVAL_SECONDS = 600;

export interface ObjectKey {
  kind: ReportedKind;
  namespace: string;
  name: string;
}

/** Application: what Argo CD wrote in `status` and where it deploys from and to. */
export interface ApplicationSummary {
  syncStatus?: string; // status.sync.status: Synced | OutOfSync | Unknown
  healthStatus?: string; // status.health.status: Healthy | Progressing | Degraded | Suspended | Missing | Unknown
  revision?: string; // status.sync.revision
  revisions?: string[]; // status.sync.revisions: a multi-source Application's, one per source (revision is the first)
  operationPhase?: string; // status.operationState.phase: Running | Succeeded | Failed | Error | Terminating
  operationRevision?: string; // status.operationState.syncResult.revision (else operation.sync.revision)
  operationStartedAt?: string; // status.operationState.startedAt
  operationFinishedAt?: string; // status.operationState.finishedAt
  operationMessage?: string; // status.operationState.message
  /** The commit that last changed the application (the Source Server's change revision), when known. */
  changeRevision?: string;
  conditions?: { type: string; message?: string }[]; // status.conditions
  destination?: { server?: string; name?: string; namespace?: string }; // spec.destination
  source?: { repoURL?: string; path?: string; targetRevision?: string; chart?: string }; // spec.source (or first of spec.sources)
}

/** Rollout: its phase and step, and the revisions it moves between. */
export interface RolloutSummary {
  phase?: string; // status.phase: Healthy | Progressing | Paused | Degraded
  currentStep?: number; // status.currentStepIndex
  stableRevision?: string; // status.stableRS
  canaryRevision?: string; // status.currentPodHash
  message?: string; // status.message
}

/** Workflow: its phase, timing and progress. */
export interface WorkflowSummary {
  phase?: string; // status.phase: Pending | Running | Succeeded | Failed | Error
  startedAt?: string; // status.startedAt
  finishedAt?: string; // status.finishedAt
  progress?: string; // status.progress, "N/M"
  message?: string; // status.message
}

export type ObjectSummary =
  ApplicationSummary | RolloutSummary | WorkflowSummary | ProductSummary | PromotionSummary | PromotionPreviewSummary;

/** The current state of an object (from a list, an ADDED or a MODIFIED watch event). */
export interface UpsertItem extends ObjectKey {
  type: 'upsert';
  uid: string;
  resourceVersion: string;
  generation: number;
  /** When the reporter saw this state (ISO 8601); used for lag metrics, never for ordering. */
  observedAt: string;
  summary: ObjectSummary;
  /** The object without `data`/`stringData` and without managedFields, trimmed to MAX_OBJECT_BYTES. */
  object: Record<string, unknown>;
  truncated: boolean;
  /**
   * Applications only: what changed it, from the runtime's Source Server (sources.ts), at most
   * MAX_CHANGE_BYTES of JSON. Absent when the reporter has none (no Source Server in the runtime,
   * or it could not answer yet: the reporter sends the item again with it once it can).
   */
  change?: ApplicationChange;
}

/** An object that was deleted (a DELETED watch event; resourceVersion is that event's). */
export interface DeleteItem extends ObjectKey {
  type: 'delete';
  uid: string;
  resourceVersion: string;
  observedAt: string;
}

/** A replica is alive: sent every HEARTBEAT_INTERVAL_SECONDS (an empty batch with a heartbeat is fine). */
export interface Heartbeat {
  replica: string;
  ownedObjects: number;
  queueDepth: number;
  oldestPendingSeconds: number;
  /**
   * The runtime version the replica belongs to (its RUNTIME_VERSION: the hybrid bundle sets it to
   * the catalog version it was made for); absent when unset. The control plane shows it as a hybrid
   * runtime's `reportedVersion`.
   */
  runtimeVersion?: string;
  /**
   * The kinds the replica has listed and watches (a kind missing was refused or is not installed);
   * absent until it has tried every kind (listed, or found missing or forbidden), and from
   * reporters before it was added. The control plane shows whether Applications are
   * among them as a hybrid runtime's `ArgoCDReachable` condition.
   */
  listed?: ReportedKind[];
}

/**
 * Everything one replica owns at `listResourceVersion`, per kind it covers. The control plane
 * removes (tombstones) the stored objects of that kind that `ownerOf(key, members)` assigns to
 * this replica, that are missing from `objects`, and whose stored resourceVersion is older than
 * `listResourceVersion` — objects deleted while the control plane could not hear.
 */
export interface Digest {
  replica: string;
  /** The live replicas (lease holders) this replica saw when it computed its share. */
  members: string[];
  kind: ReportedKind;
  listResourceVersion: string;
  objects: { namespace: string; name: string; uid: string; resourceVersion: string }[];
}

export interface EventBatch {
  replica: string;
  items: (UpsertItem | DeleteItem)[];
  heartbeat?: Heartbeat;
  digests?: Digest[];
}

/** The answer to a batch: how many items were stored and how many were older than what is stored. */
export interface EventBatchResult {
  applied: number;
  stale: number;
  removedByDigest: number;
}

/**
 * Order of two states of the same object key. Kubernetes calls resourceVersions opaque; every
 * etcd-backed API server (kube-apiserver, vcluster's) issues them from etcd's revision counter, a
 * decimal integer that grows with every write anywhere in the cluster. The control plane relies on
 * that: a state is newer when its resourceVersion is a larger integer (across uids too, so a
 * deletion's tombstone is older than the object recreated after it). A resourceVersion that is not
 * a decimal integer is refused (400) rather than ordered by arrival.
 */
export function parseResourceVersion(rv: string): bigint | undefined {
  if (!/^[0-9]{1,19}$/.test(rv)) return undefined;
  const n = BigInt(rv);
  return n <= 9223372036854775807n ? n : undefined;
}

export function compareResourceVersions(a: string, b: string): number {
  const x = parseResourceVersion(a);
  const y = parseResourceVersion(b);
  if (x === undefined || y === undefined)
    throw new Error(`not a comparable resourceVersion: ${x === undefined ? a : b}`);
  return x < y ? -1 : x > y ? 1 : 0;
}

export function objectKeyString(key: ObjectKey): string {
  return `${key.kind}/${key.namespace}/${key.name}`;
}

/**
 * Rendezvous (highest-random-weight) hashing: the member with the highest weight for a key owns
 * it. When a member leaves, only its keys move (each to the member with the next-highest weight);
 * when one joins, only the keys it now wins move to it: about 1/N of them.
 */
export function rendezvousWeight(member: string, key: string): bigint {
  // One-shot hash of the UTF-8 of member, NUL, key: the same bytes as hashing them in three parts.
  return hash('sha256', `${member}\0${key}`, 'buffer').readBigUInt64BE(0);
}

export function ownerOf(key: ObjectKey | string, members: readonly string[]): string | undefined {
  const k = typeof key === 'string' ? key : objectKeyString(key);
  let best: string | undefined;
  let bestWeight = -1n;
  for (const m of members) {
    const w = rendezvousWeight(m, k);
    if (w > bestWeight || (w === bestWeight && best !== undefined && m < best)) {
      best = m;
      bestWeight = w;
    }
  }
  return best;
}

/**
 * Whether `replica` owns `key` among `members`: `ownerOf(key, members) === replica`, in fewer hashes
 * (it stops at the first member that outweighs the replica: for a key the replica does not own,
 * usually after one or two). False when the replica is not a member.
 */
export function isOwner(replica: string, key: ObjectKey | string, members: readonly string[]): boolean {
  if (!members.includes(replica)) return false;
  const k = typeof key === 'string' ? key : objectKeyString(key);
  const own = rendezvousWeight(replica, k);
  for (const m of members) {
    if (m === replica) continue;
    const w = rendezvousWeight(m, k);
    if (w > own || (w === own && m < replica)) return false;
  }
  return true;
}
