/**
 * The API's schema compilers (provisioner/http/serialization.ts, validation.ts) compile a response
 * serializer or a request validator at its first use, once per distinct schema in the process:
 * what they answer is fastify's own compile's, a schema they refuse fails at its first use and at
 * compileEvery…(), naming the route, and an app built again reuses what the first compiled.
 */
import t from 'tap';
import Fastify from 'fastify';
import { Type } from 'typebox';
import { schemaController } from '../../../provisioner/http/schema-controller.ts';
import { compileEverySerializer } from '../../../provisioner/http/serialization.ts';
import { compileEveryValidator } from '../../../provisioner/http/validation.ts';

const Shared = Type.Object({ id: Type.String(), count: Type.Integer() }, { $id: 'SharedThing' });

async function app() {
  const app = Fastify({ schemaController });
  app.addSchema(Shared);
  app.get(
    '/things/:id',
    {
      schema: {
        params: Type.Object({ id: Type.Integer({ minimum: 1 }) }),
        querystring: Type.Object({ limit: Type.Integer({ default: 10 }) }),
        response: { 200: Type.Ref('SharedThing'), 404: Type.Object({ code: Type.String() }) },
      },
    },
    async (req, reply) => {
      const { id } = req.params as { id: number };
      const { limit } = req.query as { limit: number };
      if (id === 404) return reply.code(404).send({ code: 'NOT_FOUND', secret: 'dropped' });
      return { id: `thing-${id}`, count: limit, secret: 'dropped' };
    },
  );
  app.post(
    '/things',
    { schema: { body: Type.Object({ name: Type.String() }, { additionalProperties: false }) } },
    async (req) => req.body,
  );
  await app.ready();
  return app;
}

t.test('answers are serialized by their schema and requests validated and coerced as before', async (t) => {
  const a = await app();
  t.teardown(() => a.close());
  let res = await a.inject({ method: 'GET', url: '/things/7?limit=3' });
  t.equal(res.statusCode, 200, 'a valid read is answered');
  t.same(res.json(), { id: 'thing-7', count: 3 }, 'the shared schema shapes the answer; the querystring is coerced');
  res = await a.inject({ method: 'GET', url: '/things/7' });
  t.same(res.json(), { id: 'thing-7', count: 10 }, 'a default fills the querystring');
  res = await a.inject({ method: 'GET', url: '/things/404' });
  t.same(res.json(), { code: 'NOT_FOUND' }, 'each status its own schema');
  res = await a.inject({ method: 'GET', url: '/things/0' });
  t.equal(res.statusCode, 400, 'a path parameter under its minimum is refused');
  t.match(res.json().message, /params\/id must be >= 1/, 'naming the parameter and its minimum');
  res = await a.inject({ method: 'POST', url: '/things', payload: { name: 'x', extra: 1 } });
  t.equal(res.statusCode, 400, 'bodies are strict: an unknown field is refused');
  res = await a.inject({ method: 'POST', url: '/things', payload: { name: 5 } });
  t.equal(res.statusCode, 400, 'bodies are strict: a number is not a string');
});

t.test('an app built again compiles nothing new', async (t) => {
  const a = await app();
  const serializers = compileEverySerializer();
  const validators = compileEveryValidator();
  const b = await app();
  t.equal(compileEverySerializer(), serializers, 'no new serializer for the second app');
  t.equal(compileEveryValidator(), validators, 'no new validator for the second app');
  t.equal(
    (await b.inject({ method: 'GET', url: '/things/2?limit=1' })).json().count,
    1,
    'the second app answers with the shared functions',
  );
  await a.close();
  await b.close();
});

t.test('a schema the compiler refuses fails at its first use and at compileEvery…, naming the route', async (t) => {
  const a = Fastify({ schemaController });
  a.get('/broken', { schema: { response: { 200: Type.Object({ thing: Type.Ref('NoSuchSchema') }) } } }, async () => ({
    thing: 1,
  }));
  a.get(
    '/bad-query',
    { schema: { querystring: { type: 'object', properties: { n: { $ref: 'no-such-schema#' } } } } },
    async () => ({}),
  );
  a.get('/fine', { schema: { response: { 200: Type.Object({ ok: Type.Boolean() }) } } }, async () => ({ ok: true }));
  await a.ready();
  t.same(
    (await a.inject({ method: 'GET', url: '/fine' })).json(),
    { ok: true },
    'the app starts and serves its other routes',
  );
  const res = await a.inject({ method: 'GET', url: '/broken' });
  t.equal(res.statusCode, 500, 'its first answer fails');
  t.throws(() => compileEverySerializer(), /the 200 answer of GET \/broken: .*NoSuchSchema/);
  t.throws(() => compileEveryValidator(), /the querystring of GET \/bad-query: .*no-such-schema/);
  await a.close();
});
