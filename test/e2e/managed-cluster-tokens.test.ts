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
 */
import t from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, RbacAuthorizationV1Api, type V1PolicyRule } from '@kubernetes/client-node';
import { createTestApi, startReplica, type TestApi, type TestReplica } from '../helpers/api.ts';
import { kubeRequest } from '../../provisioner/managed-clusters/kube-api.ts';
import { startEtcd, startKubeControlPlane, toolchainFrom } from './harness/control-plane.ts';

t.setTimeout(10 * 60_000);

const bin = process.env.HRT_TOOLCHAIN_BIN;
if (!bin) throw new Error('HRT_TOOLCHAIN_BIN is not set: run the tier through scripts/test.sh e2e');
const toolchain = toolchainFrom(bin);
const dir = await mkdtemp(join(tmpdir(), 'hrt-e2e-mc-tokens-'));
const etcd = await startEtcd(toolchain, join(dir, 'etcd'));
const own = await startKubeControlPlane(toolchain, {
  name: 'own',
  dir: join(dir, 'own'),
  etcdUrl: etcd.url,
  etcdPrefix: '/own',
  nodes: 0,
  apiServerOnly: true,
});
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
  await own.stop();
  await etcd.stop();
  await rm(dir, { recursive: true, force: true });
});

const core = own.kc.makeApiClient(CoreV1Api);
const rbac = own.kc.makeApiClient(RbacAuthorizationV1Api);
for (const name of ['apps', 'deployer']) await core.createNamespace({ body: { metadata: { name } } });

/** A ServiceAccount in `deployer` allowed everything in `apps`, and (when `renew`) tokens for itself. */
async function serviceAccountToken(name: string, renew: boolean): Promise<string> {
  await core.createNamespacedServiceAccount({ namespace: 'deployer', body: { metadata: { name } } });
  const bind = async (namespace: string, rules: V1PolicyRule[]): Promise<void> => {
    await rbac.createNamespacedRole({ namespace, body: { metadata: { name }, rules } });
    await rbac.createNamespacedRoleBinding({
      namespace,
      body: {
        metadata: { name },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name },
        subjects: [{ kind: 'ServiceAccount', name, namespace: 'deployer' }],
      },
    });
  };
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
const renewingToken = await serviceAccountToken('argocd-manager', true);
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
  t.equal(registered.tokenRotation?.serviceAccount, 'deployer/argocd-manager', 'the answer names the ServiceAccount');
  t.notMatch(res.body, renewingToken, 'the answer holds no token');
  const first = await programToken('prod');
  t.not(first, renewingToken, 'the control plane holds a token it requested, not the one given');
  t.equal(claims(first).exp - claims(first).iat, LIFETIME_SECONDS, `the token is valid for ${LIFETIME_SECONDS} s`);
  t.equal(claims(first).sub, 'system:serviceaccount:deployer:argocd-manager', 'for the same ServiceAccount');
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

  const { rows } = await api.db.pool.query<{ token_rotations: number; credentials_enc: Buffer }>(
    'SELECT token_rotations, credentials_enc FROM managed_clusters WHERE tenant_id = $1 AND name = $2',
    [tenant.tenantId, 'prod'],
  );
  const rotations = rows[0]!.token_rotations;
  t.ok(rotations >= 3, `the registration counts its renewals (${rotations})`);
  t.notOk(rows[0]!.credentials_enc.toString('latin1').includes(seen.at(-1)!), 'the stored token is sealed');
  const audit = await api.db.pool.query<{ actor_role: string; after: string }>(
    `SELECT actor_role, after::text FROM audit_log WHERE action = 'managed-cluster.rotate-token' AND target_id = $1`,
    [tenant.tenantId],
  );
  t.ok(audit.rows.length >= rotations, `every renewal is audited (${audit.rows.length} rows, ${rotations} renewals)`);
  t.ok(
    audit.rows.every((r) => r.actor_role === 'system' && seen.every((s) => !r.after.includes(s))),
    'the audit rows name the system and hold no token',
  );
  const logs = await api.db.pool.query<{ line: string }>(
    `SELECT l.line FROM operation_logs l JOIN operations o ON o.id = l.operation_id
      WHERE o.tenant_id = $1 AND l.line LIKE '%token of deployer/argocd-manager renewed%'`,
    [tenant.tenantId],
  );
  t.ok(logs.rows.length >= rotations, `each renewal's operation logs it (${logs.rows.length} lines)`);
  t.ok(
    logs.rows.every((r) => seen.every((s) => !r.line.includes(s))),
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
