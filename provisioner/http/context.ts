import type pg from 'pg';
import type { Config } from '../config.ts';
import type { SecretBox } from '../crypto.ts';
import type { Catalog } from '../../runtime/catalog.ts';
import type { TenantService } from '../tenants/service.ts';
import type { ClusterService } from '../clusters/service.ts';
import type { KeyService } from '../keys/service.ts';
import type { RuntimeVersionService } from '../runtime-versions/service.ts';
import type { Metrics } from './metrics.ts';
import type { OperationLogHub } from '../reconciler/log-follow.ts';
import type { TunnelDirectory, TunnelServer } from '../tunnel/index.ts';
import type { KeyCache } from '../auth/key-cache.ts';
import type { KeyStreams } from './streams.ts';
import type { HotReads } from '../store/batched-reads.ts';
import type { Notifications } from '../db/notifications.ts';

/** What route plugins get: built once in app.ts, never read from globals. */
export interface AppContext {
  config: Config;
  pool: pg.Pool;
  box: SecretBox;
  catalog: Catalog;
  tenants: TenantService;
  clusters: ClusterService;
  keys: KeyService;
  runtimeVersions: RuntimeVersionService;
  metrics: Metrics;
  /** Live operation log followers, woken through the notifications hub. */
  logHub: OperationLogHub;
  /** The process's one LISTEN connection (db/notifications.ts). */
  notifications: Notifications;
  /** Tunnels of connected runtimes. */
  tunnel: TunnelServer;
  /** Which replica holds each runtime's tunnel (shared through Postgres). */
  tunnelDirectory: TunnelDirectory;
  /** Public half of the request-signing key; runtimes verify forwarded requests with it. */
  requestSigningPublicKeyPem: string;
  /** Resolved API keys, briefly (see auth/key-cache.ts). */
  keyCache: KeyCache;
  /** Batched reads of a tenant and of an API key (store/batched-reads.ts). */
  reads: HotReads;
  /** Open event streams by API key: a revoked key's streams end at once. */
  streams: KeyStreams;
}
