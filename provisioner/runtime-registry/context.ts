/**
 * What every part of the runtimes service shares (service.ts builds it once): its dependencies,
 * the install bundle function, the cache of generated bundles, the rates and the Argo charts; and
 * the small reads and checks more than one part makes (the control plane's public URL, the tenant).
 */
import type pg from 'pg';
import { AppError, errors } from '../errors.ts';
import type { Catalog } from '../../runtime/catalog.ts';
import { TUNNEL_PATH } from '../../runtime/protocol/frames.ts';
import type { Sealer } from '../store/idempotency.ts';
import { getTenantRow, type TenantRow } from '../store/tenants.ts';
import { hybridInstallBundle, type InstallBundle, type InstallBundleInput } from '../../runtime/hybrid/bundle.ts';
import type { IngressAddressPolicy, Lookup } from '../tunnel/ingress-address.ts';
import { ArgoCharts } from './argo-charts.ts';
import { BundleCache } from './bundle-cache.ts';
import { RuntimeRates, type RuntimeRateBudgets } from './rates.ts';
import { DEFAULT_TENANT_BUDGETS } from '../config.ts';

export interface RuntimeServiceDeps {
  pool: pg.Pool;
  /** Seals stored Idempotency-Key answers (they hold the bootstrap token). */
  box: Sealer;
  catalog: Catalog;
  /** The control plane's URL as customers' clusters reach it (config.hybrid.publicUrl); undefined: hybrid runtimes cannot be registered. */
  publicUrl: string | undefined;
  /** The request-signing public key (PEM) the agents verify forwarded requests with. */
  publicKeyPem: string;
  bootstrapTtlSeconds: number;
  /** Hybrid runtimes per tenant, not removed (config.budgets.hybridRuntimes). */
  perTenant: number;
  /** This process's tunnels: the hosted runtime's tunnel state. */
  tunnelStatus: (tenantId: string) => { connected: boolean; since?: string | undefined };
  /** This process's tunnels: a hybrid runtime's tunnel state. */
  runtimeTunnelStatus: (runtimeId: string) => { connected: boolean; since?: string | undefined };
  replicaId: string;
  /** Called after a revocation committed (this process drops the key from its cache, closes its tunnel). */
  onKeyRevoked: (keyId: string) => void;
  /** The install bundle (default runtime/hybrid/bundle.ts's). */
  bundle?: (input: InstallBundleInput) => InstallBundle;
  /** Where an ingressUrl may point (config.hybrid.ingress, with the public URL as the control plane's own). */
  ingressPolicy: IngressAddressPolicy;
  /** Name resolution for the ingressUrl check (default the system's). */
  lookup?: Lookup;
  /** Rates of registrations, bundles and upgraders' polls (config.budgets; default DEFAULT_TENANT_BUDGETS'). */
  rates?: RuntimeRateBudgets;
  /** Bytes of generated bundles kept (config.hybrid.bundleCacheBytes; default bundle-cache.ts's). */
  bundleCacheBytes?: number;
  /** The Argo charts an argo=new runtime's install URL serves (default: none configured, so no URL for argo=new). */
  argoCharts?: ArgoCharts;
}

/** Who reads: a tenant's own key reads no operator remediation text in the hosted runtime's conditions. */
export type Reader = 'tenant' | 'operator';

/** The runtimes service's shared state: one per service, passed to each of its parts. */
export interface Runtimes {
  readonly deps: RuntimeServiceDeps;
  readonly bundle: (input: InstallBundleInput) => InstallBundle;
  /** Upgrade bundles and the bundles upgraders' plans compare, once per settings and versions. */
  readonly generated: BundleCache;
  readonly rates: RuntimeRates;
  readonly argoCharts: ArgoCharts;
}

export function runtimesOf(deps: RuntimeServiceDeps): Runtimes {
  return {
    deps,
    argoCharts: deps.argoCharts ?? new ArgoCharts({ chartRepositories: undefined }),
    bundle: deps.bundle ?? hybridInstallBundle,
    generated: new BundleCache(deps.bundleCacheBytes !== undefined ? { maxBytes: deps.bundleCacheBytes } : {}),
    rates: new RuntimeRates(deps.rates ?? DEFAULT_TENANT_BUDGETS),
  };
}

/** The tunnel URL of a control plane URL: ws(s) and the tunnel path. */
export function tunnelUrlOf(publicUrl: string): string {
  const u = new URL(publicUrl);
  u.protocol = u.protocol === 'http:' ? 'ws:' : 'wss:';
  u.pathname = `${u.pathname.replace(/\/+$/, '')}${TUNNEL_PATH}`;
  return u.toString();
}

/** The control plane's public URL, or HYBRID_RUNTIMES_NOT_CONFIGURED when it is not set. */
export function requirePublicUrl(rt: Runtimes): string {
  const publicUrl = rt.deps.publicUrl;
  if (publicUrl === undefined) throw hybridNotConfigured();
  return publicUrl;
}

export async function tenantOf(rt: Runtimes, tenantId: string): Promise<TenantRow> {
  const tenant = await getTenantRow(rt.deps.pool, tenantId);
  if (!tenant) throw errors.notFound('tenant', tenantId);
  return tenant;
}

export const iso = (d: Date | null): string | null => d?.toISOString() ?? null;

const hybridNotConfigured = () =>
  new AppError(
    'HYBRID_RUNTIMES_NOT_CONFIGURED',
    "hybrid runtimes cannot be registered or upgraded here: PROVISIONER_PUBLIC_URL, the URL customers' clusters reach the control plane at, is not set; ask the operator to set it",
    { details: { setting: 'PROVISIONER_PUBLIC_URL' } },
  );
