/**
 * Who is alive, from the replicas' Leases, judged by this replica's own clock: a Lease is live while
 * its renewTime keeps changing; one not seen to change for `leaseDuration` is expired (as client-go's
 * leader election does, so clock skew between pods does not matter). A Lease whose renewTime is
 * far in the past by the wall clock is expired at once (a replica starting next to a long-dead
 * Lease does not wait a whole duration). This replica counts itself live while its own last
 * successful renewal is younger than the duration: a replica cut off from the API server stops
 * owning anything before the others take its objects over.
 */
import { isOwner, type ObjectKey } from '../../protocol/events.ts';

export interface LeaseObservation {
  holder: string;
  /** spec.renewTime as written (ISO 8601), or undefined. */
  renewTime: string | undefined;
}

export class MemberTracker {
  readonly self: string;
  private readonly durationMs: number;
  private readonly now: () => number;
  private readonly seen = new Map<string, { renewTime: string | undefined; changedAt: number; wallMs: number }>();
  private selfRenewedAt = -Infinity;

  constructor(self: string, leaseDurationSeconds: number, now: () => number = Date.now) {
    this.self = self;
    this.durationMs = leaseDurationSeconds * 1000;
    this.now = now;
  }

  /** Records that this replica's own Lease was just renewed. */
  renewed(): void {
    this.selfRenewedAt = this.now();
  }

  /** Forgets this replica's renewal (it deleted its Lease on shutdown). */
  resigned(): void {
    this.selfRenewedAt = -Infinity;
  }

  /** Records the Leases listed now (every replica's, this one's included). */
  observe(leases: readonly LeaseObservation[]): void {
    const now = this.now();
    const present = new Set<string>();
    for (const l of leases) {
      present.add(l.holder);
      const prev = this.seen.get(l.holder);
      const wallMs = l.renewTime ? Date.parse(l.renewTime) : NaN;
      if (!prev || prev.renewTime !== l.renewTime)
        this.seen.set(l.holder, { renewTime: l.renewTime, changedAt: now, wallMs });
    }
    for (const holder of [...this.seen.keys()]) if (!present.has(holder)) this.seen.delete(holder);
  }

  /** The live replicas, sorted (this one included while its Lease is fresh). */
  members(): string[] {
    const now = this.now();
    const live = new Set<string>();
    for (const [holder, s] of this.seen) {
      if (holder === this.self) continue;
      const unchangedFor = now - s.changedAt;
      // Far past by the wall clock (beyond any plausible skew): dead already when first seen.
      const longDead = Number.isFinite(s.wallMs) && Date.now() - s.wallMs > this.durationMs + 60_000;
      if (unchangedFor < this.durationMs && !longDead) live.add(holder);
    }
    if (now - this.selfRenewedAt < this.durationMs) live.add(this.self);
    return [...live].sort();
  }

  /** Leases of replicas gone long enough to be removed (any replica may delete them). */
  abandoned(afterMs: number): string[] {
    const out: string[] = [];
    for (const [holder, s] of this.seen) {
      if (holder === this.self) continue;
      if (Number.isFinite(s.wallMs) && Date.now() - s.wallMs > afterMs) out.push(holder);
    }
    return out;
  }
}

/** Whether `self` owns `key` among `members`. */
export function owns(self: string, key: ObjectKey | string, members: readonly string[]): boolean {
  return isOwner(self, key, members);
}
