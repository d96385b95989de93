/**
 * How an Application's report becomes an entry of its history (docs/api.md "Application history"):
 * which reports make one, and what its result is. Pure: the store applies it (store/
 * application-history.ts) in the transaction that stores the event batch.
 *
 * - An entry is keyed by (runtime, application, change revision): a report whose `change` names a
 *   change revision the application has no entry for creates one; a report without a change
 *   revision (no Source Server, no Git source over http(s), or an older Source Server's multi-source answer) makes none.
 * - Its result, from the report: `failed` with Argo CD's message when the Source Server could not
 *   generate the manifests (`change.error`) or the Application has a ComparisonError or
 *   InvalidSpecError condition; else from Argo CD's operation when it ran at the change's revision
 *   (Running → running, Succeeded → succeeded with its times, Failed/Error → failed with its
 *   message); else `succeeded` when the Application is Synced at that revision; else `pending`.
 * - A result only moves forward: pending → running → succeeded or failed. A final result is not
 *   rewritten by a report of the same sync (a retry after a timeout, a reporter replaying its
 *   queue), and a report that says less (pending after running) changes nothing. The latest sync
 *   of the change decides: a later operation (started after the recorded one: a retry, or the sync
 *   that followed once a passing ComparisonError cleared) replaces the result, and a failure no
 *   sync ran for (Argo CD could not compare) turns succeeded once Argo CD reports it synced.
 */
import type { ApplicationSummary, UpsertItem } from '../../runtime/protocol/events.ts';
import type { ApplicationChange } from '../../runtime/protocol/sources.ts';
import type { HistoryWrite } from '../store/application-history.ts';

export type { HistoryResult, HistoryWrite } from '../store/application-history.ts';

/** Conditions Argo CD sets when it cannot generate or compare the manifests: the deployment failed. */
const FAILED_CONDITIONS = new Set(['ComparisonError', 'InvalidSpecError']);

const time = (v: unknown): string | null => (typeof v === 'string' && !Number.isNaN(Date.parse(v)) ? v : null);
const text = (v: unknown): string | null => (typeof v === 'string' && v !== '' ? v : null);

/** The result a report says for its change (see the module's comment). */
export function resultOf(
  summary: ApplicationSummary,
  change: ApplicationChange,
): Pick<HistoryWrite, 'result' | 'result_message' | 'started_at' | 'finished_at' | 'duration_ms'> {
  const none = { started_at: null, finished_at: null, duration_ms: null };
  if (change.error !== undefined && change.error !== '')
    return { result: 'failed', result_message: change.error, ...none };
  const failedCondition = Array.isArray(summary.conditions)
    ? summary.conditions.find((c) => FAILED_CONDITIONS.has(c?.type))
    : undefined;
  if (failedCondition)
    return { result: 'failed', result_message: text(failedCondition.message) ?? failedCondition.type, ...none };
  if (summary.operationRevision !== undefined && summary.operationRevision === change.revision) {
    const started = time(summary.operationStartedAt);
    const finished = time(summary.operationFinishedAt);
    const duration = started && finished ? Math.max(0, Date.parse(finished) - Date.parse(started)) : null;
    switch (summary.operationPhase) {
      case 'Running':
      case 'Terminating':
        return { result: 'running', result_message: null, ...none, started_at: started };
      case 'Succeeded':
        return {
          result: 'succeeded',
          result_message: text(summary.operationMessage),
          started_at: started,
          finished_at: finished,
          duration_ms: duration,
        };
      case 'Failed':
      case 'Error':
        return {
          result: 'failed',
          result_message: text(summary.operationMessage) ?? `sync ${summary.operationPhase.toLowerCase()}`,
          started_at: started,
          finished_at: finished,
          duration_ms: duration,
        };
    }
  }
  if (summary.syncStatus === 'Synced' && summary.revision === change.revision)
    return { result: 'succeeded', result_message: null, ...none };
  return { result: 'pending', result_message: null, ...none };
}

/** The entry an Application's report makes, or undefined when it makes none (no change revision). */
export function historyWriteOf(item: UpsertItem): HistoryWrite | undefined {
  const change = item.change;
  if (item.kind !== 'Application' || !change?.changeRevision) return undefined;
  const commit = change.commit;
  return {
    namespace: item.namespace,
    name: item.name,
    rv: item.resourceVersion,
    change_revision: change.changeRevision,
    revision: change.revision,
    previous_change_revision: change.previousChangeRevision ?? null,
    author: commit?.author ?? null,
    date: time(commit?.date),
    message: commit?.message ?? null,
    tags: commit?.tags ?? [],
    images: change.images,
    resources: change.resources,
    truncated: change.truncated,
    ...resultOf(item.summary as ApplicationSummary, change),
  };
}
