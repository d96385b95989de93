/**
 * An API under test: the process's services and the real fastify app over them, built the way
 * `provisioner serve` builds them (buildServices, buildApp), on a fresh, migrated database, with
 * an admin key and an operator key. Tests call it with the one API client
 * (provisioner/http/api-client.ts) over app.inject() (inject-fetch.ts): `api.client` (the admin
 * key), `api.as(key)` (another key, or `null`: none):
 *
 *     const { tenant } = await api.client.call('GET /v1/tenants/:id', { params: { id } });
 *     await t.rejects(api.as(tenantKey).call('GET /v1/keys'), { status: 403, code: 'FORBIDDEN' });
 *
 * `request` is the one raw request, for what the client cannot send: malformed bodies, wrong
 * types, raw headers, paths outside the route map. No reconciler runs (PROVISIONER_ENGINE=none
 * unless the env says otherwise).
 */
import { randomBytes } from 'node:crypto';
import type { FastifyInstance, InjectOptions } from 'fastify';
import type { LightMyRequestResponse } from 'fastify';
import type pg from 'pg';
import { loadConfig, type Config } from '../../provisioner/config.ts';
import { ApiClient, type AnswerOf, type BodyOf } from '../../provisioner/http/api-client.ts';
import { buildApp } from '../../provisioner/http/app.ts';
import { buildServices, type Services, type ServicesOptions } from '../../provisioner/services.ts';
import { createKey } from '../../provisioner/store/keys.ts';
import type { Catalog } from '../../runtime/catalog.ts';
import { injectFetch } from './inject-fetch.ts';
import { createTestDatabase, type TestDatabase } from './postgres.ts';

export interface TestApi {
  app: FastifyInstance;
  services: Services;
  db: TestDatabase;
  config: Config;
  adminKey: string;
  operatorKey: string;
  /** The one API client over app.inject(), with the admin key. */
  client: ApiClient;
  /** The client with another key (`null`: no key at all). */
  as(key: string | null): ApiClient;
  /**
   * A raw request through app.inject() (the admin key unless `key` says another, `null`: none):
   * only for what the client cannot send (malformed input, raw headers, routes outside the map).
   */
  request(
    method: InjectOptions['method'],
    url: string,
    opts?: { key?: string | null; body?: unknown; headers?: Record<string, string> },
  ): Promise<LightMyRequestResponse>;
  /** POST /v1/signup (a unique organization unless `body` names one), with no key; throws unless accepted. */
  signup(
    body?: Partial<BodyOf<'POST /v1/signup'>>,
    headers?: Record<string, string>,
  ): Promise<{ tenantId: string; apiKey: string; operationId: string; body: AnswerOf<'POST /v1/signup'> }>;
  close(): Promise<void>;
}

let orgCounter = 0;
export function uniqueOrg(prefix = 'org'): string {
  orgCounter += 1;
  return `${prefix}-${orgCounter}-${randomBytes(3).toString('hex')}`;
}

/** One provisioner process's services and app, started (not listening); close() stops them as serve does. */
export interface TestReplica {
  app: FastifyInstance;
  services: Services;
  close(): Promise<void>;
}

/** Builds and starts services and app as `provisioner serve` does, on the given pool. */
export async function startReplica(
  config: Config,
  db: { pool: pg.Pool; url: string },
  opts: ServicesOptions = {},
): Promise<TestReplica> {
  const services = await buildServices(config, db, opts);
  const app = await buildApp(services);
  await services.start();
  await app.ready();
  let closed: Promise<void> | undefined;
  return {
    app,
    services,
    close() {
      closed ??= (async () => {
        await services.reconciler?.stop({ graceMs: 0 });
        await services.fleetDriver?.stop();
        await app.close();
        await services.stop();
      })();
      return closed;
    },
  };
}

export async function createTestApi(
  opts: {
    env?: Record<string, string>;
    catalog?: Catalog;
    logger?: ServicesOptions['logger'];
    /** An engine for a reconciler built (not started) with the services: services.reconciler. */
    engine?: ServicesOptions['engine'];
  } = {},
): Promise<TestApi> {
  const db = await createTestDatabase();
  const config = loadConfig({
    DATABASE_URL: db.url,
    PROVISIONER_SIGNUP_RATE_LIMIT: '100000',
    PROVISIONER_ENGINE: 'none',
    PROVISIONER_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    ...opts.env,
  });
  const replica = await startReplica(config, db, {
    ...(opts.catalog ? { catalog: opts.catalog } : {}),
    ...(opts.logger ? { logger: opts.logger } : {}),
    ...(opts.engine ? { engine: opts.engine } : {}),
  });
  const { app, services } = replica;
  const adminKey = (await createKey(db.pool, { role: 'admin', name: 'test admin', createdBy: 'test' })).key;
  const operatorKey = (await createKey(db.pool, { role: 'operator', name: 'test operator', createdBy: 'test' })).key;
  const client = new ApiClient({ token: adminKey, fetch: injectFetch(app) });
  const api: TestApi = {
    app,
    client,
    as: (key) => client.withToken(key ?? undefined),
    services,
    db,
    config,
    adminKey,
    operatorKey,
    async request(method, url, o = {}) {
      const key = o.key === undefined ? adminKey : o.key;
      const headers: Record<string, string> = { ...(key ? { authorization: `Bearer ${key}` } : {}), ...o.headers };
      return app.inject({ method, url, headers, ...(o.body !== undefined ? { payload: o.body as object } : {}) });
    },
    async signup(body = {}, headers = {}) {
      const parsed = await client.call('POST /v1/signup', {
        body: { organization: uniqueOrg(), email: 'owner@example.com', ...body },
        headers,
        token: '',
      });
      return { tenantId: parsed.tenant.id, apiKey: parsed.apiKey, operationId: parsed.operationId, body: parsed };
    },
    async close() {
      await replica.close();
      await db.drop();
    },
  };
  return api;
}
