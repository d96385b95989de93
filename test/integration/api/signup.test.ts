import { createHash, randomUUID } from 'node:crypto';
import t from 'tap';
import { createTestApi, uniqueOrg } from '../../helpers/api.ts';
import { setAvailability } from '../../../provisioner/store/versions.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { ageIdempotencyKey } from '../../helpers/housekeeping.ts';

const api = await createTestApi();
t.teardown(() => api.close());

const post = (payload: unknown, headers: Record<string, string> = {}) =>
  api.app.inject({ method: 'POST', url: '/v1/signup', headers, payload: payload as object });

t.test(
  'signup creates a pending tenant with defaults, a queued create operation and a working tenant key',
  async (t) => {
    const org = uniqueOrg('acme');
    const res = await post({ organization: org, email: 'ops@acme.example' });
    t.equal(res.statusCode, 202);
    const body = res.json();
    t.equal(body.tenant.organization, org);
    t.equal(body.tenant.spec.plan, 'free');
    t.equal(body.tenant.spec.runtimeVersion, catalog.defaultVersion('stable'));
    t.equal(body.tenant.status.phase, 'Pending');
    t.equal(body.tenant.generation, 1);
    t.equal(body.tenant.status.observedGeneration, 0);
    t.match(body.apiKey, /^hrt_tenant_/);
    const op = await api.request('GET', `/v1/operations/${body.operationId}`, { key: body.apiKey });
    t.equal(op.statusCode, 200);
    t.match(op.json(), {
      kind: 'create',
      state: 'queued',
      tenantId: body.tenant.id,
      toVersion: body.tenant.spec.runtimeVersion,
    });
    const own = await api.request('GET', `/v1/tenants/${body.tenant.id}`, { key: body.apiKey });
    t.equal(own.statusCode, 200);
    t.equal(own.json().id, body.tenant.id);
    const { rows } = await api.db.pool.query<{ key_hash: Buffer }>(
      'SELECT key_hash FROM api_keys WHERE tenant_id = $1',
      [body.tenant.id],
    );
    t.equal(rows.length, 1, 'one key stored for the tenant');
    t.not(rows[0]!.key_hash.toString('utf8'), body.apiKey, 'the key is not stored in clear');
  },
);

t.test('signup writes an audit row without the API key', async (t) => {
  const { tenantId, apiKey } = await api.signup();
  const { rows } = await api.db.pool.query<{ action: string; actor: string; after: unknown }>(
    `SELECT action, actor, after FROM audit_log WHERE target_id = $1`,
    [tenantId],
  );
  t.equal(rows.length, 1);
  t.equal(rows[0]!.action, 'tenant.signup');
  t.equal(rows[0]!.actor, 'public');
  t.notOk(JSON.stringify(rows[0]!.after).includes(apiKey), 'audit row does not hold the key');
});

t.test('a duplicate organization is refused with 409 naming the field', async (t) => {
  const org = uniqueOrg();
  t.equal((await post({ organization: org, email: 'a@b.io' })).statusCode, 202);
  const res = await post({ organization: org, email: 'c@d.io' });
  t.equal(res.statusCode, 409);
  t.match(res.json(), { error: { code: 'ORGANIZATION_TAKEN', field: 'organization' } });
});

t.test('Idempotency-Key: the same key and body return the first answer', async (t) => {
  const payload = { organization: uniqueOrg(), email: 'x@y.io' };
  const key = randomUUID();
  const first = await post(payload, { 'idempotency-key': key });
  const second = await post(payload, { 'idempotency-key': key });
  t.equal(first.statusCode, 202);
  t.equal(second.statusCode, 202);
  t.same(second.json(), first.json(), 'replayed body is identical, including the API key');
  const { rows } = await api.db.pool.query('SELECT id FROM tenants WHERE organization = $1', [payload.organization]);
  t.equal(rows.length, 1, 'one tenant created');
});

t.test('Idempotency-Key: the same key with a different body is 409', async (t) => {
  const key = randomUUID();
  t.equal((await post({ organization: uniqueOrg(), email: 'x@y.io' }, { 'idempotency-key': key })).statusCode, 202);
  const res = await post({ organization: uniqueOrg(), email: 'x@y.io' }, { 'idempotency-key': key });
  t.equal(res.statusCode, 409);
  t.match(res.json(), { error: { code: 'IDEMPOTENCY_KEY_REUSED', field: 'Idempotency-Key' } });
});

t.test('a second signup with the same Idempotency-Key under concurrency creates one tenant', async (t) => {
  const payload = { organization: uniqueOrg('race'), email: 'r@race.io' };
  const key = randomUUID();
  const results = await Promise.all(Array.from({ length: 12 }, () => post(payload, { 'idempotency-key': key })));
  t.same(
    results.map((r) => r.statusCode),
    Array(12).fill(202),
    'every request answered 202',
  );
  const ids = new Set(results.map((r) => r.json().tenant.id));
  t.equal(ids.size, 1, 'all answers name the same tenant');
  const { rows } = await api.db.pool.query('SELECT count(*)::int AS n FROM tenants WHERE organization = $1', [
    payload.organization,
  ]);
  t.equal(rows[0].n, 1);
});

t.test('concurrent signups for one organization without a key: one wins, the others get 409', async (t) => {
  const org = uniqueOrg('dup');
  const results = await Promise.all(Array.from({ length: 8 }, () => post({ organization: org, email: 'd@d.io' })));
  t.equal(results.filter((r) => r.statusCode === 202).length, 1);
  t.equal(results.filter((r) => r.statusCode === 409).length, 7);
  const { rows } = await api.db.pool.query(
    'SELECT count(*)::int AS n FROM api_keys k JOIN tenants t ON t.id = k.tenant_id WHERE t.organization = $1',
    [org],
  );
  t.equal(rows[0].n, 1, 'losers left no keys behind');
});

t.test('bad input is a 4xx naming what was wrong, and writes nothing', async (t) => {
  const before = (await api.db.pool.query('SELECT count(*)::int AS n FROM tenants')).rows[0].n;
  const cases: Array<
    [
      string,
      () => Promise<{ statusCode: number; json: () => { error: { code: string; field?: string } } }>,
      number,
      string,
      string | undefined,
    ]
  > = [
    [
      'malformed JSON',
      () =>
        api.app.inject({
          method: 'POST',
          url: '/v1/signup',
          headers: { 'content-type': 'application/json' },
          payload: '{"organization": "x",',
        }),
      400,
      'INVALID_JSON',
      undefined,
    ],
    [
      'empty JSON body',
      () =>
        api.app.inject({
          method: 'POST',
          url: '/v1/signup',
          headers: { 'content-type': 'application/json' },
          payload: '',
        }),
      400,
      'INVALID_JSON',
      undefined,
    ],
    [
      'wrong content type',
      () =>
        api.app.inject({
          method: 'POST',
          url: '/v1/signup',
          headers: { 'content-type': 'text/plain' },
          payload: 'organization=x',
        }),
      415,
      'UNSUPPORTED_MEDIA_TYPE',
      undefined,
    ],
    [
      'unknown field',
      () => post({ organization: uniqueOrg(), email: 'a@b.io', admin: true }),
      400,
      'VALIDATION_FAILED',
      'admin',
    ],
    ['missing email', () => post({ organization: uniqueOrg() }), 400, 'VALIDATION_FAILED', 'email'],
    ['bad email', () => post({ organization: uniqueOrg(), email: 'not-an-email' }), 400, 'VALIDATION_FAILED', 'email'],
    [
      'organization not a DNS label',
      () => post({ organization: 'Acme Corp', email: 'a@b.io' }),
      400,
      'VALIDATION_FAILED',
      'organization',
    ],
    [
      'organization wrong type',
      () => post({ organization: 42, email: 'a@b.io' }),
      400,
      'VALIDATION_FAILED',
      'organization',
    ],
    [
      'unknown plan',
      () => post({ organization: uniqueOrg(), email: 'a@b.io', plan: 'platinum' }),
      400,
      'VALIDATION_FAILED',
      'plan',
    ],
    [
      'region without a root cluster',
      () => post({ organization: uniqueOrg(), email: 'a@b.io', region: 'mars-1' }),
      400,
      'UNKNOWN_REGION',
      'region',
    ],
    [
      'region not a DNS label',
      () => post({ organization: uniqueOrg(), email: 'a@b.io', region: 'EU West' }),
      400,
      'VALIDATION_FAILED',
      'region',
    ],
    [
      'unknown version',
      () => post({ organization: uniqueOrg(), email: 'a@b.io', runtimeVersion: '9.9.9' }),
      400,
      'UNKNOWN_RUNTIME_VERSION',
      'runtimeVersion',
    ],
    [
      'version not semver',
      () => post({ organization: uniqueOrg(), email: 'a@b.io', runtimeVersion: 'latest' }),
      400,
      'VALIDATION_FAILED',
      'runtimeVersion',
    ],
    [
      'oversize body',
      () => post({ organization: uniqueOrg(), email: 'a@b.io', pad: 'x'.repeat(200_000) }),
      413,
      'PAYLOAD_TOO_LARGE',
      undefined,
    ],
    [
      'idempotency key with spaces',
      () =>
        post({ organization: uniqueOrg(), email: 'a@b.io' }, { 'idempotency-key': 'has space has space has space' }),
      400,
      'VALIDATION_FAILED',
      'Idempotency-Key',
    ],
    [
      'idempotency key too short to be secret',
      () => post({ organization: uniqueOrg(), email: 'a@b.io' }, { 'idempotency-key': '7f1c2b' }),
      400,
      'VALIDATION_FAILED',
      'Idempotency-Key',
    ],
  ];
  for (const [name, run, status, code, field] of cases) {
    const res = await run();
    t.equal(res.statusCode, status, `${name}: status`);
    const body = res.json();
    t.equal(body.error.code, code, `${name}: code`);
    if (field) t.equal(body.error.field, field, `${name}: field`);
  }
  const after = (await api.db.pool.query('SELECT count(*)::int AS n FROM tenants')).rows[0].n;
  t.equal(after, before, 'no tenant was written');
});

t.test('withdrawn and deprecated versions cannot be chosen at signup', async (t) => {
  const [oldest] = catalog.versions;
  await setAvailability(api.db.pool, oldest!.version, 'withdrawn', 'test');
  let res = await post({ organization: uniqueOrg(), email: 'a@b.io', runtimeVersion: oldest!.version });
  t.equal(res.statusCode, 422);
  t.match(res.json(), { error: { code: 'RUNTIME_VERSION_UNAVAILABLE', field: 'runtimeVersion' } });
  await setAvailability(api.db.pool, oldest!.version, 'deprecated', 'test');
  res = await post({ organization: uniqueOrg(), email: 'a@b.io', runtimeVersion: oldest!.version });
  t.equal(res.statusCode, 422);
  t.match(res.json().error.message, /deprecated/);
  await setAvailability(api.db.pool, oldest!.version, 'available', 'test');
  res = await post({ organization: uniqueOrg(), email: 'a@b.io', runtimeVersion: oldest!.version });
  t.equal(res.statusCode, 202);
});

t.test('5xx answers leak no internals', async (t) => {
  const broken = await createTestApi();
  await broken.db.pool.query('DROP TABLE audit_log');
  const res = await broken.app.inject({
    method: 'POST',
    url: '/v1/signup',
    payload: { organization: uniqueOrg(), email: 'a@b.io' },
  });
  t.equal(res.statusCode, 500);
  t.same(Object.keys(res.json().error).sort(), ['code', 'message', 'requestId']);
  t.equal(res.json().error.message, 'internal error');
  t.notMatch(res.body, /audit_log|relation|postgres/i);
  const { rows } = await broken.db.pool.query('SELECT count(*)::int AS n FROM tenants');
  t.equal(rows[0].n, 0, 'the failed signup left no tenant behind');
  await broken.close();
});

t.test(
  'region: listed publicly from the root clusters, chosen at signup, shown in the spec and filterable',
  async (t) => {
    const kubeconfig =
      'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://203.0.113.10:6443"}}]\n' +
      'users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n';
    for (const [name, region] of [
      ['signup-eu', 'eu-test-1'],
      ['signup-us', 'us-test-1'],
    ] as const) {
      const res = await api.request('POST', '/v1/clusters', {
        body: { name, region, capacity: 5, kubeconfig, force: true },
      });
      t.equal(res.statusCode, 201, `cluster ${name} registered`);
    }
    t.equal((await api.request('POST', '/v1/clusters/signup-us/cordon')).statusCode, 200, 'signup-us cordoned');
    const regions = await api.app.inject({ method: 'GET', url: '/v1/regions' });
    t.equal(regions.statusCode, 200, 'public: no key needed');
    const items = regions.json().items as Array<{ name: string; accepting: boolean }>;
    t.same(
      items.filter((r) => r.name.endsWith('-test-1')),
      [
        { name: 'eu-test-1', accepting: true },
        { name: 'us-test-1', accepting: false },
      ],
      'a region with only cordoned clusters is not accepting',
    );

    const res = await post({ organization: uniqueOrg(), email: 'a@b.io', region: 'eu-test-1' });
    t.equal(res.statusCode, 202);
    const tenant = res.json().tenant;
    t.equal(tenant.spec.region, 'eu-test-1');
    const other = (await post({ organization: uniqueOrg(), email: 'a@b.io' })).json().tenant;
    t.equal(other.spec.region, null, 'no region asked: any region');
    const listed = await api.request('GET', '/v1/tenants?region=eu-test-1', { key: api.operatorKey });
    t.same(
      listed.json().items.map((x: { id: string }) => x.id),
      [tenant.id],
      'list filter by region',
    );
    const bad = await post({ organization: uniqueOrg(), email: 'a@b.io', region: 'ap-test-1' });
    t.match(bad.json(), {
      error: {
        code: 'UNKNOWN_REGION',
        field: 'region',
        message: /region 'ap-test-1' has no root cluster; choose one of: .*eu-test-1/,
      },
    });
  },
);

t.test('an idempotency replay never hands the API key to a stranger', async (t) => {
  const payload = { organization: uniqueOrg('victim'), email: 'owner@victim.example' };
  // The victim used a short, guessable key (the README's example used to be one): refused, nothing stored.
  const guessable = await post(payload, { 'idempotency-key': '7f1c2b' });
  t.equal(guessable.statusCode, 400, 'a guessable key is refused');
  t.notOk(JSON.stringify(guessable.json()).includes('hrt_'), 'no key in the answer');
  const key = randomUUID();
  const first = await post(payload, { 'idempotency-key': key });
  t.equal(first.statusCode, 202);
  // A stranger who knows the body but not the key: a new signup of the same organization, no replay.
  const stranger = await post(payload, { 'idempotency-key': randomUUID() });
  t.equal(stranger.statusCode, 409, 'the stranger gets a conflict on the organization');
  t.notOk(stranger.body.includes(first.json().apiKey), "and not the victim's key");
  // The key is stored only as its hash.
  const { rows } = await api.db.pool.query<{ key: string }>('SELECT key FROM idempotency_keys');
  t.notOk(
    rows.some((r) => r.key === key),
    'the raw key is not stored',
  );
  t.ok(
    rows.some((r) => r.key === createHash('sha256').update(key).digest('hex')),
    'its SHA-256 is',
  );
});

t.test('the replay window is bounded: after an hour the key no longer replays the answer', async (t) => {
  const payload = { organization: uniqueOrg('late'), email: 'late@example.com' };
  const key = randomUUID();
  const first = await post(payload, { 'idempotency-key': key });
  t.equal(first.statusCode, 202);
  await ageIdempotencyKey(api.db.pool, createHash('sha256').update(key).digest('hex'), 61 * 60);
  const late = await post(payload, { 'idempotency-key': key });
  t.equal(late.statusCode, 409, 'treated as a new signup of a taken organization');
  t.equal(late.json().error.code, 'ORGANIZATION_TAKEN');
  t.notOk(late.body.includes(first.json().apiKey), 'the API key is not replayed');
});
