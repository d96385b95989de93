import { Writable } from 'node:stream';
import t from 'tap';
import Fastify, { type FastifyBaseLogger } from 'fastify';
import pino from 'pino';
import { RequestLog } from '../../provisioner/http/request-log.ts';
import { hashKey, hashKeyBase64 } from '../../provisioner/store/key-format.ts';

interface Line {
  level: number;
  msg: string;
  req?: { method: string; url: string };
  res?: { statusCode: number };
  responseTime?: number;
}

async function appLogging(level: string) {
  const lines: Line[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      lines.push(JSON.parse(chunk.toString()) as Line);
      cb();
    },
  });
  const app = Fastify({
    loggerInstance: pino({ level }, sink) as unknown as FastifyBaseLogger,
    logController: new RequestLog(),
  });
  app.get('/ok', async () => ({ ok: true }));
  app.get('/missing', async (_req, reply) => reply.status(404).send({ error: 'no' }));
  app.post('/ok', async () => ({ ok: true }));
  await app.ready();
  return { app, lines };
}

t.test('one line per request; successful reads at debug, the rest at info', async (t) => {
  const { app, lines } = await appLogging('info');
  await app.inject({ method: 'GET', url: '/ok' });
  await app.inject({ method: 'HEAD', url: '/ok' });
  await app.inject({ method: 'GET', url: '/missing' });
  await app.inject({ method: 'POST', url: '/ok', payload: {} });
  t.same(
    lines.map((l) => [l.msg, l.req?.method, l.req?.url, l.res?.statusCode]),
    [
      ['request completed', 'GET', '/missing', 404],
      ['request completed', 'POST', '/ok', 200],
    ],
    'info: the refused read and the write, no incoming-request lines',
  );
  t.ok(lines.every((l) => l.level === 30 && typeof l.responseTime === 'number'));
  await app.close();
});

t.test('at debug level successful reads are logged too, once each', async (t) => {
  const { app, lines } = await appLogging('debug');
  await app.inject({ method: 'GET', url: '/ok' });
  await app.inject({ method: 'POST', url: '/ok', payload: {} });
  t.same(
    lines.map((l) => [l.level, l.req?.method, l.res?.statusCode]),
    [
      [20, 'GET', 200],
      [30, 'POST', 200],
    ],
  );
  await app.close();
});

t.test('the key cache id is the base64 of the stored key hash', async (t) => {
  const key = 'hrt_tenant_' + 'x'.repeat(43);
  t.equal(hashKeyBase64(key), hashKey(key).toString('base64'));
});
