/**
 * The real Pulumi engine (the toolchain's CLI through the Automation API, as the provisioner
 * drives it) with the provisioner's default state backend — the DIY Postgres backend in the
 * provisioner's database — against a real kube-apiserver. The stack, work dir, backend URL and
 * environment come from the engine's own plan (provisioner/engine/pulumi-plan.ts). Resources are
 * ConfigMaps managed by a small dynamic provider (fixtures/configmap-provider.cjs), because the
 * Kubernetes provider plugin cannot be built here (docs/e2e.md).
 *
 * Covered: up creates in the API server and stores the stack in Postgres; drift found by
 * refresh and corrected by up; a CLI killed in the middle of an update leaves a stale lock and a
 * pending create, which the engine's recovery plan (cancel, refresh with pending creates
 * cleared) removes so that the next up succeeds with no resource twice; destroy with remove
 * takes the resources and the stack out of the backend. And the provisioner's engine itself
 * (PulumiEngine, through a CLI wrapper that notes each run): it reads outputs and the update's
 * summary without decrypting the stack's secrets, and sets the stack's config only when it changed.
 */
import t from 'tap';
import { randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, readlink, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { spawnSync } from 'node:child_process';
import * as pulumi from '@pulumi/pulumi';
import { LocalWorkspace, PulumiCommand, type Stack } from '@pulumi/pulumi/automation/index.js';
import { CoreV1Api } from '@kubernetes/client-node';
import { PulumiEngine } from '../../provisioner/engine/pulumi.ts';
import { backendUrlFor, planStack, recoveryPlan } from '../../provisioner/engine/pulumi-plan.ts';
import { interruptedResources, repairHelmReleases } from '../../provisioner/engine/helm-recovery.ts';
import { createTestDatabase } from '../helpers/postgres.ts';
import { stateKeys } from '../helpers/pulumi-state.ts';
import { startEtcd, startKubeControlPlane, toolchainFrom } from '../../sandbox/control-plane.ts';
import { statusOf } from './harness/kube.ts';
import { until } from '../../sandbox/processes.ts';

t.setTimeout(15 * 60_000);

const bin = process.env.HRT_TOOLCHAIN_BIN;
if (!bin) throw new Error('HRT_TOOLCHAIN_BIN is not set: run the tier through scripts/test.sh e2e');
const require = createRequire(import.meta.url);
const { provider } = require('./fixtures/configmap-provider.cjs') as { provider: pulumi.dynamic.ResourceProvider };
/** The kubernetes provider version the engine installs at start (any version: this file never starts it). */
const KUBERNETES_PLUGIN = '4.25.0';

const dir = await mkdtemp(join(tmpdir(), 'hrt-e2e-engine-'));
const toolchain = toolchainFrom(bin);
const etcd = await startEtcd(toolchain, join(dir, 'etcd'));
const root = await startKubeControlPlane(toolchain, {
  name: 'engine',
  dir: join(dir, 'root'),
  etcd,
  etcdPrefix: '/engine',
  nodes: 1,
});
const db = await createTestDatabase();
/** Ends every process working in this file's directory: what a killed update leaves behind (its provider plugins). */
async function killLeftovers(): Promise<void> {
  for (const pid of await readdir('/proc').catch(() => [] as string[])) {
    if (!/^\d+$/.test(pid)) continue;
    const cwd = await readlink(`/proc/${pid}/cwd`).catch(() => '');
    if (cwd.startsWith(dir)) {
      try {
        process.kill(Number(pid), 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }
}

t.teardown(async () => {
  // The update killed on purpose leaves its provider plugin processes behind: end those too.
  await killLeftovers();
  await root.stop();
  await etcd.stop();
  await db.drop();
  await rm(dir, { recursive: true, force: true });
});
t.comment(`control plane ready in ${root.startSeconds.toFixed(1)} s`);

// The dynamic provider plugin ships with the npm SDK; the CLI finds it (and node) on PATH.
const sdkDir = dirname(require.resolve('@pulumi/pulumi/package.json'));
process.env.PATH = [bin, sdkDir, dirname(process.execPath), process.env.PATH].join(':');
// The dynamic provider host resolves the SDK from the stack's work dir: point it at ours.
const nodePath = dirname(dirname(sdkDir));

const dbUrl = new URL(db.url);
dbUrl.searchParams.set('sslmode', 'disable'); // the test server has no TLS
const tenantId = randomUUID();
const plan = planStack(
  {
    tenantId,
    organization: 'e2e',
    plan: 'free',
    runtimeVersion: '1.0.0',
    suspended: false,
    clusterName: 'engine',
    rootKubeconfig: '',
    runtimeToken: '',
  },
  {
    dataDir: join(dir, 'data'),
    backendUrl: backendUrlFor(undefined, dbUrl.toString()),
    secretsProvider: 'passphrase',
    passphrase: 'e2e-passphrase',
    pulumiHome: join(dir, 'pulumi-home'),
    stackConfig: () => ({}),
  },
);
await mkdir(plan.workDir, { recursive: true });
const api = { server: root.server, ca: root.ca.certPem, cert: root.admin.certPem, key: root.admin.keyPem };
const core = root.kc.makeApiClient(CoreV1Api);
const names = ['alpha', 'beta'].map((n) => `cm-${n}-${tenantId.slice(0, 8)}`);
let createDelayMs = 0;
let data: Record<string, string> = { version: '1' };

class ConfigMap extends pulumi.dynamic.Resource {
  constructor(name: string, args: Record<string, pulumi.Input<unknown>>) {
    super(provider, name, { ...args, uid: undefined }, { additionalSecretOutputs: ['key', 'cert'] });
  }
}

const program = async () => {
  const made = names.map(
    (name, i) =>
      new ConfigMap(name, {
        ...api,
        name,
        namespace: 'default',
        data,
        createDelayMs: i === 1 ? createDelayMs : 0,
      }),
  );
  return { configMaps: made.map((m) => m.id) };
};

const pulumiCommand = await PulumiCommand.get({ root: dirname(bin), skipVersionCheck: true });
async function stack(): Promise<Stack> {
  return LocalWorkspace.createOrSelectStack(
    { stackName: plan.stackName, projectName: plan.projectName, program },
    {
      workDir: plan.workDir,
      pulumiHome: plan.envVars.PULUMI_HOME!,
      pulumiCommand,
      envVars: { ...plan.envVars, NODE_PATH: nodePath },
      secretsProvider: plan.secretsProvider,
      projectSettings: {
        name: plan.projectName,
        runtime: 'nodejs',
        backend: { url: plan.envVars.PULUMI_BACKEND_URL! },
      },
    },
  );
}
/** The ConfigMap, or undefined when the API server says 404; any other error fails the test. */
async function configMap(name: string) {
  return core.readNamespacedConfigMap({ name, namespace: 'default' }).then(
    (c) => c,
    (err: unknown) => {
      if (statusOf(err) === 404) return undefined;
      throw err;
    },
  );
}
async function stackKeys(): Promise<string[]> {
  // The stack file itself (history and backups are kept by the backend on purpose).
  return stateKeys(db.pool, { under: 'stacks', containing: plan.stackName });
}

t.test('up creates the resources in the API server and keeps the stack in the provisioner database', async (t) => {
  const s = await stack();
  const res = await s.up();
  t.equal(res.summary.result, 'succeeded');
  t.same(res.summary.resourceChanges, { create: 3 }, 'the stack and its two ConfigMaps');
  for (const name of names) t.same((await configMap(name))?.data, { version: '1' }, `${name} exists with its data`);
  t.ok(
    (await stackKeys()).some((k) => k.endsWith('.json')),
    'the stack is stored in the pulumi_state table',
  );
  const again = await s.up();
  t.same(again.summary.resourceChanges, { same: 3 }, 'an unchanged up changes nothing');
});

t.test('drift: a resource deleted by hand is found by refresh and restored by up', async (t) => {
  const s = await stack();
  await core.deleteNamespacedConfigMap({ name: names[0]!, namespace: 'default' });
  const refresh = await s.refresh();
  t.equal(refresh.summary.resourceChanges?.delete, 1, 'refresh records the deletion');
  const up = await s.up();
  t.equal(up.summary.resourceChanges?.create, 1, 'up creates it again');
  t.ok(await configMap(names[0]!), 'restored');
});

t.test(
  'a CLI killed mid-update leaves a stale lock; the recovery plan clears it and the next up converges',
  async (t) => {
    const s = await stack();
    data = { version: '2' };
    createDelayMs = 0;
    await core.deleteNamespacedConfigMap({ name: names[1]!, namespace: 'default' });
    await s.refresh();
    // The second ConfigMap's create hangs until the crash: no bounded delay, which a busy machine
    // can outlast (the create then lands before or after the kill, and the next up finds it).
    createDelayMs = 3_600_000;
    const running = s.up().then(
      () => 'finished',
      (err: unknown) => err,
    );
    await until(
      'the update to start creating',
      60_000,
      async () => (await configMap(names[0]!))?.data?.version === '2',
    );
    // The first ConfigMap's update lands in the API server before the engine checkpoints it: kill
    // only once the stack file records that update done and the second ConfigMap's create begun.
    await until('the checkpoint to record the update and the pending create', 120_000, async () => {
      const ops = interruptedResources(await s.exportStack());
      return ops.length === 1 && ops[0]!.operation === 'creating';
    });
    const killed = spawnSync('pkill', ['-KILL', '-f', `pulumi up .*${plan.stackName}`]);
    t.equal(killed.status, 0, 'the pulumi CLI process was killed');
    // The whole engine dies: its provider plugin too, with the create it was holding.
    await killLeftovers();
    t.not(await running, 'finished', 'the interrupted update did not finish');

    createDelayMs = 0;
    const blocked = await s.up().then(
      () => undefined,
      (err: unknown) => err,
    );
    t.match(
      String(blocked),
      /locked|ConcurrentUpdate|currently being updated/i,
      'the stack is locked by the dead update',
    );

    const steps = recoveryPlan();
    t.same(
      steps.map((x) => x.step),
      ['cancel', 'release-helm', 'refresh'],
    );
    await s.cancel();
    const pending = interruptedResources(await s.exportStack());
    t.same(
      pending.map((p) => [p.operation, p.type]),
      [['creating', 'pulumi-nodejs:dynamic:Resource']],
      'the export names the interrupted create',
    );
    t.same(await repairHelmReleases(pending), [], 'no Helm release to repair');
    await s.refresh({ clearPendingCreates: true });
    const up = await s.up();
    t.equal(up.summary.result, 'succeeded', 'the next up succeeds');
    const state = (await s.exportStack()).deployment as {
      pending_operations?: unknown[];
      resources?: Array<{ type: string }>;
    };
    t.equal((state.pending_operations ?? []).length, 0, 'no pending operations left');
    t.equal(
      (state.resources ?? []).filter((r) => r.type === 'pulumi-nodejs:dynamic:Resource').length,
      2,
      'each ConfigMap once in the state',
    );
    const list = await core.listNamespacedConfigMap({ namespace: 'default' });
    for (const name of names) {
      t.equal(list.items.filter((c) => c.metadata?.name === name).length, 1, `${name} exists once`);
      t.same((await configMap(name))?.data, { version: '2' });
    }
  },
);

t.test('destroy with remove takes the resources and the stack out of the backend', async (t) => {
  const s = await stack();
  const res = await s.destroy({ remove: true });
  t.equal(res.summary.result, 'succeeded');
  for (const name of names) t.equal(await configMap(name), undefined, `${name} deleted`);
  t.same(
    (await stackKeys()).filter((k) => k.endsWith('.json')),
    [],
    'the stack file is gone from the state table',
  );
  const listed = await LocalWorkspace.create({
    workDir: plan.workDir,
    pulumiHome: plan.envVars.PULUMI_HOME!,
    pulumiCommand,
    envVars: plan.envVars,
    projectSettings: { name: plan.projectName, runtime: 'nodejs', backend: { url: plan.envVars.PULUMI_BACKEND_URL! } },
  }).then((ws) => ws.listStacks());
  t.notOk(
    listed.some((x) => x.name === plan.stackName),
    'the stack is gone from the backend',
  );
});

t.test(
  "the provisioner's engine: outputs without decrypting, the config set only when it changed, each checked against the CLI runs it made",
  async (t) => {
    // The engine runs `<cliDir>/bin/pulumi`: here a script that notes each run's first two words,
    // then runs the toolchain's CLI with every argument.
    const cliDir = join(dir, 'engine-cli');
    const runsLog = join(dir, 'engine-cli-runs.log');
    await mkdir(join(cliDir, 'bin'), { recursive: true });
    await writeFile(
      join(cliDir, 'bin', 'pulumi'),
      `#!/bin/sh\nprintf '%s %s%s\\n' "$1" "$2" "$(case " $* " in *" --show-secrets "*) echo ' --show-secrets';; esac)" >> ${runsLog}\nexec ${join(bin, 'pulumi')} "$@"\n`,
      { mode: 0o755 },
    );
    const runs = async (): Promise<string[]> => {
      const text = await readFile(runsLog, 'utf8').catch(() => '');
      await writeFile(runsLog, '');
      return text.split('\n').filter(Boolean);
    };
    // The engine installs the kubernetes provider at start; this program creates no Kubernetes
    // resource, so a placeholder in the plugin cache stands for it and is never started.
    const pulumiHome = join(dir, 'engine-pulumi-home');
    const placeholder = join(pulumiHome, 'plugins', `resource-kubernetes-v${KUBERNETES_PLUGIN}`);
    await mkdir(placeholder, { recursive: true });
    await writeFile(join(placeholder, 'pulumi-resource-kubernetes'), '#!/bin/sh\nexit 1\n', { mode: 0o755 });

    const engineTenant = randomUUID();
    const engine = new PulumiEngine({
      dataDir: join(dir, 'engine-data'),
      backendUrl: backendUrlFor(undefined, dbUrl.toString()),
      secretsProvider: 'passphrase',
      passphrase: 'e2e-passphrase',
      pulumiHome,
      cliDir,
      kubernetesPluginVersion: KUBERNETES_PLUGIN,
      stackConfig: (input) => ({
        'tenants:organization': { value: input.organization, secret: false },
        'tenants:runtimeToken': { value: input.runtimeToken, secret: true },
      }),
      program: async () => {
        const config = new pulumi.Config('tenants');
        return { organization: config.require('organization'), token: config.requireSecret('runtimeToken') };
      },
    });
    await engine.start();
    t.ok(engine.availability().available, `the engine is ready: ${JSON.stringify(engine.availability())}`);
    await runs();
    const input = (organization: string, runtimeToken: string) => ({
      tenantId: engineTenant,
      organization,
      plan: 'free',
      runtimeVersion: '1.0.0',
      suspended: false,
      clusterName: 'engine',
      rootKubeconfig: '',
      runtimeToken,
    });

    const first = await engine.up(input('acme', 'token-1'));
    t.same(first.outputs, { organization: 'acme' }, 'the plain output, and the secret one left out');
    const firstRuns = await runs();
    t.equal(firstRuns.filter((r) => r === 'config set-all').length, 1, 'the new stack gets its config');
    t.same(
      firstRuns.filter((r) => r.endsWith('--show-secrets')),
      [],
      `no run decrypts the stack's secrets to read outputs or the summary: ${firstRuns.join('; ')}`,
    );
    t.equal(firstRuns.filter((r) => r === 'stack output').length, 1, 'the outputs are read once');

    const same = await engine.up(input('acme', 'token-1'));
    t.same(same.outputs, { organization: 'acme' }, 'an unchanged up reads the same plain output');
    t.same(same.changes, { same: 1 }, 'nothing changed');
    const sameRuns = await runs();
    t.same(
      sameRuns.filter((r) => r === 'config set-all'),
      [],
      `an unchanged config is not set again: ${sameRuns.join('; ')}`,
    );

    const changed = await engine.up(input('acme-renamed', 'token-2'));
    t.same(changed.outputs, { organization: 'acme-renamed' }, 'a changed config is set and the program sees it');
    t.equal((await runs()).filter((r) => r === 'config set-all').length, 1, 'the changed config is set once');

    // The stack settings file changed behind the engine's back (here: removed): set again.
    await rm(join(dir, 'engine-data', 'engine', engineTenant, `Pulumi.tenant-${engineTenant}.yaml`));
    const restored = await engine.up(input('acme-renamed', 'token-2'));
    t.same(restored.outputs, { organization: 'acme-renamed' }, 'the up after the settings file went reads the config');
    t.equal(
      (await runs()).filter((r) => r === 'config set-all').length,
      1,
      'a changed settings file: the config is set again',
    );

    const refreshed = await engine.refresh(input('acme-renamed', 'token-2'));
    t.same(refreshed.outputs, { organization: 'acme-renamed' }, 'refresh reads the outputs too');
    t.same(
      (await runs()).filter((r) => r.endsWith('--show-secrets')),
      [],
      'without decrypting',
    );
    await engine.destroy(input('acme-renamed', 'token-2'));
  },
);
