/**
 * Idempotency keys: the first request with a key stores its response (encrypted: a signup
 * response holds an API key) in the same transaction that does the work, so a retry with the
 * same key and body gets the same answer and a concurrent duplicate waits for the first.
 *
 * The key is a secret (whoever presents it gets the stored answer): only its SHA-256 is stored,
 * the answer is encrypted bound to that hash, and a record is replayed only within
 * REPLAY_WINDOW_HOURS of the first request; after that the key starts afresh. The public route
 * only takes high-entropy keys (http/routes/signup.ts), so a stranger cannot guess one, nor
 * learn from a 409 which keys others use. Records past the window are deleted by the
 * `idempotency-pruner` loop (services.ts), not only when their key comes back.
 */
import { createHash } from 'node:crypto';
import type { Queryable } from '../db/tx.ts';

/** What seals the stored answers (crypto.ts's SecretBox). */
export interface Sealer {
  encrypt(plaintext: string | Buffer, aad?: string): Buffer;
  decrypt(sealed: Buffer, aad?: string): Buffer;
}

export type Claim =
  { kind: 'new' } | { kind: 'replay'; status: number; body: unknown } | { kind: 'mismatch' } | { kind: 'in-progress' };

/** Canonical JSON (sorted keys) so that key order does not change the request hash. */
export function requestHash(body: unknown): string {
  const canon = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(canon);
    if (v && typeof v === 'object') {
      return Object.fromEntries(
        Object.keys(v)
          .sort()
          .map((k) => [k, canon((v as Record<string, unknown>)[k])]),
      );
    }
    return v;
  };
  return createHash('sha256')
    .update(JSON.stringify(canon(body) ?? null))
    .digest('hex');
}

/** How long a stored answer is replayed. */
export const REPLAY_WINDOW_HOURS = 1;

/** What is stored for a key: its SHA-256 (hex), never the key. */
export function keyDigest(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

/** Must run inside the transaction that does the work. Blocks while another transaction holds the key. */
export async function claimKey(
  db: Queryable,
  box: Sealer,
  scope: string,
  rawKey: string,
  hash: string,
): Promise<Claim> {
  const key = keyDigest(rawKey);
  // A record past the replay window is forgotten: the key starts afresh.
  await db.query(
    `DELETE FROM idempotency_keys WHERE scope = $1 AND key = $2 AND created_at < now() - make_interval(hours => $3)`,
    [scope, key, REPLAY_WINDOW_HOURS],
  );
  const ins = await db.query(
    `INSERT INTO idempotency_keys (scope, key, request_hash) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING 1`,
    [scope, key, hash],
  );
  if ((ins.rowCount ?? 0) > 0) return { kind: 'new' };
  const { rows } = await db.query<{
    request_hash: string;
    response_status: number | null;
    response_enc: Buffer | null;
  }>('SELECT request_hash, response_status, response_enc FROM idempotency_keys WHERE scope = $1 AND key = $2', [
    scope,
    key,
  ]);
  const row = rows[0];
  if (!row) return { kind: 'in-progress' };
  if (row.request_hash !== hash) return { kind: 'mismatch' };
  if (row.response_status === null || row.response_enc === null) return { kind: 'in-progress' };
  const body: unknown = JSON.parse(box.decrypt(row.response_enc, `${scope}/${key}`).toString('utf8'));
  return { kind: 'replay', status: row.response_status, body };
}

export async function storeResponse(
  db: Queryable,
  box: Sealer,
  scope: string,
  rawKey: string,
  status: number,
  body: unknown,
): Promise<void> {
  const key = keyDigest(rawKey);
  await db.query('UPDATE idempotency_keys SET response_status = $3, response_enc = $4 WHERE scope = $1 AND key = $2', [
    scope,
    key,
    status,
    box.encrypt(JSON.stringify(body), `${scope}/${key}`),
  ]);
}

/**
 * Deletes up to `limit` records older than the replay window (`olderThanHours`, default
 * REPLAY_WINDOW_HOURS): past it a record is never replayed (claimKey forgets it), and a stored
 * answer holds secrets (a signup's API key, a registration's bootstrap token), so it is not kept
 * longer than it serves. Records another transaction holds are skipped. Answers how many went.
 */
export async function pruneKeys(db: Queryable, limit: number, olderThanHours = REPLAY_WINDOW_HOURS): Promise<number> {
  const { rowCount } = await db.query(
    `DELETE FROM idempotency_keys WHERE (scope, key) IN (
       SELECT scope, key FROM idempotency_keys WHERE created_at < now() - make_interval(hours => $1)
        ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED)`,
    [olderThanHours, limit],
  );
  return rowCount ?? 0;
}
