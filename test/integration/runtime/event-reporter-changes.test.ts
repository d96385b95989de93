/**
 * The event reporter with a Source Server (runtime/agents/event-reporter/changes.ts): a reporter
 * replica watching a real kube-apiserver with the real Application CRD (test/e2e/harness/argo.ts;
 * skipped, and named, where the toolchain is missing), asking a Source Server double what changed
 * each Application and posting to a control plane double. Both doubles are loopback HTTP servers
 * standing for what the e2e tier runs for real (runtime/agents/source-server against Argo CD, the
 * provisioner's events route): here they record what they were asked and sent.
 *
 * What a user of the control plane would notice: an Application's report carries its change
 * revision and commit, asked once per revision (not on every health or operation update), the
 * change moves when the revision does, and a Source Server that is down delays nothing: the
 * report goes out without the change and again with it once the Source Server answers.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import t from 'tap';
import { CoreV1Api } from '@kubernetes/client-node';
import { loadEventReporterConfig } from '../../../runtime/agents/event-reporter/config.ts';
import { EventReporter } from '../../../runtime/agents/event-reporter/reporter.ts';
import { agentKubeTransport } from '../../../runtime/agents/common/kube.ts';
import type { ApplicationSummary, EventBatch, UpsertItem } from '../../../runtime/protocol/events.ts';
import { MAX_CHANGE_BYTES, type ApplicationChange } from '../../../runtime/protocol/sources.ts';
import {
  applicationStatus,
  argoApiServerUnavailable,
  sampleApplication,
  startArgoApiServer,
} from '../../e2e/harness/argo.ts';
import { until } from '../../../sandbox/until.ts';

type Obj = Record<string, unknown>;
const NS = 'argocd';
const R1 = '1111111111111111111111111111111111111111';
const R2 = '2222222222222222222222222222222222222222';

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
  const argo = await startArgoApiServer(t, { name: 'reporter-changes', crds: ['applications'] });
  const core = argo.kc.makeApiClient(CoreV1Api);
  for (const name of [NS, 'hosted-runtime']) await core.createNamespace({ body: { metadata: { name } } });

  // The Source Server double: the change of an Application at a revision, or 503 while `down`.
  const asked: { app: string; revision: string | null }[] = [];
  let down = false;
  const changeAt = (revision: string): ApplicationChange => ({
    revision,
    changeRevision: `c${revision.slice(1)}`,
    commit: { revision: `c${revision.slice(1)}`, author: 'Dana <dana@example.test>', message: `change at ${revision}` },
    resources: [{ group: 'apps', kind: 'Deployment', namespace: 'web', name: 'web', action: 'modified', fields: [] }],
    images: [],
    truncated: false,
  });
  const sourceServer = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const m = /^\/v1\/applications\/([^/]+)\/([^/]+)\/change$/.exec(url.pathname);
    if (!m) return void res.writeHead(404).end('{}');
    asked.push({ app: `${m[1]}/${m[2]}`, revision: url.searchParams.get('revision') });
    if (down) return void res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":{}}');
    const revision = url.searchParams.get('revision') ?? R1;
    const change = changeAt(revision);
    // `huge`: a change larger than a report may carry (MAX_CHANGE_BYTES), as a broken Source Server could answer.
    if (m[2] === 'huge') change.commit!.message = 'x'.repeat(4 * MAX_CHANGE_BYTES);
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(change));
  });
  const sourceServerUrl = await listen(sourceServer);

  // The control plane double: every Application item it was sent, in order.
  const sent: UpsertItem[] = [];
  const controlPlane = createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      const batch = JSON.parse(body) as EventBatch;
      for (const item of batch.items) if (item.type === 'upsert' && item.kind === 'Application') sent.push(item);
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ applied: batch.items.length, stale: 0, removedByDigest: 0 }));
    });
  });
  const controlPlaneUrl = await listen(controlPlane);

  const config = loadEventReporterConfig({
    CONTROL_PLANE_URL: controlPlaneUrl,
    RUNTIME_TOKEN: 'rt_test_0123456789abcdefghijklmnop',
    REPLICA_NAME: 'reporter-a',
    LEASE_NAMESPACE: 'hosted-runtime',
    KUBECONFIG: argo.kubeconfigFile,
    PORT: '0',
    HOST: '127.0.0.1',
    RETRY_MAX_SECONDS: '1',
    SOURCE_SERVER_URL: sourceServerUrl,
    LOG_LEVEL: 'silent',
  });
  const reporter = new EventReporter({
    config,
    kube: agentKubeTransport(argo.kubeconfigFile),
    log: pino({ level: 'silent' }),
    absentRetryMs: 60_000,
    // Long enough that a held report is released by the answer, not by the bound.
    changeHoldMs: 60_000,
  });
  await reporter.start();
  t.teardown(() => reporter.close());

  const apps = (name: string) => sent.filter((i) => i.name === name);
  const summary = (i: UpsertItem) => i.summary as ApplicationSummary;
  const write = async (name: string, status: Obj, resourceVersion?: string): Promise<string> => {
    const body = { ...sampleApplication(NS, name), status } as Obj;
    if (resourceVersion === undefined) {
      const created = (await argo.objects.createNamespacedCustomObject({
        group: 'argoproj.io',
        version: 'v1alpha1',
        namespace: NS,
        plural: 'applications',
        body,
      })) as Obj;
      return (created.metadata as Obj).resourceVersion as string;
    }
    (body.metadata as Obj).resourceVersion = resourceVersion;
    const replaced = (await argo.objects.replaceNamespacedCustomObject({
      group: 'argoproj.io',
      version: 'v1alpha1',
      namespace: NS,
      plural: 'applications',
      name,
      body,
    })) as Obj;
    return (replaced.metadata as Obj).resourceVersion as string;
  };

  await t.test("an Application's report carries its change revision and commit, asked once per revision", async (t) => {
    let rv = await write('web', applicationStatus({ revision: R1, phase: 'Running', health: 'Progressing' }));
    const first = await until('the first report of web', 60_000, () => apps('web')[0]);
    t.equal(first.change?.changeRevision, `c${R1.slice(1)}`, 'the first report already carries the change');
    t.equal(summary(first).changeRevision, `c${R1.slice(1)}`, 'the summary names the change revision');
    t.equal(first.change?.commit?.author, 'Dana <dana@example.test>', 'with the commit’s author');
    t.equal(summary(first).operationRevision, R1, 'the summary names the revision the operation is for');
    t.equal(summary(first).operationPhase, 'Running', 'and its phase');
    t.ok(summary(first).operationStartedAt, 'and when it started');
    t.same(
      asked.filter((a) => a.app === `${NS}/web`),
      [{ app: `${NS}/web`, revision: R1 }],
      'the Source Server was asked once, for the synced revision',
    );

    // Health and operation move, the revision does not: the same change, no new question.
    rv = await write('web', applicationStatus({ revision: R1, phase: 'Succeeded', health: 'Healthy' }), rv);
    const done = await until('the report of web with its sync succeeded', 60_000, () =>
      apps('web').find((i) => i.resourceVersion === rv),
    );
    t.equal(summary(done).operationPhase, 'Succeeded', 'the later report has the finished operation');
    t.ok(summary(done).operationFinishedAt, 'with its finish time');
    t.equal(done.change?.changeRevision, `c${R1.slice(1)}`, 'and the same change');
    t.equal(asked.filter((a) => a.app === `${NS}/web`).length, 1, 'without asking the Source Server again');

    // The revision moves: a new question, a new change, and no report of R2 without it.
    rv = await write('web', applicationStatus({ revision: R2, phase: 'Succeeded' }), rv);
    const moved = await until('the report of web at the new revision', 60_000, () =>
      apps('web').find((i) => i.resourceVersion === rv),
    );
    t.equal(moved.change?.changeRevision, `c${R2.slice(1)}`, 'the change moved with the revision');
    t.same(asked.filter((a) => a.app === `${NS}/web`).at(-1), { app: `${NS}/web`, revision: R2 }, 'asked for R2');
    t.notOk(
      apps('web').some((i) => summary(i).revision === R2 && i.change === undefined),
      'no report of the new revision went out without its change',
    );
  });

  await t.test('a Source Server that is down delays nothing: the report goes again once it answers', async (t) => {
    down = true;
    await write('api', applicationStatus({ revision: R1 }));
    const without = await until('the report of api', 60_000, () => apps('api')[0]);
    t.equal(without.change, undefined, 'reported without a change while the Source Server fails');
    t.equal(summary(without).revision, R1, 'with its revision');
    down = false;
    const withChange = await until('the report of api with its change', 60_000, () =>
      apps('api').find((i) => i.change !== undefined),
    );
    t.equal(withChange.change?.changeRevision, `c${R1.slice(1)}`, 'sent again with the change once it answers');
    t.equal(summary(withChange).changeRevision, `c${R1.slice(1)}`, 'the summary names it too');
    const metrics = await reporter.metrics.registry.getSingleMetricAsString('event_reporter_change_lookups_total');
    t.match(metrics, /result="error"} [1-9]/, 'the failed lookups are counted');
    t.match(metrics, /result="ok"} [1-9]/, 'and the answered ones');
  });

  await t.test('an answer larger than a report may carry: the Application is reported without it', async (t) => {
    await write('huge', applicationStatus({ revision: R1 }));
    const reported = await until('the report of huge', 60_000, () => apps('huge')[0]);
    await until('the lookup of huge', 60_000, () => asked.some((a) => a.app === `${NS}/huge`));
    const metrics = await until('the too-large answer counted', 60_000, async () => {
      const text = await reporter.metrics.registry.getSingleMetricAsString('event_reporter_change_lookups_total');
      return /result="too_large"} 1/.test(text) ? text : undefined;
    });
    t.match(metrics, /result="too_large"} 1/, 'counted as too large, once: not retried');
    t.equal(reported.change, undefined, 'reported without the change');
    t.notOk(
      apps('huge').some((i) => i.change !== undefined),
      'and never with it',
    );
    t.equal(summary(reported).revision, R1, 'its state is reported all the same');
  });
}
