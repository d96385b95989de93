import { Type } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { KubeConfig } from '@kubernetes/client-node';
import { DnsLabel, withErrors } from '../schemas.ts';
import { actorOf } from '../auth.ts';
import { errors } from '../../errors.ts';
import { pgCode, withTx } from '../../db/tx.ts';
import { writeAudit } from '../../store/audit.ts';
import { getClusterByName, insertCluster, listClusters, setCordoned } from '../../store/clusters.ts';
import { PLAN_NAMES } from '../../../tenants/plans.ts';
import type { AppContext } from '../context.ts';

const NameParams = Type.Object({ name: DnsLabel }, { additionalProperties: false });

const RegisterBody = Type.Object({
  name: DnsLabel,
  region: Type.String({ minLength: 1, maxLength: 63, pattern: '^[a-z0-9-]+$' }),
  capacity: Type.Integer({ minimum: 0, maximum: 100_000, description: 'maximum tenants placed on this cluster' }),
  labels: Type.Optional(Type.Record(Type.String({ maxLength: 63 }), Type.String({ maxLength: 63 }), { maxProperties: 32 })),
  plans: Type.Optional(Type.Array(Type.String({ maxLength: 40 }), { maxItems: 16, description: 'plans allowed here; empty means all' })),
  kubeconfig: Type.String({ minLength: 1, maxLength: 256 * 1024, description: 'kubeconfig contents (YAML or JSON); stored encrypted' }),
}, { additionalProperties: false });

/** Parses a kubeconfig and checks it names a current context with a cluster and user. */
export function validateKubeconfig(text: string): void {
  const kc = new KubeConfig();
  try {
    kc.loadFromString(text);
  } catch (err) {
    throw errors.validation(`kubeconfig could not be parsed: ${(err as Error).message.split('\n')[0]}`, 'kubeconfig');
  }
  const ctxName = kc.getCurrentContext();
  if (!ctxName || !kc.getCurrentCluster() || !kc.getCurrentUser()) {
    throw errors.validation('kubeconfig must set current-context to a context with a cluster and a user', 'kubeconfig');
  }
  const server = kc.getCurrentCluster()!.server;
  if (!/^https?:\/\//.test(server)) throw errors.validation(`kubeconfig cluster server '${server}' is not an http(s) URL`, 'kubeconfig');
}

export const clusterRoutes = (ctx: AppContext): FastifyPluginAsyncTypebox => async (app) => {
  app.get('/v1/clusters', {
    config: { roles: ['operator'] },
    schema: { summary: 'List root clusters with their load', tags: ['clusters'], response: withErrors({ 200: Type.Object({ items: Type.Array(Type.Ref('Cluster')) }) }) },
  }, async () => ({ items: await listClusters(ctx.pool) }));

  app.get('/v1/clusters/:name', {
    config: { roles: ['operator'] },
    schema: { summary: 'Get a root cluster', tags: ['clusters'], params: NameParams, response: withErrors({ 200: Type.Ref('Cluster') }) },
  }, async (request) => {
    const c = await getClusterByName(ctx.pool, request.params.name);
    if (!c) throw errors.notFound('cluster', request.params.name);
    return c;
  });

  app.post('/v1/clusters', {
    config: { roles: ['operator'] },
    schema: { summary: 'Register a root cluster', tags: ['clusters'], body: RegisterBody, response: withErrors({ 201: Type.Ref('Cluster') }) },
  }, async (request, reply) => {
    const b = request.body;
    validateKubeconfig(b.kubeconfig);
    for (const p of b.plans ?? []) if (!PLAN_NAMES.includes(p)) throw errors.unknownPlan(p, PLAN_NAMES);
    const cluster = await withTx(ctx.pool, async (tx) => {
      let c;
      try {
        c = await insertCluster(tx, {
          name: b.name, region: b.region, capacity: b.capacity, labels: b.labels ?? {}, plans: b.plans ?? [],
          kubeconfigEnc: ctx.box.encrypt(b.kubeconfig, `cluster/${b.name}`),
        });
      } catch (err) {
        if (pgCode(err) === '23505') throw errors.clusterExists(b.name);
        throw err;
      }
      await writeAudit(tx, actorOf(request), { action: 'cluster.register', targetType: 'cluster', targetId: c.name, after: c, requestId: request.id });
      return c;
    });
    return reply.status(201).send(cluster);
  });

  for (const action of ['cordon', 'uncordon'] as const) {
    app.post(`/v1/clusters/:name/${action}`, {
      config: { roles: ['operator'] },
      schema: {
        summary: action === 'cordon' ? 'Cordon a cluster: no new tenants are placed on it' : 'Uncordon a cluster',
        tags: ['clusters'], params: NameParams, response: withErrors({ 200: Type.Ref('Cluster') }),
      },
    }, async (request) => {
      return withTx(ctx.pool, async (tx) => {
        const before = await getClusterByName(tx, request.params.name);
        if (!before) throw errors.notFound('cluster', request.params.name);
        const after = (await setCordoned(tx, request.params.name, action === 'cordon'))!;
        await writeAudit(tx, actorOf(request), {
          action: `cluster.${action}`, targetType: 'cluster', targetId: after.name,
          before: { cordoned: before.cordoned }, after: { cordoned: after.cordoned }, requestId: request.id,
        });
        return after;
      });
    });
  }
};
