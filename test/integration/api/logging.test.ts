/**
 * What an operator reads in the provisioner's log: expected client answers (a runtime without a
 * tunnel, an unknown tenant, a refused body) are info or warning lines without a stack; error
 * level is kept for the provisioner's own failures.
 */
import { Writable } from 'node:stream';
import t from 'tap';
import pino from 'pino';
import { createTestApi } from '../../helpers/api.ts';

interface Line {
  level: number;
  msg: string;
  code?: string;
  err?: { stack?: string };
  stack?: string;
}

t.test('a runtime without a tunnel answers 503 RUNTIME_UNREACHABLE, logged as a warning without a stack', async (t) => {
  const lines: Line[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(l) as Line);
      cb();
    },
  });
  const api = await createTestApi({ logger: pino({ level: 'debug' }, sink) });
  t.teardown(() => api.close());
  const { tenantId, apiKey } = await api.signup();
  lines.length = 0;
  // the runtime's API through the tunnel is outside the route map: the client's raw
  await t.rejects(
    api.as(apiKey).raw('GET', `/v1/tenants/${tenantId}/runtime/api/v1/applications`),
    { status: 503, code: 'RUNTIME_UNREACHABLE' },
    'no tunnel: 503',
  );
  const unknown = await api.client.request('GET /v1/tenants/:id', {
    params: { id: '00000000-0000-4000-8000-000000000000' },
  });
  t.equal(unknown.status, 404, 'unknown tenant: 404');
  // a signup body without its email: sent raw
  const bad = await api.request('POST', '/v1/signup', { key: null, body: { organization: '' } });
  t.equal(bad.statusCode, 400, 'bad signup: 400');

  t.same(
    lines.filter((l) => l.level >= 50).map((l) => l.msg),
    [],
    'no error-level line for a 503 RUNTIME_UNREACHABLE, a 404 or a 400',
  );
  t.same(
    lines.filter((l) => l.err?.stack !== undefined || l.stack !== undefined).map((l) => l.msg),
    [],
    'no line carries a stack',
  );
  t.ok(
    lines.some((l) => l.level === 40 && l.code === 'RUNTIME_UNREACHABLE'),
    'one warning names RUNTIME_UNREACHABLE',
  );
});
