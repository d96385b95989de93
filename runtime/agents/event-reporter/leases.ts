/**
 * Shard membership through Leases: this replica keeps `event-reporter-<replica>` (labelled
 * LEASE_LABEL) renewed every `leaseDuration / 5`, lists every replica's Lease on the same tick and
 * hands them to the MemberTracker. On a graceful shutdown it deletes its Lease so the others take
 * its objects over on their next tick instead of after the whole duration. Leases of replicas
 * dead for ten durations (at least 5 minutes) are deleted by whoever sees them. The ticks are the
 * rounds of a loop (runtime/loops/periodic.ts): one at a time, and the resignation waits for the
 * one in flight before it deletes the Lease.
 */
import type { Logger } from 'pino';
import { statusError, type KubeTransport } from '../../kube/transport.ts';
import { MemberTracker } from './members.ts';
import { PeriodicLoop } from '../../loops/periodic.ts';

/** The fields of a coordination.k8s.io/v1 Lease this replica reads and writes. */
interface Lease {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; namespace?: string; labels?: Record<string, string>; resourceVersion?: string };
  spec?: {
    holderIdentity?: string;
    leaseDurationSeconds?: number;
    acquireTime?: string;
    renewTime?: string;
  };
}

/** A MicroTime as the API server parses it (RFC 3339 with exactly six fractional digits). */
export const microTime = (d = new Date()): string => d.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');

/** The Lease API of one namespace over a transport (what client-node's CoordinationV1Api did here). */
class LeaseApi {
  private readonly kube: KubeTransport;
  private readonly namespace: string;

  constructor(kube: KubeTransport, namespace: string) {
    this.kube = kube;
    this.namespace = namespace;
  }

  private path(name?: string): string {
    const base = `/apis/coordination.k8s.io/v1/namespaces/${encodeURIComponent(this.namespace)}/leases`;
    return name === undefined ? base : `${base}/${encodeURIComponent(name)}`;
  }

  private async call<T>(what: string, path: string, o: Parameters<KubeTransport['request']>[1]): Promise<T> {
    const res = await this.kube.request(path, o);
    if (res.status < 200 || res.status >= 300) throw statusError(what, res.status);
    return res.body as T;
  }

  read(name: string): Promise<Lease> {
    return this.call('read lease', this.path(name), {});
  }
  create(body: Lease): Promise<Lease> {
    return this.call('create lease', this.path(), { method: 'POST', body });
  }
  replace(name: string, body: Lease): Promise<Lease> {
    return this.call('replace lease', this.path(name), { method: 'PUT', body });
  }
  async remove(name: string): Promise<void> {
    await this.call('delete lease', this.path(name), { method: 'DELETE' });
  }
  list(labelSelector: string): Promise<{ items: Lease[] }> {
    return this.call('list leases', this.path(), { query: { labelSelector } });
  }
}

export const LEASE_LABEL = 'hosted-runtimes.io/event-reporter-member';
export const leaseName = (replica: string): string => `event-reporter-${replica}`;

const statusOf = (err: unknown): number | undefined => {
  const c = (err as { code?: unknown })?.code;
  return typeof c === 'number' ? c : undefined;
};
const timeString = (v: unknown): string | undefined =>
  v instanceof Date ? v.toISOString() : typeof v === 'string' ? v : undefined;

export interface LeaseKeeperOptions {
  kube: KubeTransport;
  namespace: string;
  replica: string;
  leaseDurationSeconds: number;
  log: Logger;
  /** Called with the sorted live replicas whenever they change. */
  onMembers: (members: string[]) => void;
}

export class LeaseKeeper {
  readonly tracker: MemberTracker;
  private readonly api: LeaseApi;
  private readonly opts: LeaseKeeperOptions;
  /** Renews and lists the Leases every leaseDuration / 5 (a tick), one tick at a time. */
  readonly loop: PeriodicLoop;
  private lastMembers = '';
  private warned = false;
  private lease: Lease | undefined;

  constructor(opts: LeaseKeeperOptions) {
    this.opts = opts;
    this.api = new LeaseApi(opts.kube, opts.namespace);
    this.tracker = new MemberTracker(opts.replica, opts.leaseDurationSeconds);
    const period = () => Math.max(500, (opts.leaseDurationSeconds * 1000) / 5);
    this.loop = new PeriodicLoop({
      name: 'membership',
      round: () => this.tick(),
      intervalMs: period,
      retryMs: period,
      onFailure: () => {}, // said by tick(), once per outage
    });
  }

  get members(): string[] {
    return this.tracker.members();
  }

  /** Whether this replica holds a fresh Lease. */
  holdsLease(): boolean {
    return this.tracker.members().includes(this.opts.replica);
  }

  start(): void {
    void this.loop.start();
  }

  /** Stops renewing (waiting for the tick in flight) and deletes this replica's Lease (the others take over at their next tick). */
  async resign(): Promise<void> {
    await this.loop.stop();
    this.tracker.resigned();
    try {
      await this.api.remove(leaseName(this.opts.replica));
      this.opts.log.info('lease deleted: the other replicas take this one’s objects over');
    } catch (err) {
      if (statusOf(err) !== 404) this.opts.log.warn({ err: (err as Error).message }, 'could not delete the lease');
    }
  }

  private async tick(): Promise<void> {
    const { log } = this.opts;
    try {
      await this.renew();
      this.tracker.renewed();
      const list = await this.api.list(LEASE_LABEL);
      this.tracker.observe(
        (list.items ?? [])
          .filter((l) => l.spec?.holderIdentity)
          .map((l) => ({ holder: l.spec!.holderIdentity!, renewTime: timeString(l.spec?.renewTime) })),
      );
      for (const gone of this.tracker.abandoned(Math.max(5 * 60_000, this.opts.leaseDurationSeconds * 10_000))) {
        await this.api.remove(leaseName(gone)).catch(() => undefined);
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
      throw err; // a failed round (the loop's health)
    } finally {
      this.publish();
    }
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
    const now = microTime();
    if (this.lease) {
      // The Lease as last written: one request per renewal; a conflict or a missing Lease reads it again.
      const body: Lease = {
        ...this.lease,
        spec: { ...this.lease.spec, holderIdentity: replica, leaseDurationSeconds, renewTime: now },
      };
      try {
        this.lease = await this.api.replace(name, body);
        return;
      } catch (err) {
        this.lease = undefined;
        if (statusOf(err) !== 409 && statusOf(err) !== 404) throw err;
      }
    }
    let lease: Lease | undefined;
    try {
      lease = await this.api.read(name);
    } catch (err) {
      if (statusOf(err) !== 404) throw err;
    }
    if (!lease) {
      this.lease = await this.api.create({
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        metadata: { name, namespace, labels: { [LEASE_LABEL]: 'true' } },
        spec: { holderIdentity: replica, leaseDurationSeconds, acquireTime: now, renewTime: now },
      });
      return;
    }
    lease.spec = { ...lease.spec, holderIdentity: replica, leaseDurationSeconds, renewTime: now };
    this.lease = await this.api.replace(name, lease);
  }
}
