/**
 * One event reporter replica: watches every reported kind into a local cache (all objects, every
 * replica: a takeover is reported from memory, without a list), queues the states of the objects
 * it owns by rendezvous hashing over the live replicas, and delivers the queue in batches with a
 * heartbeat and digests.
 *
 * Ownership changes: when the live replicas change, queued objects this replica lost are dropped
 * (their new owner reports them from its own cache), the objects it gained are queued from the
 * cache, and a digest per kind is sent, from which the control plane removes what was deleted
 * while nobody owned it. Digests are also sent every DIGEST_INTERVAL_SECONDS, after every list and
 * after a watch resumed from an error.
 *
 * With a Source Server (SOURCE_SERVER_URL), each owned Application's report carries what changed
 * it (changes.ts). When the Application's state moved in a way the answer depends on, its report
 * is held back while the lookup runs (at most `changeHoldMs`), so that it goes out once, with the
 * change; a lookup that fails or takes longer lets it go without, and the report is sent again
 * once the change arrives.
 */
import { createServer, type Server } from 'node:http';
import type { Logger } from 'pino';
import {
  objectKeyString,
  type ApplicationSummary,
  type Digest,
  type Heartbeat,
  type UpsertItem,
} from '../../protocol/events.ts';
import { REPORTED_KIND_NAMES, REPORTED_KINDS, type ReportedKind } from '../../protocol/kinds.ts';
import { AgentHealth } from '../common/health.ts';
import { closeServer, listen } from '../common/service.ts';
import type { EventReporterConfig } from './config.ts';
import { ChangeLookups, type Attached } from './changes.ts';
import { Sender, type PendingDigests } from './delivery.ts';
import { deleteItem, metaOf, prepare, upsertItem, type CachedItem, type PreparedItem } from './items.ts';
import { LeaseKeeper } from './leases.ts';
import { owns } from './members.ts';
import { createMetrics, type ReporterMetrics } from './metrics.ts';
import { ReportQueue, type QueueEntry, type QueueItem } from './queue.ts';
import { Reflector, type WatchSink } from '../../kube/reflector.ts';
import type { KubeTransport } from '../../kube/transport.ts';
import { PeriodicLoop } from '../../loops/periodic.ts';
import { wait } from '../../loops/wait.ts';

type Obj = Record<string, unknown>;

export interface ReporterOptions {
  config: EventReporterConfig;
  /** The vcluster's API server (runtime/kube/light-client.ts: client-node is not loaded). */
  kube: KubeTransport;
  log: Logger;
  /** Delay between tries while a kind's CRD is missing (default 30 s). */
  absentRetryMs?: number;
  /** Longest an Application's report waits for its change from the Source Server (default 5 s). */
  changeHoldMs?: number;
  /** Bytes of JSON of Source Server answers kept (default 16 MiB). */
  changeCacheBytes?: number;
}

const kindOf = (key: string): ReportedKind => key.slice(0, key.indexOf('/')) as ReportedKind;
/** A cached item that can be sent (undefined when only its identity is kept: the control plane has it). */
const sendable = (c: CachedItem | undefined): PreparedItem | undefined =>
  c?.json !== undefined ? (c as PreparedItem) : undefined;

export class EventReporter implements WatchSink<ReportedKind> {
  readonly queue: ReportQueue;
  readonly metrics: ReporterMetrics;
  private readonly o: ReporterOptions;
  private readonly log: Logger;
  private readonly self: string;
  private readonly caches = new Map<ReportedKind, Map<string, CachedItem>>();
  private readonly resourceVersions = new Map<ReportedKind, string>();
  private readonly listed = new Set<ReportedKind>();
  private readonly unavailable = new Set<ReportedKind>();
  private readonly digestDue = new Map<ReportedKind, number>();
  private digestGeneration = 0;
  private readonly takeover = new Set<string>();
  private takingOver: Promise<void> | undefined;
  private members: string[] = [];
  private readonly leases: LeaseKeeper;
  private readonly watchers: Reflector<ReportedKind>[];
  private readonly sender: Sender;
  private server: Server | undefined;
  /** Asks for every kind's digest every DIGEST_INTERVAL_SECONDS (the sender sends them). */
  private readonly digestLoop: PeriodicLoop;
  /**
   * /healthz and /readyz (runtime/agents/common/health.ts): ready once every kind is listed (or its
   * CRD absent) and this replica holds its Lease, while the Lease's and the digests' loops run.
   */
  readonly health: AgentHealth;
  private ownedCache: { at: number; counts: Partial<Record<ReportedKind, number>> } | undefined;
  private closing = false;
  /** With a Source Server: what changed each owned Application. */
  private readonly changes: ChangeLookups | undefined;
  /** Applications whose report waits for its change, with the timer that lets it go without. */
  private readonly held = new Map<string, NodeJS.Timeout>();

  constructor(o: ReporterOptions) {
    this.o = o;
    this.log = o.log;
    this.self = o.config.replica;
    this.queue = new ReportQueue(o.config.queueLimit);
    for (const kind of REPORTED_KIND_NAMES) this.caches.set(kind, new Map());
    this.metrics = createMetrics({
      queueDepth: () => this.queue.size,
      oldestPendingSeconds: () => this.queue.oldestPendingSeconds(),
      ownedObjects: () => this.ownedCounts(),
      members: () => this.members.length,
    });
    this.leases = new LeaseKeeper({
      kube: o.kube,
      namespace: o.config.namespace,
      replica: this.self,
      leaseDurationSeconds: o.config.leaseDurationSeconds,
      log: o.log.child({ part: 'membership' }),
      onMembers: (m) => this.membersChanged(m),
    });
    this.watchers = REPORTED_KIND_NAMES.map(
      (kind) =>
        new Reflector<ReportedKind>({
          kind,
          transport: o.kube,
          sink: this,
          log: o.log,
          path: `/apis/${REPORTED_KINDS[kind].group}/${REPORTED_KINDS[kind].version}${
            o.config.watchNamespace ? `/namespaces/${encodeURIComponent(o.config.watchNamespace)}` : ''
          }/${REPORTED_KINDS[kind].plural}`,
          absentMessage: `the ${kind} CRD is not installed; not reporting ${kind}s`,
          ...(o.absentRetryMs !== undefined ? { absentRetryMs: o.absentRetryMs } : {}),
        }),
    );
    if (o.config.sourceServerUrl)
      this.changes = new ChangeLookups({
        sourceServerUrl: o.config.sourceServerUrl,
        concurrency: o.config.sourceServerConcurrency,
        timeoutMs: o.config.sourceServerTimeoutSeconds * 1000,
        retryMaxMs: o.config.retryMaxSeconds * 1000,
        maxBytes: o.changeCacheBytes ?? 16 * 1024 * 1024,
        log: o.log.child({ part: 'changes' }),
        metrics: this.metrics,
        settled: (key) => void this.changeSettled(key),
      });
    const digestEvery = () => o.config.digestIntervalSeconds * 1000;
    this.digestLoop = new PeriodicLoop({
      name: 'digests',
      round: () => Promise.resolve(this.requestDigest(...REPORTED_KIND_NAMES)),
      firstDelayMs: digestEvery,
      intervalMs: digestEvery,
    });
    this.sender = new Sender({
      controlPlaneUrl: o.config.controlPlaneUrl,
      token: o.config.token,
      replica: this.self,
      queue: this.queue,
      log: o.log.child({ part: 'delivery' }),
      metrics: this.metrics,
      heartbeatIntervalMs: o.config.heartbeatIntervalSeconds * 1000,
      retryMaxMs: o.config.retryMaxSeconds * 1000,
      heartbeat: () => this.heartbeat(),
      onDelivered: (entries) => this.delivered(entries),
      digestsDue: () => this.digestsDue(),
      digests: () => this.pendingDigests(),
    });
    this.health = new AgentHealth({
      loops: [
        // Five failed renewals in a row: the Lease expires about then and the others take over.
        { loop: this.leases.loop, staleAfterMs: () => o.config.leaseDurationSeconds * 1000, failingAfter: 5 },
        // The first digests come a whole interval after the start, on purpose.
        { loop: this.digestLoop, staleAfterMs: () => 2 * digestEvery() + 60_000, readyBeforeFirstRound: true },
      ],
      checks: [
        {
          name: 'watches',
          read: () => {
            const listed = REPORTED_KIND_NAMES.filter((k) => this.listed.has(k));
            const unavailable = REPORTED_KIND_NAMES.filter((k) => this.unavailable.has(k));
            const waiting = REPORTED_KIND_NAMES.filter((k) => !this.listed.has(k) && !this.unavailable.has(k));
            return {
              ready: waiting.length === 0,
              ...(waiting.length ? { reason: `not listed yet: ${waiting.join(', ')}` } : {}),
              fields: { listed, unavailable },
            };
          },
        },
        {
          name: 'lease',
          read: () => {
            const holdsLease = this.members.includes(this.self);
            return {
              ready: holdsLease,
              ...(holdsLease ? {} : { reason: 'this replica holds no Lease' }),
              fields: { holdsLease },
            };
          },
        },
        {
          name: 'shutdown',
          read: () => ({ ready: !this.closing, ...(this.closing ? { reason: 'shutting down' } : {}) }),
        },
      ],
    });
  }

  /** Starts the health/metrics server (resolves with its port), the Lease, the watches and delivery. */
  async start(): Promise<number> {
    this.server = createServer((req, res) => {
      if (this.health.handle(req, res)) return;
      const path = (req.url ?? '/').split('?')[0];
      if (path === '/metrics') {
        this.metrics.registry.metrics().then(
          (text) => res.writeHead(200, { 'content-type': this.metrics.registry.contentType }).end(text),
          (err: unknown) => {
            this.log.warn({ err }, 'metrics failed');
            res.writeHead(500).end();
          },
        );
      } else {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      }
    });
    const port = await listen(this.server, this.o.config.port, this.o.config.host);
    this.leases.start();
    for (const w of this.watchers) w.start();
    this.sender.start();
    await this.digestLoop.start();
    return port;
  }

  /** SIGTERM: stop watching, delete the Lease (fast handover), deliver what is queued within the grace. */
  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    const deadline = Date.now() + this.o.config.shutdownGraceSeconds * 1000;
    await this.digestLoop.stop();
    await Promise.all(this.watchers.map((w) => w.stop()));
    // Held reports go out as they are: the queue is what is delivered before the handover.
    this.changes?.close();
    for (const [key, timer] of this.held) {
      clearTimeout(timer);
      const item = sendable(this.caches.get(kindOf(key))?.get(key));
      if (item && this.owns(key)) this.queue.put(key, item);
    }
    this.held.clear();
    await this.leases.resign();
    const left = this.queue.size;
    const flushed = await this.sender.drain(Math.max(0, deadline - Date.now() - 500));
    if (flushed) this.log.info({ delivered: left }, 'queue flushed');
    else
      this.log.warn(
        { undelivered: this.queue.size },
        'shutdown grace over with reports still queued (the new owners report them)',
      );
    if (this.server) await closeServer(this.server);
  }

  private owns(key: string, members = this.members): boolean {
    return owns(this.self, key, members);
  }

  // --- WatchSink ---

  upsert(kind: ReportedKind, obj: Obj): boolean {
    const raw = upsertItem(kind, obj);
    if (!raw) return true;
    const key = objectKeyString(raw);
    const owned = this.owns(key);
    const hold = owned && this.attachChange(kind, key, raw) === 'pending';
    const item = prepare(raw);
    if (owned && !hold && !this.offer(kind, key, item)) return false;
    this.caches.get(kind)!.set(key, item);
    if (hold) this.hold(key);
    return true;
  }

  remove(kind: ReportedKind, obj: Obj): boolean {
    const meta = metaOf(obj);
    if (!meta) return true;
    const key = objectKeyString({ kind, namespace: meta.namespace, name: meta.name });
    if (this.owns(key) && !this.offer(kind, key, prepare(deleteItem(kind, meta, meta.resourceVersion)))) return false;
    this.caches.get(kind)!.delete(key);
    this.takeover.delete(key);
    this.changes?.forget(key);
    clearTimeout(this.held.get(key));
    this.held.delete(key);
    return true;
  }

  async relisted(kind: ReportedKind, items: Obj[], resourceVersion: string): Promise<void> {
    const old = this.caches.get(kind)!;
    const fresh = new Map<string, CachedItem>();
    const changed: string[] = [];
    const holding: string[] = [];
    const observedAt = new Date();
    for (const obj of items) {
      const raw = upsertItem(kind, obj, observedAt);
      if (!raw) continue;
      const key = objectKeyString(raw);
      const before = old.get(key);
      const moved = before?.resourceVersion !== raw.resourceVersion;
      if (moved && this.owns(key) && this.attachChange(kind, key, raw) === 'pending') holding.push(key);
      else if (moved) changed.push(key);
      const item = prepare(raw);
      // An unchanged object whose state the control plane has stays as little as it was.
      fresh.set(key, before?.resourceVersion === item.resourceVersion && before.json === undefined ? before : item);
    }
    const deleted = [...old.entries()].filter(([key]) => !fresh.has(key));
    this.caches.set(kind, fresh);
    this.resourceVersions.set(kind, resourceVersion);
    this.listed.add(kind);
    this.metrics.relists.inc({ kind });
    this.log.info(
      {
        kind,
        objects: fresh.size,
        changed: changed.length + holding.length,
        deleted: deleted.length,
        resourceVersion,
      },
      'listed',
    );
    this.requestDigest(kind);
    for (const key of holding) this.hold(key);
    for (const [key, prev] of deleted) {
      this.takeover.delete(key);
      this.changes?.forget(key);
      await this.offerWhenRoom(key, () => prepare(deleteItem(kind, prev, resourceVersion)));
    }
    for (const key of changed) await this.offerWhenRoom(key, () => sendable(this.caches.get(kind)!.get(key)));
  }

  advanced(kind: ReportedKind, resourceVersion: string): void {
    this.resourceVersions.set(kind, resourceVersion);
  }

  reconnected(kind: ReportedKind): void {
    this.requestDigest(kind);
  }

  availability(kind: ReportedKind, available: boolean): void {
    if (available) this.unavailable.delete(kind);
    else {
      this.unavailable.add(kind);
      this.digestDue.delete(kind);
    }
  }

  waitForRoom(): Promise<void> {
    return this.queue.waitForRoom();
  }

  onRestart(kind: ReportedKind, reason: 'closed' | 'error' | 'gone' | 'paused'): void {
    this.metrics.watchRestarts.inc({ kind, reason });
    if (reason === 'paused') this.metrics.backPressurePauses.inc({ kind });
  }

  // --- queueing ---

  /** Queues an item of an owned object; false when the queue is full. */
  private offer(_kind: ReportedKind, key: string, item: QueueItem): boolean {
    const r = this.queue.put(key, item);
    if (r === 'coalesced') this.metrics.coalesced.inc();
    return r !== 'full';
  }

  /** Queues the item `make` gives (read when there is room, so it is the latest) while the object is still owned. */
  private async offerWhenRoom(key: string, make: () => QueueItem | undefined): Promise<void> {
    for (;;) {
      if (!this.owns(key)) return;
      const item = make();
      if (!item) return;
      const r = this.queue.put(key, item);
      if (r === 'coalesced') this.metrics.coalesced.inc();
      if (r !== 'full') return;
      await this.queue.waitForRoom();
    }
  }

  // --- membership ---

  private membersChanged(members: string[]): void {
    const before = this.members;
    this.members = members;
    this.ownedCache = undefined;
    this.metrics.membershipChanges.inc();
    const dropped = this.queue.drop((key) => !this.owns(key));
    for (const key of [...this.takeover]) if (!this.owns(key)) this.takeover.delete(key);
    this.changes?.retain((key) => this.owns(key));
    for (const [key, timer] of this.held)
      if (!this.owns(key)) {
        clearTimeout(timer);
        this.held.delete(key);
      }
    let gained = 0;
    for (const cache of this.caches.values()) {
      for (const key of cache.keys()) {
        if (this.owns(key) && !this.owns(key, before)) {
          this.takeover.add(key);
          gained++;
        }
      }
    }
    this.log.info({ members, before, gained, dropped }, 'live replicas changed');
    this.requestDigest(...REPORTED_KIND_NAMES);
    this.takingOver ??= this.drainTakeover().finally(() => {
      this.takingOver = undefined;
    });
  }

  private async drainTakeover(): Promise<void> {
    while (this.takeover.size > 0 && !this.closing) {
      const key = this.takeover.values().next().value!;
      this.takeover.delete(key);
      const kind = kindOf(key);
      const cached = this.caches.get(kind)?.get(key);
      if (cached && cached.json === undefined && this.owns(key)) await this.readFromApiServer(kind, key, cached);
      if (this.changes && kind === 'Application' && this.owns(key)) {
        const attached = this.reattachChange(kind, key);
        if (attached === 'pending') {
          this.hold(key);
          continue;
        }
      }
      await this.offerWhenRoom(key, () => sendable(this.caches.get(kind)?.get(key)));
    }
  }

  // --- changes (Source Server) ---

  /** Attaches what changed an owned Application to its item ('attached' for every other kind). */
  private attachChange(kind: ReportedKind, key: string, item: UpsertItem): Attached {
    if (!this.changes || kind !== 'Application') return 'attached';
    return this.changes.attach(key, item);
  }

  /**
   * The cached item of an Application built again with what is known now of its change (the
   * cache's JSON may predate it: an item built while another replica owned the object, or sent
   * before the answer came). Undefined when nothing is cached; 'attached' also when nothing changed.
   */
  private reattachChange(kind: ReportedKind, key: string): Attached | undefined {
    return this.rebuildWithChange(kind, key)?.attached;
  }

  private rebuildWithChange(kind: ReportedKind, key: string): { attached: Attached; changed: boolean } | undefined {
    const cache = this.caches.get(kind)!;
    const cached = cache.get(key);
    if (cached?.json === undefined) return undefined;
    const item = JSON.parse(cached.json) as UpsertItem;
    const before = item.change === undefined ? undefined : JSON.stringify(item.change);
    delete item.change;
    delete (item.summary as ApplicationSummary).changeRevision;
    const attached = this.attachChange(kind, key, item);
    const after = item.change === undefined ? undefined : JSON.stringify(item.change);
    if (before === after) return { attached, changed: false };
    cache.set(key, prepare(item));
    return { attached, changed: true };
  }

  /** Holds an owned Application's report back until its change is known or `changeHoldMs` passed. */
  private hold(key: string): void {
    if (this.held.has(key) || this.closing) return;
    const timer = setTimeout(() => {
      this.held.delete(key);
      void this.offerWhenRoom(key, () => sendable(this.caches.get(kindOf(key))?.get(key)));
    }, this.o.changeHoldMs ?? 5_000);
    timer.unref();
    this.held.set(key, timer);
  }

  /**
   * A lookup for an Application's current state ended: its report goes out with the change (or
   * without, when the lookup failed and the report was held); a report sent before without it is
   * sent again.
   */
  private async changeSettled(key: string): Promise<void> {
    const wasHeld = this.held.has(key);
    clearTimeout(this.held.get(key));
    this.held.delete(key);
    if (this.closing) return;
    if (!this.owns(key)) {
      this.changes?.forget(key);
      return;
    }
    const kind = kindOf(key);
    const cached = this.caches.get(kind)?.get(key);
    if (!cached) return;
    if (cached.json === undefined) await this.readFromApiServer(kind, key, cached);
    const rebuilt = this.rebuildWithChange(kind, key);
    if (!rebuilt) return;
    if (rebuilt.attached === 'pending') {
      this.hold(key);
      return;
    }
    if (wasHeld || rebuilt.changed || cached.json === undefined)
      await this.offerWhenRoom(key, () => sendable(this.caches.get(kind)?.get(key)));
  }

  /**
   * The current state of an object this replica took over and whose JSON it no longer keeps (it
   * had reported it once, before the object moved to another replica): read from the API server,
   * kept in the cache unless the watch brought a newer state meanwhile. Retried every second while
   * the object is still owned; a 404 means its deletion is on the way through the watch.
   */
  private async readFromApiServer(kind: ReportedKind, key: string, cached: CachedItem): Promise<void> {
    const k = REPORTED_KINDS[kind];
    const path = `/apis/${k.group}/${k.version}/namespaces/${encodeURIComponent(cached.namespace)}/${k.plural}/${encodeURIComponent(cached.name)}`;
    for (let attempt = 0; !this.closing && this.owns(key); attempt++) {
      try {
        const res = await this.o.kube.request(path, { signal: AbortSignal.timeout(30_000) });
        if (res.status === 404) return;
        if (res.status === 200) {
          const raw = upsertItem(kind, res.body as Obj);
          const now = this.caches.get(kind)!.get(key);
          if (raw && now?.json === undefined) this.caches.get(kind)!.set(key, prepare(raw));
          return;
        }
        throw new Error(`HTTP ${res.status}`);
      } catch (err) {
        if (attempt === 0)
          this.log.warn({ err: (err as Error).message, object: key }, 'could not read a taken-over object; retrying');
        await wait(1000);
      }
    }
  }

  /** Delivered states of objects this replica owns are not kept: identity and resourceVersion stay. */
  private delivered(entries: readonly QueueEntry[]): void {
    for (const e of entries) {
      const cache = this.caches.get(kindOf(e.key));
      const cached = cache?.get(e.key);
      if (cached?.json !== undefined && cached.resourceVersion === e.item.resourceVersion && this.owns(e.key)) {
        const { json: _json, ...identity } = cached;
        cache!.set(e.key, identity);
      }
    }
  }

  // --- heartbeat and digests ---

  private ownedCounts(): Partial<Record<ReportedKind, number>> {
    if (this.ownedCache && Date.now() - this.ownedCache.at < 5_000) return this.ownedCache.counts;
    const counts: Partial<Record<ReportedKind, number>> = {};
    for (const [kind, cache] of this.caches) {
      let n = 0;
      for (const key of cache.keys()) if (this.owns(key)) n++;
      counts[kind] = n;
    }
    this.ownedCache = { at: Date.now(), counts };
    return counts;
  }

  private heartbeat(): Heartbeat {
    const owned = Object.values(this.ownedCounts()).reduce((a, b) => a + (b ?? 0), 0);
    // Only once every kind was listed or found missing or forbidden: before its first list a kind
    // is neither, and saying it is not listed would read as "cannot list".
    const settled = REPORTED_KIND_NAMES.every((k) => this.listed.has(k) || this.unavailable.has(k));
    return {
      replica: this.self,
      ownedObjects: owned,
      queueDepth: this.queue.size,
      oldestPendingSeconds: Math.round(this.queue.oldestPendingSeconds() * 1000) / 1000,
      ...(this.o.config.runtimeVersion !== undefined ? { runtimeVersion: this.o.config.runtimeVersion } : {}),
      // Listed once and still installed (a watch that fails later is retried, not reported here).
      ...(settled ? { listed: REPORTED_KIND_NAMES.filter((k) => this.listed.has(k) && !this.unavailable.has(k)) } : {}),
    };
  }

  private requestDigest(...kinds: ReportedKind[]): void {
    const gen = ++this.digestGeneration;
    for (const k of kinds) if (!this.unavailable.has(k)) this.digestDue.set(k, gen);
    this.sender.poke();
  }

  private digestable(kind: ReportedKind): boolean {
    return this.listed.has(kind) && !this.unavailable.has(kind) && this.resourceVersions.has(kind);
  }

  private digestsDue(): boolean {
    if (!this.members.includes(this.self)) return false;
    for (const k of this.digestDue.keys()) if (this.digestable(k)) return true;
    return false;
  }

  private pendingDigests(): PendingDigests {
    if (!this.members.includes(this.self)) return { digests: [], commit: () => undefined };
    const taken = new Map<ReportedKind, number>();
    const digests: Digest[] = [];
    for (const [kind, gen] of this.digestDue) {
      if (!this.digestable(kind)) continue;
      taken.set(kind, gen);
      const objects: Digest['objects'] = [];
      for (const [key, i] of this.caches.get(kind)!)
        if (this.owns(key))
          objects.push({ namespace: i.namespace, name: i.name, uid: i.uid, resourceVersion: i.resourceVersion });
      digests.push({
        replica: this.self,
        members: [...this.members],
        kind,
        listResourceVersion: this.resourceVersions.get(kind)!,
        objects,
      });
    }
    return {
      digests,
      commit: () => {
        for (const [kind, gen] of taken) if (this.digestDue.get(kind) === gen) this.digestDue.delete(kind);
      },
    };
  }
}
