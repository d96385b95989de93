/**
 * API keys on the API side: creation (shown once, stored as a hash), listing, revocation. Each
 * change is written with its audit row in one transaction; a revocation also NOTIFYs every
 * replica (store/keys.ts) and is applied to this process at once through `onRevoked`.
 */
import type pg from 'pg';
import type { Role } from '../store/key-format.ts';
import { withTx } from '../db/tx.ts';
import { errors } from '../errors.ts';
import { writeAudit, type Requester } from '../store/audit.ts';
import { countTenantKeys, createKey, getKey, listKeys, revokeKey, type ApiKeyInfo } from '../store/keys.ts';
import { DEFAULT_TENANT_BUDGETS } from '../config.ts';
import { getTenantRow } from '../store/tenants.ts';

export interface KeyServiceDeps {
  pool: pg.Pool;
  /** Called after a revocation committed (this process drops the key from its cache, closes its tunnel). */
  onRevoked: (keyId: string) => void;
  /** Unrevoked keys bound to one tenant (config.budgets.keys; default 100). */
  perTenant?: number;
}

export interface NewKey {
  role: Role;
  name: string;
  /** The tenant a tenant or runtime key is bound to; other roles are bound to none. */
  tenantId?: string | undefined;
}

export class KeyService {
  readonly #pool: pg.Pool;
  readonly #onRevoked: (keyId: string) => void;
  readonly #perTenant: number;

  constructor(deps: KeyServiceDeps) {
    this.#pool = deps.pool;
    this.#onRevoked = deps.onRevoked;
    this.#perTenant = deps.perTenant ?? DEFAULT_TENANT_BUDGETS.keys;
  }

  /** Creates a key; the answer holds the key itself, which is never shown again. */
  async create(input: NewKey, by: Requester): Promise<{ key: string; info: ApiKeyInfo }> {
    const bound = input.role === 'tenant' || input.role === 'runtime';
    if (bound && !input.tenantId) throw errors.validation(`a ${input.role} key needs tenantId`, 'tenantId');
    if (!bound && input.tenantId)
      throw errors.validation(`an ${input.role} key cannot be bound to a tenant`, 'tenantId');
    return withTx(this.#pool, async (tx) => {
      if (input.tenantId) {
        // Under the tenant's row lock: two creations at once cannot both take the last place.
        const tenant = await getTenantRow(tx, input.tenantId, true);
        if (!tenant) throw errors.notFound('tenant', input.tenantId);
        if (tenant.deleted) throw errors.tenantDeleted(input.tenantId);
        if ((await countTenantKeys(tx, input.tenantId)) >= this.#perTenant)
          throw errors.tenantLimitReached('unrevoked API keys', this.#perTenant, 'PROVISIONER_KEYS_PER_TENANT');
      }
      const created = await createKey(tx, {
        role: input.role,
        tenantId: input.tenantId ?? null,
        name: input.name,
        createdBy: by.actor.id,
      });
      await writeAudit(tx, by.actor, {
        action: 'key.create',
        targetType: 'api_key',
        targetId: created.info.id,
        after: created.info,
        requestId: by.requestId,
      });
      return created;
    });
  }

  list(filter: { tenantId?: string | undefined; includeRevoked: boolean }): Promise<ApiKeyInfo[]> {
    return listKeys(this.#pool, {
      ...(filter.tenantId ? { tenantId: filter.tenantId } : {}),
      includeRevoked: filter.includeRevoked,
    });
  }

  /** Revokes a key; the caller's own key cannot be revoked (there would be no admin key left to undo it). */
  async revoke(id: string, by: Requester): Promise<ApiKeyInfo> {
    const info = await withTx(this.#pool, async (tx) => {
      const before = await getKey(tx, id);
      if (!before) throw errors.notFound('API key', id);
      if (before.id === by.actor.id) throw errors.cannotRevokeOwnKey();
      const after = (await revokeKey(tx, id))!;
      await writeAudit(tx, by.actor, {
        action: 'key.revoke',
        targetType: 'api_key',
        targetId: after.id,
        before,
        after,
        requestId: by.requestId,
      });
      return after;
    });
    this.#onRevoked(info.id);
    return info;
  }
}
