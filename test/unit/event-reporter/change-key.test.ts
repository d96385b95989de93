/**
 * When the event reporter asks the Source Server again about an Application
 * (runtime/agents/event-reporter/changes.ts `wantedOf`): what the answer depends on. A
 * multi-source Application's other sources move on their own, so every source's synced revision
 * is part of it.
 */
import t from 'tap';
import { wantedOf } from '../../../runtime/agents/event-reporter/changes.ts';
import { applicationSummary } from '../../../runtime/agents/event-reporter/items.ts';

const multi = (revisions: string[], status = 'Synced') =>
  applicationSummary({
    spec: {
      sources: [
        { repoURL: 'https://git.example.test/apps.git', path: 'apps/m1', targetRevision: 'main' },
        { repoURL: 'https://git.example.test/config.git', path: 'envs/prod', targetRevision: 'main' },
      ],
    },
    status: { sync: { status, revisions } },
  });

t.test('a multi-source Application is asked again when any of its sources moves', async (t) => {
  const before = wantedOf('argocd', 'm', multi(['a1', 'b1']));
  t.equal(before.revision, 'a1', 'asked at the first source’s synced revision');
  t.not(wantedOf('argocd', 'm', multi(['a1', 'b2'])).key, before.key, 'the second source moved alone: asked again');
  t.equal(wantedOf('argocd', 'm', multi(['a1', 'b1'])).key, before.key, 'nothing moved: the same question');
});

t.test('a single-source Application: its one revision', async (t) => {
  const single = (revision: string) =>
    applicationSummary({
      spec: { source: { repoURL: 'https://git.example.test/apps.git', path: 'apps/a', targetRevision: 'main' } },
      status: { sync: { status: 'Synced', revision } },
    });
  t.equal(single('a1').revisions, undefined, 'no revisions list');
  t.not(
    wantedOf('argocd', 'a', single('a1')).key,
    wantedOf('argocd', 'a', single('a2')).key,
    'asked again when it moves',
  );
});

t.test(
  'while Argo CD cannot compare, the head is asked: the synced revisions are not part of the question',
  async (t) => {
    const now = () => 1_000_000;
    const a = wantedOf('argocd', 'm', multi(['a1', 'b1'], 'Unknown'), now);
    const b = wantedOf('argocd', 'm', multi(['a1', 'b2'], 'Unknown'), now);
    t.equal(a.revision, undefined, 'no revision asked');
    t.equal(a.key, b.key, 'the same question within the answer’s time');
  },
);
