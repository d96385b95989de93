/**
 * The control plane's rules for reported objects that need no database: how a batch's items become
 * rows (the newest of several states of one object, the filter columns per kind, refusals naming
 * the field) and how heartbeat rows become the Reporting condition.
 */
import t from 'tap';
import { filterColumns, prepareBatch } from '../../provisioner/runtime-objects/ingest.ts';
import { reportingOf, type ReporterRow } from '../../provisioner/store/reporting.ts';
import { isAppError } from '../../provisioner/errors.ts';
import { writesJson } from '../../provisioner/store/runtime-objects.ts';
import type { UpsertItem } from '../../runtime/protocol/events.ts';
import { application, batch, deletion } from '../helpers/events.ts';

t.test('several states of one object in a batch: the largest resourceVersion wins, whatever the order', async (t) => {
  const p = prepareBatch(
    batch('r', [
      application('a', 9, { health: 'Degraded' }),
      application('b', 5),
      application('a', 12, { health: 'Healthy' }),
      deletion('Application', 'argocd', 'a', 11),
    ]),
    false,
  );
  t.equal(p.writes.length, 2, 'one row per object');
  const a = p.writes.find((w) => w.name === 'a')!;
  t.equal(a.rv, '12', 'the largest resourceVersion of object a');
  t.equal(a.deleted, false, 'the deletion at 11 is older than the state at 12');
  t.equal(a.health, 'Healthy', 'with that state');
  t.equal(p.superseded, 2, 'two items were superseded within the batch');
  // Compared as integers, not as strings ("9" > "12" as strings).
  const q = prepareBatch(batch('r', [application('c', 12), application('c', 9)]), false);
  t.equal(q.writes[0]!.rv, '12', '12 is newer than 9');
});

t.test('filter columns per kind', async (t) => {
  const app = application('a', 1, { health: 'Degraded', sync: 'OutOfSync' });
  t.same(
    filterColumns({ ...app, summary: { ...app.summary, operationPhase: 'Running' } }),
    { health: 'Degraded', sync: 'OutOfSync', phase: 'Running' },
    'an Application: health, sync, operation phase',
  );
  const rollout: UpsertItem = { ...app, kind: 'Rollout', summary: { phase: 'Paused', currentStep: 2 } };
  t.same(
    filterColumns(rollout),
    { health: 'Paused', sync: null, phase: 'Paused' },
    "a Rollout's phase is also its health",
  );
  const wf: UpsertItem = { ...app, kind: 'Workflow', summary: { phase: 'Failed' } };
  t.same(filterColumns(wf), { health: null, sync: null, phase: 'Failed' }, 'a Workflow: phase only');
});

t.test('refusals name the field', async (t) => {
  const refused = (b: Parameters<typeof prepareBatch>[0], field: string, what: string) => {
    try {
      prepareBatch(b, true);
      t.fail(`${what}: refused`);
    } catch (err) {
      t.ok(
        isAppError(err) && err.code === 'VALIDATION_FAILED' && err.field === field,
        `${what}: refused naming ${field}`,
      );
    }
  };
  refused(batch('r', [application('a', 1), application('b', '1e5')]), 'items.1.resourceVersion', 'exponent notation');
  refused(batch('r', [application('a', '-1')]), 'items.0.resourceVersion', 'a negative resourceVersion');
  refused(batch('r', [application('a', '9223372036854775808')]), 'items.0.resourceVersion', 'above 2^63 - 1');
  refused(batch('r', [application('a', 1, { padBytes: 300 * 1024 })]), 'items.0.object', 'an object over 256 KiB');
  refused(
    batch('r', [{ ...deletion('Application', 'n', 'a', 3), summary: {} } as never]),
    'items.0.summary',
    'a delete item with upsert fields',
  );
  t.equal(
    prepareBatch(batch('r', [application('a', '9223372036854775807')]), true).writes.length,
    1,
    '2^63 - 1 is accepted',
  );
});

t.test('the Reporting condition from heartbeat rows', async (t) => {
  const row = (replica: string, ageSeconds: number, owned: number, sinceAgo = 600): ReporterRow => ({
    replica,
    ageSeconds,
    owned,
    lastSeen: new Date(Date.now() - ageSeconds * 1000).toISOString(),
    since: new Date(Date.now() - sinceAgo * 1000).toISOString(),
  });
  t.equal(reportingOf(null), undefined, 'never reported: no condition');
  t.equal(reportingOf([]), undefined, 'no rows: no condition');
  const live = reportingOf([row('a', 5, 10), row('b', 40, 7), row('old', 3000, 99)])!;
  t.match(live.condition, { type: 'Reporting', status: 'True', reason: 'Heartbeat' }, 'True while a replica reports');
  t.same(
    { replicas: live.status.replicas, objects: live.status.objects, stale: live.status.stale },
    { replicas: 2, objects: 17, stale: false },
    'replicas heard within 60 s and the objects they own (a replica gone long ago does not count)',
  );
  const stale = reportingOf([row('a', 61, 10), row('b', 90, 7), row('old', 3000, 99)])!;
  t.match(stale.condition, { status: 'False', reason: 'Stale' }, 'False, Stale, after 60 s without a heartbeat');
  t.same(
    { replicas: stale.status.replicas, objects: stale.status.objects, stale: stale.status.stale },
    { replicas: 0, objects: 17, stale: true },
    'no live replica; the objects of the last run',
  );
  const at = Date.parse(stale.condition.lastTransitionTime);
  t.ok(Math.abs(at - (Date.now() - 1000)) < 2000, 'it became stale 60 s after the last heartbeat (1 s ago)');
});

t.test("the statement's rows carry each object's JSON as it was serialized for the size check", async (t) => {
  const up = application('a', 7, { namespace: 'n' });
  const { writes } = prepareBatch(batch('r', [up, deletion('Application', 'n', 'b', 8)]), true);
  const rows = JSON.parse(writesJson(writes)) as Record<string, unknown>[];
  t.same(rows[0]!.object, up.object, 'the object arrives whole');
  t.equal(rows[0]!.rv, '7', 'beside the other columns');
  t.equal(rows[1]!.object, null, 'a deletion has no object');
  t.equal(rows[1]!.deleted, true, 'and is a deletion');
});
