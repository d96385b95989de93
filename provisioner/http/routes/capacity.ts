/**
 * `GET /v1/capacity`: what tenants cost on the root clusters and how fast they start, per plan —
 * tenants awake, asleep and waking with what each reserves, the warm pool against its size, where
 * the last day's signups' runtimes came from, and the last day's wakes (docs/operations.md "Sleep",
 * "Warm pool"). The console's Capacity page and `provisioner capacity` read it.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { endpoint } from '../api-routes.ts';
import type { AppContext } from '../context.ts';

export const capacityRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    app.route({
      ...endpoint('GET /v1/capacity', {
        summary:
          'Tenants awake and asleep per plan with what they reserve, the warm pool, signups warm and cold, wakes',
        tags: ['tenants'],
      }),
      config: { roles: ['operator'] },
      handler: async () => ctx.capacity.read(),
    });
  };
