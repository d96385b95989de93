/**
 * A receiver double of `POST /v1/runtime/events` for the event reporter's tests: it applies the
 * wire contract's rules the way the control plane does (latest resourceVersion wins across uids,
 * deletions leave tombstones, a digest removes the objects its sender owns that it did not list and
 * that are older than its list) and records who reported what and when, so a test can ask which
 * replica owned an object and when a takeover happened. It can be stopped and started again on the
 * same port to play a control plane outage. The real route is tested with the real provisioner.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import {
  compareResourceVersions,
  EVENTS_PATH,
  objectKeyString,
  ownerOf,
  type Digest,
  type EventBatch,
  type Heartbeat,
  type UpsertItem,
} from '../../../runtime/protocol/events.ts';

export interface StoredObject {
  key: string;
  uid: string;
  resourceVersion: string;
  deleted: boolean;
  /** How the current state came: an upsert or delete item, or a digest's removal. */
  via: 'upsert' | 'delete' | 'digest';
  reportedBy: string;
  item?: UpsertItem;
}

export interface Report {
  replica: string;
  key: string;
  resourceVersion: string;
  type: 'upsert' | 'delete';
  at: number;
}

export class EventReceiverDouble {
  readonly token: string;
  readonly objects = new Map<string, StoredObject>();
  readonly reports: Report[] = [];
  readonly digests: (Digest & { at: number })[] = [];
  readonly heartbeats: (Heartbeat & { at: number })[] = [];
  batches = 0;
  private server: Server | undefined;
  private port = 0;

  constructor(token: string) {
    this.token = token;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    const server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    const addr = server.address();
    this.port = typeof addr === 'object' && addr ? addr.port : this.port;
    this.server = server;
  }

  /** Stops listening and cuts every open connection (the control plane is gone). */
  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** Live (not deleted) objects: key → resourceVersion. */
  live(): Map<string, string> {
    const out = new Map<string, string>();
    for (const o of this.objects.values()) if (!o.deleted) out.set(o.key, o.resourceVersion);
    return out;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    if (req.method !== 'POST' || req.url !== EVENTS_PATH) return void res.writeHead(404).end();
    if (req.headers.authorization !== `Bearer ${this.token}`) return void res.writeHead(401).end();
    let batch: EventBatch;
    try {
      batch = JSON.parse(Buffer.concat(chunks).toString('utf8')) as EventBatch;
    } catch {
      return void res.writeHead(400).end('not JSON');
    }
    this.batches++;
    const at = Date.now();
    let applied = 0;
    let stale = 0;
    let removedByDigest = 0;
    for (const item of batch.items) {
      const key = objectKeyString(item);
      this.reports.push({ replica: batch.replica, key, resourceVersion: item.resourceVersion, type: item.type, at });
      const prev = this.objects.get(key);
      if (prev && compareResourceVersions(item.resourceVersion, prev.resourceVersion) <= 0) {
        stale++;
        continue;
      }
      applied++;
      this.objects.set(key, {
        key,
        uid: item.uid,
        resourceVersion: item.resourceVersion,
        deleted: item.type === 'delete',
        via: item.type,
        reportedBy: batch.replica,
        ...(item.type === 'upsert' ? { item } : {}),
      });
    }
    if (batch.heartbeat) this.heartbeats.push({ ...batch.heartbeat, at });
    for (const d of batch.digests ?? []) {
      this.digests.push({ ...d, at });
      const listed = new Set(
        d.objects.map((o) => objectKeyString({ kind: d.kind, namespace: o.namespace, name: o.name })),
      );
      for (const o of this.objects.values()) {
        if (o.deleted || !o.key.startsWith(`${d.kind}/`) || listed.has(o.key)) continue;
        if (ownerOf(o.key, d.members) !== d.replica) continue;
        if (compareResourceVersions(o.resourceVersion, d.listResourceVersion) >= 0) continue;
        o.deleted = true;
        o.via = 'digest';
        o.reportedBy = d.replica;
        o.resourceVersion = d.listResourceVersion;
        delete o.item;
        removedByDigest++;
      }
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ applied, stale, removedByDigest }));
  }
}
