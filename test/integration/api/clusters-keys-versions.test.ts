import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { ScriptedEngine } from '../../helpers/scripted-engine.ts';
import { auditActions, auditRows } from '../../helpers/audit.ts';
import { readClusterKubeconfig } from '../../../provisioner/store/clusters.ts';

const api = await createTestApi();
t.teardown(() => api.close());
const client = api.client;
const operator = api.as(api.operatorKey);

const kubeconfig = (server = 'https://203.0.113.10:6443') => `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "${server}"}}]
users: [{name: u, user: {token: very-secret-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`;

t.test('a root cluster is registered with its kubeconfig encrypted at rest and never returned', async (t) => {
  const res = await operator.request('POST /v1/clusters', {
    body: {
      name: 'eu-west-1a',
      region: 'eu-west-1',
      capacity: 50,
      labels: { tier: 'shared' },
      plans: ['free', 'team'],
      kubeconfig: kubeconfig(),
      // The server is made up: the registration's reachability probe is tested in clusters-add.test.ts.
      force: true,
    },
  });
  t.equal(res.status, 201);
  t.match(res.body, {
    name: 'eu-west-1a',
    region: 'eu-west-1',
    capacity: 50,
    labels: { tier: 'shared' },
    plans: ['free', 'team'],
    cordoned: false,
    tenants: 0,
  });
  t.notMatch(JSON.stringify(res.body), /very-secret-token/);
  const sealed = await readClusterKubeconfig(api.db.pool, 'eu-west-1a');
  if (!sealed) throw new Error('precondition: the cluster was stored');
  t.notOk(sealed.toString('latin1').includes('very-secret-token'), 'not stored in clear');
  t.equal(api.services.box.decrypt(sealed, 'cluster/eu-west-1a').toString(), kubeconfig(), 'decrypts back');
  t.throws(() => api.services.box.decrypt(sealed, 'cluster/other'), 'bound to its cluster name');
  const list = await client.call('GET /v1/clusters');
  t.same(
    list.items.map((c) => c.name),
    ['eu-west-1a'],
  );
  t.notMatch(JSON.stringify(list), /very-secret-token/);
  const audit = await auditRows(api.db.pool, { action: 'cluster.register' });
  t.notMatch(JSON.stringify(audit[0]!.after), /very-secret-token/, 'audit row holds no kubeconfig');
});

t.test('cluster registration refuses bad input with the field named', async (t) => {
  const cases: Array<[Record<string, unknown>, number, string, string]> = [
    [{ name: 'eu-west-1a', region: 'eu', capacity: 1, kubeconfig: kubeconfig() }, 409, 'CLUSTER_EXISTS', 'name'],
    [{ name: 'Bad_Name', region: 'eu', capacity: 1, kubeconfig: kubeconfig() }, 400, 'VALIDATION_FAILED', 'name'],
    [{ name: 'c2', region: 'eu', capacity: -1, kubeconfig: kubeconfig() }, 400, 'VALIDATION_FAILED', 'capacity'],
    [{ name: 'c2', region: 'eu', capacity: 1, kubeconfig: 'not: [valid' }, 400, 'VALIDATION_FAILED', 'kubeconfig'],
    [
      { name: 'c2', region: 'eu', capacity: 1, kubeconfig: 'apiVersion: v1\nkind: Config\n' },
      400,
      'VALIDATION_FAILED',
      'kubeconfig',
    ],
    [
      { name: 'c2', region: 'eu', capacity: 1, kubeconfig: kubeconfig('ftp://x') },
      400,
      'VALIDATION_FAILED',
      'kubeconfig',
    ],
    [{ name: 'c2', region: 'eu', capacity: 1, plans: ['gold'], kubeconfig: kubeconfig() }, 400, 'UNKNOWN_PLAN', 'plan'],
    [{ name: 'c2', region: 'eu', capacity: 1 }, 400, 'VALIDATION_FAILED', 'kubeconfig'],
  ];
  // some bodies are of the wrong shape: all sent raw
  for (const [body, status, code, field] of cases) {
    const res = await api.request('POST', '/v1/clusters', { body });
    t.equal(res.statusCode, status, JSON.stringify(body).slice(0, 60));
    t.match(res.json().error, { code, field });
  }
  t.equal((await client.call('GET /v1/clusters')).items.length, 1, 'nothing half-written');
});

t.test('cordon and uncordon are recorded and audited; unknown clusters are 404', async (t) => {
  const params = { name: 'eu-west-1a' };
  const c = await operator.request('POST /v1/clusters/:name/cordon', { params });
  t.equal(c.status, 200);
  t.equal(c.ok && c.body.cordoned, true);
  t.equal((await client.call('GET /v1/clusters/:name', { params })).cordoned, true);
  const u = await operator.call('POST /v1/clusters/:name/uncordon', { params });
  t.equal(u.cordoned, false);
  t.same(await auditActions(api.db.pool, { targetType: 'cluster' }), [
    'cluster.register',
    'cluster.cordon',
    'cluster.uncordon',
  ]);
  await t.rejects(client.call('POST /v1/clusters/:name/cordon', { params: { name: 'nope' } }), {
    status: 404,
    code: 'CLUSTER_NOT_FOUND',
  });
});

t.test('runtime versions list the catalog with availability and the default; ops change availability', async (t) => {
  const anonymous = api.as(null);
  const res = await anonymous.call('GET /v1/runtime-versions');
  t.same(
    res.items.map((v) => v.version),
    catalog.versions.map((v) => v.version),
  );
  t.equal(res.defaultVersion, catalog.defaultVersion('stable'));
  t.equal(res.items.filter((v) => v.default).length, 1);
  t.ok(res.items.every((v) => v.availability === 'available' && v.components.argoCd));
  const version = catalog.versions[0]!.version;
  const put = await operator.request('PUT /v1/runtime-versions/:version/availability', {
    params: { version },
    body: { availability: 'deprecated' },
  });
  t.equal(put.status, 200);
  t.equal(put.ok && put.body.availability, 'deprecated');
  const after = await anonymous.call('GET /v1/runtime-versions');
  t.equal(after.items.find((v) => v.version === version)!.availability, 'deprecated');
  // an availability outside the list: sent raw
  const bad = await api.request('PUT', `/v1/runtime-versions/${version}/availability`, {
    body: { availability: 'gone' },
  });
  t.equal(bad.statusCode, 400);
  t.match(bad.json().error, { code: 'VALIDATION_FAILED', field: 'availability' });
  await t.rejects(
    client.call('PUT /v1/runtime-versions/:version/availability', {
      params: { version: '9.9.9' },
      body: { availability: 'withdrawn' },
    }),
    { name: 'ApiError', status: 404 },
  );
  const audit = await auditRows(api.db.pool, { action: 'runtime_version.availability' });
  t.match(audit[0], { before: { availability: 'available' }, after: { availability: 'deprecated' } });
});

t.test('admin creates and revokes keys; keys are shown once and listed without secrets', async (t) => {
  const created = await client.request('POST /v1/keys', { body: { role: 'operator', name: 'oncall' } });
  t.equal(created.status, 201);
  if (!created.ok) throw new Error('precondition: the key was created');
  const { key, info } = created.body;
  t.match(key, /^hrt_operator_/);
  t.equal(info.prefix, key.slice(0, info.prefix.length));
  const list = await client.call('GET /v1/keys');
  t.notMatch(JSON.stringify(list), new RegExp(key.slice(15)), 'listing never contains a key');
  t.ok(list.items.some((k) => k.id === info.id));
  // a role outside the list: sent raw
  const badRole = await api.request('POST', '/v1/keys', { body: { role: 'root', name: 'x' } });
  t.match(badRole.json().error, { code: 'VALIDATION_FAILED', field: 'role' });
  await t.rejects(client.call('POST /v1/keys', { body: { role: 'tenant', name: 'x' } }), {
    code: 'VALIDATION_FAILED',
    field: 'tenantId',
  });
  const admin = (await client.call('GET /v1/keys')).items.find((k) => k.name === 'test admin')!;
  await t.rejects(
    client.call('DELETE /v1/keys/:id', { params: { id: admin.id } }),
    { name: 'ApiError', status: 409 },
    'an admin key cannot revoke itself',
  );
  const revoke = await client.request('DELETE /v1/keys/:id', { params: { id: info.id } });
  t.equal(revoke.status, 200);
  if (!revoke.ok) throw new Error('precondition: the key was revoked');
  const again = await client.call('DELETE /v1/keys/:id', { params: { id: info.id } });
  t.equal(again.revokedAt, revoke.body.revokedAt, 'revoking twice keeps the first time');
  const listed = await client.call('GET /v1/keys', { query: { includeRevoked: true } });
  t.ok(listed.items.find((k) => k.id === info.id)!.revokedAt);
  t.same(await auditActions(api.db.pool, { targetType: 'api_key', targetId: info.id }), [
    'key.create',
    'key.revoke',
    'key.revoke',
  ]);
});

t.test('health, readiness, metrics, OpenAPI and unknown routes', async (t) => {
  t.same((await api.request('GET', '/healthz', { key: null })).json(), { status: 'ok' });
  const ready = (await api.request('GET', '/readyz', { key: null })).json();
  t.same(
    { status: ready.status, checks: ready.checks },
    { status: 'ready', checks: { database: 'ok', migrations: 'ok' } },
    '/readyz: ready, database and migrations ok',
  );
  t.same(
    ready.loops.map((l: { name: string; state: string }) => [l.name, l.state]),
    [
      ['notifications', 'running'],
      ['tunnel-directory', 'running'],
      ['managed-cluster-prober', 'running'],
      ['managed-cluster-token-refresher', 'running'],
      ['tombstone-purger', 'running'],
      ['idempotency-pruner', 'running'],
      ['removed-runtime-purger', 'running'],
      ['app-history-pruner', 'running'],
      // Sleep and the warm pool are applied by a reconciler: without one they do not run.
      ['idle-sleep', 'disabled'],
      ['webhook-delivery', 'running'],
      ['warm-pool', 'disabled'],
    ],
    '/readyz lists every loop of this replica (engine none: no reconciler, fleet driver or drift watch; no idle sleep or warm pool) by name',
  );
  t.equal(
    ready.loops.filter((l: Record<string, unknown>) => 'lastError' in l).length,
    0,
    'no loop error text on the public /readyz',
  );
  await api.signup();
  const metrics = await api.request('GET', '/metrics', { key: null });
  t.match(metrics.headers['content-type'], /text\/plain/);
  t.match(metrics.body, /provisioner_tenants\{phase="Pending"\} \d+/);
  t.match(metrics.body, /provisioner_http_request_duration_seconds_bucket\{[^}]*route="\/v1\/signup"/);
  const spec = (await api.request('GET', '/docs/json', { key: null })).json();
  t.equal(spec.openapi.slice(0, 2), '3.');
  for (const path of [
    '/v1/signup',
    '/v1/tenants',
    '/v1/tenants/{id}',
    '/v1/tenants/{id}/upgrade',
    '/v1/clusters',
    '/v1/keys',
    '/v1/runtime-versions',
  ]) {
    t.ok(spec.paths[path], `OpenAPI documents ${path}`);
  }
  // health, metrics, the OpenAPI document and unknown routes are outside the route map: raw
  const nf = await api.request('GET', '/v1/nothing');
  t.equal(nf.statusCode, 404);
  t.equal(nf.json().error.code, 'ROUTE_NOT_FOUND');
});

t.test(
  '/readyz and /metrics list the loops of a replica with a reconciler, the drift watch and its heartbeat',
  async (t) => {
    // TEST DOUBLE engine (everything else real): a replica that runs a reconciler, as `provisioner serve` with an engine.
    const other = await createTestApi({ engine: new ScriptedEngine() });
    t.teardown(() => other.close());
    await other.services.startWorkers();
    const ready = (await other.request('GET', '/readyz', { key: null })).json();
    const loops = new Map(ready.loops.map((l: { name: string; state: string }) => [l.name, l.state]));
    t.same(
      [...loops.keys()].slice(0, 2),
      ['notifications', 'tunnel-directory'],
      'the LISTEN connection and the tunnel directory are loops, first in the list',
    );
    t.same(
      [...loops.keys()].slice(-7),
      [
        'warm-pool',
        'drift-watch-flush',
        'drift-watch',
        'lease-heartbeat',
        'reconciler',
        'engine-check',
        'fleet-driver',
      ],
      "the drift watch's two loops, then the workers: the lease heartbeat before the reconciler, its engine re-check after it",
    );
    for (const name of [
      'notifications',
      'tunnel-directory',
      'drift-watch',
      'drift-watch-flush',
      'lease-heartbeat',
      'engine-check',
    ])
      t.equal(loops.get(name), 'running', `${name} runs`);
    const metrics = (await other.request('GET', '/metrics', { key: null })).body;
    for (const name of ['notifications', 'drift-watch', 'lease-heartbeat', 'engine-check'])
      t.match(metrics, new RegExp(`provisioner_loop_running\\{loop="${name}"\\} 1`), `/metrics: ${name} runs`);
    await other.services.stopWorkers();
    t.same(
      other.services.loops
        .status()
        .filter((l) => ['lease-heartbeat', 'reconciler', 'engine-check'].includes(l.name))
        .map((l) => [l.name, l.state]),
      [
        ['lease-heartbeat', 'stopped'],
        ['reconciler', 'stopped'],
        ['engine-check', 'stopped'],
      ],
      'stopping the workers stops the heartbeat and the engine re-check with the reconciler',
    );
  },
);

t.test('readiness fails when the database is unreachable', async (t) => {
  const other = await createTestApi();
  // The services hold connections of the pool (the LISTEN one): hand them back so the pool can end.
  await other.services.stop();
  await other.db.pool.end();
  const res = await other.app.inject({ method: 'GET', url: '/readyz' });
  t.equal(res.statusCode, 503);
  t.equal(res.json().checks.database, 'unreachable');
  other.db.pool.end = async () => {};
  await other.close();
});
