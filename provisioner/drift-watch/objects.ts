/**
 * What the root-cluster watch looks at: the kinds of object the tenants program owns on a root
 * cluster (one watch per kind per cluster, selected by label, never one per tenant; only kinds the
 * provisioner may read across all namespaces, so no Secrets), the
 * tenant an object belongs to, and the object's fingerprint — a hash of what the program or a
 * person sets, without what the server or controllers write (status, resourceVersion,
 * managedFields). An update whose fingerprint did not change (a ResourceQuota's `status.used`,
 * a StatefulSet's status) is not a change worth a resync. Pure functions, no I/O.
 */
import { createHash } from 'node:crypto';

/** The tenants program's Helm release name of every vcluster (tenants/virtual-cluster.ts; a unit test keeps them equal). */
import { VCLUSTER_RELEASE } from '../../tenants/names.ts';
export { VCLUSTER_RELEASE };

interface Obj {
  metadata?: Meta;
  [field: string]: unknown;
}

/** The label the tenants program puts on the objects it creates (tenants/tenant-namespace.ts ownershipLabels). */
export const MANAGED_BY_SELECTOR = 'app.kubernetes.io/managed-by=hosted-runtimes-provisioner';

export interface WatchedKind {
  /** Name in logs, metrics and resync reasons. */
  kind: string;
  /** The collection across all namespaces. */
  path: string;
  labelSelector?: string;
  fieldSelector?: string;
}

export const WATCHED_KINDS: readonly WatchedKind[] = [
  { kind: 'Namespace', path: '/api/v1/namespaces', labelSelector: MANAGED_BY_SELECTOR },
  { kind: 'ResourceQuota', path: '/api/v1/resourcequotas', labelSelector: MANAGED_BY_SELECTOR },
  { kind: 'LimitRange', path: '/api/v1/limitranges', labelSelector: MANAGED_BY_SELECTOR },
  { kind: 'NetworkPolicy', path: '/apis/networking.k8s.io/v1/networkpolicies', labelSelector: MANAGED_BY_SELECTOR },
  // The vcluster chart's workload: a release changed or removed by hand changes or removes it.
  {
    kind: 'StatefulSet',
    path: '/apis/apps/v1/statefulsets',
    labelSelector: `app=vcluster,release=${VCLUSTER_RELEASE}`,
  },
  // No Secrets (the Helm release records, the exported kubeconfig): listing them across all
  // namespaces needs a cluster-wide read of every Secret, which the provisioner does not have
  // (infra/provisioner-rbac.ts; docs/decisions.md, "Least privilege for reads").
];

const TENANT_NAMESPACE = /^tenant-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/;

interface Meta {
  name?: string;
  namespace?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: unknown[];
  finalizers?: string[];
  deletionTimestamp?: string;
  [field: string]: unknown;
}

const metaOf = (obj: Obj): Meta => obj.metadata ?? {};

/** `namespace/name`, or the name of a cluster-scoped object. */
export function objectKey(obj: Obj): string {
  const m = metaOf(obj);
  return m.namespace ? `${m.namespace}/${m.name ?? ''}` : (m.name ?? '');
}

/** The tenant whose namespace (`tenant-<uuid>`) holds the object, or which the Namespace is. */
export function tenantOf(watched: WatchedKind, obj: Obj): string | undefined {
  const m = metaOf(obj);
  const ns = watched.kind === 'Namespace' ? m.name : m.namespace;
  return ns ? TENANT_NAMESPACE.exec(ns)?.[1] : undefined;
}

/**
 * Top-level fields left out: what controllers write (`status`), the metadata (taken apart below),
 * and `kind`/`apiVersion`, which watch events carry and the items of a list do not.
 */
const NOT_FINGERPRINTED = new Set(['status', 'metadata', 'kind', 'apiVersion']);

/** Annotations written by servers and tools on every apply, not by the program. */
const VOLATILE_ANNOTATIONS = new Set(['kubectl.kubernetes.io/last-applied-configuration']);

/**
 * Hash of what the program (or a person) sets: every top-level field but `status`, `kind`,
 * `apiVersion` and `metadata`, and of the metadata the name, labels, annotations, owners, finalizers and whether
 * the object is being deleted (a namespace deleted by hand is Terminating before it is gone).
 */
export function fingerprint(obj: Obj): string {
  const m = metaOf(obj);
  const annotations = Object.fromEntries(
    Object.entries(m.annotations ?? {}).filter(([k]) => !VOLATILE_ANNOTATIONS.has(k)),
  );
  const rest: Obj = {};
  for (const [k, v] of Object.entries(obj)) if (!NOT_FINGERPRINTED.has(k)) rest[k] = v;
  const meta = {
    labels: m.labels ?? {},
    annotations,
    ownerReferences: m.ownerReferences ?? [],
    finalizers: m.finalizers ?? [],
    deleting: m.deletionTimestamp !== undefined,
  };
  return createHash('sha1').update(stableJson({ meta, rest })).digest('base64').slice(0, 22);
}

/** JSON with object keys sorted, so equal objects hash alike whatever the key order. */
export function stableJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(stableJson).join(',')}]`;
  if (v && typeof v === 'object') {
    const entries = Object.entries(v as Obj)
      .filter(([, x]) => x !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, x]) => `${JSON.stringify(k)}:${stableJson(x)}`).join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}
