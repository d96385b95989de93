/**
 * Shard membership through Leases: this replica keeps `event-reporter-<replica>` (labelled
 * LEASE_LABEL) renewed every `leaseDuration / 5`, lists every replica's Lease on the same tick and
 * hands them to the MemberTracker. On a graceful shutdown it deletes its Lease so the others take
 * its objects over on their next tick instead of after the whole duration. Leases of replicas
 * dead for ten durations (at least 5 minutes) are deleted by whoever sees them.
 */
import { CoordinationV1Api, type KubeConfig, type V1Lease, V1MicroTime } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { MemberTracker } from './members.ts';

export const LEASE_LABEL = 'hosted-runtimes.io/event-reporter-member';
export const leaseName = (replica: string): string => `event-reporter-${replica}`;

const statusOf = (err: unknown): number | undefined => {
  const c = (err as { code?: unknown })?.code;
  return typeof c === 'number' ? c : undefined;
};
const timeString = (v: unknown): string | undefined =>
  v instanceof Date ? v.toISOString() : typeof v === 'string' ? v : undefined;

export interface LeaseKeeperOptions {
  kc: KubeConfig;
  namespace: string;
  replica: string;
  leaseDurationSeconds: number;
  log: Logger;
  /** Called with the sorted live replicas whenever they change. */
  onMembers: (members: string[]) => void;
}

export class LeaseKeeper {
  readonly tracker: MemberTracker;
  private readonly api: CoordinationV1Api;
  private readonly opts: LeaseKeeperOptions;
  private timer: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;
  private lastMembers = '';
  private stopped = false;
  private warned = false;
  private lease: V1Lease | undefined;

  constructor(opts: LeaseKeeperOptions) {
    this.opts = opts;
    this.api = opts.kc.makeApiClient(CoordinationV1Api);
    this.tracker = new MemberTracker(opts.replica, opts.leaseDurationSeconds);
  }

  get members(): string[] {
    return this.tracker.members();
  }

  /** Whether this replica holds a fresh Lease. */
  holdsLease(): boolean {
    return this.tracker.members().includes(this.opts.replica);
  }

  start(): void {
    const period = Math.max(500, (this.opts.leaseDurationSeconds * 1000) / 5);
    const loop = async () => {
      if (this.stopped) return;
      this.ticking = this.tick();
      await this.ticking;
      if (!this.stopped) this.timer = setTimeout(() => void loop(), period);
    };
    void loop();
  }

  /** Stops renewing and deletes this replica's Lease (the others take over at their next tick). */
  async resign(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.ticking;
    this.tracker.resigned();
    try {
      await this.api.deleteNamespacedLease({ name: leaseName(this.opts.replica), namespace: this.opts.namespace });
      this.opts.log.info('lease deleted: the other replicas take this one’s objects over');
    } catch (err) {
      if (statusOf(err) !== 404) this.opts.log.warn({ err: (err as Error).message }, 'could not delete the lease');
    }
  }

  private async tick(): Promise<void> {
    const { namespace, log } = this.opts;
    try {
      await this.renew();
      this.tracker.renewed();
      const list = await this.api.listNamespacedLease({ namespace, labelSelector: LEASE_LABEL });
      this.tracker.observe(
        list.items
          .filter((l) => l.spec?.holderIdentity)
          .map((l) => ({ holder: l.spec!.holderIdentity!, renewTime: timeString(l.spec?.renewTime) })),
      );
      for (const gone of this.tracker.abandoned(Math.max(5 * 60_000, this.opts.leaseDurationSeconds * 10_000))) {
        await this.api.deleteNamespacedLease({ name: leaseName(gone), namespace }).catch(() => undefined);
        log.info({ replica: gone }, 'deleted the lease of a replica gone for long');
      }
      if (this.warned) log.info('leases readable and renewable again');
      this.warned = false;
    } catch (err) {
      if (!this.warned)
        log.warn(
          { err: (err as Error).message, status: statusOf(err) },
          'could not renew or list leases; this replica gives up its objects once its lease expires',
        );
      this.warned = true;
    }
    this.publish();
  }

  /** Reports the live replicas if they changed (also called between ticks, so expiry is seen). */
  publish(): void {
    const members = this.tracker.members();
    const key = members.join(',');
    if (key !== this.lastMembers) {
      this.lastMembers = key;
      this.opts.onMembers(members);
    }
  }

  private async renew(): Promise<void> {
    const { namespace, replica, leaseDurationSeconds } = this.opts;
    const name = leaseName(replica);
    const now = new V1MicroTime();
    if (this.lease) {
      // The Lease as last written: one request per renewal; a conflict or a missing Lease reads it again.
      const body: V1Lease = {
        ...this.lease,
        spec: { ...this.lease.spec, holderIdentity: replica, leaseDurationSeconds, renewTime: now },
      };
      try {
        this.lease = await this.api.replaceNamespacedLease({ name, namespace, body });
        return;
      } catch (err) {
        this.lease = undefined;
        if (statusOf(err) !== 409 && statusOf(err) !== 404) throw err;
      }
    }
    let lease: V1Lease | undefined;
    try {
      lease = await this.api.readNamespacedLease({ name, namespace });
    } catch (err) {
      if (statusOf(err) !== 404) throw err;
    }
    if (!lease) {
      this.lease = await this.api.createNamespacedLease({
        namespace,
        body: {
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { name, namespace, labels: { [LEASE_LABEL]: 'true' } },
          spec: { holderIdentity: replica, leaseDurationSeconds, acquireTime: now, renewTime: now },
        },
      });
      return;
    }
    lease.spec = { ...lease.spec, holderIdentity: replica, leaseDurationSeconds, renewTime: now };
    this.lease = await this.api.replaceNamespacedLease({ name, namespace, body: lease });
  }
}
