import { generateKeyPairSync } from 'node:crypto';
import t from 'tap';
import type { StackInput } from '../../../provisioner/engine/engine.ts';
import {
  backendUrlFor,
  cliRootFor,
  cliVersionProblem,
  envVarsFor,
  planStack,
  recoveryPlan,
  redactConfig,
  redactUrl,
  requiredPlugins,
  stackNameFor,
  workDirFor,
} from '../../../provisioner/engine/pulumi-plan.ts';
import { tenantsStackConfig } from '../../../provisioner/engine/create.ts';
import { PulumiEngine, isStateTableRace, summarizeEvent } from '../../../provisioner/engine/pulumi.ts';
import { EngineError } from '../../../provisioner/engine/engine.ts';
import { catalog } from '../../../runtime/catalog.ts';

const tenantId = '6f1c2b9e-0a4d-4c1e-9a77-0d7e5f1b2c3d';
const input: StackInput = {
  tenantId,
  organization: 'acme',
  plan: 'free',
  runtimeVersion: catalog.versions[0]!.version,
  suspended: false,
  clusterName: 'root-a',
  rootKubeconfig: 'apiVersion: v1\nusers: [{name: u, user: {token: very-secret-root-token}}]\n',
  runtimeToken: 'hrt_runtime_secret_token_value',
};
const publicKey = generateKeyPairSync('ed25519').publicKey.export({ type: 'spki', format: 'pem' }).toString();

t.test('stack name and work dir: one stack and one directory per tenant', async (t) => {
  t.equal(stackNameFor(tenantId), `tenant-${tenantId}`);
  t.equal(workDirFor('/var/lib/prov', tenantId), `/var/lib/prov/engine/${tenantId}`);
  t.throws(() => workDirFor('/d', '../etc'), /cannot name a work directory/);
});

t.test('backend URL: the provisioner database with its own state table by default', async (t) => {
  t.equal(
    backendUrlFor(undefined, 'postgresql://prov:pw@db:5432/prov?sslmode=disable'),
    'postgres://prov:pw@db:5432/prov?sslmode=disable&table=pulumi_state',
  );
  t.equal(backendUrlFor(undefined, 'postgres://prov@db/prov'), 'postgres://prov@db/prov?table=pulumi_state');
  t.equal(
    backendUrlFor('postgres://s@db/state?table=stacks', 'postgres://x@y/z'),
    'postgres://s@db/state?table=stacks',
    'a configured table is kept',
  );
  t.equal(backendUrlFor('file:///var/lib/state', 'postgres://x@y/z'), 'file:///var/lib/state');
  t.equal(backendUrlFor('s3://bucket/prefix', 'postgres://x@y/z'), 's3://bucket/prefix');
  t.equal(
    redactUrl('postgres://prov:hunter2@db/prov?table=pulumi_state'),
    'postgres://prov:redacted@db/prov?table=pulumi_state',
  );
});

t.test('CLI environment: backend, home, passphrase only for the passphrase provider', async (t) => {
  const env = envVarsFor({
    backendUrl: 'postgres://db/p?table=pulumi_state',
    secretsProvider: 'passphrase',
    passphrase: 'pp',
    pulumiHome: '/h',
  });
  t.match(env, {
    PULUMI_BACKEND_URL: 'postgres://db/p?table=pulumi_state',
    PULUMI_HOME: '/h',
    PULUMI_CONFIG_PASSPHRASE: 'pp',
    PULUMI_SKIP_UPDATE_CHECK: 'true',
  });
  const kms = envVarsFor({
    backendUrl: 'file:///s',
    secretsProvider: 'awskms://alias/x',
    passphrase: undefined,
    pulumiHome: '/h',
  });
  t.notOk('PULUMI_CONFIG_PASSPHRASE' in kms);
  t.throws(
    () =>
      envVarsFor({ backendUrl: 'file:///s', secretsProvider: 'passphrase', passphrase: undefined, pulumiHome: '/h' }),
    /PULUMI_CONFIG_PASSPHRASE is not set/,
  );
});

t.test('stack config from the tenant: kubeconfig and runtime token are secret, the rest plain', async (t) => {
  const stackConfig = await tenantsStackConfig('https://cp.example.com', publicKey);
  const plan = planStack(input, {
    dataDir: '/d',
    backendUrl: 'postgres://db/p?table=pulumi_state',
    secretsProvider: 'passphrase',
    passphrase: 'pp',
    pulumiHome: '/h',
    stackConfig,
  });
  t.equal(plan.projectName, 'tenants');
  t.equal(plan.stackName, `tenant-${tenantId}`);
  t.equal(plan.workDir, `/d/engine/${tenantId}`);
  t.equal(plan.secretsProvider, 'passphrase');
  t.same(plan.config['tenant:rootKubeconfig'], { value: input.rootKubeconfig, secret: true });
  t.same(plan.config['tenant:runtimeToken'], { value: input.runtimeToken, secret: true });
  t.same(plan.config['tenant:tenantId'], { value: tenantId, secret: false });
  t.same(plan.config['tenant:runtimeVersion'], { value: input.runtimeVersion, secret: false });
  t.same(plan.config['tenant:suspended'], { value: 'false', secret: false });
  t.same(plan.config['tenant:controlPlaneUrl'], { value: 'https://cp.example.com', secret: false });
  const shown = JSON.stringify(redactConfig(plan.config));
  t.notMatch(shown, /very-secret-root-token|hrt_runtime_secret_token_value/, 'the loggable form hides secrets');
  t.match(redactConfig(plan.config), { 'tenant:rootKubeconfig': '[secret]', 'tenant:plan': 'free' });
});

t.test(
  'recovery: clear the stale lock, release pending Helm records, then refresh with pending creates cleared',
  async (t) => {
    t.same(
      recoveryPlan().map((s) => s.step),
      ['cancel', 'release-helm', 'refresh'],
    );
    t.match(recoveryPlan()[2], { clearPendingCreates: true });
  },
);

t.test('CLI discovery and version check', async (t) => {
  t.equal(
    cliRootFor(undefined, () => false),
    undefined,
    'PATH',
  );
  t.equal(
    cliRootFor('/opt/pulumi', (p) => p === '/opt/pulumi/bin/pulumi'),
    '/opt/pulumi',
  );
  t.equal(
    cliRootFor('/opt/pulumi/bin', (p) => p === '/opt/pulumi/bin/pulumi'),
    '/opt/pulumi',
    'the bin folder itself',
  );
  t.equal(cliVersionProblem('3.190.0'), undefined);
  t.equal(cliVersionProblem('v3.181.0'), undefined);
  t.match(cliVersionProblem('3.120.1'), /3\.120\.1 is too old .*install the Pulumi CLI 3\.181\.0/);
  t.match(cliVersionProblem(null), /did not report its version/);
  t.same(requiredPlugins('4.34.2'), [{ name: 'kubernetes', version: 'v4.34.2', kind: 'resource' }]);
});

t.test('without a CLI the engine reports unavailability and refuses to run', async (t) => {
  const logged: Array<{ msg: string; fields: Record<string, unknown> | undefined }> = [];
  const engine = new PulumiEngine({
    log: (msg, fields) => logged.push({ msg, fields }),
    program: async () => ({}),
    dataDir: '/tmp/none',
    backendUrl: 'file:///tmp/none',
    secretsProvider: 'passphrase',
    passphrase: 'x',
    pulumiHome: '/tmp/none/.pulumi',
    cliDir: '/nonexistent/pulumi',
    kubernetesPluginVersion: '4.34.2',
    stackConfig: () => ({}),
  });
  await engine.start();
  const a = engine.availability();
  t.equal(a.available, false);
  t.match(a, { message: /not found in \/nonexistent\/pulumi\/bin: install the Pulumi CLI/ });
  const err = await engine.up(input).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(err instanceof EngineError && err.code === 'EngineUnavailable', 'up throws EngineUnavailable');
  // The reconciler re-checks every minute: nothing changed, nothing more is logged.
  await engine.start();
  await engine.start();
  t.equal(logged.length, 1, 'one log line for three checks that found the same missing CLI');
  t.equal(logged[0]?.msg, 'pulumi CLI not found');
  t.same(
    Object.keys(logged[0]?.fields ?? {}).sort(),
    ['message', 'where'],
    "the line holds where it looked and the condition's message, not the SDK's multi-line error",
  );
  t.notOk(String(logged[0]?.fields?.message).includes('\n'), 'the message is one line');
});

t.test(
  "engine events add only the change summary to the log: the engine's text has a line for every step",
  async (t) => {
    const meta = (op: 'create' | 'same') => ({
      op,
      urn: 'urn:pulumi:tenant-x::tenants::kubernetes:core/v1:Namespace::tenant-x',
      type: 'kubernetes:core/v1:Namespace',
      provider: '',
    });
    // The events of one created resource, as the engine sends them (the text prints its step once).
    for (const [what, e] of [
      ['its start', { sequence: 1, timestamp: 0, resourcePreEvent: { metadata: meta('create') } }],
      ['its end', { sequence: 2, timestamp: 0, resOutputsEvent: { metadata: meta('create') } }],
      [
        'its failure',
        { sequence: 3, timestamp: 0, resOpFailedEvent: { metadata: meta('create'), status: 1, steps: 1 } },
      ],
      [
        'its diagnostic',
        {
          sequence: 4,
          timestamp: 0,
          diagnosticEvent: { message: 'error: failed to create\n', color: 'never', severity: 'error' },
        },
      ],
    ] as const)
      t.equal(summarizeEvent(e as never), undefined, `no line for ${what}: the engine's text says it`);
    t.match(
      summarizeEvent({
        sequence: 5,
        timestamp: 0,
        summaryEvent: {
          maybeCorrupt: false,
          durationSeconds: 3,
          resourceChanges: { create: 4, same: 2 },
          policyPacks: {},
        },
      }),
      { message: 'summary: create 4, same 2 in 3s' },
      'the change summary is one line',
    );
  },
);

t.test('a lost race to create the state table is recognised; other backend errors are not', async (t) => {
  const race = Object.assign(new Error('code: 255'), {
    stderr:
      'error: could not create stack: pq: duplicate key value violates unique constraint "pg_type_typname_nsp_index" (23505)',
  });
  t.ok(isStateTableRace(race), 'the pg_type unique violation of a concurrent CREATE TABLE is a race');
  t.ok(isStateTableRace(new Error('pq: relation "pulumi_state" already exists')), 'so is "already exists"');
  t.notOk(isStateTableRace(new Error('pq: password authentication failed for user "prov"')), 'a bad password is not');
  t.notOk(isStateTableRace(new Error('stack "tenant-1" already exists')), 'an existing stack is not');
});
