/**
 * Delivery of the queue to the control plane: one batch in flight at a time, each at most
 * MAX_BATCH_ITEMS items and MAX_BATCH_BYTES of JSON, posted to `${controlPlaneUrl}/v1/runtime/events`
 * with the runtime token. At least once: an entry leaves the queue only when the control plane
 * acknowledged the batch holding it (a retried batch is built again from the queue, so it carries
 * the latest states). Network errors, 5xx and 429 are retried with exponential backoff and full
 * jitter (Retry-After honoured), a batch that met a 5xx in halves; 401/403 are retried slowly
 * (a rotated token is read again on every try), and at once when the token read meanwhile is not
 * the one refused (a mounted Secret updated after a warm pool entry's key was exchanged at its
 * claim: the old key may be revoked before the new file arrives). Any other 4xx means the batch can
 * never be accepted: a batch of several items is split in halves until the offending item is alone,
 * and that one is logged, counted and dropped.
 */
import type { Logger } from 'pino';
import {
  EVENTS_PATH,
  MAX_BATCH_BYTES,
  MAX_BATCH_ITEMS,
  type Digest,
  type EventBatch,
  type Heartbeat,
} from '../../protocol/events.ts';
import { backoffDelay, slowRetryDelay } from '../common/backoff.ts';
import { armWait, wait } from '../../loops/wait.ts';
import type { ReporterMetrics } from './metrics.ts';
import type { QueueEntry, ReportQueue } from './queue.ts';

export interface PendingDigests {
  digests: Digest[];
  /** Marks these digests delivered (a digest requested again meanwhile stays due). */
  commit(): void;
}

export interface SenderOptions {
  controlPlaneUrl: string;
  token: () => string;
  replica: string;
  queue: ReportQueue;
  log: Logger;
  metrics: ReporterMetrics;
  heartbeatIntervalMs: number;
  retryMaxMs: number;
  heartbeat: () => Heartbeat;
  /** Whether a digest is due (cheap); `digests` builds the due ones when a batch is made. */
  digestsDue: () => boolean;
  digests: () => PendingDigests;
  /** The control plane acknowledged these entries (the reporter then keeps less of them). */
  onDelivered?: (entries: readonly QueueEntry[]) => void;
  /** Per-request time limit (default 30 s). */
  requestTimeoutMs?: number;
  /** How often the token is read again while waiting after a refusal (default 1 s). */
  tokenCheckMs?: number;
}

type PostResult =
  | { kind: 'ok' }
  | { kind: 'retry'; afterMs?: number; reason: string; serverError?: boolean }
  | { kind: 'unauthorized'; status: number }
  | { kind: 'rejected'; status: number; body: string };

/** Retry-After in seconds or as an HTTP date, in ms (undefined when absent or unreadable). */
export function retryAfterMs(header: string | null, now = Date.now()): number | undefined {
  if (!header) return undefined;
  if (/^\d+$/.test(header.trim())) return Number(header.trim()) * 1000;
  const at = Date.parse(header);
  return Number.isFinite(at) ? Math.max(0, at - now) : undefined;
}

export class Sender {
  private readonly o: SenderOptions;
  private readonly url: string;
  private stopped = false;
  private draining = false;
  private wake: (() => void) | undefined;
  private loop: Promise<void> | undefined;
  private lastHeartbeat = 0;
  private maxItems = MAX_BATCH_ITEMS;
  private inFlight: AbortController | undefined;
  /** The token of the last post. */
  private postedWith: string | undefined;
  /** Whether the last attempt reached the control plane and was accepted. */
  healthy = true;

  constructor(o: SenderOptions) {
    this.o = o;
    this.url = `${o.controlPlaneUrl}${EVENTS_PATH}`;
  }

  start(): void {
    this.loop ??= this.run();
  }

  /** Something is due (a digest): send soon. */
  poke(): void {
    this.wake?.();
  }

  /** Delivers what is queued until the queue is empty or `timeoutMs` passed, then stops. */
  async drain(timeoutMs: number): Promise<boolean> {
    this.draining = true;
    this.poke();
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline && this.o.queue.size > 0) await this.pause(Math.min(100, deadline - Date.now()));
    const empty = this.o.queue.size === 0;
    this.stopped = true;
    this.inFlight?.abort();
    this.poke();
    await this.loop;
    return empty;
  }

  private pause(ms: number): Promise<void> {
    return wait(ms);
  }

  /** Waits up to `ms`, or less when poked or when the queue gets work. */
  private idle(ms: number): Promise<void> {
    const armed = armWait(ms);
    this.wake = armed.wake;
    void this.o.queue.waitForWork().then(armed.wake);
    return armed.done;
  }

  private async run(): Promise<void> {
    const { queue, log, metrics } = this.o;
    let attempt = 0;
    while (!this.stopped) {
      const heartbeatDue = Date.now() - this.lastHeartbeat >= this.o.heartbeatIntervalMs;
      if (queue.size === 0 && !this.o.digestsDue() && !heartbeatDue) {
        await this.idle(this.o.heartbeatIntervalMs - (Date.now() - this.lastHeartbeat));
        // A short linger lets a burst fill the first batch instead of going out one by one.
        if (!this.stopped && !this.draining) await this.pause(20);
        continue;
      }
      const pending = this.o.digests();
      const envelope: Omit<EventBatch, 'items'> = { replica: this.o.replica };
      if (heartbeatDue) envelope.heartbeat = this.o.heartbeat();
      if (pending.digests.length > 0) envelope.digests = pending.digests;
      // The envelope is serialised here; the items are JSON already and are joined in as they are.
      const head = JSON.stringify(envelope);
      const budget = MAX_BATCH_BYTES - Buffer.byteLength(head) - 16;
      const entries: QueueEntry[] =
        budget > 1024 || pending.digests.length === 0 ? queue.peek(this.maxItems, Math.max(budget, 0)) : [];
      const body = `${head.slice(0, -1)},"items":[${entries.map((e) => e.item.json).join(',')}]}`;
      if (Buffer.byteLength(body) > MAX_BATCH_BYTES)
        log.warn({ bytes: Buffer.byteLength(body), items: entries.length }, 'batch is larger than the contract allows');

      const result = await this.post(body);
      if (this.stopped && result.kind !== 'ok') break;
      switch (result.kind) {
        case 'ok': {
          attempt = 0;
          if (!this.healthy) log.info('the control plane accepts batches again');
          this.healthy = true;
          queue.ack(entries);
          pending.commit();
          this.o.onDelivered?.(entries);
          if (envelope.heartbeat) this.lastHeartbeat = Date.now();
          metrics.batches.inc({ result: 'ok' });
          const now = Date.now();
          for (const e of entries) {
            metrics.reportsSent.inc({ type: e.item.type });
            metrics.deliveryLag.observe(Math.max(0, (now - Date.parse(e.item.observedAt)) / 1000));
          }
          if (this.maxItems < MAX_BATCH_ITEMS) this.maxItems = Math.min(MAX_BATCH_ITEMS, this.maxItems * 2);
          break;
        }
        case 'retry': {
          metrics.batches.inc({ result: 'retry' });
          const delay = Math.min(
            result.afterMs ?? backoffDelay(attempt, { initialMs: 250, maxMs: this.o.retryMaxMs, factor: 2 }),
            5 * 60_000,
          );
          attempt++;
          // A batch the control plane failed on may be too large for it right now, or hold the
          // one state it chokes on: the next tries go in halves (grown back after a success).
          if (result.serverError && entries.length > 1) this.maxItems = Math.max(1, Math.ceil(entries.length / 2));
          if (this.healthy)
            log.warn({ reason: result.reason, retryInMs: delay }, 'could not deliver a batch; retrying with backoff');
          this.healthy = false;
          await this.idleFor(delay);
          break;
        }
        case 'unauthorized': {
          metrics.batches.inc({ result: 'retry' });
          if (this.healthy)
            log.error({ status: result.status }, 'the control plane refused the runtime token; retrying slowly');
          this.healthy = false;
          await this.idleUntilNewToken(slowRetryDelay());
          break;
        }
        case 'rejected': {
          metrics.batches.inc({ result: 'rejected' });
          if (entries.length > 1) {
            // Find the item the control plane refuses: halve until it is alone.
            this.maxItems = Math.max(1, Math.ceil(entries.length / 2));
            log.warn({ status: result.status, items: entries.length }, 'batch refused; sending it in smaller parts');
            break;
          }
          const dropped = entries[0];
          log.error(
            {
              status: result.status,
              response: result.body.slice(0, 500),
              object: dropped ? dropped.key : undefined,
              resourceVersion: dropped?.item.resourceVersion,
              digests: envelope.digests?.map((d) => d.kind),
            },
            'the control plane refused this report; it is dropped (sending it again cannot succeed)',
          );
          queue.ack(entries);
          pending.commit();
          if (dropped) metrics.reportsFailed.inc({ reason: `http_${result.status}` });
          if (envelope.heartbeat) this.lastHeartbeat = Date.now();
          break;
        }
      }
    }
  }

  /** Waits out a slow retry after a refusal, ending early when stopped or when the token read now is another. */
  private async idleUntilNewToken(ms: number): Promise<void> {
    const refused = this.postedWith;
    const deadline = Date.now() + ms;
    const step = this.o.tokenCheckMs ?? 1000;
    while (!this.stopped && Date.now() < deadline) {
      await this.idleFor(Math.min(step, deadline - Date.now()));
      let now: string | undefined;
      try {
        now = this.o.token();
      } catch {
        now = undefined; // said by the next post
      }
      if (now !== undefined && now !== refused) {
        this.o.log.info('the runtime token changed: sending again with the new one');
        return;
      }
    }
  }

  /** Waits out a retry delay, ending early only when stopped (not on new work). */
  private idleFor(ms: number): Promise<void> {
    const armed = armWait(ms);
    this.wake = () => {
      if (this.stopped) armed.wake();
    };
    return armed.done;
  }

  private async post(body: string): Promise<PostResult> {
    const controller = new AbortController();
    this.inFlight = controller;
    const timer = setTimeout(() => controller.abort(), this.o.requestTimeoutMs ?? 30_000);
    try {
      const token = this.o.token();
      this.postedWith = token;
      const res = await fetch(this.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body,
        signal: controller.signal,
      });
      const text = await res.text().catch(() => '');
      if (res.ok) return { kind: 'ok' };
      if (res.status === 429 || res.status >= 500) {
        const afterMs = retryAfterMs(res.headers.get('retry-after'));
        return {
          kind: 'retry',
          reason: `HTTP ${res.status}${text ? `: ${text.slice(0, 200)}` : ''}`,
          serverError: res.status >= 500,
          ...(afterMs !== undefined ? { afterMs } : {}),
        };
      }
      if (res.status === 401 || res.status === 403) return { kind: 'unauthorized', status: res.status };
      return { kind: 'rejected', status: res.status, body: text };
    } catch (err) {
      const cause = (err as { cause?: { code?: string } }).cause?.code;
      return { kind: 'retry', reason: cause ?? (err instanceof Error ? err.message : String(err)) };
    } finally {
      clearTimeout(timer);
      this.inFlight = undefined;
    }
  }
}
