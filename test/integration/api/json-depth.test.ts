/**
 * Deeply nested JSON, over real HTTP, without a key: refused as 400 VALIDATION_FAILED naming the
 * body before anything walks it (a recursive walk of 30,000 levels overflowed the stack: a 500 and
 * an error-level stack trace), and nothing at error level in the log.
 */
import { Writable } from 'node:stream';
import t from 'tap';
import pino from 'pino';
import { createTestApi } from '../../helpers/api.ts';
import { MAX_JSON_DEPTH } from '../../../provisioner/http/request-rules.ts';
import { createKey } from '../../../provisioner/store/keys.ts';

interface Line {
  level: number;
  msg: string;
  err?: { stack?: string };
}

const lines: Line[] = [];
const sink = new Writable({
  write(chunk: Buffer, _enc, cb) {
    for (const l of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(l) as Line);
    cb();
  },
});
const api = await createTestApi({ logger: pino({ level: 'debug' }, sink) });
t.teardown(() => api.close());
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });

interface ErrorAnswer {
  error: { code: string; message: string; field?: string };
}

async function post(path: string, body: string, key?: string): Promise<{ status: number; json: ErrorAnswer }> {
  const res = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body,
  });
  const text = await res.text();
  return { status: res.status, json: JSON.parse(text) as ErrorAnswer };
}

t.test(
  '30,000 levels of arrays (60 KB) on /v1/signup: 400 VALIDATION_FAILED naming the body, no error logged',
  async (t) => {
    lines.length = 0;
    const body = '['.repeat(30_000) + ']'.repeat(30_000);
    const res = await post('/v1/signup', body);
    t.equal(res.status, 400, `400 (was ${res.status} ${res.json.error.code})`);
    t.equal(res.json.error.code, 'VALIDATION_FAILED');
    t.equal(res.json.error.field, 'body', 'names the body');
    t.match(res.json.error.message, new RegExp(`deeper than ${MAX_JSON_DEPTH} levels`), 'says what the limit is');
    t.same(
      lines.filter((l) => l.level >= 50).map((l) => l.msg),
      [],
      'nothing is logged at error level',
    );
  },
);

t.test('10,000 levels of objects (60 KB) in a field: the same answer', async (t) => {
  const body = `{"organization":"x","email":"a@b.io","x":${'{"a":'.repeat(10_000)}1${'}'.repeat(10_000)}}`;
  const res = await post('/v1/signup', body);
  t.equal(res.status, 400);
  t.equal(res.json.error.field, 'body', 'names the body');
});

t.test(`a body ${MAX_JSON_DEPTH} levels deep passes the depth rule; one level more does not`, async (t) => {
  const nested = (levels: number) =>
    `{"organization":"x","email":"a@b.io","x":${'['.repeat(levels - 1)}${']'.repeat(levels - 1)}}`;
  const at = await post('/v1/signup', nested(MAX_JSON_DEPTH));
  t.equal(at.status, 400, 'refused for the unknown field x, not for its depth');
  t.not(at.json.error.field, 'body', `${MAX_JSON_DEPTH} levels: the error is not about the body's depth`);
  const over = await post('/v1/signup', nested(MAX_JSON_DEPTH + 1));
  t.equal(over.json.error.field, 'body', `${MAX_JSON_DEPTH + 1} levels: refused for its depth`);
});

t.test('a NUL deep in a reported object is found and named (the NUL scan walks without recursion)', async (t) => {
  const { tenantId } = await api.signup();
  const runtimeKey = (await createKey(api.db.pool, { role: 'runtime', tenantId, name: 'runtime', createdBy: 'test' }))
    .key;
  let object: unknown = 'deep\u0000';
  const keys: string[] = [];
  for (let i = 0; i < MAX_JSON_DEPTH - 6; i++) {
    object = { [`k${i}`]: object };
    keys.unshift(`k${i}`);
  }
  const item = {
    type: 'upsert',
    kind: 'Application',
    namespace: 'argocd',
    name: 'guestbook',
    uid: 'u1',
    resourceVersion: '10',
    observedAt: new Date().toISOString(),
    object,
  };
  const res = await post('/v1/runtime/events', JSON.stringify({ replica: 'r1', items: [item] }), runtimeKey);
  t.equal(res.status, 400);
  t.equal(res.json.error.field, `items.0.object.${keys.join('.')}`, 'the path of the string is named');
});
