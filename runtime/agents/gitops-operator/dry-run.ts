/**
 * A promotion's dry run (docs/promotions.md "Dry runs"): the step's Git change committed on a
 * scratch branch of the operator's own, each application of the environment previewed at that
 * commit by the Source Server (what a sync there would change in what runs now), the branch
 * deleted again. This file: the scratch branch's name, the Source Server's preview client, and the
 * preview bounded into what the Promotion's status keeps.
 */
import { SOURCE_SERVER_PATH_PREFIX, type ApplicationPreview } from '../../protocol/sources.ts';
import {
  type DryRunApplication,
  MAX_DRY_RUN_FIELDS,
  MAX_DRY_RUN_RESOURCES,
  type Promotion,
} from '../../protocol/promotions.ts';

/** The branch a dry run commits an environment's change on (deleted when the preview is done). */
export function scratchBranch(p: Promotion, environment: string): string {
  return `promotions/${p.metadata.name}/dry-run/${environment}`;
}

/** The Source Server could not answer: `transient` (503, unreachable) is asked again next round. */
export class PreviewError extends Error {
  readonly transient: boolean;
  constructor(message: string, transient: boolean) {
    super(message);
    this.name = 'PreviewError';
    this.transient = transient;
  }
}

export type PreviewSource = (application: string, revision: string) => Promise<ApplicationPreview>;

/** The Source Server's `…/preview` for Applications in `namespace`. */
export function sourceServerPreview(baseUrl: string, namespace: string, timeoutMs = 120_000): PreviewSource {
  return async (application, revision) => {
    const target = `${baseUrl}${SOURCE_SERVER_PATH_PREFIX}/${encodeURIComponent(namespace)}/${encodeURIComponent(application)}/preview?revision=${encodeURIComponent(revision)}`;
    let res: Response;
    try {
      res = await fetch(target, { signal: AbortSignal.timeout(timeoutMs) });
    } catch (err) {
      throw new PreviewError(`the Source Server cannot be reached: ${(err as Error).message}`, true);
    }
    const body = (await res.json().catch(() => undefined)) as
      (ApplicationPreview & { error?: { code?: string; message?: string } }) | undefined;
    if (res.ok && body) return body;
    const why = body?.error ? `${body.error.code ?? ''}: ${body.error.message ?? ''}` : `HTTP ${res.status}`;
    throw new PreviewError(`the Source Server: ${why}`, res.status === 503 || res.status >= 504);
  };
}

/** Longest field path kept in the status (characters; longer ones end in `…`). */
const MAX_FIELD_CHARS = 200;
const cut = (f: string) => (f.length <= MAX_FIELD_CHARS ? f : `${f.slice(0, MAX_FIELD_CHARS - 1)}…`);

/** A preview as the Promotion's status keeps it: at most MAX_DRY_RUN_RESOURCES resources and MAX_DRY_RUN_FIELDS fields each. */
export function boundPreview(application: string, preview: ApplicationPreview): DryRunApplication {
  const resources = preview.resources.slice(0, MAX_DRY_RUN_RESOURCES).map((r) => {
    const more = r.fields.length - MAX_DRY_RUN_FIELDS;
    return {
      ...(r.group ? { group: r.group } : {}),
      kind: r.kind,
      namespace: r.namespace,
      name: r.name,
      action: r.action,
      fields: r.fields.slice(0, MAX_DRY_RUN_FIELDS).map(cut),
      ...(more > 0 || r.fieldsTruncated ? { moreFields: Math.max(more, 0) } : {}),
      ...(r.notFromChange?.length ? { notFromChange: r.notFromChange.slice(0, MAX_DRY_RUN_FIELDS).map(cut) } : {}),
    };
  });
  const more = preview.resources.length - resources.length;
  return {
    application,
    ...(preview.current ? { current: preview.current } : {}),
    resources,
    ...(more > 0 ? { moreResources: more } : {}),
  };
}
