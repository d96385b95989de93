/**
 * The root-cluster watch: per registered root cluster, one list + watch per kind of object the
 * tenants program owns there (objects.ts), keeping only each object's fingerprint. When a
 * tenant's object is created, changed (its fingerprint moved) or deleted, a resync of exactly
 * that tenant is requested (requests.ts), unless the change is the engine's own run. Drift is so
 * corrected seconds after it happens instead of at the next periodic resync, which becomes a slow
 * safety net (PROVISIONER_RESYNC_SECONDS, default 24 h).
 *
 * The first list of a kind is the baseline (nothing is requested for it). A watch that resumes
 * after an error continues from its resourceVersion (nothing missed); one whose resourceVersion
 * was compacted away (410 Gone, as after an API server restart with a new etcd compaction) lists
 * again and requests resyncs for every difference from what it had. The registered clusters are
 * read again every `clusterRefreshMs` (10 s): a new cluster is watched, a removed one is let go, a
 * rotated kubeconfig restarts that cluster's watches.
 *
 * Two loops under the loop manager (runtime/loops/periodic.ts): `drift-watch` (its rounds: the
 * reads of the registered clusters; its stop stops the watches) and `drift-watch-flush` (its
 * rounds: the writes of the gathered resync requests every `flushMs`). Watch events are not rounds.
 *
 * Not client-node's informer: an informer caches whole objects (a Helm release record carries the
 * whole release), which at 10,000 tenants is gigabytes; this keeps ~100 bytes per object.
 */
import { createHash } from 'node:crypto';
import type { KubeConfig } from '@kubernetes/client-node';
import type pg from 'pg';
import { pino, type Logger } from 'pino';
import { Reflector, type WatchSink } from '../../runtime/kube/reflector.ts';
import type { SecretBox } from '../crypto.ts';
import { kubeConfigFrom } from '../../kubeconfig-policy/client.ts';
import type { KubeconfigPolicy } from '../../kubeconfig-policy/policy.ts';
import { fingerprint, objectKey, tenantOf, WATCHED_KINDS, type WatchedKind } from './objects.ts';
import { ENGINE_ECHO_MS, requestResyncs, type ResyncRequest } from '../store/resync-requests.ts';
import { sealedClusterKubeconfigs } from '../store/clusters.ts';
import type { LoopHealth } from '../../runtime/loops/health.ts';
import { PeriodicLoop } from '../../runtime/loops/periodic.ts';

type Obj = Record<string, unknown>;

export interface DriftWatchOptions {
  pool: pg.Pool;
  box: SecretBox;
  kubeconfigPolicy: KubeconfigPolicy;
  log?: Logger;
  /** How often the registered clusters are read again (default 10 s). */
  clusterRefreshMs?: number;
  /** How long changes are gathered before the requests are written (default 200 ms). */
  flushMs?: number;
  /** See requests.ts ENGINE_ECHO_MS. */
  echoMs?: number;
  /** Kinds to watch (default WATCHED_KINDS; tests narrow it). */
  kinds?: readonly WatchedKind[];
}

/** Counters for /metrics and the tests. */
export interface DriftWatchStats {
  /** Watch events and relist differences by what they were. */
  events: { changed: number; unchanged: number; ignored: number };
  /** Tenants for which a change was passed on, and those for which a resync was requested. */
  signalled: number;
  requested: number;
  /** Watches that restarted (error, closed, 410). */
  restarts: number;
}

interface Signal {
  reasons: string[];
  at: number;
}

const MAX_REASONS = 3;

/**
 * Reconnect cap of a root cluster's watches while its API server is away. A watch that resumes
 * misses nothing (it continues from its resourceVersion, or lists again and diffs), so a longer
 * cap only delays noticing drift made during the outage, by at most this long after the API
 * server returns; the shorter 30 s cap of the runtime's reporter cost seven TLS dials per cluster
 * every 15 s on average against a cluster that stays unreachable.
 */
const RECONNECT_CAP_MS = 120_000;

export class DriftWatch {
  readonly #options: Required<Omit<DriftWatchOptions, 'log'>> & { log: Logger };
  readonly #clusters = new Map<string, ClusterWatch>();
  #pending = new Map<string, Signal>();
  #flushFailing = false;
  /** Reads the registered clusters and starts, restarts or stops their watches; its stop stops them. */
  readonly loop: PeriodicLoop;
  /** Writes the gathered resync requests. */
  readonly flushLoop: PeriodicLoop;
  readonly stats: DriftWatchStats = {
    events: { changed: 0, unchanged: 0, ignored: 0 },
    signalled: 0,
    requested: 0,
    restarts: 0,
  };

  constructor(o: DriftWatchOptions) {
    this.#options = {
      pool: o.pool,
      box: o.box,
      kubeconfigPolicy: o.kubeconfigPolicy,
      log: o.log ?? pino({ level: 'silent' }),
      clusterRefreshMs: o.clusterRefreshMs ?? 10_000,
      flushMs: o.flushMs ?? 200,
      echoMs: o.echoMs ?? ENGINE_ECHO_MS,
      kinds: o.kinds ?? WATCHED_KINDS,
    };
    const refreshMs = () => this.#options.clusterRefreshMs;
    this.loop = new PeriodicLoop({
      name: 'drift-watch',
      round: () => this.#refresh(),
      intervalMs: refreshMs,
      retryMs: refreshMs,
      onFailure: (err) =>
        this.#options.log.warn(
          { err: (err as Error).message },
          'drift watch: could not read the root clusters; trying again',
        ),
      // start() resolves once the clusters were read (the lists go on in the background).
      startAfterFirstRound: true,
      tearDown: async () => {
        await Promise.all([...this.#clusters.values()].map((c) => c.stop()));
        this.#clusters.clear();
      },
    });
    const flushMs = () => this.#options.flushMs;
    this.flushLoop = new PeriodicLoop({
      name: 'drift-watch-flush',
      round: () => this.#flush(),
      firstDelayMs: flushMs,
      intervalMs: flushMs,
      retryMs: flushMs,
      onFailure: (err) => {
        // The database is away: said once, until a write succeeds again.
        if (!this.#flushFailing)
          this.#options.log.warn(
            { err: (err as Error).message },
            'drift watch: could not record resync requests; retrying',
          );
        this.#flushFailing = true;
      },
    });
  }

  /** The cluster reads' health (rounds of `drift-watch`). */
  get health(): LoopHealth {
    return this.loop.health;
  }

  /** Starts watching the registered clusters (resolves once they were read; the lists go on in the background). */
  async start(): Promise<void> {
    await this.flushLoop.start();
    await this.loop.start();
  }

  /** Stops the cluster reads and the watches (waiting for the read in flight), then the writes of requests. */
  async stop(): Promise<void> {
    await this.loop.stop();
    await this.flushLoop.stop();
  }

  /** Per cluster and kind: whether the first list is done and how many objects are known. */
  status(): Array<{ cluster: string; kind: string; synced: boolean; objects: number }> {
    return [...this.#clusters.values()].flatMap((c) => c.status());
  }

  /** True once every kind of every registered cluster has its baseline. */
  get synced(): boolean {
    return this.status().every((s) => s.synced);
  }

  /** Reads the registered clusters and starts, restarts or stops their watches (a round of the loop now, waited for). */
  refresh(): Promise<void> {
    return this.loop.runNow();
  }

  /** A round of `drift-watch`: a failed read of the clusters throws (the loop says it and tries again). */
  async #refresh(): Promise<void> {
    const rows = await sealedClusterKubeconfigs(this.#options.pool);
    if (this.loop.stopping) return;
    const seen = new Set<string>();
    for (const row of rows) {
      seen.add(row.id);
      const version = createHash('sha1').update(row.kubeconfig_enc).digest('hex');
      const current = this.#clusters.get(row.id);
      if (current?.version === version) continue;
      if (current) await current.stop();
      let kc: KubeConfig;
      try {
        kc = await kubeConfigFrom(
          this.#options.box.decrypt(row.kubeconfig_enc, `cluster/${row.name}`).toString('utf8'),
          this.#options.kubeconfigPolicy,
        );
      } catch (err) {
        this.#clusters.delete(row.id);
        this.#options.log.warn(
          { cluster: row.name, err: (err as Error).message },
          'drift watch: the cluster kubeconfig is refused; not watching it',
        );
        continue;
      }
      const watch = new ClusterWatch(row.name, version, kc, this.#options.kinds, this, this.#options.log);
      this.#clusters.set(row.id, watch);
      watch.start();
      this.#options.log.info(
        { cluster: row.name },
        current ? 'drift watch: kubeconfig changed; watching again' : 'drift watch: watching cluster',
      );
    }
    for (const [id, watch] of this.#clusters) {
      if (seen.has(id)) continue;
      this.#clusters.delete(id);
      await watch.stop();
      this.#options.log.info({ cluster: watch.name }, 'drift watch: cluster removed; stopped watching it');
    }
  }

  /** A change to one of `tenantId`'s objects (called by the cluster watches). */
  signal(tenantId: string, reason: string): void {
    this.stats.signalled += 1;
    const s = this.#pending.get(tenantId);
    if (!s) this.#pending.set(tenantId, { reasons: [reason], at: Date.now() });
    else {
      if (s.reasons.length < MAX_REASONS + 1 && !s.reasons.includes(reason)) s.reasons.push(reason);
      s.at = Date.now();
    }
  }

  /** Writes the gathered requests (a round of `drift-watch-flush` now, waited for). */
  flush(): Promise<void> {
    return this.flushLoop.runNow();
  }

  async #flush(): Promise<void> {
    if (this.#pending.size === 0) return;
    const batch = this.#pending;
    this.#pending = new Map();
    const now = Date.now();
    const requests: ResyncRequest[] = [...batch].map(([tenantId, s]) => ({
      tenantId,
      reason:
        s.reasons.length > MAX_REASONS
          ? `${s.reasons.slice(0, MAX_REASONS).join('; ')} and more`
          : s.reasons.join('; '),
      ageMs: now - s.at,
    }));
    try {
      const taken = await requestResyncs(this.#options.pool, requests, this.#options.echoMs);
      this.#flushFailing = false;
      this.stats.requested += taken.length;
      const byId = new Map(requests.map((r) => [r.tenantId, r.reason]));
      for (const id of taken)
        this.#options.log.info({ tenantId: id, change: byId.get(id) }, 'drift watch: resync requested');
    } catch (err) {
      // The database is away: keep the changes (newer ones win) and try again on the next round.
      for (const [id, s] of batch) if (!this.#pending.has(id)) this.#pending.set(id, s);
      throw err;
    }
  }
}

/** The watches of one root cluster, one per kind; fingerprints by kind and object key. */
class ClusterWatch implements WatchSink<string> {
  readonly name: string;
  readonly version: string;
  readonly #kinds: Map<string, WatchedKind>;
  readonly #fingerprints = new Map<string, Map<string, string>>();
  readonly #listed = new Set<string>();
  readonly #reflectors: Reflector<string>[];
  readonly #owner: DriftWatch;
  readonly #log: Logger;

  constructor(
    name: string,
    version: string,
    kc: KubeConfig,
    kinds: readonly WatchedKind[],
    owner: DriftWatch,
    log: Logger,
  ) {
    this.name = name;
    this.version = version;
    this.#owner = owner;
    this.#log = log.child({ cluster: name });
    this.#kinds = new Map(kinds.map((k) => [k.kind, k]));
    this.#reflectors = kinds.map(
      (k) =>
        new Reflector<string>({
          kind: k.kind,
          kc,
          sink: this,
          log: this.#log,
          path: k.path,
          ...(k.labelSelector ? { labelSelector: k.labelSelector } : {}),
          ...(k.fieldSelector ? { fieldSelector: k.fieldSelector } : {}),
          forbiddenMessage: `drift watch: not allowed to list ${k.kind} on root cluster ${name}`,
          maxBackoffMs: RECONNECT_CAP_MS,
        }),
    );
  }

  start(): void {
    for (const r of this.#reflectors) r.start();
  }

  async stop(): Promise<void> {
    await Promise.all(this.#reflectors.map((r) => r.stop()));
  }

  status(): Array<{ cluster: string; kind: string; synced: boolean; objects: number }> {
    return [...this.#kinds.keys()].map((kind) => ({
      cluster: this.name,
      kind,
      synced: this.#listed.has(kind),
      objects: this.#fingerprints.get(kind)?.size ?? 0,
    }));
  }

  #changed(watched: WatchedKind, tenantId: string, key: string, what: 'created' | 'changed' | 'deleted'): void {
    this.#owner.stats.events.changed += 1;
    this.#owner.signal(tenantId, `${watched.kind} ${key}: ${what}`);
  }

  // --- WatchSink ---

  upsert(kind: string, obj: Obj): boolean {
    const watched = this.#kinds.get(kind)!;
    const tenantId = tenantOf(watched, obj);
    if (!tenantId) {
      this.#owner.stats.events.ignored += 1;
      return true;
    }
    const map = this.#map(kind);
    const key = objectKey(obj);
    const fp = fingerprint(obj);
    const before = map.get(key);
    map.set(key, fp);
    if (before === fp) this.#owner.stats.events.unchanged += 1;
    else this.#changed(watched, tenantId, key, before === undefined ? 'created' : 'changed');
    return true;
  }

  remove(kind: string, obj: Obj): boolean {
    const watched = this.#kinds.get(kind)!;
    const tenantId = tenantOf(watched, obj);
    if (!tenantId) {
      this.#owner.stats.events.ignored += 1;
      return true;
    }
    const key = objectKey(obj);
    this.#map(kind).delete(key);
    this.#changed(watched, tenantId, key, 'deleted');
    return true;
  }

  async relisted(kind: string, items: Obj[]): Promise<void> {
    const watched = this.#kinds.get(kind)!;
    const next = new Map<string, string>();
    const tenants = new Map<string, string>();
    for (const obj of items) {
      const tenantId = tenantOf(watched, obj);
      if (!tenantId) continue;
      const key = objectKey(obj);
      next.set(key, fingerprint(obj));
      tenants.set(key, tenantId);
    }
    const before = this.#fingerprints.get(kind);
    this.#fingerprints.set(kind, next);
    const first = !this.#listed.has(kind);
    this.#listed.add(kind);
    if (first || !before) {
      this.#log.info({ kind, objects: next.size }, 'drift watch: listed');
      return;
    }
    // A list after a 410: every difference from what the watch had is a change it did not see.
    for (const [key, fp] of next) {
      const old = before.get(key);
      if (old === fp) continue;
      this.#changed(watched, tenants.get(key)!, key, old === undefined ? 'created' : 'changed');
    }
    for (const key of before.keys()) {
      if (next.has(key)) continue;
      const tenantId = tenantOf(watched, keyAsObject(watched, key));
      if (tenantId) this.#changed(watched, tenantId, key, 'deleted');
    }
  }

  advanced(): void {}

  reconnected(): void {}

  availability(kind: string, available: boolean): void {
    if (!available) this.#listed.delete(kind);
  }

  waitForRoom(): Promise<void> {
    return Promise.resolve();
  }

  onRestart(): void {
    this.#owner.stats.restarts += 1;
  }

  #map(kind: string): Map<string, string> {
    let m = this.#fingerprints.get(kind);
    if (!m) {
      m = new Map<string, string>();
      this.#fingerprints.set(kind, m);
    }
    return m;
  }
}

/** The metadata an object key stands for (to find the tenant of an object known only by key). */
function keyAsObject(watched: WatchedKind, key: string): Obj {
  if (watched.kind === 'Namespace') return { metadata: { name: key } };
  const slash = key.indexOf('/');
  return { metadata: { namespace: key.slice(0, slash), name: key.slice(slash + 1) } };
}
