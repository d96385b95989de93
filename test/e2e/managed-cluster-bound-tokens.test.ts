/**
 * Bound managed-cluster tokens against a real kube-apiserver from the toolchain (with the
 * service-account issuer and signing-key flags, so TokenRequest works) playing the tenant's own
 * cluster; the API in-process on real Postgres, no engine.
 *
 * Covered: a registration whose ServiceAccount may request tokens for itself and manage Secrets in
 * its namespace gets tokens bound to a per-registration Secret (created, labelled, no data; the
 * token's claims name it) that work, and renewed tokens stay bound to it; DELETE deletes the Secret
 * and the held tokens are refused within 60 s, while another tenant's registration of the same
 * ServiceAccount (its own Secret) keeps working; an account that may not create Secrets gets
 * unbound tokens and both its view and its DELETE say so (valid until expiry); DELETE with the
 * cluster's API server stopped answers 202 with revoked: false and the command that revokes the
 * tokens, which does once run.
 */
import t from 'tap';
import { CoreV1Api, RbacAuthorizationV1Api, type V1PolicyRule } from '@kubernetes/client-node';
import { createTestApi, type TestApi } from '../helpers/api.ts';
import { kubeRequest } from '../../provisioner/managed-clusters/kube-api.ts';
import { startApiServers } from '../../sandbox/control-plane.ts';
import { grantRole } from './harness/kube.ts';
import { auditRows } from '../helpers/audit.ts';

t.setTimeout(8 * 60_000);

const servers = await startApiServers('hrt-e2e-mc-bound-', ['own']);
const own = servers.servers.own;
const LIFETIME_SECONDS = 600; // the shortest the API server grants
const api: TestApi = await createTestApi({
  env: {
    PROVISIONER_MANAGED_CLUSTER_ALLOWED_CIDRS: '127.0.0.0/8',
    PROVISIONER_MANAGED_CLUSTER_TOKEN_SECONDS: String(LIFETIME_SECONDS),
    PROVISIONER_MANAGED_CLUSTER_TOKEN_REFRESH_SECONDS: '2',
  },
});
t.teardown(async () => {
  await api.close();
  await servers.stop();
});

const core = own.kc.makeApiClient(CoreV1Api);
const rbac = own.kc.makeApiClient(RbacAuthorizationV1Api);
for (const name of ['apps', 'deployer']) await core.createNamespace({ body: { metadata: { name } } });

/** A ServiceAccount in `deployer` allowed everything in `apps`, tokens for itself, and `deployer` rules. */
async function serviceAccountToken(name: string, own: V1PolicyRule[]): Promise<string> {
  await core.createNamespacedServiceAccount({ namespace: 'deployer', body: { metadata: { name } } });
  const bind = (namespace: string, rules: V1PolicyRule[]): Promise<void> =>
    grantRole(rbac, namespace, name, { namespace: 'deployer', name }, rules);
  await bind('apps', [{ apiGroups: ['*'], resources: ['*'], verbs: ['*'] }]);
  await bind('deployer', [
    { apiGroups: [''], resources: ['serviceaccounts/token'], resourceNames: [name], verbs: ['create'] },
    ...own,
  ]);
  const answer = await core.createNamespacedServiceAccountToken({
    name,
    namespace: 'deployer',
    body: { spec: { audiences: [], expirationSeconds: 3600 } },
  });
  return answer.status!.token!;
}
// The Role docs/api.md asks for: create, get and delete secrets in the account's namespace.
const binderToken = await serviceAccountToken('binder', [
  { apiGroups: [''], resources: ['secrets'], verbs: ['create', 'get', 'delete'] },
]);
const plainToken = await serviceAccountToken('plain', []);
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

/** Polls until the token is refused (401), 60 s at most: the status and the seconds it took. */
async function untilRefused(token: string): Promise<{ status: number; seconds: number }> {
  const started = Date.now();
  let status = await poll(token);
  while (status !== 401 && Date.now() - started < 75_000) {
    await new Promise((resolve) => setTimeout(resolve, 250));
    status = await poll(token);
  }
  return { status, seconds: (Date.now() - started) / 1000 };
}

interface Claims {
  exp: number;
  iat: number;
  sub: string;
  'kubernetes.io'?: { secret?: { name: string; uid: string } };
}
const claims = (token: string): Claims =>
  JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8')) as Claims;

async function programToken(tenantId: string, name: string): Promise<string> {
  const all = await api.services.managedClusters.forProgram(api.db.pool, tenantId);
  const found = all.find((m) => m.name === name);
  if (!found?.config.bearerToken) throw new Error(`no bearer token for ${name} in the program's input`);
  return found.config.bearerToken;
}

async function secretOf(
  name: string,
): Promise<{ uid: string; type?: string; data?: unknown; labels?: object } | undefined> {
  try {
    const s = await core.readNamespacedSecret({ namespace: 'deployer', name });
    return { uid: s.metadata!.uid!, type: s.type, data: s.data, labels: s.metadata?.labels };
  } catch {
    return undefined;
  }
}

const register = (tenant: { tenantId: string; apiKey: string }, name: string, token: string) =>
  api.request('POST', `/v1/tenants/${tenant.tenantId}/managed-clusters`, {
    key: tenant.apiKey,
    body: { name, namespaces: ['apps'], server: own.server, token, caData: ca },
  });

const first = await api.signup();
const other = await api.signup();

t.test('tokens bound to a per-registration Secret: issued, renewed, revoked by DELETE within 60 s', async (t) => {
  const res = await register(first, 'prod', binderToken);
  t.equal(res.statusCode, 201, `registered (${res.body.slice(0, 300)})`);
  const rotation = res.json().managedCluster.tokenRotation;
  const secretName = `hosted-runtimes-binding-prod-${first.tenantId}`;
  t.equal(rotation?.serviceAccount, 'deployer/binder', 'short-lived tokens of the account');
  t.equal(rotation?.binding, `deployer/${secretName}`, 'bound to the registration’s Secret');
  t.equal(rotation?.unbound, null, 'nothing says they are unbound');
  t.notMatch(res.body, binderToken, 'the answer holds no token');

  const secret = await secretOf(secretName);
  t.ok(secret, 'the binding Secret exists in the ServiceAccount’s namespace');
  t.equal(secret?.type, 'Opaque', 'of type Opaque');
  t.same(secret?.data ?? {}, {}, 'holding no data');
  t.match(secret?.labels, { 'app.kubernetes.io/managed-by': 'hosted-runtimes' }, 'labelled as the service’s');

  const held = await programToken(first.tenantId, 'prod');
  t.not(held, binderToken, 'the control plane holds a token it requested');
  t.same(
    claims(held)['kubernetes.io']?.secret,
    { name: secretName, uid: secret?.uid },
    'the token is bound to that Secret (name and uid)',
  );
  t.equal(await poll(held), 200, 'and it works');

  // The other tenant registers the same account: its tokens are bound to its own Secret.
  const second = await register(other, 'prod', binderToken);
  t.equal(second.statusCode, 201, `the same account registered by another tenant (${second.body.slice(0, 200)})`);
  t.equal(
    second.json().managedCluster.tokenRotation?.binding,
    `deployer/hosted-runtimes-binding-prod-${other.tenantId}`,
    'bound to a Secret of its own',
  );

  // A renewal (every 2 s here) keeps the binding.
  const deadline = Date.now() + 30_000;
  let renewed = held;
  while (renewed === held && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 250));
    renewed = await programToken(first.tenantId, 'prod');
  }
  t.not(renewed, held, 'the token was renewed');
  t.same(claims(renewed)['kubernetes.io']?.secret, { name: secretName, uid: secret?.uid }, 'bound to the same Secret');
  t.equal(await poll(renewed), 200, 'the renewed token works');

  const del = await api.request('DELETE', `/v1/tenants/${first.tenantId}/managed-clusters/prod`, {
    key: first.apiKey,
  });
  t.equal(del.statusCode, 202, `removed (${del.body.slice(0, 300)})`);
  t.match(
    del.json().revocation,
    { serviceAccount: 'deployer/binder', binding: `deployer/${secretName}`, revoked: true },
    'the answer says the binding Secret was deleted',
  );
  t.notOk(del.json().revocation.command, 'no command to run: it is done');
  t.equal(await secretOf(secretName), undefined, 'the binding Secret is gone');
  const last = await programToken(other.tenantId, 'prod');
  for (const [what, token] of [
    ['the first token', held],
    ['the renewed token', renewed],
  ] as const) {
    const { status, seconds } = await untilRefused(token);
    t.equal(status, 401, `${what} is refused (401)`);
    t.ok(seconds <= 60, `${what} was refused within 60 s of the removal (took ${seconds.toFixed(1)} s)`);
  }
  t.equal(await poll(last), 200, "the other tenant's token, bound to its own Secret, still works");
  const audit = (await auditRows(api.db.pool, { action: 'managed-cluster.remove', targetId: first.tenantId })).map(
    (r) => JSON.stringify(r.after),
  );
  t.match(audit[0], /"revoked": ?true/, 'the removal is audited with its revocation');
  t.ok(
    audit.every((after) => ![held, renewed, binderToken].some((s) => after.includes(s))),
    'the audit row holds no token',
  );
});

t.test('an account that may not create Secrets: unbound tokens, and the view and DELETE say so', async (t) => {
  const tenant = await api.signup();
  const res = await register(tenant, 'plain', plainToken);
  t.equal(res.statusCode, 201, `registered (${res.body.slice(0, 300)})`);
  const rotation = res.json().managedCluster.tokenRotation;
  t.equal(rotation?.serviceAccount, 'deployer/plain', 'short-lived tokens all the same');
  t.equal(rotation?.binding, null, 'not bound');
  t.match(rotation?.unbound, /not bound .*Secrets in namespace deployer \(HTTP 403\)/, 'the view says why');
  t.match(rotation?.unbound, `each stays valid until it expires (up to ${LIFETIME_SECONDS} s)`, 'and what it means');
  const held = await programToken(tenant.tenantId, 'plain');
  t.equal(claims(held)['kubernetes.io']?.secret, undefined, 'the token is bound to no Secret');
  t.equal(await poll(held), 200, 'and works');
  t.equal(
    await secretOf(`hosted-runtimes-binding-plain-${tenant.tenantId}`),
    undefined,
    'no binding Secret was created',
  );

  const del = await api.request('DELETE', `/v1/tenants/${tenant.tenantId}/managed-clusters/plain`, {
    key: tenant.apiKey,
  });
  t.equal(del.statusCode, 202, `removed all the same (${del.body.slice(0, 300)})`);
  const revocation = del.json().revocation;
  t.equal(revocation?.revoked, false, 'the answer says the tokens were not revoked');
  t.match(revocation.error, /not bound to a Secret.*stays valid until it expires/, 'why');
  t.ok(Date.parse(revocation.validUntil) > Date.now(), `and until when (${revocation.validUntil})`);
  t.equal(await poll(held), 200, 'the unbound token indeed still works after the removal');
});

t.test('DELETE with the cluster stopped: 202, revoked false and the command that revokes', async (t) => {
  const held = await programToken(other.tenantId, 'prod');
  const secretName = `hosted-runtimes-binding-prod-${other.tenantId}`;
  await own.stopApiServer();
  const started = Date.now();
  const del = await api.request('DELETE', `/v1/tenants/${other.tenantId}/managed-clusters/prod`, {
    key: other.apiKey,
  });
  t.equal(del.statusCode, 202, `the removal is not refused (${del.body.slice(0, 400)})`);
  t.ok(Date.now() - started < 15_000, `answered in ${Date.now() - started} ms`);
  const revocation = del.json().revocation;
  t.match(
    revocation,
    {
      serviceAccount: 'deployer/binder',
      binding: `deployer/${secretName}`,
      revoked: false,
      command: `kubectl -n deployer delete secret ${secretName}`,
    },
    'revoked: false, with the command that does it',
  );
  t.match(revocation.error, /could not be reached/, 'saying the cluster could not be reached');
  const gone = await api.request('GET', `/v1/tenants/${other.tenantId}/managed-clusters/prod`, { key: other.apiKey });
  t.equal(gone.statusCode, 404, 'the registration is removed');

  await own.startApiServer();
  t.equal(await poll(held), 200, 'the held token still works while the Secret is there');
  await core.deleteNamespacedSecret({ namespace: 'deployer', name: secretName }); // what the command does
  const { status, seconds } = await untilRefused(held);
  t.equal(status, 401, `once the tenant deletes it, the token is refused (${seconds.toFixed(1)} s later)`);
});
