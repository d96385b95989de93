/**
 * Authentication and role checks, as one scope-level hook: every route declares the roles that
 * may call it in `config.roles` (or `config.public`), and the hook resolves the bearer key before
 * the handler runs. Tenant keys only ever see their own tenant: every route of one tenant
 * (`/v1/tenants/:id` and below) gets a preHandler that answers 404 for other tenants' ids, so no
 * handler checks it itself (and a new route cannot forget it).
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Role } from '../store/key-format.ts';
import { authenticate } from '../keys/authenticate.ts';
import type { KeyCache } from '../keys/cache.ts';
import { errors } from '../errors.ts';
import type { KeyIdentity } from '../store/keys.ts';
import type { Actor, Requester } from '../store/audit.ts';

export interface Auth {
  keyId: string;
  role: Role;
  tenantId: string | null;
  /** A hybrid runtime's key: its runtime's id (null for every other key). */
  runtimeId?: string | null;
}

declare module 'fastify' {
  interface FastifyRequest {
    auth: Auth | null;
  }
  interface FastifyContextConfig {
    /** Roles allowed to call the route; admin is always allowed. */
    roles?: readonly Role[];
    /** No key required (signup, health, docs). */
    public?: boolean;
  }
}

/** `lookup` resolves a key's SHA-256 (base64) when the cache does not have it. */
export function registerAuth(
  app: FastifyInstance,
  lookup: (hashBase64: string) => Promise<KeyIdentity | undefined>,
  cache: KeyCache,
): void {
  app.decorateRequest('auth', null);
  // After validation (preHandler), so that a malformed id is still a 400 for every caller.
  app.addHook('onRoute', (route) => {
    if (!TENANT_ROUTE.test(route.url)) return;
    const own =
      route.preHandler === undefined ? [] : Array.isArray(route.preHandler) ? route.preHandler : [route.preHandler];
    route.preHandler = [tenantAccess, ...own];
  });
  app.addHook('onRequest', async (request) => {
    // request.routeOptions builds a new object on every read: read it once.
    const route = request.routeOptions;
    const cfg = route.config;
    if (cfg.public || route.url === undefined) return;
    const identity = await authenticate(request.headers.authorization, lookup, cache);
    request.auth = identity;
    const roles = cfg.roles ?? [];
    if (identity.role !== 'admin' && !roles.includes(identity.role)) {
      throw errors.forbidden(`role '${identity.role}' may not call ${request.method} ${route.url}`);
    }
  });
}

export function authOf(request: FastifyRequest): Auth {
  if (!request.auth) throw errors.unauthenticated();
  return request.auth;
}

export function actorOf(request: FastifyRequest): Actor {
  const a = request.auth;
  return a ? { id: a.keyId, role: a.role } : { id: 'public', role: 'public' };
}

/** The routes of one tenant, whose `:id` a tenant-bound key may only name when it is its own. */
const TENANT_ROUTE = /^\/v1\/tenants\/:id(\/|$)/;

async function tenantAccess(request: FastifyRequest): Promise<void> {
  assertTenantAccess(request, (request.params as { id: string }).id);
}

/** The caller and the request, as services record them in audit rows. */
export function requesterOf(request: FastifyRequest): Requester {
  return { actor: actorOf(request), requestId: request.id };
}

/** Throws 404 (not 403) when a tenant-bound key addresses another tenant, so ids do not leak. */
export function assertTenantAccess(request: FastifyRequest, tenantId: string): void {
  const a = authOf(request);
  if ((a.role === 'tenant' || a.role === 'runtime') && a.tenantId !== tenantId)
    throw errors.notFound('tenant', tenantId);
}
