/**
 * The app-proxy's requests to the vcluster API server (runtime/agents/app-proxy/kube.ts) and how
 * their answers become the actions' failures. The transport here is a TEST DOUBLE that records the
 * requests and answers as scripted; the real API servers answer in the e2e tier (argocd.test.ts,
 * promotions.test.ts, hosted-runtime.test.ts).
 */
import t from 'tap';
import { argoObjects, FIELD_MANAGER, KubeError } from '../../../runtime/agents/app-proxy/kube.ts';
import type { KubeRequestOptions, KubeResponse, KubeTransport } from '../../../runtime/kube/transport.ts';

interface Sent {
  path: string;
  opts: KubeRequestOptions;
}

/** A KubeTransport double: every request is recorded and answered by `answer`. */
function transport(answer: (path: string, opts: KubeRequestOptions) => Promise<KubeResponse>): {
  kube: KubeTransport;
  sent: Sent[];
} {
  const sent: Sent[] = [];
  return {
    sent,
    kube: {
      request: (path, opts = {}) => {
        sent.push({ path, opts });
        return answer(path, opts);
      },
      watch: () => Promise.reject(new Error('the app-proxy does not watch')),
    },
  };
}

const app = { apiVersion: 'argoproj.io/v1alpha1', kind: 'Application', metadata: { name: 'web', namespace: 'argocd' } };

t.test('requests: the object, its status subresource and the collection, with the field manager', async (t) => {
  const { kube, sent } = transport(() => Promise.resolve({ status: 200, body: app }));
  const objects = argoObjects(kube);
  t.same(await objects.get('applications', 'argocd', 'web'), app, 'the object is answered as the API server sent it');
  await objects.mergePatch('applications', 'argocd', 'web', { operation: { sync: {} } });
  await objects.mergePatch('promotions', 'team-a', 'p1', { status: { phase: 'Aborted' } }, 'status');
  await objects.create('promotions', 'team-a', { metadata: { name: 'web-1' } });
  t.same(
    sent.map((s) => [s.opts.method, s.path]),
    [
      ['GET', '/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/web'],
      ['PATCH', '/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/web'],
      ['PATCH', '/apis/promotions.hosted-runtimes.io/v1alpha1/namespaces/team-a/promotions/p1/status'],
      ['POST', '/apis/promotions.hosted-runtimes.io/v1alpha1/namespaces/team-a/promotions'],
    ],
    'each action goes to its resource (Argo objects in argoproj.io, promotions in their own group)',
  );
  t.equal(sent[1]!.opts.contentType, 'application/merge-patch+json', 'a patch is a JSON merge patch');
  t.same(sent[1]!.opts.body, { operation: { sync: {} } }, 'with the body the action made');
  for (const s of sent.slice(1))
    t.same(s.opts.query, { fieldManager: FIELD_MANAGER }, `${s.opts.method} names the app-proxy as field manager`);
  t.ok(
    sent.every((s) => s.opts.signal instanceof AbortSignal),
    'every request is bounded in time',
  );
});

t.test('answers become the failures the actions answer with', async (t) => {
  const cases: [number, unknown, string, RegExp][] = [
    [
      404,
      { kind: 'Status', message: 'applications.argoproj.io "web" not found' },
      'not-found',
      /get applications argocd\/web: not found/,
    ],
    [409, { message: 'the object has been modified' }, 'conflict', /the object has been modified/],
    [422, { message: 'spec.source: Required value' }, 'invalid', /spec\.source: Required value/],
    [403, { message: 'cannot get resource "applications"' }, 'forbidden', /cannot get resource/],
    [401, undefined, 'forbidden', /HTTP 401/],
    [500, { message: 'etcdserver: request timed out' }, 'unavailable', /HTTP 500: etcdserver: request timed out/],
  ];
  for (const [status, body, kind, message] of cases) {
    const { kube } = transport(() => Promise.resolve({ status, body }));
    const err = await argoObjects(kube)
      .get('applications', 'argocd', 'web')
      .catch((e: unknown) => e);
    t.ok(err instanceof KubeError, `${status}: a KubeError`);
    t.equal((err as KubeError).failure.kind, kind, `${status} → ${kind}`);
    t.match((err as KubeError).message, message, `${status}: the message says what was asked and why`);
  }
});

t.test('no answer: unavailable, with the reason', async (t) => {
  const refused = transport(() =>
    Promise.reject(Object.assign(new Error('connect ECONNREFUSED 10.0.0.1:443'), { code: 'ECONNREFUSED' })),
  );
  const err = (await argoObjects(refused.kube)
    .get('applications', 'argocd', 'web')
    .catch((e: unknown) => e)) as KubeError;
  t.equal(err.failure.kind, 'unavailable', 'a refused connection is unavailable (the caller answers 503)');
  t.match(err.message, /ECONNREFUSED/, 'naming the refusal');

  // The double waits for the request's own signal, as a real transport does for a silent server
  // (whose open socket keeps the process running; AbortSignal.timeout's timer alone does not).
  const open = setInterval(() => undefined, 1000);
  t.teardown(() => clearInterval(open));
  const silent = transport(
    (_path, opts) =>
      new Promise((_resolve, reject) =>
        opts.signal!.addEventListener('abort', () => reject(opts.signal!.reason as Error)),
      ),
  );
  const slow = (await argoObjects(silent.kube, { timeoutMs: 50 })
    .get('applications', 'argocd', 'web')
    .catch((e: unknown) => e)) as KubeError;
  t.equal(slow.failure.kind, 'unavailable', 'a server that does not answer in time is unavailable');
  t.match(slow.failure, { message: 'no answer within 50 ms' }, 'with the bound it waited');

  const notJson = transport(() => Promise.resolve({ status: 200, body: undefined }));
  const odd = (await argoObjects(notJson.kube)
    .get('applications', 'argocd', 'web')
    .catch((e: unknown) => e)) as KubeError;
  t.equal(odd.failure.kind, 'unavailable', 'a 200 without a JSON object is not taken for the object');
});
