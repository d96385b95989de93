/**
 * The event reporter asks Argo CD to compare again an Application whose comparison failed on an
 * unreachable repo-server (runtime/agents/event-reporter/comparison-retry.ts): a reporter replica
 * watching a real kube-apiserver with the real Application CRD (test/e2e/harness/argo.ts; skipped,
 * and named, where the toolchain is missing) and posting to a control plane double (a loopback
 * HTTP server standing for the provisioner's events route). The test writes the statuses Argo
 * CD's application controller writes (the e2e tier runs the real controller): a ComparisonError,
 * the controller taking the refresh annotation away once it compared.
 *
 * What a customer would notice: after their runtime starts again, an Application the controller
 * compared before its repo-server answered is compared again within seconds instead of staying
 * Unknown until Argo CD's next reconciliation (180 s); an Application whose own source is wrong is
 * left to Argo CD.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import t from 'tap';
import { CoreV1Api } from '@kubernetes/client-node';
import { loadEventReporterConfig } from '../../../runtime/agents/event-reporter/config.ts';
import { EventReporter } from '../../../runtime/agents/event-reporter/reporter.ts';
import { REFRESH_ANNOTATION } from '../../../runtime/agents/event-reporter/comparison-retry.ts';
import { agentKubeTransport } from '../../../runtime/agents/common/kube.ts';
import type { ApplicationSummary, EventBatch } from '../../../runtime/protocol/events.ts';
import {
  applicationStatus,
  argoApiServerUnavailable,
  sampleApplication,
  startArgoApiServer,
} from '../../e2e/harness/argo.ts';
import { until } from '../../../sandbox/until.ts';

type Obj = Record<string, unknown>;
const NS = 'argocd';
/** What Argo CD writes when its application controller compared before the repo-server listened. */
const REFUSED =
  'Failed to load target state: failed to generate manifest for source 1 of 1: rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial tcp 10.96.0.12:8081: connect: connection refused"';
const NO_PATH =
  'Failed to load target state: failed to generate manifest for source 1 of 1: rpc error: code = Unknown desc = apps/nope: app path does not exist';
/** The retries' delays here (the agent's are 10, 30 and 90 s). */
const DELAYS = [300, 600, 900];

const unavailable = argoApiServerUnavailable();
if (unavailable) {
  if (process.env.CI === 'true') t.fail(`the Argo API server cannot start: ${unavailable}`);
  else t.plan(0, unavailable);
} else {
  await run();
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function run(): Promise<void> {
  const argo = await startArgoApiServer(t, { name: 'reporter-comparisons', crds: ['applications'] });
  const core = argo.kc.makeApiClient(CoreV1Api);
  for (const name of [NS, 'hosted-runtime']) await core.createNamespace({ body: { metadata: { name } } });

  // The control plane double: the last reported sync status of each Application (what the
  // reporter has seen, so that the test writes the next status only after it).
  const reported = new Map<string, string | undefined>();
  const controlPlane = createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      const batch = JSON.parse(body) as EventBatch;
      for (const i of batch.items)
        if (i.type === 'upsert' && i.kind === 'Application')
          reported.set(i.name, (i.summary as ApplicationSummary).syncStatus);
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ applied: batch.items.length, stale: 0, removedByDigest: 0 }));
    });
  });
  const config = loadEventReporterConfig({
    CONTROL_PLANE_URL: await listen(controlPlane),
    RUNTIME_TOKEN: 'rt_test_0123456789abcdefghijklmnop',
    REPLICA_NAME: 'reporter-a',
    LEASE_NAMESPACE: 'hosted-runtime',
    KUBECONFIG: argo.kubeconfigFile,
    PORT: '0',
    HOST: '127.0.0.1',
    RETRY_MAX_SECONDS: '1',
    LOG_LEVEL: 'silent',
  });
  const reporter = new EventReporter({
    config,
    kube: agentKubeTransport(argo.kubeconfigFile),
    log: pino({ level: 'silent' }),
    absentRetryMs: 60_000,
    comparisonRetryDelaysMs: DELAYS,
  });
  const port = await reporter.start();
  t.teardown(() => reporter.close());

  const api = { group: 'argoproj.io', version: 'v1alpha1', namespace: NS, plural: 'applications' } as const;
  const read = async (name: string) => (await argo.objects.getNamespacedCustomObject({ ...api, name })) as Obj;
  const annotation = async (name: string) =>
    ((((await read(name)).metadata as Obj).annotations as Record<string, string> | undefined) ?? {})[
      REFRESH_ANNOTATION
    ];
  /** The status the controller writes: `error` as its ComparisonError; the refresh annotation taken away (it compared). */
  const compared = async (name: string, error: string | undefined): Promise<void> => {
    const app = await read(name);
    const meta = app.metadata as Obj & { annotations?: Record<string, string> };
    const annotations = { ...meta.annotations };
    delete annotations[REFRESH_ANNOTATION];
    const status = error
      ? {
          ...applicationStatus({ sync: 'Unknown', health: 'Healthy' }),
          conditions: [{ type: 'ComparisonError', message: error, lastTransitionTime: new Date().toISOString() }],
        }
      : applicationStatus({ sync: 'Synced', health: 'Healthy' });
    await argo.objects.replaceNamespacedCustomObject({
      ...api,
      name,
      body: { ...app, metadata: { ...meta, annotations }, status },
    });
  };
  const create = async (name: string, error: string | undefined): Promise<void> => {
    await argo.objects.createNamespacedCustomObject({ ...api, body: sampleApplication(NS, name) });
    await compared(name, error);
  };
  const refreshes = async (): Promise<number> => {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    const m = /^event_reporter_comparison_refreshes_total\{outcome="asked"\} (\d+)$/m.exec(text);
    return Number(m?.[1] ?? 0);
  };
  /** Waits for the first refresh of a new Application in the error: the retries' clock has moved past `DELAYS[0]`. */
  const witness = async (name: string): Promise<void> => {
    await create(name, REFUSED);
    await until(`a refresh asked for ${name}`, 30_000, async () => (await annotation(name)) ?? false);
  };

  await t.test(
    'an Application compared before its repo-server answered is refreshed, up to three times; one with a wrong path is not',
    async (t) => {
      await create('bad-path', NO_PATH);
      await create('fine', undefined);
      await create('web', REFUSED);
      const first = await until('a refresh asked for web', 30_000, async () => (await annotation('web')) ?? false);
      t.equal(first, 'normal', 'web: a normal refresh (the annotation `argocd app get --refresh` sets)');

      // The controller compared while the repo-server still did not answer: asked again, twice more.
      for (const n of [2, 3]) {
        await compared('web', REFUSED);
        t.equal(
          await until(`refresh ${n} of web`, 30_000, async () => (await annotation('web')) ?? false),
          'normal',
          `still failing: refresh ${n} asked`,
        );
      }
      // Both were written before web's first refresh, 1.8 s of retries ago.
      t.equal(await annotation('bad-path'), undefined, 'bad-path (the Application’s own error): left to Argo CD');
      t.equal(await annotation('fine'), undefined, 'fine (compared): nothing asked');
      await compared('web', REFUSED);
      await witness('witness-1');
      t.equal(
        await annotation('web'),
        undefined,
        'after three refreshes it is left to Argo CD’s own reconciliation (no endless refreshes)',
      );
      t.equal(await refreshes(), 4, '/metrics counts the refreshes asked: three of web, one of the witness');

      // Compared at last; a later failure of the repo-server is a new episode.
      await compared('web', undefined);
      await until('web reported Synced', 30_000, () => reported.get('web') === 'Synced');
      await compared('web', REFUSED);
      t.equal(
        await until('a refresh after a new failure', 30_000, async () => (await annotation('web')) ?? false),
        'normal',
        'a new failure after a good comparison: refreshed again',
      );
      t.equal(await refreshes(), 5, 'five refreshes in all');
    },
  );

  await t.test('a deleted Application is forgotten: no refresh counted, none failed', async (t) => {
    const before = await refreshes();
    await create('gone', REFUSED);
    await argo.objects.deleteNamespacedCustomObject({ ...api, name: 'gone' });
    await witness('witness-2');
    t.equal(await refreshes(), before + 1, 'no refresh asked for the deleted Application (one for the witness)');
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    t.notMatch(text, /comparison_refreshes_total\{outcome="failed"\} [1-9]/, 'and no refresh failed');
  });
}
