/**
 * The report queue: one entry per object key holding the latest item for it, so a burst of
 * updates to one object costs one report ("latest state wins"; each replaced item is counted as
 * coalesced). It is bounded by the number of distinct objects: `put` of a new key into a full
 * queue is refused and the producer waits for room (`waitForRoom`) — the watches pause instead of
 * dropping events, so the final state of every object is still delivered.
 *
 * An entry stays in the queue while its batch is in flight; `ack` removes it only when no newer
 * item replaced it meanwhile (then the newer one is still to be sent). An entry keeps its place
 * when replaced, so a busy object does not starve older ones.
 */
import type { PreparedItem } from './items.ts';

export type QueueItem = PreparedItem;

export interface QueueEntry {
  key: string;
  item: QueueItem;
  /** JSON size of the item in bytes. */
  bytes: number;
  /** Changes whenever the item is replaced. */
  seq: number;
  /** When the key entered the queue (ms), kept when the item is replaced. */
  queuedAt: number;
}

export type PutResult = 'queued' | 'coalesced' | 'full';

export class ReportQueue {
  readonly limit: number;
  private readonly entries = new Map<string, QueueEntry>();
  private seq = 0;
  private roomWaiters: (() => void)[] = [];
  private workWaiters: (() => void)[] = [];
  private readonly now: () => number;
  /** Updates that replaced a pending item of the same object. */
  coalesced = 0;

  constructor(limit: number, now: () => number = Date.now) {
    if (!Number.isInteger(limit) || limit < 1) throw new Error(`queue limit must be a positive integer, not ${limit}`);
    this.limit = limit;
    this.now = now;
  }

  get size(): number {
    return this.entries.size;
  }

  hasRoom(): boolean {
    return this.entries.size < this.limit;
  }

  has(key: string): boolean {
    return this.entries.has(key);
  }

  /** Queues the latest item of `key`; 'full' (nothing changed) when it is a new key and there is no room. */
  put(key: string, item: QueueItem, bytes = Buffer.byteLength(item.json)): PutResult {
    const existing = this.entries.get(key);
    if (existing) {
      existing.item = item;
      existing.bytes = bytes;
      existing.seq = ++this.seq;
      this.coalesced++;
      this.wakeWork();
      return 'coalesced';
    }
    if (!this.hasRoom()) return 'full';
    this.entries.set(key, { key, item, bytes, seq: ++this.seq, queuedAt: this.now() });
    this.wakeWork();
    return 'queued';
  }

  /** Resolves once a new key can be queued (at once when it can now). */
  waitForRoom(): Promise<void> {
    if (this.hasRoom()) return Promise.resolve();
    return new Promise((resolve) => this.roomWaiters.push(resolve));
  }

  /** Resolves once the queue holds anything (at once when it does). */
  waitForWork(): Promise<void> {
    if (this.entries.size > 0) return Promise.resolve();
    return new Promise((resolve) => this.workWaiters.push(resolve));
  }

  /**
   * The oldest entries, as many as fit in `maxItems` items and `maxBytes` bytes (at least one, even
   * when that one alone is larger), left in the queue until acknowledged.
   */
  peek(maxItems: number, maxBytes: number): QueueEntry[] {
    const out: QueueEntry[] = [];
    let bytes = 0;
    for (const e of this.entries.values()) {
      if (out.length >= maxItems) break;
      if (out.length > 0 && bytes + e.bytes > maxBytes) break;
      out.push({ ...e });
      bytes += e.bytes + 1;
    }
    return out;
  }

  /** Removes the given entries unless they were replaced since they were peeked; returns how many went. */
  ack(sent: readonly QueueEntry[]): number {
    let removed = 0;
    for (const s of sent) {
      const e = this.entries.get(s.key);
      if (e && e.seq === s.seq) {
        this.entries.delete(s.key);
        removed++;
      }
    }
    if (removed > 0) this.wakeRoom();
    return removed;
  }

  /** Removes every entry whose key matches (objects this replica no longer owns); returns how many. */
  drop(match: (key: string) => boolean): number {
    let removed = 0;
    for (const key of [...this.entries.keys()]) {
      if (match(key)) {
        this.entries.delete(key);
        removed++;
      }
    }
    if (removed > 0) this.wakeRoom();
    return removed;
  }

  /** Seconds the oldest entry has waited (0 when empty). */
  oldestPendingSeconds(): number {
    const first = this.entries.values().next();
    return first.done ? 0 : Math.max(0, (this.now() - first.value.queuedAt) / 1000);
  }

  private wakeRoom(): void {
    while (this.hasRoom() && this.roomWaiters.length > 0) this.roomWaiters.shift()!();
  }

  private wakeWork(): void {
    const waiters = this.workWaiters;
    this.workWaiters = [];
    for (const w of waiters) w();
  }
}
