/**
 * Git webhooks at a public per-tenant URL (docs/operations.md "Webhooks while asleep").
 *
 * `POST /v1/tenants/:id/webhook-url` mints the URL's secret (shown once, its SHA-256 kept; a new one
 * replaces the old). A Git provider posts to `/v1/webhooks/:tenantId/:secret/<path>`: the webhook is
 * checked (secret, size, the tenant's queue budget), kept in Postgres and answered 202 at once, and
 * a sleeping tenant is woken. The `webhook-delivery` loop of the replica that holds the tenant's
 * tunnel sends each kept webhook, in the order they came, to the runtime's event source
 * (`/webhooks/<path>` on its request router, signed as every forwarded request) and deletes it once
 * the runtime answered; a failure is retried with backoff, at most MAX_ATTEMPTS times. So a webhook
 * sent while the tenant sleeps, or while its runtime restarts, is delivered once it is back, and a
 * provisioner that dies loses none (the queue is a table; a lease lets another replica take over).
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { Readable } from 'node:stream';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { WebhookConfig } from '../config.ts';
import { withTx } from '../db/tx.ts';
import type { Notifications } from '../db/notifications.ts';
import { AppError, errors } from '../errors.ts';
import { PeriodicLoop } from '../../runtime/loops/periodic.ts';
import { writeAudit, type Requester } from '../store/audit.ts';
import {
  WEBHOOK_CHANNEL,
  deleteWebhook,
  leaseWebhooks,
  queueWebhook,
  retryWebhook,
  setWebhookTokenHash,
  tenantsWithDueWebhooks,
  webhookTarget,
} from '../store/webhooks.ts';
import { getTenantRow } from '../store/tenants.ts';
import type { TunnelServer } from '../tunnel/server.ts';
import { RELAY_HEADER } from '../tunnel/relay.ts';
import { REQUEST_TOKEN_HEADER } from '../../runtime/protocol/request-token.ts';

/** Delivery attempts before a webhook is given up (logged with its tenant and path). */
export const MAX_ATTEMPTS = 10;
const LEASE_SECONDS = 60;
const BATCH = 20;
const DELIVERY_TIMEOUT_MS = 30_000;

/** Headers a webhook keeps for the event source: its type and the provider's event and signature headers. */
export function keptHeaders(raw: Record<string, string | string[] | undefined>): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  let bytes = 0;
  for (const [name, value] of Object.entries(raw)) {
    const n = name.toLowerCase();
    const keep =
      n === 'content-type' ||
      n === 'user-agent' ||
      (n.startsWith('x-') &&
        !n.startsWith('x-forwarded-') &&
        !['x-real-ip', 'x-request-id', RELAY_HEADER, REQUEST_TOKEN_HEADER].includes(n));
    if (!keep || value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) {
      bytes += n.length + v.length;
      if (bytes > 16 * 1024) return out;
      out.push([n, v]);
    }
  }
  return out;
}

const hashOf = (secret: string): Buffer => createHash('sha256').update(secret, 'utf8').digest();

export interface WebhookServiceOptions {
  pool: pg.Pool;
  config: WebhookConfig;
  tunnel: TunnelServer;
  notifications: Notifications;
  /** Wakes a sleeping tenant (sleep/service.ts). */
  wake: (tenantId: string, by: Requester, reason: string) => Promise<unknown>;
  logger?: Logger | undefined;
}

export class WebhookService {
  readonly loop: PeriodicLoop;
  readonly #o: WebhookServiceOptions;
  readonly stats = { received: 0, delivered: 0, retried: 0, givenUp: 0 };

  constructor(o: WebhookServiceOptions) {
    this.#o = o;
    this.loop = new PeriodicLoop({
      name: 'webhook-delivery',
      round: async () => ((await this.deliver()) >= BATCH ? 'again' : undefined),
      intervalMs: () => 5_000,
      setUp: () => {
        o.notifications.subscribe(
          WEBHOOK_CHANNEL,
          (tenantId) => {
            if (o.tunnel.status(tenantId).connected) this.loop.kick();
          },
          () => this.loop.kick(),
        );
        o.tunnel.events.on('connect', this.#onConnect);
      },
      tearDown: () => {
        o.tunnel.events.off('connect', this.#onConnect);
      },
      logger: o.logger,
    });
  }

  readonly #onConnect = (): void => this.loop.kick();

  /** A new secret for the tenant's webhook URL (the old one stops working). */
  async mintUrl(tenantId: string, baseUrl: string, by: Requester): Promise<{ url: string }> {
    const secret = randomBytes(32).toString('base64url');
    await withTx(this.#o.pool, async (tx) => {
      const row = await getTenantRow(tx, tenantId, true);
      if (!row) throw errors.notFound('tenant', tenantId);
      if (row.deleted) throw errors.tenantDeleted(tenantId);
      await setWebhookTokenHash(tx, tenantId, hashOf(secret));
      await writeAudit(tx, by.actor, {
        action: 'tenant.webhook_url',
        targetType: 'tenant',
        targetId: tenantId,
        requestId: by.requestId,
      });
    });
    return { url: `${baseUrl.replace(/\/+$/, '')}/v1/webhooks/${tenantId}/${secret}/` };
  }

  /**
   * Takes a webhook posted to the tenant's URL: kept for delivery (202), a sleeping tenant woken.
   * An unknown tenant or a wrong secret is a 404 (the URL does not exist for the caller).
   */
  async receive(
    tenantId: string,
    secret: string,
    w: { path: string; headers: Array<[string, string]>; body: Buffer; requestId: string },
  ): Promise<{ id: string; waking: boolean }> {
    const target = await webhookTarget(this.#o.pool, tenantId);
    const given = hashOf(secret);
    if (!target || target.deleted || !target.hash || !timingSafeEqual(target.hash, given))
      throw new AppError(
        'ROUTE_NOT_FOUND',
        'no webhook URL here: the tenant does not exist, or the URL is not its current one (POST /v1/tenants/:id/webhook-url gives a new one)',
      );
    const queued = await queueWebhook(
      this.#o.pool,
      { tenantId, path: w.path, headers: w.headers, body: w.body },
      { count: this.#o.config.queuePerTenant, bytes: this.#o.config.queueBytesPerTenant },
    );
    if ('refused' in queued) {
      throw new AppError(
        'WEBHOOK_QUEUE_FULL',
        queued.refused === 'count'
          ? `the tenant already has ${queued.queued} webhooks waiting for its runtime (PROVISIONER_WEBHOOK_QUEUE_PER_TENANT); retry later`
          : `the tenant's waiting webhooks hold ${queued.queuedBytes} bytes; this one would pass PROVISIONER_WEBHOOK_QUEUE_BYTES_PER_TENANT; retry later`,
        { details: { retryAfterSeconds: 60 } },
      );
    }
    this.stats.received += 1;
    if (target.sleeping)
      await this.#o.wake(tenantId, { actor: { id: 'webhook', role: 'public' }, requestId: w.requestId }, 'a webhook');
    return { id: queued.id, waking: target.sleeping };
  }

  /** One delivery round: this replica's tunnels' due webhooks, in order per tenant. Answers how many were sent. */
  async deliver(): Promise<number> {
    const due = await tenantsWithDueWebhooks(this.#o.pool, 500);
    const here = due.filter((id) => this.#o.tunnel.status(id).connected);
    const leased = await leaseWebhooks(this.#o.pool, here, BATCH, LEASE_SECONDS);
    const failedTenants = new Set<string>();
    let sent = 0;
    for (const w of leased) {
      if (failedTenants.has(w.tenant_id)) {
        // Order is kept: a tenant's later webhooks wait for its earlier one.
        await retryWebhook(this.#o.pool, w.id, 1000, 'waiting for an earlier webhook of the tenant');
        continue;
      }
      const error = await this.#send(w.tenant_id, w.path, w.headers, w.body);
      if (error === undefined) {
        await deleteWebhook(this.#o.pool, w.id);
        this.stats.delivered += 1;
        sent += 1;
      } else if (w.attempts >= MAX_ATTEMPTS) {
        await deleteWebhook(this.#o.pool, w.id);
        this.stats.givenUp += 1;
        this.#o.logger?.warn(
          { tenantId: w.tenant_id, path: w.path.split('?', 1)[0], attempts: w.attempts, error },
          'webhook given up after its last attempt',
        );
      } else {
        failedTenants.add(w.tenant_id);
        this.stats.retried += 1;
        await retryWebhook(this.#o.pool, w.id, Math.min(300_000, 1000 * 2 ** w.attempts), error);
      }
    }
    return sent;
  }

  /** Sends one webhook through the tenant's tunnel; undefined when the runtime took it (any answer below 500). */
  async #send(
    tenantId: string,
    path: string,
    headers: Array<[string, string]>,
    body: Buffer,
  ): Promise<string | undefined> {
    const signal = AbortSignal.timeout(DELIVERY_TIMEOUT_MS);
    try {
      const res = await this.#o.tunnel.forward(tenantId, {
        method: 'POST',
        path: `/webhooks${path}`,
        headers: [...headers, ['content-length', String(body.length)]],
        body: Readable.from([body]),
        signal,
      });
      res.body.resume();
      if (res.status >= 500) return `the runtime answered ${res.status}`;
      return undefined;
    } catch (err) {
      return (err as Error).message;
    }
  }
}
