/**
 * An API under test: the process's services and the real fastify app over them, built the way
 * `provisioner serve` builds them (buildServices, buildApp), on a fresh, migrated database, with
 * an admin key and an operator key, and small helpers for requests through app.inject(). No
 * reconciler runs (PROVISIONER_ENGINE=none unless the env says otherwise).
 */
import { randomBytes } from 'node:crypto';
import type { FastifyInstance, InjectOptions } from 'fastify';
import type { LightMyRequestResponse } from 'fastify';
import type pg from 'pg';
import { loadConfig, type Config } from '../../provisioner/config.ts';
import { buildApp } from '../../provisioner/http/app.ts';
import { buildServices, type Services, type ServicesOptions } from '../../provisioner/services.ts';
import { createKey } from '../../provisioner/store/keys.ts';
import type { Catalog } from '../../runtime/catalog.ts';
import { createTestDatabase, type TestDatabase } from './postgres.ts';

export interface TestApi {
  app: FastifyInstance;
  services: Services;
  db: TestDatabase;
  config: Config;
  adminKey: string;
  operatorKey: string;
  request(
    method: InjectOptions['method'],
    url: string,
    opts?: { key?: string | null; body?: unknown; headers?: Record<string, string> },
  ): Promise<LightMyRequestResponse>;
  signup(
    body?: Record<string, unknown>,
    headers?: Record<string, string>,
  ): Promise<{ tenantId: string; apiKey: string; operationId: string; body: SignupBody }>;
  close(): Promise<void>;
}

export interface SignupBody {
  tenant: {
    id: string;
    organization: string;
    generation: number;
    spec: Record<string, unknown>;
    status: Record<string, unknown>;
  };
  apiKey: string;
  /** Served from the warm pool. */
  warm?: boolean;
  operationId: string;
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
  const api: TestApi = {
    app,
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
      const res = await app.inject({
        method: 'POST',
        url: '/v1/signup',
        headers,
        payload: { organization: uniqueOrg(), email: 'owner@example.com', ...body },
      });
      if (res.statusCode !== 202) throw new Error(`signup failed: ${res.statusCode} ${res.body}`);
      const parsed = res.json<SignupBody>();
      return { tenantId: parsed.tenant.id, apiKey: parsed.apiKey, operationId: parsed.operationId, body: parsed };
    },
    async close() {
      await replica.close();
      await db.drop();
    },
  };
  return api;
}
