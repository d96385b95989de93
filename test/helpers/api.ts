/**
 * An API under test: the real fastify app on a fresh, migrated database, with an admin key and an
 * operator key, and small helpers for requests through app.inject().
 */
import { randomBytes } from 'node:crypto';
import type { FastifyInstance, InjectOptions } from 'fastify';
import type { LightMyRequestResponse } from 'fastify';
import { loadConfig, type Config } from '../../provisioner/config.ts';
import { SecretBox } from '../../provisioner/crypto.ts';
import { buildApp } from '../../provisioner/http/app.ts';
import type { AppContext } from '../../provisioner/http/context.ts';
import { createKey } from '../../provisioner/store/keys.ts';
import { catalog, type Catalog } from '../../runtime/catalog.ts';
import { createTestDatabase, type TestDatabase } from './postgres.ts';

export interface TestApi {
  app: FastifyInstance;
  ctx: AppContext;
  db: TestDatabase;
  config: Config;
  adminKey: string;
  operatorKey: string;
  request(method: InjectOptions['method'], url: string, opts?: { key?: string | null; body?: unknown; headers?: Record<string, string> }): Promise<LightMyRequestResponse>;
  signup(body?: Record<string, unknown>, headers?: Record<string, string>): Promise<{ tenantId: string; apiKey: string; operationId: string; body: SignupBody }>;
  close(): Promise<void>;
}

export interface SignupBody {
  tenant: { id: string; organization: string; generation: number; spec: Record<string, unknown>; status: Record<string, unknown> };
  apiKey: string;
  operationId: string;
}

let orgCounter = 0;
export function uniqueOrg(prefix = 'org'): string {
  orgCounter += 1;
  return `${prefix}-${orgCounter}-${randomBytes(3).toString('hex')}`;
}

export async function createTestApi(opts: { env?: Record<string, string>; catalog?: Catalog } = {}): Promise<TestApi> {
  const db = await createTestDatabase();
  const config = loadConfig({ DATABASE_URL: db.url, PROVISIONER_SIGNUP_RATE_LIMIT: '100000', ...opts.env });
  const box = new SecretBox(randomBytes(32));
  const { app, ctx } = await buildApp({ config, pool: db.pool, box, catalog: opts.catalog ?? catalog });
  await app.ready();
  const adminKey = (await createKey(db.pool, { role: 'admin', name: 'test admin', createdBy: 'test' })).key;
  const operatorKey = (await createKey(db.pool, { role: 'operator', name: 'test operator', createdBy: 'test' })).key;
  const api: TestApi = {
    app, ctx, db, config, adminKey, operatorKey,
    async request(method, url, o = {}) {
      const key = o.key === undefined ? adminKey : o.key;
      const headers: Record<string, string> = { ...(key ? { authorization: `Bearer ${key}` } : {}), ...o.headers };
      return app.inject({ method, url, headers, ...(o.body !== undefined ? { payload: o.body as object } : {}) });
    },
    async signup(body = {}, headers = {}) {
      const res = await app.inject({
        method: 'POST', url: '/v1/signup', headers,
        payload: { organization: uniqueOrg(), email: 'owner@example.com', ...body },
      });
      if (res.statusCode !== 202) throw new Error(`signup failed: ${res.statusCode} ${res.body}`);
      const parsed = res.json<SignupBody>();
      return { tenantId: parsed.tenant.id, apiKey: parsed.apiKey, operationId: parsed.operationId, body: parsed };
    },
    async close() {
      await app.close();
      await db.drop();
    },
  };
  return api;
}
