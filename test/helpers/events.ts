/**
 * Event batches as a runtime's event reporter sends them (runtime/protocol/events.ts), for tests
 * and the ingest benchmark.
 */
import type { DeleteItem, EventBatch, UpsertItem } from '../../runtime/protocol/events.ts';
import type { ReportedKind } from '../../runtime/protocol/kinds.ts';

export function application(
  name: string,
  rv: number | string,
  o: { namespace?: string; health?: string; sync?: string; uid?: string; padBytes?: number } = {},
): UpsertItem {
  const namespace = o.namespace ?? 'argocd';
  const health = o.health ?? 'Healthy';
  const sync = o.sync ?? 'Synced';
  return {
    type: 'upsert',
    kind: 'Application',
    namespace,
    name,
    uid: o.uid ?? `uid-${namespace}-${name}`,
    resourceVersion: String(rv),
    generation: 1,
    observedAt: new Date().toISOString(),
    summary: {
      syncStatus: sync,
      healthStatus: health,
      revision: 'a1b2c3d',
      destination: { server: 'https://kubernetes.default.svc', namespace: 'default' },
      source: { repoURL: 'https://git.example.com/apps.git', path: name, targetRevision: 'HEAD' },
    },
    object: {
      apiVersion: 'argoproj.io/v1alpha1',
      kind: 'Application',
      metadata: { name, namespace, uid: o.uid ?? `uid-${namespace}-${name}`, resourceVersion: String(rv) },
      spec: { project: 'default', source: { repoURL: 'https://git.example.com/apps.git', path: name } },
      status: {
        sync: { status: sync },
        health: { status: health },
        ...(o.padBytes ? { pad: 'x'.repeat(o.padBytes) } : {}),
      },
    },
    truncated: false,
  };
}

export function deletion(
  kind: ReportedKind,
  namespace: string,
  name: string,
  rv: number | string,
  uid?: string,
): DeleteItem {
  return {
    type: 'delete',
    kind,
    namespace,
    name,
    uid: uid ?? `uid-${namespace}-${name}`,
    resourceVersion: String(rv),
    observedAt: new Date().toISOString(),
  };
}

export function batch(replica: string, items: EventBatch['items'], extra: Partial<EventBatch> = {}): EventBatch {
  return { replica, items, ...extra };
}
