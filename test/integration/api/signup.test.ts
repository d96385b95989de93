import { createHash, randomUUID } from 'node:crypto';
import t from 'tap';
import type { ApiResult, BodyOf } from '../../../provisioner/http/api-client.ts';
import { createTestApi, uniqueOrg } from '../../helpers/api.ts';
import { setAvailability } from '../../../provisioner/store/versions.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { ageIdempotencyKey, storedIdempotencyKeys } from '../../helpers/housekeeping.ts';
import { auditRows, dropAuditLog } from '../../helpers/audit.ts';
import { storedKeys } from '../../helpers/keys.ts';
import { countTenantRecords } from '../../helpers/tenants.ts';

const api = await createTestApi();
t.teardown(() => api.close());

/** POST /v1/signup with no key: the client's answer (status, body), never thrown. */
const post = (body: BodyOf<'POST /v1/signup'>, headers: Record<string, string> = {}) =>
  api.as(null).request('POST /v1/signup', { body, headers });
/** The same, raw: for bodies and headers the route's types refuse (the bad-input cases). */
const raw = (payload: unknown, headers: Record<string, string> = {}) =>
  api.request('POST', '/v1/signup', { key: null, body: payload, headers });
/** The answer's body, known accepted (a failed precondition otherwise). */
const accepted = (res: ApiResult<'POST /v1/signup'>) => {
  if (!res.ok) throw new Error(`signup: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
};

t.test(
  'signup creates a pending tenant with defaults, a queued create operation and a working tenant key',
  async (t) => {
    const org = uniqueOrg('acme');
    const res = await post({ organization: org, email: 'ops@acme.example' });
    t.equal(res.status, 202);
    const body = accepted(res);
    t.equal(body.tenant.organization, org);
    t.equal(body.tenant.spec.plan, 'free');
    t.equal(body.tenant.spec.runtimeVersion, catalog.defaultVersion('stable'));
    t.equal(body.tenant.status.phase, 'Pending');
    t.equal(body.tenant.generation, 1);
    t.equal(body.tenant.status.observedGeneration, 0);
    t.match(body.apiKey, /^hrt_tenant_/);
    const own = api.as(body.apiKey);
    const op = await own.call('GET /v1/operations/:id', { params: { id: body.operationId } });
    t.match(op, {
      kind: 'create',
      state: 'queued',
      tenantId: body.tenant.id,
      toVersion: body.tenant.spec.runtimeVersion,
    });
    t.equal((await own.call('GET /v1/tenants/:id', { params: { id: body.tenant.id } })).id, body.tenant.id);
    const rows = await storedKeys(api.db.pool, { tenantId: body.tenant.id });
    t.equal(rows.length, 1, 'one key stored for the tenant');
    t.not(rows[0]!.key_hash.toString('utf8'), body.apiKey, 'the key is not stored in clear');
  },
);

t.test('signup writes an audit row without the API key', async (t) => {
  const { tenantId, apiKey } = await api.signup();
  const rows = await auditRows(api.db.pool, { targetId: tenantId });
  t.equal(rows.length, 1);
  t.equal(rows[0]!.action, 'tenant.signup');
  t.equal(rows[0]!.actor, 'public');
  t.notOk(JSON.stringify(rows[0]!.after).includes(apiKey), 'audit row does not hold the key');
});

t.test('a duplicate organization is refused with 409 naming the field', async (t) => {
  const org = uniqueOrg();
  t.equal((await post({ organization: org, email: 'a@b.io' })).status, 202);
  const res = await post({ organization: org, email: 'c@d.io' });
  t.equal(res.status, 409);
  t.match(res.body, { error: { code: 'ORGANIZATION_TAKEN', field: 'organization' } });
});

t.test('Idempotency-Key: the same key and body return the first answer', async (t) => {
  const payload = { organization: uniqueOrg(), email: 'x@y.io' };
  const key = randomUUID();
  const first = await post(payload, { 'idempotency-key': key });
  const second = await post(payload, { 'idempotency-key': key });
  t.equal(first.status, 202);
  t.equal(second.status, 202);
  t.same(second.body, first.body, 'replayed body is identical, including the API key');
  t.equal(await countTenantRecords(api.db.pool, { organization: payload.organization }), 1, 'one tenant created');
});

t.test('Idempotency-Key: the same key with a different body is 409', async (t) => {
  const key = randomUUID();
  t.equal((await post({ organization: uniqueOrg(), email: 'x@y.io' }, { 'idempotency-key': key })).status, 202);
  const res = await post({ organization: uniqueOrg(), email: 'x@y.io' }, { 'idempotency-key': key });
  t.equal(res.status, 409);
  t.match(res.body, { error: { code: 'IDEMPOTENCY_KEY_REUSED', field: 'Idempotency-Key' } });
});

t.test('a second signup with the same Idempotency-Key under concurrency creates one tenant', async (t) => {
  const payload = { organization: uniqueOrg('race'), email: 'r@race.io' };
  const key = randomUUID();
  const results = await Promise.all(Array.from({ length: 12 }, () => post(payload, { 'idempotency-key': key })));
  t.same(
    results.map((r) => r.status),
    Array(12).fill(202),
    'every request answered 202',
  );
  const ids = new Set(results.map((r) => accepted(r).tenant.id));
  t.equal(ids.size, 1, 'all answers name the same tenant');
  t.equal(await countTenantRecords(api.db.pool, { organization: payload.organization }), 1);
});

t.test('concurrent signups for one organization without a key: one wins, the others get 409', async (t) => {
  const org = uniqueOrg('dup');
  const results = await Promise.all(Array.from({ length: 8 }, () => post({ organization: org, email: 'd@d.io' })));
  t.equal(results.filter((r) => r.status === 202).length, 1);
  t.equal(results.filter((r) => r.status === 409).length, 7);
  t.equal((await storedKeys(api.db.pool, { organization: org })).length, 1, 'losers left no keys behind');
});

t.test('bad input is a 4xx naming what was wrong, and writes nothing', async (t) => {
  const before = await countTenantRecords(api.db.pool);
  // bad input on purpose (malformed JSON, wrong types, unknown fields, raw headers): sent raw
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
        api.request('POST', '/v1/signup', {
          key: null,
          headers: { 'content-type': 'application/json' },
          body: '{"organization": "x",',
        }),
      400,
      'INVALID_JSON',
      undefined,
    ],
    [
      'empty JSON body',
      () => api.request('POST', '/v1/signup', { key: null, headers: { 'content-type': 'application/json' }, body: '' }),
      400,
      'INVALID_JSON',
      undefined,
    ],
    [
      'wrong content type',
      () =>
        api.request('POST', '/v1/signup', {
          key: null,
          headers: { 'content-type': 'text/plain' },
          body: 'organization=x',
        }),
      415,
      'UNSUPPORTED_MEDIA_TYPE',
      undefined,
    ],
    [
      'unknown field',
      () => raw({ organization: uniqueOrg(), email: 'a@b.io', admin: true }),
      400,
      'VALIDATION_FAILED',
      'admin',
    ],
    ['missing email', () => raw({ organization: uniqueOrg() }), 400, 'VALIDATION_FAILED', 'email'],
    ['bad email', () => raw({ organization: uniqueOrg(), email: 'not-an-email' }), 400, 'VALIDATION_FAILED', 'email'],
    [
      'organization not a DNS label',
      () => raw({ organization: 'Acme Corp', email: 'a@b.io' }),
      400,
      'VALIDATION_FAILED',
      'organization',
    ],
    [
      'organization wrong type',
      () => raw({ organization: 42, email: 'a@b.io' }),
      400,
      'VALIDATION_FAILED',
      'organization',
    ],
    [
      'unknown plan',
      () => raw({ organization: uniqueOrg(), email: 'a@b.io', plan: 'platinum' }),
      400,
      'VALIDATION_FAILED',
      'plan',
    ],
    [
      'region without a root cluster',
      () => raw({ organization: uniqueOrg(), email: 'a@b.io', region: 'mars-1' }),
      400,
      'UNKNOWN_REGION',
      'region',
    ],
    [
      'region not a DNS label',
      () => raw({ organization: uniqueOrg(), email: 'a@b.io', region: 'EU West' }),
      400,
      'VALIDATION_FAILED',
      'region',
    ],
    [
      'unknown version',
      () => raw({ organization: uniqueOrg(), email: 'a@b.io', runtimeVersion: '9.9.9' }),
      400,
      'UNKNOWN_RUNTIME_VERSION',
      'runtimeVersion',
    ],
    [
      'version not semver',
      () => raw({ organization: uniqueOrg(), email: 'a@b.io', runtimeVersion: 'latest' }),
      400,
      'VALIDATION_FAILED',
      'runtimeVersion',
    ],
    [
      'oversize body',
      () => raw({ organization: uniqueOrg(), email: 'a@b.io', pad: 'x'.repeat(200_000) }),
      413,
      'PAYLOAD_TOO_LARGE',
      undefined,
    ],
    [
      'idempotency key with spaces',
      () => raw({ organization: uniqueOrg(), email: 'a@b.io' }, { 'idempotency-key': 'has space has space has space' }),
      400,
      'VALIDATION_FAILED',
      'Idempotency-Key',
    ],
    [
      'idempotency key too short to be secret',
      () => raw({ organization: uniqueOrg(), email: 'a@b.io' }, { 'idempotency-key': '7f1c2b' }),
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
  const after = await countTenantRecords(api.db.pool);
  t.equal(after, before, 'no tenant was written');
});

t.test('withdrawn and deprecated versions cannot be chosen at signup', async (t) => {
  const [oldest] = catalog.versions;
  await setAvailability(api.db.pool, oldest!.version, 'withdrawn', 'test');
  let res = await post({ organization: uniqueOrg(), email: 'a@b.io', runtimeVersion: oldest!.version });
  t.equal(res.status, 422);
  t.match(res.body, { error: { code: 'RUNTIME_VERSION_UNAVAILABLE', field: 'runtimeVersion' } });
  await setAvailability(api.db.pool, oldest!.version, 'deprecated', 'test');
  res = await post({ organization: uniqueOrg(), email: 'a@b.io', runtimeVersion: oldest!.version });
  t.equal(res.status, 422);
  t.match(res.body, { error: { message: /deprecated/ } });
  await setAvailability(api.db.pool, oldest!.version, 'available', 'test');
  res = await post({ organization: uniqueOrg(), email: 'a@b.io', runtimeVersion: oldest!.version });
  t.equal(res.status, 202);
});

t.test('5xx answers leak no internals', async (t) => {
  const broken = await createTestApi();
  await dropAuditLog(broken.db.pool);
  const res = await broken
    .as(null)
    .request('POST /v1/signup', { body: { organization: uniqueOrg(), email: 'a@b.io' } });
  t.equal(res.status, 500);
  if (res.ok) throw new Error('precondition: the signup failed');
  t.same(Object.keys(res.body.error).sort(), ['code', 'message', 'requestId']);
  t.equal(res.body.error.message, 'internal error');
  t.notMatch(JSON.stringify(res.body), /audit_log|relation|postgres/i);
  t.equal(await countTenantRecords(broken.db.pool), 0, 'the failed signup left no tenant behind');
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
      const res = await api.client.request('POST /v1/clusters', {
        body: { name, region, capacity: 5, kubeconfig, force: true },
      });
      t.equal(res.status, 201, `cluster ${name} registered`);
    }
    t.equal(
      (await api.client.request('POST /v1/clusters/:name/cordon', { params: { name: 'signup-us' } })).status,
      200,
      'signup-us cordoned',
    );
    const regions = await api.as(null).request('GET /v1/regions');
    t.equal(regions.status, 200, 'public: no key needed');
    const items = regions.ok ? regions.body.items : [];
    t.same(
      items.filter((r) => r.name.endsWith('-test-1')),
      [
        { name: 'eu-test-1', accepting: true },
        { name: 'us-test-1', accepting: false },
      ],
      'a region with only cordoned clusters is not accepting',
    );

    const res = await post({ organization: uniqueOrg(), email: 'a@b.io', region: 'eu-test-1' });
    t.equal(res.status, 202);
    const tenant = accepted(res).tenant;
    t.equal(tenant.spec.region, 'eu-test-1');
    const other = accepted(await post({ organization: uniqueOrg(), email: 'a@b.io' })).tenant;
    t.equal(other.spec.region, null, 'no region asked: any region');
    const listed = await api.as(api.operatorKey).call('GET /v1/tenants', { query: { region: 'eu-test-1' } });
    t.same(
      listed.items.map((x) => x.id),
      [tenant.id],
      'list filter by region',
    );
    const bad = await post({ organization: uniqueOrg(), email: 'a@b.io', region: 'ap-test-1' });
    t.match(bad.body, {
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
  t.equal(guessable.status, 400, 'a guessable key is refused');
  t.notOk(JSON.stringify(guessable.body).includes('hrt_'), 'no key in the answer');
  const key = randomUUID();
  const first = await post(payload, { 'idempotency-key': key });
  t.equal(first.status, 202);
  // A stranger who knows the body but not the key: a new signup of the same organization, no replay.
  const stranger = await post(payload, { 'idempotency-key': randomUUID() });
  t.equal(stranger.status, 409, 'the stranger gets a conflict on the organization');
  t.notOk(JSON.stringify(stranger.body).includes(accepted(first).apiKey), "and not the victim's key");
  // The key is stored only as its hash.
  const rows = await storedIdempotencyKeys(api.db.pool);
  t.notOk(
    rows.some((r) => r === key),
    'the raw key is not stored',
  );
  t.ok(
    rows.some((r) => r === createHash('sha256').update(key).digest('hex')),
    'its SHA-256 is',
  );
});

t.test('the replay window is bounded: after an hour the key no longer replays the answer', async (t) => {
  const payload = { organization: uniqueOrg('late'), email: 'late@example.com' };
  const key = randomUUID();
  const first = await post(payload, { 'idempotency-key': key });
  t.equal(first.status, 202);
  await ageIdempotencyKey(api.db.pool, createHash('sha256').update(key).digest('hex'), 61 * 60);
  const late = await post(payload, { 'idempotency-key': key });
  t.equal(late.status, 409, 'treated as a new signup of a taken organization');
  t.match(late.body, { error: { code: 'ORGANIZATION_TAKEN' } });
  t.notOk(JSON.stringify(late.body).includes(accepted(first).apiKey), 'the API key is not replayed');
});
