/**
 * Inputs that once reached a 5xx or an answer outside the documented error shape, on a running
 * server (real HTTP on loopback, real PostgreSQL): NUL and control characters, integers beyond
 * PostgreSQL's bigint, the runtime route of a tenant that does not exist, withdrawing the default
 * runtime version, the 415 message, errors raised by fastify's router and Node's HTTP parser,
 * unknown methods, and the OpenAPI document's claims.
 */
import t from 'tap';
import net from 'node:net';
import { once } from 'node:events';
import { createTestApi, uniqueOrg } from '../../helpers/api.ts';
import { createKey } from '../../../provisioner/store/keys.ts';

const api = await createTestApi();
t.teardown(() => api.close());
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
const port = Number(new URL(base).port);

interface ErrorAnswer {
  error: { code: string; message: string; field?: string; requestId?: string };
}

async function call(
  method: string,
  path: string,
  opts: { key?: string | null; body?: unknown; headers?: Record<string, string> } = {},
): Promise<{ status: number; headers: Headers; text: string; json: () => ErrorAnswer }> {
  const key = opts.key === undefined ? api.adminKey : opts.key;
  const res = await fetch(`${base}${path}`, {
    method,
    headers: {
      ...(key ? { authorization: `Bearer ${key}` } : {}),
      ...(opts.body !== undefined ? { 'content-type': 'application/json' } : {}),
      ...opts.headers,
    },
    ...(opts.body !== undefined ? { body: typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: () => JSON.parse(text) as ErrorAnswer };
}

/** Sends raw bytes and returns the whole answer (the server closes the connection after it). */
async function raw(bytes: string): Promise<string> {
  const socket = net.connect(port, '127.0.0.1');
  await once(socket, 'connect');
  let answer = '';
  socket.on('data', (d: Buffer) => {
    answer += d.toString('latin1');
  });
  socket.on('error', () => {});
  socket.write(bytes);
  await once(socket, 'close');
  return answer;
}

function shapeOf(answer: string): { status: number; body: ErrorAnswer } {
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1]);
  const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as ErrorAnswer;
  return { status, body };
}

const tenant = await api.signup();

t.test('a NUL character in any string that reaches SQL is a 400 naming the field', async (t) => {
  const cases: [string, () => ReturnType<typeof call>, string][] = [
    ['tenant filter (tenant key)', () => call('GET', '/v1/tenants?plan=a%00b', { key: tenant.apiKey }), 'plan'],
    ['tenant filter cluster', () => call('GET', '/v1/tenants?cluster=%00'), 'cluster'],
    ['audit filter', () => call('GET', '/v1/audit?targetType=x%00'), 'targetType'],
    ['audit target id', () => call('GET', '/v1/audit?targetId=%00%00'), 'targetId'],
    ['cursor', () => call('GET', '/v1/tenants?cursor=ab%00cd'), 'cursor'],
    ['key name', () => call('POST', '/v1/keys', { body: { role: 'operator', name: 'ops\u0000' } }), 'name'],
    [
      'cluster label value',
      () =>
        call('POST', '/v1/clusters', {
          body: { name: 'c1', region: 'eu', capacity: 1, kubeconfig: 'x', labels: { tier: 'a\u0000' } },
        }),
      'labels.tier',
    ],
    [
      'cluster label name',
      () =>
        call('POST', '/v1/clusters', {
          body: { name: 'c1', region: 'eu', capacity: 1, kubeconfig: 'x', labels: { 'ti\u0000er': 'a' } },
        }),
      'labels',
    ],
    [
      'cluster plan',
      () =>
        call('POST', '/v1/clusters', {
          body: { name: 'c1', region: 'eu', capacity: 1, kubeconfig: 'x', plans: ['fr\u0000ee'] },
        }),
      'plans.0',
    ],
    ['PATCH plan', () => call('PATCH', `/v1/tenants/${tenant.tenantId}`, { body: { plan: 'a\u0000' } }), 'plan'],
    [
      'suspension reason',
      () => call('POST', `/v1/tenants/${tenant.tenantId}/suspend`, { body: { reason: 'why\u0000' } }),
      'reason',
    ],
  ];
  for (const [name, run, field] of cases) {
    const res = await run();
    t.equal(res.status, 400, `${name}: 400 (was ${res.text})`);
    t.equal(res.json().error.code, 'VALIDATION_FAILED', `${name}: VALIDATION_FAILED`);
    t.equal(res.json().error.field, field, `${name}: the field is named`);
  }
  t.match((await call('GET', '/v1/audit?targetType=x%00')).json().error.message, /NUL/, 'the message says why');
});

t.test('a NUL deep in free-form JSON (a reported object) is a 400 naming its path', async (t) => {
  const runtimeKey = (
    await createKey(api.db.pool, { role: 'runtime', tenantId: tenant.tenantId, name: 'runtime', createdBy: 'test' })
  ).key;
  const item = {
    type: 'upsert',
    kind: 'Application',
    namespace: 'argocd',
    name: 'guestbook',
    uid: 'u1',
    resourceVersion: '10',
    observedAt: new Date().toISOString(),
    object: { spec: { source: { path: 'apps\u0000' } } },
  };
  const res = await call('POST', '/v1/runtime/events', { key: runtimeKey, body: { replica: 'r1', items: [item] } });
  t.equal(res.status, 400, `400 (was ${res.text})`);
  t.equal(res.json().error.field, 'items.0.object.spec.source.path', 'the path of the string is named');
  const key = await call('POST', '/v1/runtime/events', {
    key: runtimeKey,
    body: { replica: 'r1', items: [{ ...item, object: { 'sp\u0000ec': 1 } }] },
  });
  t.equal(key.status, 400, 'a NUL in a key: 400');
  const seq = await call('GET', `/v1/tenants/${tenant.tenantId}/changes?after=9999999999999999999`);
  t.equal(seq.status, 400, 'a change sequence number beyond bigint: 400');
  t.equal(seq.json().error.field, 'after', 'names after');
});

t.test('control characters in display names are refused', async (t) => {
  for (const [name, body, field] of [
    ['key name with an escape sequence', { role: 'operator', name: 'ops\u001b[31m' }, 'name'],
    ['key name with a newline', { role: 'operator', name: 'a\nb' }, 'name'],
  ] as const) {
    const res = await call('POST', '/v1/keys', { body });
    t.equal(res.status, 400, `${name}: 400`);
    t.equal(res.json().error.field, field, `${name}: names ${field}`);
    t.match(res.json().error.message, /control characters/, `${name}: says control characters`);
  }
  const label = await call('POST', '/v1/clusters', {
    body: { name: 'c2', region: 'eu', capacity: 1, kubeconfig: 'x', labels: { tier: 'a\tb' } },
  });
  t.equal(label.status, 400, 'a label value with a tab: 400');
  t.equal(label.json().error.field, 'labels.tier', 'names the label');
  const ok = await call('POST', '/v1/keys', { body: { role: 'operator', name: 'ops team – Zürich' } });
  t.equal(ok.status, 201, 'a name with non-ASCII letters and punctuation is accepted');
});

t.test('integers beyond the declared range are a 400 naming the field, never a database error', async (t) => {
  const cases: [string, string, string][] = [
    ['log after at 2^63', `/v1/operations/${tenant.operationId}/log?after=9223372036854775808`, 'after'],
    ['log after as 1e21', `/v1/operations/${tenant.operationId}/log?after=1e21`, 'after'],
    ['audit before at 2^63', '/v1/audit?before=9223372036854775808', 'before'],
    ['audit before as 1e21', '/v1/audit?before=1e21', 'before'],
    ['log limit', `/v1/operations/${tenant.operationId}/log?limit=1e21`, 'limit'],
    ['tenant list limit', '/v1/tenants?limit=99999999999999999999', 'limit'],
  ];
  for (const [name, path, field] of cases) {
    const res = await call('GET', path);
    t.equal(res.status, 400, `${name}: 400 (was ${res.text})`);
    t.equal(res.json().error.field, field, `${name}: names ${field}`);
  }
  const resumed = await call('GET', `/v1/operations/${tenant.operationId}/log`, {
    headers: { 'last-event-id': '99999999999999999999999' },
  });
  t.equal(resumed.status, 200, 'a Last-Event-ID beyond any sequence number reads from the start, not a 500');
});

t.test('the runtime route of a tenant that does not exist is 404 TENANT_NOT_FOUND', async (t) => {
  const missing = '00000000-0000-4000-8000-000000000000';
  for (const [who, key] of [
    ['operator', api.operatorKey],
    ['admin', api.adminKey],
  ] as const) {
    const res = await call('GET', `/v1/tenants/${missing}/runtime/api/v1/applications`, { key });
    t.equal(res.status, 404, `${who}: 404`);
    t.equal(res.json().error.code, 'TENANT_NOT_FOUND', `${who}: TENANT_NOT_FOUND`);
  }
  const existing = await call('GET', `/v1/tenants/${tenant.tenantId}/runtime/api/v1/applications`);
  t.equal(existing.status, 503, 'an existing tenant without a tunnel is still 503');
  t.equal(existing.json().error.code, 'RUNTIME_UNREACHABLE', 'RUNTIME_UNREACHABLE');
});

t.test('the default runtime version is always installable', async (t) => {
  interface Catalog {
    items: { version: string; channel: string; availability: string; default: boolean }[];
    defaultVersion: string;
  }
  const catalog = async () => (await call('GET', '/v1/runtime-versions', { key: null })).json() as unknown as Catalog;
  const before = await catalog();
  const setAvailability = (version: string, availability: string) =>
    call('PUT', `/v1/runtime-versions/${version}/availability`, { key: api.operatorKey, body: { availability } });
  t.ok(before.items.length >= 2, 'the catalog has at least two versions');
  const first = before.defaultVersion;
  t.equal((await setAvailability(first, 'withdrawn')).status, 200, 'the default can be withdrawn');
  const after = await catalog();
  t.not(after.defaultVersion, first, 'another version became the default');
  t.equal(
    after.items.find((v) => v.version === after.defaultVersion)?.availability,
    'available',
    'the new default is available',
  );
  t.equal(after.items.filter((v) => v.default).length, 1, 'exactly one version is marked default');
  const signup = await call('POST', '/v1/signup', {
    key: null,
    body: { organization: uniqueOrg(), email: 'a@example.com' },
  });
  t.equal(signup.status, 202, `a signup naming no version still works (was ${signup.text})`);
  t.equal(
    (JSON.parse(signup.text) as { tenant: { spec: { runtimeVersion: string } } }).tenant.spec.runtimeVersion,
    after.defaultVersion,
    'and gets the new default',
  );

  // Deprecate every other version: the last available one cannot be made unavailable.
  const others = after.items.filter((v) => v.availability === 'available' && v.version !== after.defaultVersion);
  for (const v of others)
    t.equal((await setAvailability(v.version, 'deprecated')).status, 200, `${v.version} deprecated`);
  const last = (await catalog()).defaultVersion;
  for (const availability of ['deprecated', 'withdrawn']) {
    const refused = await setAvailability(last, availability);
    t.equal(refused.status, 409, `marking the last available version ${availability}: 409`);
    t.equal(refused.json().error.code, 'LAST_AVAILABLE_RUNTIME_VERSION', 'LAST_AVAILABLE_RUNTIME_VERSION');
    t.match(refused.json().error.message, /make another version available first/, 'the message says what to do');
  }
  // Restore for the other tests.
  for (const v of before.items) await setAvailability(v.version, v.availability);
  t.equal((await catalog()).defaultVersion, first, 'making the catalog default available again restores it');
});

t.test('415 names the content type that was sent', async (t) => {
  const res = await call('POST', '/v1/keys', {
    body: 'role=operator',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
  });
  t.equal(res.status, 415, '415');
  t.equal(res.json().error.code, 'UNSUPPORTED_MEDIA_TYPE', 'UNSUPPORTED_MEDIA_TYPE');
  t.match(res.json().error.message, /'application\/x-www-form-urlencoded'/, 'the message names the type sent');
});

t.test('errors raised before a route runs have the documented shape', async (t) => {
  const long = await raw(`GET /v1/tenants/${'a%1b'.repeat(150)} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`);
  const l = shapeOf(long);
  t.equal(l.status, 414, 'an over-long path parameter: 414');
  t.equal(l.body.error.code, 'URI_TOO_LONG', 'URI_TOO_LONG');
  t.ok(l.body.error.requestId, 'with a request id');
  t.notOk(
    [...l.body.error.message].some((c) => c.charCodeAt(0) < 0x20),
    'the message echoes no control characters',
  );
  t.notOk(long.includes('\u001b'), 'the answer holds no escape character');

  const big = shapeOf(await raw(`GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: ${'a'.repeat(20_000)}\r\n\r\n`));
  t.equal(big.status, 431, 'headers over the limit: 431');
  t.equal(big.body.error.code, 'REQUEST_HEADERS_TOO_LARGE', 'REQUEST_HEADERS_TOO_LARGE');
  t.ok(big.body.error.requestId, 'with a request id');

  const both = shapeOf(
    await raw(
      'POST /v1/signup HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n',
    ),
  );
  t.equal(both.status, 400, 'Content-Length with Transfer-Encoding: 400');
  t.equal(both.body.error.code, 'BAD_REQUEST', 'BAD_REQUEST');
  t.match(both.body.error.message, /Content-Length and Transfer-Encoding/, 'the message says what was wrong');

  for (const path of ['/docs/static/..%2f..%2fpackage.json', '/docs/static/../../package.json', '/docs/nope.js']) {
    const res = await call('GET', path, { key: null });
    t.equal(res.status, 404, `${path}: 404`);
    t.equal(res.json().error.code, 'ROUTE_NOT_FOUND', `${path}: ROUTE_NOT_FOUND`);
    t.ok(res.json().error.requestId, `${path}: with a request id`);
  }
});

t.test('an unknown method on a known path is 405 with Allow', async (t) => {
  const res = await call('PUT', '/v1/tenants');
  t.equal(res.status, 405, 'PUT /v1/tenants: 405');
  t.equal(res.json().error.code, 'METHOD_NOT_ALLOWED', 'METHOD_NOT_ALLOWED');
  t.match(res.headers.get('allow') ?? '', /\bGET\b/, 'Allow lists GET');
  const one = await call('DELETE', `/v1/operations/${tenant.operationId}`);
  t.equal(one.status, 405, 'DELETE on an operation: 405');
  t.match(one.headers.get('allow') ?? '', /GET/, 'Allow lists GET');
  const none = await call('GET', '/v1/nothing-here');
  t.equal(none.status, 404, 'an unknown path stays 404');
  // A path that is a route of its own is not the parametric route of another method in disguise.
  for (const [method, path] of [
    ['PATCH', '/v1/tenants/summary'],
    ['DELETE', '/v1/tenants/events'],
  ] as const) {
    const own = await call(method, path, method === 'PATCH' ? { body: {} } : {});
    t.equal(own.status, 405, `${method} ${path}: 405, not the tenant route's 400 for id '${path.split('/').at(-1)}'`);
    t.equal(own.headers.get('allow'), 'GET, HEAD', 'Allow lists the methods of that path');
  }
  const options = await call('OPTIONS', '/v1/tenants/summary');
  t.equal(options.status, 405, 'OPTIONS /v1/tenants/summary: 405');
  t.equal(options.headers.get('allow'), 'GET, HEAD', "Allow lists that path's methods only, not the tenant route's");
  const tenantRoute = await call('GET', `/v1/tenants/${tenant.tenantId}`);
  t.equal(tenantRoute.status, 200, 'the parametric route still answers its own ids');
});

t.test('the OpenAPI document tells the truth', async (t) => {
  interface Op {
    security?: unknown[];
    parameters?: { name: string; in: string; schema: { pattern?: string } }[];
    responses: Record<string, { content?: Record<string, unknown>; links?: Record<string, { operationRef: string }> }>;
    requestBody?: { content: Record<string, { schema: { properties: Record<string, { maxLength?: number }> } }> };
  }
  const doc = (await call('GET', '/docs/json', { key: null })).json() as unknown as {
    paths: Record<string, Record<string, Op>>;
  };
  for (const [path, method] of [
    ['/v1/signup', 'post'],
    ['/v1/plans', 'get'],
    ['/v1/regions', 'get'],
    ['/v1/runtime-versions', 'get'],
    ['/healthz', 'get'],
    ['/readyz', 'get'],
    ['/metrics', 'get'],
  ] as const) {
    t.same(
      doc.paths[path]?.[method]?.security,
      [],
      `${method.toUpperCase()} ${path} is in the document without a bearer requirement`,
    );
  }
  t.equal(doc.paths['/v1/tenants']?.get?.security, undefined, 'GET /v1/tenants keeps the bearer requirement');
  const runtime = doc.paths['/v1/tenants/{id}/runtime/{path}']?.get;
  t.ok(runtime, 'the runtime route is documented with a named path parameter');
  for (const status of ['404', '503', 'default'])
    t.ok(runtime?.responses[status], `the runtime route documents ${status}`);
  t.ok(
    doc.paths['/v1/operations/{id}/log']?.get?.responses['200']?.content?.['text/event-stream'],
    'the log route declares text/event-stream',
  );
  const maxLength =
    doc.paths['/v1/clusters']?.post?.requestBody?.content['application/json']?.schema.properties.kubeconfig
      ?.maxLength ?? 0;
  t.ok(maxLength > 0, 'the kubeconfig has a maxLength');
  const kubeconfig = `# ${'x'.repeat(maxLength - 2)}`;
  const res = await call('POST', '/v1/clusters', {
    key: api.operatorKey,
    body: { name: 'big', region: 'eu', capacity: 1, kubeconfig: kubeconfig.replace(/x/g, '\u00e9') },
  });
  t.not(res.status, 413, `a kubeconfig of maxLength (${maxLength}) characters is not refused for its size`);
  t.equal(res.json().error.field, 'kubeconfig', 'it reaches the kubeconfig policy, which names the field');
  t.equal(
    doc.paths['/v1/keys']?.post?.responses['201']?.links?.RevokeKey?.operationRef,
    '#/paths/~1v1~1keys~1{id}/delete',
    'a created key links to its revocation',
  );
  t.ok(doc.paths['/v1/signup']?.post?.responses['202']?.links?.GetTenant, 'a signup links to its tenant');
  const idem = doc.paths['/v1/signup']?.post?.parameters?.find((p) => p.name === 'idempotency-key');
  t.ok(idem?.schema.pattern, 'the Idempotency-Key rules are in the document');
});
