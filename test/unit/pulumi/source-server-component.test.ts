/**
 * The Source Server as the tenant program installs it (runtime/component/agents.ts
 * SOURCE_SERVER_AGENT, source-server-account.ts): only from runtime version 1.7.0, with its rights
 * (no cluster rules; Secrets of Argo CD's namespace only), Argo CD's read-only account for it, a
 * password derived from the runtime token that Argo CD's stored hash accepts and that a second
 * run computes again unchanged, and the event reporter and app-proxy pointed at it.
 */
import bcrypt from 'bcryptjs';
import t from 'tap';
import type { IDeployment } from 'kubernetes-models/apps/v1';
import type { IRole, IRoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import type { ISecret } from 'kubernetes-models/v1';
import { agentsAt, SOURCE_SERVER_ARGOCD_SECRET, SOURCE_SERVER_URL } from '../../../runtime/component/agents.ts';
import { sourceServerPassword } from '../../../runtime/component/source-server-account.ts';
import { createTenantProgram } from '../../../tenants/program.ts';
import { inputsOf, metaOf, releaseOf, runProgram, type RunResult } from './harness.ts';
import { recordingWaiter, ROOT_ACCESS, tenantConfig } from './fixtures.ts';

const runtimeToken = 'rt_0123456789abcdefghijklmnopqrstuvwxyz';
/** The argo-cd values this test reads. */
type Obj = {
  configs?: {
    cm?: Record<string, string>;
    rbac?: Record<string, string>;
    secret?: { extra?: Record<string, string> };
  };
};

const run = (runtimeVersion: string): Promise<RunResult> =>
  runProgram(
    createTenantProgram({ rootAccess: ROOT_ACCESS, waitForSecret: recordingWaiter().waiter }),
    tenantConfig({ runtimeVersion, runtimeToken }),
  );
const deployments = (r: RunResult) =>
  new Map(r.ofType('kubernetes:apps/v1:Deployment').map((d) => [metaOf(d).name!, inputsOf<IDeployment>(d)]));
const argoCdValues = (r: RunResult): Obj =>
  releaseOf<Obj>(r.ofType('kubernetes:helm.sh/v3:Release').find((x) => x.inputs.chart === 'argo-cd')!).values;
const envOf = (d: IDeployment | undefined, name: string) =>
  d?.spec?.template.spec?.containers[0]?.env?.find((e) => e.name === name);

const before = await run('1.6.0');
const at = await run('1.7.0');
const again = await run('1.7.0');

void t.test('the Source Server is installed from runtime version 1.7.0 only', async (t) => {
  t.notOk(
    agentsAt('1.6.0').some((a) => a.name === 'source-server'),
    '1.6.0 has no Source Server',
  );
  t.ok(
    agentsAt('1.7.0').some((a) => a.name === 'source-server'),
    '1.7.0 has it',
  );
  t.notOk(deployments(before).has('source-server'), 'a 1.6.0 runtime gets no source-server Deployment');
  t.ok(deployments(at).has('source-server'), 'a 1.7.0 runtime gets one');
  for (const agent of ['event-reporter', 'app-proxy']) {
    t.equal(
      envOf(deployments(before).get(agent), 'SOURCE_SERVER_URL'),
      undefined,
      `1.6.0 ${agent}: no SOURCE_SERVER_URL`,
    );
    t.equal(
      envOf(deployments(at).get(agent), 'SOURCE_SERVER_URL')?.value,
      SOURCE_SERVER_URL,
      `1.7.0 ${agent}: SOURCE_SERVER_URL is the Source Server's Service`,
    );
  }
  const accounts = (v: Obj) => v.configs?.cm?.['accounts.source-server'];
  t.equal(accounts(argoCdValues(before)), undefined, "a 1.6.0 runtime's Argo CD has no source-server account");
  t.equal(accounts(argoCdValues(at)), 'login', "a 1.7.0 runtime's Argo CD has the account, login only");
});

void t.test('its rights: Secrets of the argocd namespace to read, nothing cluster-wide', async (t) => {
  const roles = at
    .ofType('kubernetes:rbac.authorization.k8s.io/v1:Role')
    .map((r) => inputsOf<IRole>(r))
    .filter((r) => r.metadata?.name?.endsWith('source-server'));
  t.same(
    roles.map((r) => [r.metadata?.namespace, r.rules]),
    [['argocd', [{ apiGroups: [''], resources: ['secrets'], verbs: ['get', 'list', 'watch'] }]]],
    'one Role, in argocd, reading Secrets',
  );
  const binding = at
    .ofType('kubernetes:rbac.authorization.k8s.io/v1:RoleBinding')
    .map((r) => inputsOf<IRoleBinding>(r))
    .find((b) => b.metadata?.namespace === 'argocd' && b.roleRef.name === roles[0]?.metadata?.name);
  t.same(
    binding?.subjects,
    [{ kind: 'ServiceAccount', name: 'source-server', namespace: 'hosted-runtime' }],
    "bound to the Source Server's service account",
  );
  t.notOk(
    at
      .ofType('kubernetes:rbac.authorization.k8s.io/v1:ClusterRole')
      .some((r) => metaOf(r).name?.endsWith('source-server')),
    'no ClusterRole',
  );
  const pod = deployments(at).get('source-server')!.spec!.template.spec!;
  t.equal(pod.securityContext?.runAsNonRoot, true, 'runs as non-root');
  t.equal(pod.containers[0]!.securityContext?.readOnlyRootFilesystem, true, 'with a read-only root file system');
  t.ok(
    pod.volumes?.some((v) => v.name === 'git-cache' && v.emptyDir?.sizeLimit),
    'its Git cache is a bounded emptyDir',
  );
});

void t.test(
  "Argo CD's stored hash accepts the Source Server's password, and a second run changes nothing",
  async (t) => {
    const secret = at
      .ofType('kubernetes:core/v1:Secret')
      .map((s) => inputsOf<ISecret>(s))
      .find((s) => s.metadata?.name === SOURCE_SERVER_ARGOCD_SECRET);
    const password = secret?.stringData?.password;
    t.equal(password, sourceServerPassword(runtimeToken), 'the Secret holds the password derived from the token');
    t.not(password, runtimeToken, 'which is not the runtime token itself');
    const extra = argoCdValues(at).configs?.secret?.extra ?? {};
    const hash = extra['accounts.source-server.password'] ?? '';
    t.ok(bcrypt.compareSync(password!, hash), "Argo CD's bcrypt hash verifies the password");
    t.notOk(bcrypt.compareSync('another password', hash), 'and refuses another');
    t.ok(extra['accounts.source-server.passwordMtime'], 'with a password time');
    t.match(
      argoCdValues(at).configs?.rbac?.['policy.csv'],
      /^g, source-server, role:readonly$/m,
      'read-only in Argo CD',
    );
    t.same(argoCdValues(again), argoCdValues(at), 'a second run computes the same Argo CD values (no diff)');
  },
);
