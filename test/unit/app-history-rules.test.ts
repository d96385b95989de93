/**
 * What result an Application's report says for its change (provisioner/app-history/rules.ts), and
 * which reports make a history entry at all.
 */
import t from 'tap';
import { historyWriteOf, resultOf } from '../../provisioner/app-history/rules.ts';
import { application } from '../helpers/events.ts';
import type { ApplicationChange } from '../../runtime/protocol/sources.ts';

const change = (o: Partial<ApplicationChange> = {}): ApplicationChange => ({
  revision: 'head',
  changeRevision: 'c1',
  resources: [],
  images: [],
  truncated: false,
  ...o,
});

t.test('the result a report says', async (t) => {
  t.match(resultOf({ syncStatus: 'OutOfSync' }, change()), { result: 'pending' }, 'not synced yet: pending');
  t.match(
    resultOf({ syncStatus: 'Synced', revision: 'head' }, change()),
    { result: 'succeeded', duration_ms: null },
    'synced at the change revision: succeeded',
  );
  t.match(
    resultOf({ syncStatus: 'Synced', revision: 'older' }, change()),
    { result: 'pending' },
    'synced at another revision: pending',
  );
  t.match(
    resultOf(
      { operationPhase: 'Running', operationRevision: 'head', operationStartedAt: '2024-05-01T10:00:00Z' },
      change(),
    ),
    { result: 'running', started_at: '2024-05-01T10:00:00Z' },
    'its operation runs: running',
  );
  t.match(
    resultOf(
      {
        operationPhase: 'Succeeded',
        operationRevision: 'head',
        operationStartedAt: '2024-05-01T10:00:00Z',
        operationFinishedAt: '2024-05-01T10:01:00Z',
      },
      change(),
    ),
    { result: 'succeeded', duration_ms: 60_000 },
    'its operation succeeded: succeeded with the duration',
  );
  t.match(
    resultOf(
      { operationPhase: 'Failed', operationRevision: 'head', operationMessage: 'one or more objects failed' },
      change(),
    ),
    { result: 'failed', result_message: 'one or more objects failed' },
    "its operation failed: failed with Argo CD's message",
  );
  t.match(
    resultOf({ operationPhase: 'Succeeded', operationRevision: 'other' }, change()),
    { result: 'pending' },
    "another revision's operation says nothing of this change",
  );
  t.match(
    resultOf(
      { syncStatus: 'Synced', revision: 'head', conditions: [{ type: 'InvalidSpecError', message: 'bad path' }] },
      change(),
    ),
    { result: 'failed', result_message: 'bad path' },
    'an InvalidSpecError condition: failed',
  );
  t.match(
    resultOf({ syncStatus: 'Synced', revision: 'head' }, change({ error: 'helm template failed' })),
    { result: 'failed', result_message: 'helm template failed' },
    "the Source Server's error: failed",
  );
});

t.test('which reports make an entry', async (t) => {
  const app = application('web', 1);
  t.equal(historyWriteOf(app), undefined, 'no change: no entry');
  t.equal(
    historyWriteOf({ ...app, change: change({ changeRevision: undefined, unsupported: 'multi-source' }) }),
    undefined,
    'a multi-source Application (no change revision): no entry',
  );
  t.match(
    historyWriteOf({
      ...app,
      change: change({ commit: { revision: 'c1', author: 'Ada', date: 'not a date', message: 'fix' } }),
    }),
    { change_revision: 'c1', revision: 'head', author: 'Ada', message: 'fix', date: null, rv: '1' },
    'a change revision: an entry with its commit (a date that is not one is left out)',
  );
});
