/**
 * What an operator reads in an operation's log (GET /v1/operations/:id/log shows these lines as
 * stored): each resource step is one line (the engine's line when the step ends, not its progress
 * line nor an echo of the engine's events with their internal names); the engine's `Outputs:`
 * are shown, secrets masked, nothing of them read as an upstream response; a tenant whose only
 * root cluster is cordoned is told the command that uncordons it. TEST DOUBLE engine (its lines are
 * what the Pulumi CLI prints, captured from a real `pulumi up`); reconciler and database are real.
 */
import t from 'tap';
import { WITHHELD } from '../../../provisioner/reconciler/visible-text.ts';
import { createHarness, scripted } from './harness.ts';
import { until } from '../../../sandbox/until.ts';
import { logLinesOf } from '../../helpers/operations.ts';

const h = await createHarness();
t.teardown(() => h.close());

const lines = async (operationId: string): Promise<string[]> => logLinesOf(h.db.pool, operationId);

/** The Pulumi CLI's text for an up creating two resources (progress lines, end lines, outputs). */
const PULUMI_UP = [
  'Updating (tenant-x):',
  '',
  ' +  pulumi:pulumi:Stack tenants-tenant-x creating (0s) ',
  ' +  kubernetes:core/v1:Namespace tenant-x creating (0s) ',
  ' +  kubernetes:helm.sh/v3:Release vcluster creating (0s) ',
  ' +  kubernetes:core/v1:Namespace tenant-x created (0.21s) ',
  ' +  kubernetes:helm.sh/v3:Release vcluster created (41s) ',
  ' +  pulumi:pulumi:Stack tenants-tenant-x created (42s) ',
  'Outputs:',
  '    argoCdUrl        : "https://api.example.test/v1/tenants/x/argo-cd/"',
  '    componentVersions: {',
  '        argoCd  : "8.0.17"',
  '        vcluster: "0.33.1"',
  '    }',
  '    runtimeToken     : [secret]',
  '    vclusterEndpoint : "https://tenant-x.vcluster.example.test:443"',
  '',
  'Resources:',
  '    + 3 created',
  '',
  'Duration: 43s',
];

t.test('each resource step is one line, with no engine event names; outputs are shown', async (t) => {
  await h.addCluster('root-lines');
  const engine = scripted({ script: () => ({ lines: PULUMI_UP }) });
  const r = await h.reconciler(engine);
  t.teardown(() => r.stop());
  const { operationId } = await h.createTenant();
  await until('the operation ends', 10_000, async () => (await lines(operationId)).some((l) => /^operation /.test(l)));
  const log = await lines(operationId);
  for (const step of ['kubernetes:core/v1:Namespace tenant-x', 'kubernetes:helm.sh/v3:Release vcluster']) {
    t.equal(
      log.filter((l) => l.includes(step)).length,
      1,
      `one line for the step of ${step} (${log.filter((l) => l.includes(step)).join(' | ')})`,
    );
  }
  t.ok(
    log.some((l) => /Release vcluster created \(41s\)/.test(l)),
    "the step's line is the one that says it ended and how long it took",
  );
  t.notOk(
    log.some((l) => /\b(?:resourcePreEvent|resOutputsEvent|resOpFailedEvent|diagnosticEvent|summaryEvent)\b/.test(l)),
    'no line names an internal engine event',
  );
  t.ok(
    log.some((l) => /^summary: \S/.test(l)),
    "the engine's summary is one line, without its event's name",
  );
  t.notOk(
    log.some((l) => l.includes(WITHHELD)),
    `no output of a successful run reads as a withheld upstream response (${log.filter((l) => l.includes(WITHHELD)).join(' | ')})`,
  );
  const outputs = log.slice(log.indexOf('Outputs:'), log.indexOf('Resources:'));
  t.same(
    outputs.map((l) => l.trim()),
    PULUMI_UP.slice(PULUMI_UP.indexOf('Outputs:'), PULUMI_UP.indexOf('Resources:')).map((l) => l.trim()),
    'the outputs are shown as the engine printed them (the runtime token stays [secret])',
  );
});

t.test('the only root cluster is cordoned: the log names the command that uncordons it', async (t) => {
  await h.addCluster('root-cordoned', { cordoned: true, region: 'eu-cordon' });
  const r = await h.reconciler(scripted(), { noCapacityRetryMs: 50 });
  t.teardown(() => r.stop());
  const { operationId } = await h.createTenant({ region: 'eu-cordon' });
  const line = await until('a waiting line', 10_000, async () => {
    const l = (await lines(operationId)).find((x) => x.startsWith('waiting for a root cluster'));
    return l ?? false;
  });
  t.match(
    line,
    /root-cordoned: cordoned.*uncordon root-cordoned \(provisioner clusters uncordon root-cordoned\)/,
    'the line says the cluster is cordoned and the command that uncordons it',
  );
  t.notMatch(line, /raise a capacity/, 'not the advice for a full cluster');
});
