/**
 * Managed-cluster registration against real kube-apiservers from the toolchain (API servers only:
 * etcd and kube-apiserver with service-account token flags, so TokenRequest works): one plays the
 * tenant's own cluster, one a root cluster of the service, one another tenant's virtual cluster.
 * The provisioner's API runs in-process (createTestApi: real app, real Postgres, no engine).
 *
 * Covered: registration by kubeconfig and by bearer token + server + CA (answer, generation bump,
 * operation, audit, credentials sealed and never returned); every refusal with its code and
 * message, nothing written: exec / token-file kubeconfigs, an address the policy refuses, a closed
 * port (network error named), a server that never answers (refused within the 10 s bound), a
 * rejected token, missing permissions (listed), a second registration of a name or of a server,
 * a root cluster's server (by URL and by another name resolving to it), another tenant's vcluster;
 * reads and the idempotent removal.
 */
import t, { type Test } from 'tap';
import { createServer, type Server } from 'node:net';
import { CoreV1Api, RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { createTestApi, type TestApi } from '../helpers/api.ts';
import { startApiServers } from '../../sandbox/control-plane.ts';
import { freePort } from '../../sandbox/processes.ts';
import { setTenantStatus } from '../helpers/tenants.ts';
import { auditCount, auditRows } from '../helpers/audit.ts';
import { sealedManagedClusters } from '../../provisioner/store/managed-clusters.ts';

t.setTimeout(10 * 60_000);

const servers = await startApiServers('hrt-e2e-managed-', ['own', 'root', 'foreign']);
const { own, root, foreign } = servers.servers;
const api: TestApi = await createTestApi({
  env: {
    PROVISIONER_MANAGED_CLUSTER_ALLOWED_CIDRS: '127.0.0.0/8',
    PROVISIONER_CLUSTER_ALLOWED_CIDRS: '127.0.0.0/8',
  },
});
const silent: Server = createServer(() => {
  // accepts and never answers: the TLS handshake never completes
});
await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
t.teardown(async () => {
  silent.close();
  await api.close();
  await servers.stop();
});

// The tenant's cluster: namespaces, a ServiceAccount allowed everything in `apps` (what Argo CD
// needs there), one only allowed to read, and their tokens from TokenRequest.
const core = own.kc.makeApiClient(CoreV1Api);
const rbac = own.kc.makeApiClient(RbacAuthorizationV1Api);
for (const name of ['apps', 'web', 'deployer']) await core.createNamespace({ body: { metadata: { name } } });
async function serviceAccountToken(name: string, rules: Array<{ verbs: string[] }>): Promise<string> {
  await core.createNamespacedServiceAccount({ namespace: 'deployer', body: { metadata: { name } } });
  await rbac.createNamespacedRole({
    namespace: 'apps',
    body: {
      metadata: { name },
      rules: rules.map((r) => ({ apiGroups: ['*'], resources: ['*'], verbs: r.verbs })),
    },
  });
  await rbac.createNamespacedRoleBinding({
    namespace: 'apps',
    body: {
      metadata: { name },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name },
      subjects: [{ kind: 'ServiceAccount', name, namespace: 'deployer' }],
    },
  });
  const answer = await core.createNamespacedServiceAccountToken({
    name,
    namespace: 'deployer',
    body: { spec: { audiences: [], expirationSeconds: 3600 } },
  });
  return answer.status!.token!;
}
const deployerToken = await serviceAccountToken('argocd-manager', [{ verbs: ['*'] }]);
const readerToken = await serviceAccountToken('reader', [{ verbs: ['get', 'list', 'watch'] }]);
const caData = Buffer.from(own.ca.certPem).toString('base64');

function tokenKubeconfig(server: string, token: string, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'c', cluster: { server, 'certificate-authority-data': caData } }],
    users: [{ name: 'u', user: { token, ...extra } }],
    contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
    'current-context': 'x',
  });
}

const tenantA = await api.signup();
const tenantB = await api.signup();
const tenantC = await api.signup();
const base = (id: string) => `/v1/tenants/${id}/managed-clusters`;

/** What a refusal must leave as it was: no registration, the same generation, no audit row. */
async function unchanged(t: Test, tenantId: string, key: string, generation: number): Promise<void> {
  const list = await api.request('GET', base(tenantId), { key });
  t.same(
    list.json().items.map((m: { name: string }) => m.name),
    registered.get(tenantId) ?? [],
    'the refusal registered nothing',
  );
  const tenant = await api.request('GET', `/v1/tenants/${tenantId}`, { key });
  t.equal(tenant.json().generation, generation, "the refusal left the tenant's generation as it was");
}
const registered = new Map<string, string[]>();

t.test('registration by a kubeconfig with a least-privilege ServiceAccount token', async (t) => {
  const before = (await api.request('GET', `/v1/tenants/${tenantA.tenantId}`, { key: tenantA.apiKey })).json();
  const started = Date.now();
  const res = await api.request('POST', base(tenantA.tenantId), {
    key: tenantA.apiKey,
    body: { name: 'prod', namespaces: ['apps'], kubeconfig: tokenKubeconfig(own.server, deployerToken) },
  });
  t.equal(res.statusCode, 201, `registered (${res.body.slice(0, 300)})`);
  t.ok(Date.now() - started < 10_000, 'answered within 10 s');
  registered.set(tenantA.tenantId, ['prod']);
  const body = res.json();
  t.equal(body.managedCluster.name, 'prod', 'the answer names the registration');
  t.equal(body.managedCluster.server, own.server, 'the server as given');
  t.same(body.managedCluster.namespaces, ['apps'], 'the namespaces as given');
  t.match(body.managedCluster.serverVersion, /^v1\.\d+/, "the server's Kubernetes version");
  t.match(
    body.managedCluster.conditions,
    [{ type: 'Reachable', status: 'True', reason: 'Validated' }],
    'Reachable=True from the registration',
  );
  t.equal(res.headers.location, `${base(tenantA.tenantId)}/prod`, 'Location names the registration');
  t.notOk(res.body.includes(deployerToken), 'the answer does not return the token');

  const after = (await api.request('GET', `/v1/tenants/${tenantA.tenantId}`, { key: tenantA.apiKey })).json();
  t.equal(after.generation, before.generation + 1, "the registration bumps the tenant's generation");
  const op = await api.request('GET', `/v1/operations/${body.operationId}`, { key: tenantA.apiKey });
  t.equal(op.json().state, 'queued', 'the operation that writes the cluster Secret is queued');
  t.equal(op.json().generation, after.generation, 'for the new generation');

  const sealed = (await sealedManagedClusters(api.db.pool, tenantA.tenantId)).find((c) => c.name === 'prod');
  t.notOk(sealed!.credentialsEnc.includes(Buffer.from(deployerToken)), 'the token is stored sealed, not in plaintext');
  const audit = await auditRows(api.db.pool, { action: 'managed-cluster.register', targetId: tenantA.tenantId });
  t.equal(audit.length, 1, 'the registration is audited once');
  t.equal(audit[0]!.actorRole, 'tenant', 'by the tenant');
  t.notMatch(JSON.stringify(audit[0]!.after), deployerToken, 'the audit row holds no credentials');

  const forProgram = await api.services.managedClusters.forProgram(api.db.pool, tenantA.tenantId);
  t.same(
    forProgram,
    [
      {
        name: 'prod',
        server: own.server,
        namespaces: ['apps'],
        config: { bearerToken: deployerToken, tlsClientConfig: { insecure: false, caData } },
      },
    ],
    "the tenant's program gets the registration with its credentials in Argo CD's config format",
  );
});

t.test('registration by bearer token, server and CA (PEM)', async (t) => {
  const res = await api.request('POST', base(tenantB.tenantId), {
    key: tenantB.apiKey,
    body: { name: 'staging', namespaces: ['apps'], server: own.server, token: deployerToken, caData: own.ca.certPem },
  });
  t.equal(res.statusCode, 201, `registered (${res.body.slice(0, 300)})`);
  registered.set(tenantB.tenantId, ['staging']);
  t.equal(res.json().managedCluster.authMethod, 'token', 'recorded as a token registration');
  const [program] = await api.services.managedClusters.forProgram(api.db.pool, tenantB.tenantId);
  t.equal(program?.config.tlsClientConfig?.caData, caData, 'the CA is passed on as base64 PEM, as Argo CD reads it');
  t.equal(program?.config.bearerToken, deployerToken, 'the token is passed on');
});

t.test('refusals: each a 4xx with its code and message, nothing written', async (t) => {
  const generationOf = async (id: string) =>
    (await api.request('GET', `/v1/tenants/${id}`)).json().generation as number;
  const [generationA, generationC] = [await generationOf(tenantA.tenantId), await generationOf(tenantC.tenantId)];
  // Tenant C has no registration yet: refusals about the cluster itself; tenant A has `prod`.
  const post = (body: Record<string, unknown>, tenant = tenantC) =>
    api.request('POST', base(tenant.tenantId), {
      key: tenant.apiKey,
      body: { name: 'other', namespaces: ['apps'], ...body },
    });

  const cases: Array<[string, Record<string, unknown>, number, string, RegExp]> = [
    [
      'an exec credential plugin',
      {
        kubeconfig: tokenKubeconfig(own.server, 'x').replace(
          '"user":{"token":"x"}',
          '"user":{"exec":{"apiVersion":"client.authentication.k8s.io/v1","command":"/bin/sh","args":["-c","id"]}}',
        ),
      },
      400,
      'VALIDATION_FAILED',
      /users\[0\]\.user\.exec: runs a command on the control plane/,
    ],
    [
      'a token read from a file',
      { kubeconfig: tokenKubeconfig(own.server, 'x').replace('"token":"x"', '"tokenFile":"/etc/passwd"') },
      400,
      'VALIDATION_FAILED',
      /tokenFile: reads a file on the control plane/,
    ],
    [
      'an auth-provider plugin',
      {
        kubeconfig: tokenKubeconfig(own.server, 'x').replace(
          '"token":"x"',
          '"auth-provider":{"name":"gcp","config":{"cmd-path":"/bin/sh"}}',
        ),
      },
      400,
      'VALIDATION_FAILED',
      /auth-provider: runs an authentication plugin/,
    ],
    [
      'the cloud metadata address',
      { server: 'https://169.254.169.254', token: 'x' },
      400,
      'VALIDATION_FAILED',
      /link-local address/,
    ],
    [
      'a closed port',
      { server: `https://127.0.0.1:${await freePort()}`, token: deployerToken, caData },
      422,
      'MANAGED_CLUSTER_UNREACHABLE',
      /could not be reached: ECONNREFUSED/,
    ],
    [
      'a token the server rejects',
      { server: own.server, token: 'not-a-valid-token', caData },
      422,
      'MANAGED_CLUSTER_UNAUTHORIZED',
      /refused the credentials \(401 Unauthorized\)/,
    ],
    [
      'a CA that did not sign the server certificate',
      { server: own.server, token: deployerToken, caData: Buffer.from(root.ca.certPem).toString('base64') },
      422,
      'MANAGED_CLUSTER_UNREACHABLE',
      /could not be reached: [A-Z_]+: .*(certificate|signature)/i,
    ],
  ];
  for (const [what, body, status, code, message] of cases) {
    const res = await post({ ...body, name: 'other' });
    t.equal(res.statusCode, status, `${what}: ${status} (${res.body.slice(0, 300)})`);
    t.equal(res.json().error.code, code, `${what}: ${code}`);
    t.match(res.json().error.message, message, `${what}: the message says why`);
    t.notOk(res.body.includes(deployerToken), `${what}: the answer does not echo the token`);
  }

  const missing = await post({ server: own.server, token: readerToken, caData, namespaces: ['apps', 'web'] });
  t.equal(missing.statusCode, 422, 'missing permissions: 422');
  t.equal(missing.json().error.code, 'MANAGED_CLUSTER_PERMISSIONS_MISSING', 'missing permissions: its code');
  t.same(
    missing.json().error.details.missing,
    [
      'create */* in namespace apps',
      'update */* in namespace apps',
      'patch */* in namespace apps',
      'delete */* in namespace apps',
      ...['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'].map((v) => `${v} */* in namespace web`),
    ],
    'missing permissions: each missing verb and namespace is listed',
  );
  t.match(missing.json().error.message, /create \*\/\* in namespace apps/, 'the message lists them too');
  const clusterWide = await post({ server: own.server, token: deployerToken, caData, namespaces: [] });
  t.equal(
    clusterWide.json().error?.code,
    'MANAGED_CLUSTER_PERMISSIONS_MISSING',
    'no namespace listed: the credentials need the whole cluster',
  );
  t.match(
    clusterWide.json().error?.details?.missing,
    ['get */* cluster-wide'],
    'and the cluster-wide verbs are listed',
  );

  const sameName = await post({ name: 'prod', server: own.server, token: deployerToken, caData }, tenantA);
  t.equal(sameName.statusCode, 409, 'a second registration of the name: 409');
  t.equal(sameName.json().error.code, 'MANAGED_CLUSTER_EXISTS', 'a second registration of the name: its code');
  const sameServer = await post({ server: `${own.server}/`, token: deployerToken, caData }, tenantA);
  t.equal(sameServer.statusCode, 409, 'the same server spelled with a trailing slash: 409');
  t.equal(sameServer.json().error.code, 'MANAGED_CLUSTER_SERVER_TAKEN', 'the same server: its code');
  t.match(sameServer.json().error.message, /already registered for this tenant as 'prod'/, 'naming the registration');

  const rootReg = await api.request('POST', '/v1/clusters', {
    key: api.operatorKey,
    body: { name: 'root-1', region: 'eu-1', capacity: 10, kubeconfig: root.kubeconfig },
  });
  t.equal(rootReg.statusCode, 201, 'the root cluster is registered by an operator');
  const rootCa = Buffer.from(root.ca.certPem).toString('base64');
  for (const server of [root.server, root.server.replace('127.0.0.1', 'localhost')]) {
    const res = await post({ server, token: 'x', caData: rootCa });
    t.equal(res.statusCode, 403, `a root cluster's server (${server}): 403`);
    t.equal(res.json().error.code, 'MANAGED_CLUSTER_ISOLATION', `${server}: its code`);
    t.match(res.json().error.message, /one of the service's root clusters/, `${server}: the message says why`);
  }
  await setTenantStatus(api.db.pool, tenantC.tenantId, { endpoints: { vclusterEndpoint: foreign.server } });
  const vcluster = await post(
    { server: foreign.server, token: 'x', caData: Buffer.from(foreign.ca.certPem).toString('base64') },
    tenantA,
  );
  t.equal(vcluster.statusCode, 403, "another tenant's vcluster: 403");
  t.equal(vcluster.json().error.code, 'MANAGED_CLUSTER_ISOLATION', "another tenant's vcluster: its code");
  t.match(vcluster.json().error.message, /another tenant's virtual cluster/, 'the message says why');

  const otherTenant = await api.request('POST', base(tenantB.tenantId), {
    key: tenantA.apiKey,
    body: { name: 'x', server: own.server, token: deployerToken },
  });
  t.equal(otherTenant.statusCode, 404, "a tenant key naming another tenant: 404, as for the tenant's other routes");

  const started = Date.now();
  const silentPort = (silent.address() as { port: number }).port;
  const hung = await post({ server: `https://127.0.0.1:${silentPort}`, token: deployerToken, caData });
  const took = Date.now() - started;
  t.equal(hung.json().error.code, 'MANAGED_CLUSTER_UNREACHABLE', 'a server that never answers: unreachable');
  t.match(hung.json().error.message, /no answer within 10 s/, 'the message says it did not answer in time');
  t.ok(took >= 9_000 && took < 12_000, `refused at the 10 s bound (${took} ms)`);

  await unchanged(t, tenantA.tenantId, tenantA.apiKey, generationA);
  await unchanged(t, tenantC.tenantId, tenantC.apiKey, generationC);
  t.equal(
    await auditCount(api.db.pool, { actionPrefix: 'managed-cluster.', targetId: [tenantA.tenantId, tenantC.tenantId] }),
    1,
    'no refusal was audited as a registration (only the first registration of tenant A)',
  );
});

t.test('reads and removal', async (t) => {
  const one = await api.request('GET', `${base(tenantA.tenantId)}/prod`, { key: tenantA.apiKey });
  t.equal(one.statusCode, 200, 'GET one registration');
  t.equal(one.json().server, own.server, 'with its server');
  t.notOk(one.body.includes(deployerToken), 'without its credentials');
  const missing = await api.request('GET', `${base(tenantA.tenantId)}/nope`, { key: tenantA.apiKey });
  t.equal(missing.json().error.code, 'MANAGED_CLUSTER_NOT_FOUND', 'an unknown name: MANAGED_CLUSTER_NOT_FOUND');
  const byOperator = await api.request('GET', base(tenantA.tenantId), { key: api.operatorKey });
  t.equal(byOperator.json().items.length, 1, 'an operator lists any tenant’s registrations');

  const generation = (await api.request('GET', `/v1/tenants/${tenantA.tenantId}`)).json().generation as number;
  const removed = await api.request('DELETE', `${base(tenantA.tenantId)}/prod`, { key: tenantA.apiKey });
  t.equal(removed.statusCode, 202, 'removal: 202 with the operation');
  const after = (await api.request('GET', `/v1/tenants/${tenantA.tenantId}`)).json();
  t.equal(after.generation, generation + 1, 'removal bumps the generation (the program deletes the Secret)');
  t.equal(after.status.lastOperationId, removed.json().operationId, 'and queues the operation');
  const again = await api.request('DELETE', `${base(tenantA.tenantId)}/prod`, { key: tenantA.apiKey });
  t.equal(again.statusCode, 204, 'a second removal: 204, nothing to do');
  const list = await api.request('GET', base(tenantA.tenantId), { key: tenantA.apiKey });
  t.same(list.json().items, [], 'the registration is gone');
  t.same(
    await api.services.managedClusters.forProgram(api.db.pool, tenantA.tenantId),
    [],
    "and gone from the program's input",
  );
  t.equal(await auditCount(api.db.pool, { action: 'managed-cluster.remove' }), 1, 'the removal is audited once');
});
