/**
 * A hybrid runtime upgraded by its in-cluster upgrader, every part real: the control plane is the
 * `provisioner serve` process (real Postgres); the customer's cluster is a second kube-apiserver
 * with the controller-manager, scheduler and KWOK, so that Deployments really roll out (KWOK runs
 * the pods). The install bundle (upgrades: agent, beside the customer's Argo CD) is applied with
 * kubectl; the bundle's bootstrap program runs with its Job's ServiceAccount token and writes the
 * runtime key into the cluster; the upgrader runs as a process with its own ServiceAccount's
 * token and that key, as its pod would.
 *
 *  - An upgrade to 1.5.0 the customer's cluster refuses (a ValidatingAdmissionPolicy of the
 *    customer's admits no pod of a 1.5.0 image): the upgrader applies it, the new ReplicaSets
 *    cannot create pods, the Deployment reports ReplicaFailure, and the upgrader puts 1.4.1 back
 *    and reports it; the control plane shows the runtime at 1.4.1 again, `Upgraded` RolledBack.
 *  - With the policy gone, the same upgrade is pulled, applied and rolled out: every agent runs
 *    1.5.0, the versions ConfigMap says so, `Upgraded` Succeeded.
 *  - What the upgrader's account may do in the cluster is exactly what the bundle lists.
 *  - Removal: the key is refused and the remove command deletes what the install created.
 */
import t, { type Test } from 'tap';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startCustomerCluster } from '../helpers/kubectl.ts';
import { startProcess, until } from '../../sandbox/processes.ts';
import {
  kubeconfigAs as kubeconfigAsAccount,
  removeCommandArgs,
  runBootstrapProgram,
  runtimeNamespace,
  startHybridControlPlane,
  workloadEnv,
} from './harness/hybrid.ts';
import type { Runtime, RuntimeRegistered, RuntimeRemoved, RuntimeUpgraded } from '../../provisioner/api/types.ts';

t.setTimeout(10 * 60_000);

const bin = process.env.HRT_TOOLCHAIN_BIN;
if (!bin) throw new Error('HRT_TOOLCHAIN_BIN is not set: run the tier through scripts/test.sh e2e');
const upgraderMain = fileURLToPath(new URL('../../runtime/agents/upgrader/main.ts', import.meta.url));

const dir = await mkdtemp(join(tmpdir(), 'hrt-e2e-hybrid-upgrader-'));
if (process.env.E2E_KEEP !== '1') t.teardown(() => rm(dir, { recursive: true, force: true }));

// The control plane: `provisioner serve` (harness/hybrid.ts).
const { call, signup, publicUrl } = await startHybridControlPlane(t, bin, dir);
const { plane, kubectl } = await startCustomerCluster(t, bin, join(dir, 'customer'), { controllers: true });
/** The runtime's own namespace in the customer's cluster (per runtime). */
const NS = runtimeNamespace('plant-u');
const kubeconfigAs = (account: string) => kubeconfigAsAccount(kubectl, plane.kubeconfig, dir, account, NS);

type Deployment = {
  metadata: { name: string; generation: number; labels?: Record<string, string> };
  spec: {
    replicas: number;
    template: { spec: { containers: Array<{ image: string; env: Array<{ name: string; value?: string }> }> } };
  };
  status?: { observedGeneration?: number; updatedReplicas?: number; availableReplicas?: number; replicas?: number };
};
async function deployments(): Promise<Deployment[]> {
  const r = await kubectl(['get', 'deployments', '-n', NS, '-o', 'json']);
  return (JSON.parse(r.stdout) as { items: Deployment[] }).items;
}
const tag = (d: Deployment) => d.spec.template.spec.containers[0]!.image.split(':').at(-1);
const rolledOut = (d: Deployment) =>
  (d.status?.observedGeneration ?? 0) >= d.metadata.generation &&
  d.status?.updatedReplicas === d.spec.replicas &&
  d.status?.availableReplicas === d.spec.replicas &&
  d.status?.replicas === d.spec.replicas;
/** Every agent's Deployment (the upgrader's own left out: the test runs the upgrader as a process) at `version`, rolled out. */
async function agentsAt(version: string): Promise<Deployment[] | undefined> {
  const list = (await deployments()).filter((d) => d.metadata.name !== 'runtime-upgrader');
  return list.length > 0 && list.every((d) => tag(d) === version && rolledOut(d)) ? list : undefined;
}

const tenant = await signup('upgrader');
const base = `/v1/tenants/${tenant.tenantId}/runtimes`;
const runtime = async () => (await call<Runtime>('GET', `${base}/plant-u`, tenant.apiKey)).body;
let registered: RuntimeRegistered;
let runtimeKey = '';

t.test('installed at 1.4.1 with kubectl; the bootstrap program writes the key; the agents roll out', async (t) => {
  const reg = await call<RuntimeRegistered>('POST', base, tenant.apiKey, {
    name: 'plant-u',
    mode: 'hybrid',
    access: 'tunnel',
    argo: 'existing',
    argoNamespace: 'gitops',
    upgrades: 'agent',
    version: '1.4.1',
  });
  t.equal(reg.status, 201, `registered: ${JSON.stringify(reg.body).slice(0, 300)}`);
  registered = reg.body;
  const manifest = join(dir, 'hybrid-runtime-plant-u.yaml');
  await writeFile(manifest, registered.install.manifests, { mode: 0o600 });
  t.equal((await kubectl(['create', 'namespace', 'gitops'])).code, 0, "the customer's Argo CD namespace");
  const applied = await kubectl(['apply', '-f', manifest]);
  t.equal(applied.code, 0, `the install bundle applies: ${applied.output.slice(-500)}`);

  // The bootstrap Job's pod (harness/hybrid.ts).
  const run = await runBootstrapProgram(kubectl, plane.kubeconfig, dir, registered.install.manifests, NS);
  t.equal((await runtime()).namespace, NS, 'the runtime reports its own namespace, where the install put it');
  t.equal(run.code, 0, `the bootstrap program succeeds: ${run.output.slice(-1000)}`);
  runtimeKey = run.runtimeKey ?? '';
  t.match(runtimeKey, /^hrt_/, 'the runtime key is in the cluster');
  t.equal((await runtime()).state, 'installed', 'the control plane shows it installed');

  const agents = await until('every agent rolled out at 1.4.1 (KWOK runs the pods)', 120_000, () => agentsAt('1.4.1'));
  t.same(agents.map((d) => d.metadata.name).sort(), ['app-proxy', 'event-reporter', 'request-router', 'tunnel-client']);
});

t.test(
  "the upgrader's account may patch the agents' Deployments and the versions ConfigMap by name, nothing more",
  async (t) => {
    const can = async (...args: string[]) =>
      (
        await kubectl(['auth', 'can-i', ...args, '-n', NS, '--as', `system:serviceaccount:${NS}:runtime-upgrader`])
      ).stdout.trim();
    t.equal(await can('patch', 'deployments/app-proxy'), 'yes', 'patch the app-proxy');
    t.equal(await can('patch', 'configmaps/runtime-versions'), 'yes', 'patch the versions ConfigMap');
    t.equal(await can('create', 'deployments'), 'no', 'create no Deployment');
    t.equal(await can('delete', 'deployments/app-proxy'), 'no', 'delete none');
    t.equal(await can('patch', 'roles/app-proxy'), 'no', 'change no RBAC');
    t.equal(await can('get', 'secrets/runtime-credentials'), 'no', 'read no Secret');
    t.equal(await can('patch', 'deployments/argocd-server'), 'no', 'patch no other Deployment');
  },
);

/**
 * Whether the API server admits a pod of a 1.5.0 image now: a server-side dry run (admission runs,
 * nothing is stored). The API server applies a created or deleted admission policy from its own
 * informer, a moment after the write returns (longer on a loaded machine), so each test waits
 * until the cluster enforces what it just wrote before it asks for the upgrade.
 */
async function admits150(): Promise<boolean> {
  const r = await kubectl([
    'run',
    'admission-probe',
    '--image=example.invalid/probe:1.5.0',
    '--restart=Never',
    '--dry-run=server',
    '-n',
    'default',
  ]);
  if (r.code === 0) return true;
  if (/images 1\.5\.0 are not admitted/.test(r.output)) return false;
  throw new Error(`the dry-run pod failed for another reason: ${r.output.slice(-300)}`);
}

let upgraderOutput: () => Promise<string> = async () => '';
// The runtime once the upgrader has reported the end of its upgrade to `to` (rolled out or rolled
// back); on timeout a failure naming what the runtime showed and what the upgrader printed.
const upgradeEnded = (t: Test, to: string) =>
  until(`the upgrader reports the end of the upgrade to ${to}`, 240_000, async () => {
    const r = await runtime();
    return r.upgrade && r.upgrade.to === to && !['pending', 'applying'].includes(r.upgrade.phase) ? r : undefined;
  }).catch(async (err: Error) => {
    t.fail(
      `${err.message}; the runtime: ${JSON.stringify((await runtime()).upgrade)}; the upgrader's log: ${await upgraderOutput()}`,
    );
    return runtime();
  });
let upgraderStop: () => Promise<void> = async () => {};
t.teardown(() => upgraderStop());

t.test('an upgrade the cluster refuses: the upgrader rolls back to 1.4.1 and the control plane shows it', async (t) => {
  // The customer's own admission policy: no pod of a 1.5.0 image.
  const policy = join(dir, 'policy.json');
  await writeFile(
    policy,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'List',
      items: [
        {
          apiVersion: 'admissionregistration.k8s.io/v1',
          kind: 'ValidatingAdmissionPolicy',
          metadata: { name: 'no-agents-1-5-0' },
          spec: {
            failurePolicy: 'Fail',
            matchConstraints: {
              resourceRules: [{ apiGroups: [''], apiVersions: ['v1'], operations: ['CREATE'], resources: ['pods'] }],
            },
            validations: [
              {
                expression: "!object.spec.containers.exists(c, c.image.endsWith(':1.5.0'))",
                message: 'images 1.5.0 are not admitted in this cluster',
              },
            ],
          },
        },
        {
          apiVersion: 'admissionregistration.k8s.io/v1',
          kind: 'ValidatingAdmissionPolicyBinding',
          metadata: { name: 'no-agents-1-5-0' },
          spec: { policyName: 'no-agents-1-5-0', validationActions: ['Deny'] },
        },
      ],
    }),
  );
  t.equal((await kubectl(['apply', '-f', policy])).code, 0, "the customer's policy");
  await until('the API server enforces the policy', 60_000, async () => !(await admits150()));

  const asked = await call<RuntimeUpgraded>('POST', `${base}/plant-u/upgrade`, tenant.apiKey, { version: '1.5.0' });
  t.equal(asked.status, 200, JSON.stringify(asked.body).slice(0, 300));
  t.equal(asked.body.appliedBy, 'agent', 'the upgrader applies it');

  // The upgrader's pod: its Deployment's environment (the runtime key and the control plane's URL from
  // the credentials Secret), its ServiceAccount's token.
  const env = await workloadEnv(kubectl, registered.install.manifests, 'Deployment', 'runtime-upgrader', NS, dir);
  t.equal(env.RUNTIME_TOKEN, runtimeKey, 'the upgrader gets the runtime key the bootstrap wrote');
  t.equal(env.CONTROL_PLANE_URL, publicUrl, "and the control plane's URL");
  const upgrader = startProcess('upgrader', process.execPath, [upgraderMain], join(dir, 'upgrader.log'), {
    env: {
      PATH: process.env.PATH ?? '',
      ...env,
      PORT: '0',
      HOST: '127.0.0.1',
      KUBECONFIG: await kubeconfigAs('runtime-upgrader'),
      POLL_SECONDS: '1',
      ROLLOUT_TIMEOUT_SECONDS: '120',
    },
  });
  // Runs until the file ends (the next test's upgrade is its too).
  upgraderStop = () => upgrader.stop();
  upgraderOutput = () => upgrader.tail(40);

  const ended = await upgradeEnded(t, '1.5.0');
  t.equal(ended.upgrade?.phase, 'rolled-back', `rolled back: ${ended.upgrade?.message}`);
  t.match(ended.upgrade?.message, /images 1\.5\.0 are not admitted/, "naming the cluster's refusal");
  t.equal(ended.version, '1.4.1', 'the runtime is to run 1.4.1 again');
  t.match(
    ended.conditions.find((c) => c.type === 'Upgraded'),
    { status: 'False', reason: 'RolledBack' },
  );
  const agents = await until('every agent back at 1.4.1 and rolled out', 120_000, () => agentsAt('1.4.1'));
  t.equal(agents.length, 4, 'the four agents run 1.4.1, available');
  const versions = await kubectl([
    'get',
    'configmap',
    'runtime-versions',
    '-n',
    NS,
    '-o',
    'jsonpath={.data.runtimeVersion}',
  ]);
  t.equal(versions.stdout, '1.4.1', 'the versions ConfigMap says 1.4.1 again');
});

t.test('with the policy gone, the same upgrade is pulled, applied and rolled out', async (t) => {
  t.equal(
    (await kubectl(['delete', 'validatingadmissionpolicybinding', 'no-agents-1-5-0'])).code,
    0,
    'the customer lifts its policy',
  );
  await until('the API server no longer enforces the policy', 60_000, admits150);
  const asked = await call<RuntimeUpgraded>('POST', `${base}/plant-u/upgrade`, tenant.apiKey, { version: '1.5.0' });
  t.equal(asked.status, 200);
  t.equal(asked.body.appliedBy, 'agent');
  const ended = await upgradeEnded(t, '1.5.0');
  t.equal(ended.upgrade?.phase, 'succeeded', `succeeded: ${ended.upgrade?.message}`);
  t.equal(ended.version, '1.5.0');
  t.equal(ended.previousVersion, '1.4.1');
  t.match(
    ended.conditions.find((c) => c.type === 'Upgraded'),
    { status: 'True', reason: 'Succeeded' },
  );
  const agents = await agentsAt('1.5.0');
  t.ok(agents, 'every agent runs 1.5.0, rolled out (the upgrader waited for it before reporting)');
  const reporter = agents?.find((d) => d.metadata.name === 'event-reporter');
  t.equal(
    reporter?.spec.template.spec.containers[0]!.env.find((e) => e.name === 'RUNTIME_VERSION')?.value,
    '1.5.0',
    'the event reporter will report 1.5.0',
  );
  const self = (await deployments()).find((d) => d.metadata.name === 'runtime-upgrader');
  t.equal(self && tag(self), '1.5.0', 'the upgrader patched its own Deployment last');
  const versions = await kubectl([
    'get',
    'configmap',
    'runtime-versions',
    '-n',
    NS,
    '-o',
    'jsonpath={.data.runtimeVersion}',
  ]);
  t.equal(versions.stdout, '1.5.0', 'the versions ConfigMap says 1.5.0');
  const managers = await kubectl([
    'get',
    'deployment',
    'app-proxy',
    '-n',
    NS,
    '-o',
    'jsonpath={.metadata.managedFields[*].manager}',
  ]);
  t.match(managers.stdout, /hosted-runtimes-upgrader/, 'the change is the upgrader’s (its field manager)');
});

t.test('removal: the key is refused, and the remove command deletes what the install created', async (t) => {
  const removed = await call<RuntimeRemoved>('DELETE', `${base}/plant-u`, tenant.apiKey);
  t.equal(removed.status, 200);
  const pull = await call('GET', '/v1/runtime/upgrade', runtimeKey);
  t.equal(pull.status, 401, 'the upgrader’s key is refused');
  const del = await kubectl(removeCommandArgs(removed.body.removeCommand));
  t.equal(del.code, 0, `the remove command: ${del.output.slice(-300)}`);
  t.same(await deployments(), [], 'no Deployment of the runtime is left');
});
