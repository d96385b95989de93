/**
 * Short-lived credentials of managed clusters against a real kube-apiserver from the toolchain
 * (with the service-account issuer and signing-key flags, so TokenRequest works) playing the
 * tenant's own cluster. Two provisioner replicas on one database (the API in-process, real
 * Postgres, no engine).
 *
 * Covered: a registration with a ServiceAccount token that may request tokens for itself keeps a
 * token of the configured lifetime instead of the one given; it is renewed at the (shortened)
 * refresh interval across three renewals while a client polls the cluster every 100 ms with the
 * credentials the tenant's program gets (what the Argo CD cluster Secret holds) and no request
 * fails; each renewal bumps the tenant's generation, is audited and logged without the token, is
 * counted, and is done by one replica; the previous token stays valid after a renewal. A token
 * that may not request tokens is kept as given (no rotation).
 *
 * Bootstrap tokens: issued with a Job manifest (its objects applied here as the tenant would; the
 * Job's own step, a TokenRequest of the new account and the redemption, done by the test since no
 * kubelet runs) and redeemed through POST /v1/managed-clusters/redeem; single-use (410), expiry
 * (410), unknown tokens (401), refusals that give the token back; least privilege (the account
 * can do nothing outside the listed namespaces); DELETE revokes (the held token gets 401 within
 * 60 s, the RBAC removed with removeRbac=1, a second DELETE is a 204); and the CLI's `connect`
 * with the tenant's kubeconfig file, end to end. Each registration's bootstrap has its own account
 * `argocd-manager-<id>`: redemption accepts only its token (not another account's, nor the former
 * shared `argocd-manager`); two tenants bootstrapping one cluster (Job manifest and `connect`) get
 * two accounts, and `remove --remove-rbac --kubeconfig` of one revokes only its token (the other's,
 * polled meanwhile, keeps working) and deletes only its objects. A registration recorded with the
 * former shared account is still revoked by DELETE.
 */
import t from 'tap';
import { join } from 'node:path';
import { writeFile } from 'node:fs/promises';
import {
  CoreV1Api,
  KubernetesObjectApi,
  RbacAuthorizationV1Api,
  type KubernetesObject,
  type V1PolicyRule,
} from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { main } from '../../provisioner/cli/main.ts';
import { createTestApi, startReplica, type TestApi, type TestReplica } from '../helpers/api.ts';
import { kubeRequest } from '../../provisioner/managed-clusters/kube-api.ts';
import { bootstrapAccount } from '../../provisioner/managed-clusters/bootstrap.ts';
import { startApiServers } from '../../sandbox/control-plane.ts';
import { grantRole } from './harness/kube.ts';
import { expireManagedClusterBootstrap, storedBootstraps } from '../helpers/managed-clusters.ts';
import { auditRows } from '../helpers/audit.ts';
import { tenantLogLines } from '../helpers/operations.ts';
import { getManagedCluster, sealedManagedClusters } from '../../provisioner/store/managed-clusters.ts';

t.setTimeout(10 * 60_000);

const servers = await startApiServers('hrt-e2e-mc-tokens-', ['own']);
const own = servers.servers.own;
const dir = servers.dir;
const LIFETIME_SECONDS = 600; // the shortest the API server grants
const REFRESH_SECONDS = 2;
const env = {
  PROVISIONER_MANAGED_CLUSTER_ALLOWED_CIDRS: '127.0.0.0/8',
  PROVISIONER_MANAGED_CLUSTER_TOKEN_SECONDS: String(LIFETIME_SECONDS),
  PROVISIONER_MANAGED_CLUSTER_TOKEN_REFRESH_SECONDS: String(REFRESH_SECONDS),
};
const api: TestApi = await createTestApi({ env });
const second: TestReplica = await startReplica(api.config, api.db);
t.teardown(async () => {
  await second.close();
  await api.close();
  await servers.stop();
});

const core = own.kc.makeApiClient(CoreV1Api);
const rbac = own.kc.makeApiClient(RbacAuthorizationV1Api);
for (const name of ['apps', 'deployer']) await core.createNamespace({ body: { metadata: { name } } });

/** A ServiceAccount in `deployer` allowed everything in `apps`, and (when `renew`) tokens for itself. */
async function serviceAccountToken(name: string, renew: boolean): Promise<string> {
  await core.createNamespacedServiceAccount({ namespace: 'deployer', body: { metadata: { name } } });
  const bind = (namespace: string, rules: V1PolicyRule[]): Promise<void> =>
    grantRole(rbac, namespace, name, { namespace: 'deployer', name }, rules);
  await bind('apps', [{ apiGroups: ['*'], resources: ['*'], verbs: ['*'] }]);
  if (renew)
    await bind('deployer', [
      { apiGroups: [''], resources: ['serviceaccounts/token'], resourceNames: [name], verbs: ['create'] },
    ]);
  const answer = await core.createNamespacedServiceAccountToken({
    name,
    namespace: 'deployer',
    body: { spec: { audiences: [], expirationSeconds: 3600 } },
  });
  return answer.status!.token!;
}
const renewingToken = await serviceAccountToken('renewer', true);
const fixedToken = await serviceAccountToken('fixed', false);
const ca = own.ca.certPem;

/** Lists config maps in `apps` with a bearer token, as Argo CD would: the HTTP status. */
async function poll(token: string): Promise<number> {
  const answer = await kubeRequest(
    { url: new URL(own.server), ca, authorization: `Bearer ${token}` },
    'GET',
    '/api/v1/namespaces/apps/configmaps',
    { signal: AbortSignal.timeout(5_000) },
  );
  return answer.status;
}

const claims = (token: string): { exp: number; iat: number; sub: string } =>
  JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8')) as {
    exp: number;
    iat: number;
    sub: string;
  };

const tenant = await api.signup();
const base = `/v1/tenants/${tenant.tenantId}/managed-clusters`;
const programToken = async (name: string): Promise<string> => {
  const all = await api.services.managedClusters.forProgram(api.db.pool, tenant.tenantId);
  const found = all.find((m) => m.name === name);
  if (!found?.config.bearerToken) throw new Error(`no bearer token for ${name} in the program's input`);
  return found.config.bearerToken;
};
const generation = async (): Promise<number> =>
  (await api.request('GET', `/v1/tenants/${tenant.tenantId}`, { key: tenant.apiKey })).json().generation as number;

async function counter(replica: { services: TestApi['services'] }, outcome: string): Promise<number> {
  const metric = await replica.services.metrics.registry
    .getSingleMetric('provisioner_managed_cluster_token_rotations_total')!
    .get();
  return metric.values.find((v) => v.labels.outcome === outcome)?.value ?? 0;
}

t.test('a ServiceAccount token that may renew itself: rotated across three renewals, no request fails', async (t) => {
  const before = await generation();
  const res = await api.request('POST', base, {
    key: tenant.apiKey,
    body: { name: 'prod', namespaces: ['apps'], server: own.server, token: renewingToken, caData: ca },
  });
  t.equal(res.statusCode, 201, `registered (${res.body.slice(0, 300)})`);
  const registered = res.json().managedCluster;
  t.equal(registered.tokenRotation?.serviceAccount, 'deployer/renewer', 'the answer names the ServiceAccount');
  t.notMatch(res.body, renewingToken, 'the answer holds no token');
  const first = await programToken('prod');
  t.not(first, renewingToken, 'the control plane holds a token it requested, not the one given');
  t.equal(claims(first).exp - claims(first).iat, LIFETIME_SECONDS, `the token is valid for ${LIFETIME_SECONDS} s`);
  t.equal(claims(first).sub, 'system:serviceaccount:deployer:renewer', 'for the same ServiceAccount');
  t.equal(await generation(), before + 1, 'the registration bumped the generation once');

  // Poll through the current credentials until three renewals have been seen (bounded in time).
  const seen = [first];
  const failures: string[] = [];
  let requests = 0;
  const deadline = Date.now() + 60_000;
  while (seen.length < 4 && Date.now() < deadline) {
    const token = await programToken('prod');
    if (token !== seen.at(-1)) seen.push(token);
    const status = await poll(token);
    requests++;
    if (status !== 200) failures.push(`HTTP ${status} with token #${seen.indexOf(token)}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  t.equal(seen.length, 4, `three renewals seen within 60 s (tokens seen: ${seen.length})`);
  t.same(failures, [], `none of the ${requests} requests through the current credentials failed`);
  t.equal(new Set(seen).size, seen.length, 'every renewal is a new token');
  for (const [i, token] of seen.entries()) {
    t.equal(claims(token).exp - claims(token).iat, LIFETIME_SECONDS, `token #${i} valid for ${LIFETIME_SECONDS} s`);
    t.equal(await poll(token), 200, `token #${i} is still accepted after it was replaced (valid until its expiry)`);
  }

  const rotations = (await getManagedCluster(api.db.pool, tenant.tenantId, 'prod'))!.tokenRotation!.rotations;
  t.ok(rotations >= 3, `the registration counts its renewals (${rotations})`);
  const [sealed] = (await sealedManagedClusters(api.db.pool, tenant.tenantId)).filter((c) => c.name === 'prod');
  t.notOk(sealed!.credentialsEnc.toString('latin1').includes(seen.at(-1)!), 'the stored token is sealed');
  const audit = await auditRows(api.db.pool, { action: 'managed-cluster.rotate-token', targetId: tenant.tenantId });
  t.ok(audit.length >= rotations, `every renewal is audited (${audit.length} rows, ${rotations} renewals)`);
  t.ok(
    audit.every((r) => r.actorRole === 'system' && seen.every((s) => !JSON.stringify(r.after).includes(s))),
    'the audit rows name the system and hold no token',
  );
  const logs = (await tenantLogLines(api.db.pool, tenant.tenantId)).filter((l) =>
    l.includes('token of deployer/renewer renewed'),
  );
  t.ok(logs.length >= rotations, `each renewal's operation logs it (${logs.length} lines)`);
  t.ok(
    logs.every((line) => seen.every((s) => !line.includes(s))),
    'the operation log lines hold no token',
  );
  const after = await generation();
  t.ok(after >= before + 1 + rotations, `each renewal bumped the generation (${before} -> ${after})`);

  const rotated = (await counter(api, 'rotated')) + (await counter(second, 'rotated'));
  t.ok(rotated >= rotations, `the two replicas counted the renewals (${rotated})`);
  t.equal(
    (await counter(api, 'dropped')) + (await counter(second, 'dropped')),
    0,
    'no renewal was done twice (none dropped for a registration renewed meanwhile by the other replica)',
  );
  t.equal((await counter(api, 'failed')) + (await counter(second, 'failed')), 0, 'no renewal failed');

  const list = await api.request('GET', base, { key: tenant.apiKey });
  const listed = list.json().items.find((m: { name: string }) => m.name === 'prod');
  t.ok(listed.tokenRotation.rotations >= 3, 'the list shows the renewals');
  t.ok(Date.parse(listed.tokenRotation.expiresAt) > Date.now(), 'and when the current token expires');
});

t.test('a token that may not request tokens for itself is kept as given', async (t) => {
  // The same server is registered once per tenant: another tenant registers it.
  const other = await api.signup();
  const ok = await api.request('POST', `/v1/tenants/${other.tenantId}/managed-clusters`, {
    key: other.apiKey,
    body: { name: 'fixed', namespaces: ['apps'], server: own.server, token: fixedToken, caData: ca },
  });
  t.equal(ok.statusCode, 201, `registered (${ok.body.slice(0, 300)})`);
  t.equal(ok.json().managedCluster.tokenRotation, null, 'no rotation: the cluster refused a TokenRequest');
  const [program] = await api.services.managedClusters.forProgram(api.db.pool, other.tenantId);
  t.equal(program?.config.bearerToken, fixedToken, 'the program gets the token as given');
});

// --- Bootstrap tokens ---------------------------------------------------------------------------

const bootTenant = await api.signup();
const bootBase = `/v1/tenants/${bootTenant.tenantId}/managed-clusters`;
const objects = KubernetesObjectApi.makeApiClient(own.kc);

/** The account of the bootstrap of bootTenant's `boot`. */
const bootAccount = bootstrapAccount({ tenantId: bootTenant.tenantId, name: 'boot' });

/** What the Job does on the cluster: a token of the bootstrap's account (its pod's would do as well). */
async function bootstrapAccountToken(name = bootAccount): Promise<string> {
  const answer = await core.createNamespacedServiceAccountToken({
    name,
    namespace: 'argocd-manager',
    body: { spec: { audiences: [], expirationSeconds: 600 } },
  });
  return answer.status!.token!;
}

const redeem = (bootstrapToken: string | undefined, body: Record<string, unknown>) =>
  api.app.inject({
    method: 'POST',
    url: '/v1/managed-clusters/redeem',
    headers: bootstrapToken ? { authorization: `Bearer ${bootstrapToken}` } : {},
    payload: body,
  });

async function issue(tenantId: string, key: string, name: string, bootstrap: Record<string, unknown>) {
  const res = await api.request('POST', `/v1/tenants/${tenantId}/managed-clusters`, {
    key,
    body: { name, bootstrap },
  });
  return res;
}

/** A manifest document, with the Job's fields the test reads. */
type ManifestDoc = KubernetesObject & {
  spec: {
    template: {
      spec: {
        serviceAccountName: string;
        containers: Array<{ image: string; env: Array<{ name: string; value?: string }> }>;
      };
    };
  };
};

let bootToken = '';
t.test('a bootstrap token: Job manifest, redeemed once with the new account, least privilege', async (t) => {
  const res = await issue(bootTenant.tenantId, bootTenant.apiKey, 'boot', { namespaces: ['apps'], server: own.server });
  t.equal(res.statusCode, 201, `issued (${res.body.slice(0, 300)})`);
  const b = res.json().bootstrap;
  t.match(b.token, /^hrtb_[A-Za-z0-9_-]{40,}$/, 'a bootstrap token');
  const ttl = Date.parse(b.expiresAt) - Date.now();
  t.ok(ttl > 0 && ttl <= 3600_000, `valid for at most an hour (${Math.round(ttl / 1000)} s)`);
  t.match(
    b.command,
    `provisioner managed-clusters connect ${bootTenant.tenantId} boot --kubeconfig FILE --namespaces apps`,
    'the connect command',
  );
  const docs = parseAllDocuments(b.job).map((d) => d.toJS() as ManifestDoc);
  t.same(
    docs.map((d) => `${d.kind}/${d.metadata?.namespace ?? ''}/${d.metadata?.name}`),
    [
      'Namespace//argocd-manager',
      `ServiceAccount/argocd-manager/${bootAccount}`,
      `Role/argocd-manager/${bootAccount}`,
      `RoleBinding/argocd-manager/${bootAccount}`,
      `Role/apps/${bootAccount}`,
      `RoleBinding/apps/${bootAccount}`,
      `Secret/argocd-manager/${bootAccount}-bootstrap`,
      `Job/argocd-manager/${bootAccount}-bootstrap`,
    ],
    'the manifest: account, its own Role, a Role in each listed namespace (no ClusterRole), the token, the Job',
  );
  t.match(bootAccount, /^argocd-manager-[0-9a-f]{10}$/, 'the account is named for the registration');
  const job = docs.at(-1)!;
  const container = job.spec.template.spec.containers[0]!;
  t.equal(job.spec.template.spec.serviceAccountName, bootAccount, 'the Job runs as the new account');
  t.match(container.image, /tunnel-client/, "the Job runs the agents' image");
  t.match(
    container.env.find((e) => e.name === 'REDEEM_URL')?.value,
    /\/v1\/managed-clusters\/redeem$/,
    'the Job redeems at the control plane',
  );
  t.equal(container.env.find((e) => e.name === 'SERVER')?.value, own.server, 'for the server given');
  t.ok(
    (await storedBootstraps(api.db.pool)).every((row) => !row.includes(b.token)),
    'the bootstrap token is stored hashed only',
  );
  const listed = await api.request('GET', bootBase, { key: bootTenant.apiKey });
  t.same(listed.json().items, [], 'nothing is registered before the token is redeemed');

  // The tenant applies the manifest (its objects but the Job, which needs a kubelet).
  for (const d of docs.slice(0, -2)) await objects.create(d);
  const accountToken = await bootstrapAccountToken();

  const noHeader = await redeem(undefined, { server: own.server, token: accountToken, caData: ca });
  t.equal(noHeader.statusCode, 401, 'no bootstrap token: 401');
  t.equal(noHeader.json().error.code, 'BOOTSTRAP_TOKEN_INVALID', 'named');
  const unknown = await redeem(`hrtb_${'x'.repeat(43)}`, { server: own.server, token: accountToken, caData: ca });
  t.equal(unknown.statusCode, 401, 'an unknown bootstrap token: 401');
  t.match(unknown.json().error.message, /bootstrap token/, 'the message names the bootstrap token');

  const wrongAccount = await redeem(b.token, { server: own.server, token: fixedToken, caData: ca });
  t.equal(wrongAccount.statusCode, 400, "another account's token is refused");
  t.match(wrongAccount.json().error.message, `argocd-manager/${bootAccount}`, 'naming the account expected');
  // Nor is the account every bootstrap shared before each registration got its own.
  await core.createNamespacedServiceAccount({
    namespace: 'argocd-manager',
    body: { metadata: { name: 'argocd-manager' } },
  });
  const shared = await redeem(b.token, {
    server: own.server,
    token: await bootstrapAccountToken('argocd-manager'),
    caData: ca,
  });
  t.equal(shared.statusCode, 400, "the former shared account's token is refused");
  await core.deleteNamespacedServiceAccount({ namespace: 'argocd-manager', name: 'argocd-manager' });

  const ok = await redeem(b.token, { server: own.server, token: accountToken, caData: ca });
  t.equal(ok.statusCode, 201, `redeemed after the refusal gave the token back (${ok.body.slice(0, 300)})`);
  const m = ok.json().managedCluster;
  t.equal(m.name, 'boot', 'registered under the name asked for');
  t.same(m.namespaces, ['apps'], 'for the listed namespaces');
  t.equal(
    m.tokenRotation?.serviceAccount,
    `argocd-manager/${bootAccount}`,
    'with short-lived tokens of the new account',
  );
  bootToken = b.token;

  const again = await redeem(b.token, { server: own.server, token: accountToken, caData: ca });
  t.equal(again.statusCode, 410, 'a second redemption: 410');
  t.equal(again.json().error.code, 'BOOTSTRAP_TOKEN_USED', 'named as used');
  t.match(again.json().error.message, /already redeemed/, 'the message says so');

  const held = await programToken2(bootTenant.tenantId, 'boot');
  t.equal(await poll(held), 200, 'the held token may work in a listed namespace');
  const outside = await kubeRequest(
    { url: new URL(own.server), ca, authorization: `Bearer ${held}` },
    'GET',
    '/api/v1/namespaces/deployer/configmaps',
    { signal: AbortSignal.timeout(5_000) },
  );
  t.equal(outside.status, 403, 'and nothing outside them (least privilege)');
});

t.test('an expired bootstrap token: 410 naming the expiry; refusals of the request', async (t) => {
  const res = await issue(bootTenant.tenantId, bootTenant.apiKey, 'late', { namespaces: ['apps'] });
  t.equal(res.statusCode, 201, 'issued');
  const b = res.json().bootstrap;
  await expireManagedClusterBootstrap(api.db.pool, 'late');
  const late = await redeem(b.token, { server: own.server, token: await bootstrapAccountToken(), caData: ca });
  t.equal(late.statusCode, 410, 'an expired bootstrap token: 410');
  t.equal(late.json().error.code, 'BOOTSTRAP_TOKEN_EXPIRED', 'named as expired');
  t.match(late.json().error.message, /expired at \d{4}-/, 'the message gives the expiry');

  const none = await issue(bootTenant.tenantId, bootTenant.apiKey, 'wide', {});
  t.equal(none.statusCode, 400, 'no namespaces and no clusterWide: 400');
  t.match(none.json().error.message, /clusterWide/, 'the message says how to ask for the whole cluster');
  const both = await api.request('POST', bootBase, {
    key: bootTenant.apiKey,
    body: { name: 'mixed', bootstrap: { namespaces: ['apps'] }, token: 'x', server: own.server },
  });
  t.equal(both.statusCode, 400, 'bootstrap with credentials: 400');
  const taken = await issue(bootTenant.tenantId, bootTenant.apiKey, 'boot', { namespaces: ['apps'] });
  t.equal(taken.statusCode, 409, 'a bootstrap for a name already registered: 409');
  const wideJob = await issue(bootTenant.tenantId, bootTenant.apiKey, 'wide', { clusterWide: true });
  t.equal(wideJob.statusCode, 201, 'cluster-wide when asked for explicitly');
  t.match(wideJob.json().bootstrap.job, /kind: ClusterRole\n/, 'its manifest has the ClusterRole');
});

t.test('DELETE revokes: the held token is refused within 60 s, the RBAC removed, idempotent', async (t) => {
  t.ok(bootToken, 'the bootstrap registration exists');
  const held = await programToken2(bootTenant.tenantId, 'boot');
  t.equal(await poll(held), 200, 'the held token works before the removal');
  const res = await api.request('DELETE', `${bootBase}/boot?removeRbac=1`, { key: bootTenant.apiKey });
  t.equal(res.statusCode, 202, `removed (${res.body.slice(0, 300)})`);
  const revocation = res.json().revocation;
  t.equal(revocation?.revoked, true, 'the ServiceAccount was deleted');
  t.same(revocation.removed, [`namespaces/apps/roles/${bootAccount}`], 'and its Role in the listed namespace');
  const started = Date.now();
  let status = await poll(held);
  while (status !== 401 && Date.now() - started < 60_000) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    status = await poll(held);
  }
  t.equal(
    status,
    401,
    `the held token is refused within 60 s of the removal (took ${Math.round((Date.now() - started) / 1000)} s)`,
  );
  const roles = await rbac.listNamespacedRole({ namespace: 'apps' });
  t.notOk(
    roles.items.some((r) => r.metadata?.name === bootAccount),
    "the bootstrap's Role in apps is gone",
  );
  const again = await api.request('DELETE', `${bootBase}/boot?removeRbac=1`, { key: bootTenant.apiKey });
  t.equal(again.statusCode, 204, 'a second removal: 204, nothing to do');
});

/** Where the API listens on HTTP, for the CLI (once listening). */
let apiUrl = '';

t.test('the CLI connects a cluster with the tenant kubeconfig file', async (t) => {
  const cliTenant = await api.signup();
  apiUrl ||= await api.app.listen({ port: 0, host: '127.0.0.1' });
  const url = apiUrl;
  const file = join(dir, 'tenant.kubeconfig');
  await writeFile(file, own.kubeconfig, { mode: 0o600 });
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(
    [
      '--url',
      url,
      '--token',
      cliTenant.apiKey,
      'managed-clusters',
      'connect',
      cliTenant.tenantId,
      'edge',
      '--kubeconfig',
      file,
      '--namespaces',
      'apps',
    ],
    { out: (s) => out.push(s), err: (s) => err.push(s), env: {} },
  );
  t.equal(code, 0, `connect succeeded (${err.join(' ')})`);
  const edgeAccount = bootstrapAccount({ tenantId: cliTenant.tenantId, name: 'edge' });
  t.match(out.join('\n'), `as ServiceAccount argocd-manager/${edgeAccount};`, 'it says so, naming its own account');
  const list = await api.request('GET', `/v1/tenants/${cliTenant.tenantId}/managed-clusters`, {
    key: cliTenant.apiKey,
  });
  const edge = list.json().items[0];
  t.equal(edge?.name, 'edge', 'registered');
  t.same(edge.namespaces, ['apps'], 'for the listed namespace');
  t.equal(edge.tokenRotation?.serviceAccount, `argocd-manager/${edgeAccount}`, 'with short-lived tokens');
  const held = await programToken2(cliTenant.tenantId, 'edge');
  t.equal(await poll(held), 200, "the program's token works in the listed namespace");

  const usage = await main(
    [
      '--url',
      url,
      '--token',
      cliTenant.apiKey,
      'managed-clusters',
      'connect',
      cliTenant.tenantId,
      'x',
      '--kubeconfig',
      file,
    ],
    { out: () => undefined, err: (s) => err.push(s), env: {} },
  );
  t.not(usage, 0, 'connect without --namespaces or --cluster-wide is refused');
});

t.test(
  'two tenants bootstrap one cluster: own accounts; removing one revokes only its tokens and objects',
  async (t) => {
    apiUrl ||= await api.app.listen({ port: 0, host: '127.0.0.1' });
    const url = apiUrl;
    const file = join(dir, 'shared.kubeconfig');
    await writeFile(file, own.kubeconfig, { mode: 0o600 });
    const a = await api.signup();
    const b = await api.signup();
    const accountA = bootstrapAccount({ tenantId: a.tenantId, name: 'shared' });
    const accountB = bootstrapAccount({ tenantId: b.tenantId, name: 'shared' });
    t.not(accountA, accountB, 'the two registrations get two account names');

    // Tenant A: the Job manifest (applied as the tenant would; the test plays the Job's pod).
    const issued = await issue(a.tenantId, a.apiKey, 'shared', { namespaces: ['apps'], server: own.server });
    t.equal(issued.statusCode, 201, `issued (${issued.body.slice(0, 300)})`);
    const docs = parseAllDocuments(issued.json().bootstrap.job).map((d) => d.toJS() as ManifestDoc);
    for (const d of docs.slice(0, -1)) {
      if (d.kind === 'Namespace') continue; // exists already
      await objects.create(d);
    }
    const redeemedA = await redeem(issued.json().bootstrap.token, {
      server: own.server,
      token: await bootstrapAccountToken(accountA),
      caData: ca,
    });
    t.equal(redeemedA.statusCode, 201, `tenant A registered (${redeemedA.body.slice(0, 300)})`);
    t.equal(redeemedA.json().managedCluster.tokenRotation?.serviceAccount, `argocd-manager/${accountA}`, "A's account");

    // Tenant B: `connect` with its kubeconfig.
    const err: string[] = [];
    const cli = (key: string, args: string[]) =>
      main(['--url', url, '--token', key, 'managed-clusters', ...args], {
        out: (line) => out.push(line),
        err: (line) => err.push(line),
        env: {},
      });
    const out: string[] = [];
    const connected = await cli(b.apiKey, [
      'connect',
      b.tenantId,
      'shared',
      '--kubeconfig',
      file,
      '--namespaces',
      'apps',
    ]);
    t.equal(connected, 0, `tenant B connected (${err.join(' ')})`);
    t.match(out.join('\n'), `as ServiceAccount argocd-manager/${accountB};`, "B's own account");

    const heldA = await programToken2(a.tenantId, 'shared');
    const heldB = await programToken2(b.tenantId, 'shared');
    t.equal(
      claims(heldA).sub,
      `system:serviceaccount:argocd-manager:${accountA}`,
      "A's program holds A's account's token",
    );
    t.equal(
      claims(heldB).sub,
      `system:serviceaccount:argocd-manager:${accountB}`,
      "B's program holds B's account's token",
    );
    t.equal(await poll(heldA), 200, "A's token works");
    t.equal(await poll(heldB), 200, "B's token works");
    const roleA = await rbac.readNamespacedRole({ namespace: 'apps', name: accountA });
    t.equal(
      roleA.metadata?.labels?.['hosted-runtimes.io/tenant'],
      a.tenantId,
      "A's Role in apps is A's (not overwritten by B)",
    );

    // Tenant A removes its registration, with its objects.
    out.length = 0;
    const removed = await cli(a.apiKey, ['remove', a.tenantId, 'shared', '--remove-rbac', '--kubeconfig', file]);
    t.equal(removed, 0, `tenant A removed its registration (${err.join(' ')})`);
    t.match(out.join('\n'), `ServiceAccount argocd-manager/${accountA} deleted`, "A's account was revoked");
    const started = Date.now();
    const bStatuses: number[] = [];
    let statusA = await poll(heldA);
    while (statusA !== 401 && Date.now() - started < 60_000) {
      bStatuses.push(await poll(heldB));
      await new Promise((resolve) => setTimeout(resolve, 500));
      statusA = await poll(heldA);
    }
    bStatuses.push(await poll(heldB));
    t.equal(
      statusA,
      401,
      `A's token is refused within 60 s of the removal (took ${Math.round((Date.now() - started) / 1000)} s)`,
    );
    t.same([...new Set(bStatuses)], [200], `B's token kept working throughout (${bStatuses.length} polls)`);
    t.equal(await poll(await programToken2(b.tenantId, 'shared')), 200, "B's current token works");

    const names = async (): Promise<string[]> => {
      const found: string[] = [];
      for (const namespace of ['argocd-manager', 'apps']) {
        for (const r of (await rbac.listNamespacedRole({ namespace })).items)
          found.push(`Role ${namespace}/${r.metadata?.name}`);
        for (const r of (await rbac.listNamespacedRoleBinding({ namespace })).items)
          found.push(`RoleBinding ${namespace}/${r.metadata?.name}`);
      }
      for (const s of (await core.listNamespacedServiceAccount({ namespace: 'argocd-manager' })).items)
        found.push(`ServiceAccount argocd-manager/${s.metadata?.name}`);
      return found;
    };
    const left = await names();
    t.same(
      left.filter((n) => n.endsWith(`/${accountA}`) || n.endsWith(`/${accountA}-bootstrap`)),
      [],
      "none of A's objects is left",
    );
    t.same(
      left.filter((n) => n.endsWith(`/${accountB}`)).sort(),
      [
        `Role apps/${accountB}`,
        `Role argocd-manager/${accountB}`,
        `RoleBinding apps/${accountB}`,
        `RoleBinding argocd-manager/${accountB}`,
        `ServiceAccount argocd-manager/${accountB}`,
      ],
      "every one of B's objects is kept",
    );
    const listB = await api.request('GET', `/v1/tenants/${b.tenantId}/managed-clusters`, { key: b.apiKey });
    t.same(
      listB.json().items.map((m: { name: string }) => m.name),
      ['shared'],
      "B's registration is still there",
    );
  },
);

t.test('a registration made with the former shared account argocd-manager is still revoked correctly', async (t) => {
  // What an older bootstrap created: the one account `argocd-manager` and RBAC of that name.
  const legacy = await api.signup();
  const name = 'argocd-manager';
  await core.createNamespacedServiceAccount({ namespace: 'argocd-manager', body: { metadata: { name } } });
  const grant = (namespace: string, rules: V1PolicyRule[]): Promise<void> =>
    grantRole(rbac, namespace, name, { namespace: 'argocd-manager', name }, rules);
  await grant('apps', [{ apiGroups: ['*'], resources: ['*'], verbs: ['*'] }]);
  await grant('argocd-manager', [
    { apiGroups: [''], resources: ['serviceaccounts/token'], resourceNames: [name], verbs: ['create'] },
    { apiGroups: [''], resources: ['serviceaccounts'], resourceNames: [name], verbs: ['get', 'delete'] },
  ]);
  // Registered as a redemption did then: the created objects record the shared account.
  await api.services.managedClusters.register(
    legacy.tenantId,
    { name: 'old', namespaces: ['apps'], server: own.server, token: await bootstrapAccountToken(name), caData: ca },
    { actor: { id: 'bootstrap:legacy', role: 'bootstrap' }, requestId: 'legacy' },
    { serviceAccount: 'argocd-manager/argocd-manager', namespaces: ['apps'], clusterWide: false },
  );
  const held = await programToken2(legacy.tenantId, 'old');
  t.equal(
    claims(held).sub,
    'system:serviceaccount:argocd-manager:argocd-manager',
    'the held token is of the shared account',
  );
  t.equal(await poll(held), 200, 'and works');

  const res = await api.request('DELETE', `/v1/tenants/${legacy.tenantId}/managed-clusters/old?removeRbac=1`, {
    key: legacy.apiKey,
  });
  t.equal(res.statusCode, 202, `removed (${res.body.slice(0, 300)})`);
  const revocation = res.json().revocation;
  t.equal(revocation?.serviceAccount, 'argocd-manager/argocd-manager', 'the revocation names the recorded account');
  t.equal(revocation?.revoked, true, 'which was deleted');
  t.same(revocation?.removed, ['namespaces/apps/roles/argocd-manager'], 'with its Role in apps');
  const started = Date.now();
  let status = await poll(held);
  while (status !== 401 && Date.now() - started < 60_000) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    status = await poll(held);
  }
  t.equal(
    status,
    401,
    `the held token is refused within 60 s of the removal (took ${Math.round((Date.now() - started) / 1000)} s)`,
  );
});

async function programToken2(tenantId: string, name: string): Promise<string> {
  const all = await api.services.managedClusters.forProgram(api.db.pool, tenantId);
  const found = all.find((m) => m.name === name);
  if (!found?.config.bearerToken) throw new Error(`no bearer token for ${name} in the program's input`);
  return found.config.bearerToken;
}
