import t from 'tap';
import pino from 'pino';
import {
  ComparisonRetries,
  REFRESH_ANNOTATION,
  unreachableRepoServer,
} from '../../../runtime/agents/event-reporter/comparison-retry.ts';
import type { KubeTransport } from '../../../runtime/kube/transport.ts';
import { until } from '../../../sandbox/until.ts';

const app = (message: string | undefined, annotations: Record<string, string> = {}) => ({
  metadata: { namespace: 'argocd', name: 'web', annotations },
  status: {
    sync: { status: 'Unknown' },
    conditions: message === undefined ? [] : [{ type: 'ComparisonError', message }],
  },
});

t.test('unreachableRepoServer: the repo-server not answering, not an error of the Application itself', (t) => {
  const refused =
    'Failed to load target state: failed to generate manifest for source 1 of 1: rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial tcp 10.96.0.12:8081: connect: connection refused"';
  t.equal(unreachableRepoServer(app(refused)), refused, 'gRPC Unavailable, connection refused');
  t.ok(
    unreachableRepoServer(
      app('rpc error: code = DeadlineExceeded desc = context deadline exceeded while generating manifests'),
    ),
    'a deadline of the repo-server call',
  );
  t.ok(
    unreachableRepoServer(app('dial tcp: lookup argocd-repo-server on 10.96.0.10:53: no such host')),
    'its Service name not resolved yet',
  );
  t.equal(
    unreachableRepoServer(
      app(
        'Failed to load target state: failed to generate manifest for source 1 of 1: rpc error: code = Unknown desc = apps/nope: app path does not exist',
      ),
    ),
    undefined,
    'a path that does not exist is the Application’s own error',
  );
  t.equal(unreachableRepoServer(app(undefined)), undefined, 'no condition: nothing to retry');
  t.equal(
    unreachableRepoServer(app('rpc error: code = Unavailable desc = x', { [REFRESH_ANNOTATION]: 'normal' })),
    undefined,
    'a refresh already asked: the controller is about to compare',
  );
  t.equal(
    unreachableRepoServer({
      status: { conditions: [{ type: 'SyncError', message: 'rpc error: code = Unavailable desc = x' }] },
    }),
    undefined,
    'only a ComparisonError',
  );
  t.end();
});

t.test('a reporter without the right to patch Applications stops asking at the first 403', async (t) => {
  // TEST DOUBLE of the API server's transport: answers every PATCH 403, as RBAC does beside a
  // customer's own Argo CD (argo=existing); the real API server answers in the integration tier.
  const paths: string[] = [];
  const kube: KubeTransport = {
    request: (path) => {
      paths.push(path);
      return Promise.resolve({ status: 403, body: { kind: 'Status', reason: 'Forbidden' } });
    },
    watch: () => Promise.reject(new Error('not used')),
  };
  const outcomes: string[] = [];
  const retries = new ComparisonRetries({
    kube,
    log: pino({ level: 'silent' }),
    delaysMs: [1, 1, 1],
    onRefresh: (o) => outcomes.push(o),
  });
  const failing = (name: string) => ({
    ...app('rpc error: code = Unavailable desc = connection refused'),
    metadata: { namespace: 'argocd', name },
  });
  retries.seen('Application/argocd/a', failing('a'));
  await until('the first refresh to be refused', 5_000, () => outcomes.length > 0);
  t.same(outcomes, ['forbidden'], 'refused, counted as forbidden');
  t.same(paths, ['/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/a'], 'one PATCH of the Application');
  retries.seen('Application/argocd/a', failing('a'));
  retries.seen('Application/argocd/b', failing('b'));
  t.equal(retries.size, 0, 'nothing kept or scheduled after the 403');
  t.equal(paths.length, 1, 'no further PATCH');
});
