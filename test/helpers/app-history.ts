/**
 * Application reports that carry what changed them (UpsertItem.change, runtime/protocol/sources.ts),
 * as a runtime's event reporter sends them once its Source Server answered: each makes or updates
 * an entry of the application's history. And the diffs a Source Server answers, for a TEST DOUBLE
 * of the runtime side in tiers without a runtime (the e2e asks a real Source Server).
 */
import { application } from './events.ts';
import type { UpsertItem } from '../../runtime/protocol/events.ts';
import type { ApplicationChange, ApplicationDiff } from '../../runtime/protocol/sources.ts';

/** A 40-hex commit id made from a short name: `sha('c1')` is the same every time. */
export const sha = (seed: string): string =>
  Buffer.from(seed.padEnd(20, '.')).toString('hex').slice(0, 40).padEnd(40, '0');

export interface Change {
  /** The change revision (the commit that changed the application). */
  commit: string;
  previous?: string;
  author?: string;
  message?: string;
  date?: string;
  /** The web container's image before and after (an image change). */
  image?: { before: string; after: string };
  /** Argo CD's message: the manifests could not be generated at this commit (a failed entry). */
  error?: string;
  /** The sync of this change: Succeeded (with 42 s between start and finish), Running, Failed, or none (pending). */
  sync?: 'Succeeded' | 'Running' | 'Failed';
}

/** An Application upsert for `name` at resourceVersion `rv`, carrying `c` as its change. */
export function changedApplication(name: string, rv: number, c: Change, namespace = 'argocd'): UpsertItem {
  const item = application(name, rv, { namespace, sync: c.sync === 'Succeeded' ? 'Synced' : 'OutOfSync' });
  const started = new Date(Date.now() - 60_000).toISOString();
  const finished = new Date(Date.now() - 18_000).toISOString();
  const change: ApplicationChange = {
    revision: c.commit,
    changeRevision: c.commit,
    ...(c.previous ? { previousChangeRevision: c.previous } : {}),
    commit: {
      revision: c.commit,
      ...(c.author ? { author: c.author } : {}),
      date: c.date ?? new Date().toISOString(),
      ...(c.message ? { message: c.message } : {}),
      tags: [],
    },
    resources: [
      {
        group: 'apps',
        kind: 'Deployment',
        namespace: 'default',
        name: 'web',
        action: 'modified',
        fields: c.image ? ['spec.template.spec.containers[name=web].image'] : ['spec.replicas'],
      },
    ],
    images: c.image
      ? [{ resource: 'Deployment/default/web', container: 'web', before: c.image.before, after: c.image.after }]
      : [],
    truncated: false,
    ...(c.error ? { error: c.error } : {}),
  };
  return {
    ...item,
    summary: {
      ...item.summary,
      revision: c.commit,
      changeRevision: c.commit,
      ...(c.sync
        ? {
            operationPhase: c.sync,
            operationRevision: c.commit,
            operationStartedAt: started,
            ...(c.sync === 'Running' ? {} : { operationFinishedAt: finished }),
            ...(c.sync === 'Failed' ? { operationMessage: 'one or more objects failed to apply' } : {}),
          }
        : {}),
    },
    change,
  };
}

/** A Deployment `web` with one container. */
export const deployment = (image: string, replicas = 2): Record<string, unknown> => ({
  apiVersion: 'apps/v1',
  kind: 'Deployment',
  metadata: { name: 'web', namespace: 'default', labels: { app: 'web' } },
  spec: {
    replicas,
    selector: { matchLabels: { app: 'web' } },
    template: {
      metadata: { labels: { app: 'web' } },
      spec: { containers: [{ name: 'web', image, ports: [{ containerPort: 8080 }] }] },
    },
  },
});

/** A diff as a Source Server answers it: `web`'s image moved from `before` to `after`. */
export function imageDiff(
  app: { namespace: string; name: string },
  revision: string,
  base: string,
  before: string,
  after: string,
): ApplicationDiff {
  return {
    application: app,
    revision,
    base,
    truncated: false,
    resources: [
      {
        group: 'apps',
        kind: 'Deployment',
        namespace: 'default',
        name: 'web',
        action: 'modified',
        fields: ['spec.template.spec.containers[name=web].image'],
        before: deployment(before),
        after: deployment(after),
      },
    ],
  };
}
