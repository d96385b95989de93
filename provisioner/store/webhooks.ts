/**
 * Webhooks kept for tenants' runtimes (migration 035): the URL's secret (its hash), the queue of
 * webhooks accepted and not yet delivered, and the delivery round's lease on them.
 */
import type { Queryable } from '../db/tx.ts';

export const WEBHOOK_CHANNEL = 'tenant_webhook';

export async function setWebhookTokenHash(db: Queryable, tenantId: string, hash: Buffer): Promise<void> {
  await db.query('UPDATE tenants SET webhook_token_hash = $2 WHERE id = $1', [tenantId, hash]);
}

/** The tenant's webhook secret hash and whether it may take webhooks (not deleted); undefined: no such tenant. */
export async function webhookTarget(
  db: Queryable,
  tenantId: string,
): Promise<{ hash: Buffer | null; deleted: boolean; sleeping: boolean } | undefined> {
  const { rows } = await db.query<{ hash: Buffer | null; deleted: boolean; sleeping: boolean }>(
    'SELECT webhook_token_hash AS hash, deleted, sleeping FROM tenants WHERE id = $1',
    [tenantId],
  );
  return rows[0];
}

export interface NewWebhook {
  tenantId: string;
  path: string;
  headers: Array<[string, string]>;
  body: Buffer;
}

/**
 * Queues a webhook within the tenant's budget, in one statement: the count and bytes already
 * queued are read under the tenant row's lock, so concurrent webhooks cannot both take the last
 * place. Answers the new id, or what the budget refused.
 */
export async function queueWebhook(
  db: Queryable,
  w: NewWebhook,
  budget: { count: number; bytes: number },
): Promise<{ id: string } | { refused: 'count' | 'bytes'; queued: number; queuedBytes: number }> {
  const { rows } = await db.query<{ id: string | null; queued: number; queued_bytes: string }>(
    `WITH t AS (SELECT id FROM tenants WHERE id = $1 FOR UPDATE),
     q AS (SELECT count(*)::int AS n, coalesce(sum(size_bytes), 0)::bigint AS bytes FROM tenant_webhooks WHERE tenant_id = $1),
     ins AS (
       INSERT INTO tenant_webhooks (tenant_id, path, headers, body, size_bytes)
       SELECT $1, $2, $3, $4, $5::int FROM t, q WHERE q.n < $6::int AND q.bytes + $5::int <= $7::bigint
       RETURNING id)
     SELECT (SELECT id::text FROM ins) AS id, q.n AS queued, q.bytes::text AS queued_bytes, pg_notify($8, $1::text)
       FROM q`,
    [w.tenantId, w.path, JSON.stringify(w.headers), w.body, w.body.length, budget.count, budget.bytes, WEBHOOK_CHANNEL],
  );
  const r = rows[0]!;
  if (r.id) return { id: r.id };
  return {
    refused: r.queued >= budget.count ? 'count' : 'bytes',
    queued: r.queued,
    queuedBytes: Number(r.queued_bytes),
  };
}

/** Tenants with webhooks due for delivery (not leased, their retry time passed), at most `limit`. */
export async function tenantsWithDueWebhooks(db: Queryable, limit: number): Promise<string[]> {
  const { rows } = await db.query<{ tenant_id: string }>(
    `SELECT DISTINCT tenant_id FROM tenant_webhooks
      WHERE next_attempt_at <= now() AND (lease_until IS NULL OR lease_until < now()) LIMIT $1`,
    [limit],
  );
  return rows.map((r) => r.tenant_id);
}

export interface QueuedWebhook {
  id: string;
  tenant_id: string;
  path: string;
  headers: Array<[string, string]>;
  body: Buffer;
  attempts: number;
  received_at: Date;
}

/**
 * Leases the tenants' due webhooks for `leaseSeconds`, oldest first per tenant, at most `limit`;
 * each lease counts an attempt. A tenant whose oldest webhook is not due waits (order is kept).
 */
export async function leaseWebhooks(
  db: Queryable,
  tenantIds: readonly string[],
  limit: number,
  leaseSeconds: number,
): Promise<QueuedWebhook[]> {
  if (tenantIds.length === 0) return [];
  const { rows } = await db.query<QueuedWebhook & { id: string }>(
    `UPDATE tenant_webhooks w SET lease_until = now() + make_interval(secs => $3), attempts = w.attempts + 1
      WHERE w.id IN (
        SELECT id FROM tenant_webhooks
         WHERE tenant_id = ANY($1::uuid[]) AND next_attempt_at <= now() AND (lease_until IS NULL OR lease_until < now())
           AND NOT EXISTS (SELECT 1 FROM tenant_webhooks o WHERE o.tenant_id = tenant_webhooks.tenant_id
                            AND o.id < tenant_webhooks.id AND (o.next_attempt_at > now() OR o.lease_until >= now()))
         ORDER BY tenant_id, id LIMIT $2 FOR UPDATE SKIP LOCKED)
      RETURNING w.id::text AS id, w.tenant_id, w.path, w.headers, w.body, w.attempts, w.received_at`,
    [tenantIds, limit, leaseSeconds],
  );
  return rows.sort((a, b) =>
    a.tenant_id === b.tenant_id ? Number(a.id) - Number(b.id) : a.tenant_id < b.tenant_id ? -1 : 1,
  );
}

/** Delivered (or given up): the webhook leaves the queue. */
export async function deleteWebhook(db: Queryable, id: string): Promise<void> {
  await db.query('DELETE FROM tenant_webhooks WHERE id = $1', [id]);
}

/** Not delivered this time: back in the queue, due again after `retryMs`. */
export async function retryWebhook(db: Queryable, id: string, retryMs: number, error: string): Promise<void> {
  await db.query(
    `UPDATE tenant_webhooks SET lease_until = NULL, next_attempt_at = now() + make_interval(secs => $2::float8 / 1000),
            last_error = $3 WHERE id = $1`,
    [id, retryMs, error.slice(0, 1000)],
  );
}

/** Webhooks kept for the tenant, and their bytes. */
export async function queuedWebhooks(db: Queryable, tenantId: string): Promise<{ count: number; bytes: number }> {
  const { rows } = await db.query<{ count: number; bytes: string }>(
    `SELECT count(*)::int AS count, coalesce(sum(size_bytes), 0)::text AS bytes FROM tenant_webhooks WHERE tenant_id = $1`,
    [tenantId],
  );
  return { count: rows[0]!.count, bytes: Number(rows[0]!.bytes) };
}
