/**
 * Runtimes, hosted and hybrid, as one model (docs/api.md "Runtimes"). A tenant's hosted runtime is
 * its tenant row seen as a runtime; a hybrid runtime is registered here, installed by the customer
 * from the bundle the registration answers with, and becomes `installed` when the bundle's
 * bootstrap Job exchanges its single-use token for the runtime key (`redeem`). Removal revokes
 * that key (which closes whatever it holds open) and answers the command that deletes what the
 * install created. Every change is written with its audit row in one transaction; the bootstrap
 * token and the runtime key are never written to a log or an audit row.
 */
import { createHash, randomBytes } from 'node:crypto';
import type pg from 'pg';
import { withTx, pgConstraint, type Queryable } from '../db/tx.ts';
import { AppError, errors } from '../errors.ts';
import type { Catalog } from '../../runtime/catalog.ts';
import { TUNNEL_PATH } from '../../runtime/protocol/frames.ts';
import { STALE_AFTER_SECONDS } from '../../runtime/protocol/events.ts';
import type { Condition } from '../store/states.ts';
import { writeAudit, type Requester } from '../store/audit.ts';
import { createKey, revokeKey } from '../store/keys.ts';
import { claimKey, requestHash, storeResponse, type Sealer } from '../store/idempotency.ts';
import {
  claimRuntimeBootstrap,
  countHybridRuntimes,
  runtimeByBootstrapToken,
  getRuntimeByName,
  insertHybridRuntime,
  listAllRuntimes,
  listTenantRuntimes,
  markRuntimeRemoved,
  getRuntimeById,
  recordUpgraderReport,
  setHybridRuntimeVersion,
  setRuntimeKey,
  type HybridAccess,
  type HybridArgo,
  type HybridUpgrades,
  type RuntimeMode,
  type RuntimeRow,
} from '../store/runtimes.ts';
import { getTenantRow, getTenantRows, toTenant, type TenantRow } from '../store/tenants.ts';
import { deleteRuntimeObjects, lockTenantObjects } from '../store/runtime-objects.ts';
import { availabilityOf } from '../store/versions.ts';
import { conditionsWithRuntime, tunnelView } from '../http/tenant-view.ts';
import type {
  Runtime,
  RuntimeBootstrapAnswer,
  RuntimeRegistered,
  RuntimeRemoved,
  RuntimeUpgradeBundle,
  RuntimeUpgraded,
} from '../http/api-types.ts';
import {
  HybridBundleError,
  hybridInstallBundle,
  hybridNamespace,
  type InstallBundle,
  type InstallBundleInput,
} from '../../runtime/hybrid/bundle.ts';
import {
  chartObjects,
  chartsPart,
  EMPTY_CHARTS_PART,
  installDocument,
  installPath,
  installUrlCommand,
  InstallDocumentError,
  type ChartsPart,
  type RenderedChart,
} from '../../runtime/hybrid/install.ts';
import { unpinnedImages } from '../../runtime/hybrid/images.ts';
import type { RuntimeVersion } from '../../runtime/versions.ts';
import { ArgoCharts, ArgoChartsUnavailableError } from './argo-charts.ts';
import { upgradeBundle } from '../../runtime/hybrid/upgrade.ts';
import { agentRefusal, upgraderPatchable, upgraderPlan } from '../../runtime/hybrid/upgrader.ts';
import { UPGRADER_NEXT, type UpgraderAssignment, type UpgraderReportBody } from '../../runtime/protocol/upgrade.ts';
import { checkVersionChange } from '../runtime-versions/service.ts';
import { RUNTIME_NAMESPACE } from '../../runtime/component/agents.ts';
import {
  ingressRegistrationProblem,
  ingressUrlShapeProblem,
  normalIngressUrl,
  type IngressAddressPolicy,
  type Lookup,
} from '../tunnel/ingress-address.ts';
import { BOOTSTRAP_TOKEN_PATTERN, type BootstrapAnswer } from '../../runtime/protocol/bootstrap.ts';
import { BundleCache, bundleCacheKey, type BundleCacheStats } from './bundle-cache.ts';
import { RuntimeRates, type RuntimeRateBudgets } from './rates.ts';
import { DEFAULT_TENANT_BUDGETS } from '../config.ts';

/**
 * How long an upgrade the in-cluster upgrader reported `applying` holds off another version change:
 * past it the upgrader is taken for gone (its rollout timeout is at most two hours) and a new
 * version may replace the upgrade.
 */
export const UPGRADER_BUSY_SECONDS = 2 * 3600;

export function newRuntimeBootstrapToken(): { token: string; hash: string } {
  const token = `hrth_${randomBytes(32).toString('base64url')}`;
  return { token, hash: hashRuntimeBootstrapToken(token) };
}

export const hashRuntimeBootstrapToken = (token: string): string => createHash('sha256').update(token).digest('base64');

export interface RegisterRuntime {
  name: string;
  mode: 'hosted' | 'hybrid';
  access: HybridAccess;
  ingressUrl?: string | undefined;
  argo: HybridArgo;
  argoNamespace?: string | undefined;
  upgrades?: HybridUpgrades | undefined;
  version?: string | undefined;
}

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

/** The tunnel URL of a control plane URL: ws(s) and the tunnel path. */
export function tunnelUrlOf(publicUrl: string): string {
  const u = new URL(publicUrl);
  u.protocol = u.protocol === 'http:' ? 'ws:' : 'wss:';
  u.pathname = `${u.pathname.replace(/\/+$/, '')}${TUNNEL_PATH}`;
  return u.toString();
}

const iso = (d: Date | null): string | null => d?.toISOString() ?? null;

export class RuntimeService {
  readonly #deps: RuntimeServiceDeps;
  readonly #bundle: (input: InstallBundleInput) => InstallBundle;
  /** Upgrade bundles and the bundles upgraders' plans compare, once per settings and versions. */
  readonly #generated: BundleCache;
  readonly #rates: RuntimeRates;
  readonly #argoCharts: ArgoCharts;

  constructor(deps: RuntimeServiceDeps) {
    this.#deps = deps;
    this.#argoCharts = deps.argoCharts ?? new ArgoCharts({ chartRepositories: undefined });
    this.#bundle = deps.bundle ?? hybridInstallBundle;
    this.#generated = new BundleCache(deps.bundleCacheBytes !== undefined ? { maxBytes: deps.bundleCacheBytes } : {});
    this.#rates = new RuntimeRates(deps.rates ?? DEFAULT_TENANT_BUDGETS);
  }

  /** What the cache of generated bundles did (builds are misses): metrics and tests. */
  bundleCacheStats(): BundleCacheStats {
    return this.#generated.stats();
  }

  /**
   * Takes one poll of a runtime's in-cluster upgrader from its tenant's and its own rates, or 429
   * (before anything is read: a poll that is refused costs nothing more).
   */
  admitUpgraderPoll(tenantId: string | null | undefined, runtimeId: string | null | undefined): void {
    if (tenantId && runtimeId) this.#rates.upgraderPoll(tenantId, runtimeId);
  }

  async list(tenantId: string, reader: Reader): Promise<Runtime[]> {
    const tenant = await this.#tenant(tenantId);
    const rows = await listTenantRuntimes(this.#deps.pool, tenantId);
    return rows.map((r) => this.#view(r, tenant, reader));
  }

  async get(tenantId: string, name: string, reader: Reader): Promise<Runtime> {
    const tenant = await this.#tenant(tenantId);
    const row = await getRuntimeByName(this.#deps.pool, tenantId, name);
    if (!row) throw errors.notFound('runtime', name);
    return this.#view(row, tenant, reader);
  }

  /** Every tenant's runtimes in creation order, a page after `after`. */
  async listAll(q: {
    after?: { ts: string; id: string } | undefined;
    limit: number;
    mode?: RuntimeMode | undefined;
  }): Promise<{ items: Runtime[]; last: { ts: string; id: string } | undefined; more: boolean }> {
    const rows = await listAllRuntimes(this.#deps.pool, { ...q, limit: q.limit + 1 });
    const page = rows.slice(0, q.limit);
    const tenants = await getTenantRows(this.#deps.pool, [...new Set(page.map((r) => r.tenant_id))]);
    const last = page.at(-1);
    return {
      items: page.map((r) => this.#view(r, tenants.get(r.tenant_id)!, 'operator')),
      last: last ? { ts: last.cursor_ts, id: last.id } : undefined,
      more: rows.length > q.limit,
    };
  }

  /**
   * Registers a hybrid runtime: the row (awaiting install), its single-use bootstrap token (stored
   * as its SHA-256) and the install bundle made for it. With an Idempotency-Key the same key and
   * body answer the first answer again (status and body).
   */
  async register(
    tenantId: string,
    input: RegisterRuntime,
    idempotencyKey: string | undefined,
    by: Requester,
    reader: Reader,
  ): Promise<{ status: number; body: RuntimeRegistered }> {
    this.#rates.registration(tenantId);
    const publicUrl = this.#publicUrl();
    if (input.mode === 'hosted')
      throw new AppError(
        'HOSTED_RUNTIME_EXISTS',
        "a tenant's hosted runtime comes with its signup (GET /v1/tenants/:id/runtimes/hosted); register hybrid runtimes with mode: hybrid",
        { field: 'mode' },
      );
    checkShape(input);
    // Stored and used as its origin only (checkShape refused every other spelling).
    const ingressUrl =
      input.access === 'ingress' && input.ingressUrl !== undefined ? normalIngressUrl(input.ingressUrl) : undefined;
    if (ingressUrl !== undefined) {
      const problem = await ingressRegistrationProblem(ingressUrl, this.#deps.ingressPolicy, this.#deps.lookup);
      if (problem) throw errors.validation(problem, 'ingressUrl');
    }
    // argo=new: the charts its install URL serves, rendered before the transaction (the first time
    // for a version takes a second or two) at the version the runtime is to get.
    const expected = this.#deps.catalog.get(
      input.version ?? (await getTenantRow(this.#deps.pool, tenantId))?.runtime_version ?? '',
    );
    const prepared = input.argo === 'new' && expected ? await this.#renderedCharts(expected) : undefined;
    return withTx(this.#deps.pool, async (tx) => {
      const scope = `runtime-register:${tenantId}`;
      if (idempotencyKey !== undefined) {
        const claim = await claimKey(tx, this.#deps.box, scope, idempotencyKey, requestHash(input));
        if (claim.kind === 'replay') return { status: claim.status, body: claim.body as RuntimeRegistered };
        if (claim.kind === 'mismatch') throw errors.idempotencyMismatch();
        if (claim.kind === 'in-progress') throw errors.idempotencyInProgress();
      }
      // Under the tenant's row lock: two registrations at once cannot both take the last place.
      const tenant = await getTenantRow(tx, tenantId, true);
      if (!tenant) throw errors.notFound('tenant', tenantId);
      if (tenant.deleted) throw errors.tenantDeleted(tenantId);
      const versionName = input.version ?? tenant.runtime_version;
      const version = this.#deps.catalog.get(versionName);
      if (!version) throw errors.unknownVersion(versionName, 'version');
      if (input.version !== undefined) {
        // An explicit version must be installable as a tenant's would be; the default is what the
        // tenant's hosted runtime already runs.
        const availability = await availabilityOf(tx, versionName);
        if (availability === 'withdrawn' || (availability === 'deprecated' && by.actor.role === 'tenant'))
          throw errors.versionUnavailable(versionName, availability, 'version');
      }
      if ((await countHybridRuntimes(tx, tenantId)) >= this.#deps.perTenant)
        throw errors.tenantLimitReached(
          'hybrid runtimes (installed or awaiting install)',
          this.#deps.perTenant,
          'PROVISIONER_HYBRID_RUNTIMES_PER_TENANT',
        );
      if (await getRuntimeByName(tx, tenantId, input.name)) throw runtimeExists(input.name);
      const { token, hash } = newRuntimeBootstrapToken();
      const upgrades = input.upgrades ?? 'customer';
      let row: RuntimeRow;
      try {
        row = await insertHybridRuntime(tx, {
          tenantId,
          name: input.name,
          access: input.access,
          ingressUrl,
          argo: input.argo,
          argoNamespace: input.argo === 'existing' ? input.argoNamespace : undefined,
          namespace: hybridNamespace(input.name),
          upgrades,
          version: version.version,
          tokenHash: hash,
          ttlSeconds: this.#deps.bootstrapTtlSeconds,
          createdBy: by.actor.id,
        });
      } catch (err) {
        if (pgConstraint(err) === 'runtimes_tenant_name') throw runtimeExists(input.name);
        throw err;
      }
      let bundle: InstallBundle;
      try {
        bundle = this.#bundle({ ...this.#bundleInput(row, publicUrl), bootstrapToken: token });
      } catch (err) {
        // What the checks above let through and the bundle refuses is still the request's fault.
        if (err instanceof HybridBundleError) throw errors.validation(err.message);
        throw err;
      }
      // The one command: the install URL, for argo=new when the control plane rendered the charts.
      const charts: RenderedCharts =
        input.argo === 'existing'
          ? { rendered: [], unpinnedImages: [] }
          : prepared?.version === version.version
            ? prepared.charts
            : { unavailable: `the Argo charts of version ${version.version} are not rendered yet: register again` };
      const url = 'rendered' in charts ? `${publicUrl}${installPath(token)}` : null;
      const runtime = this.#view(row, tenant, reader);
      await writeAudit(tx, by.actor, {
        action: 'runtime.register',
        targetType: 'runtime',
        targetId: row.id,
        after: { ...runtime, conditions: undefined, tunnel: undefined },
        requestId: by.requestId,
      });
      const body: RuntimeRegistered = {
        runtime,
        bootstrapToken: token,
        bootstrapExpiresAt: row.bootstrap_expires_at!.toISOString(),
        install: {
          url,
          urlUnavailable: 'unavailable' in charts ? charts.unavailable : null,
          command: url !== null ? installUrlCommand(url) : bundle.command,
          manifests: bundle.manifests,
          charts: bundle.charts,
          fileCommand: bundle.command,
          removeCommand: bundle.removeCommand,
          namespace: bundle.namespace,
          unpinnedImages: [
            ...new Set([...bundle.unpinnedImages, ...('rendered' in charts ? charts.unpinnedImages : [])]),
          ].sort(),
        },
      };
      if (idempotencyKey !== undefined) await storeResponse(tx, this.#deps.box, scope, idempotencyKey, 201, body);
      return { status: 201, body };
    });
  }

  /**
   * The bootstrap exchange: a known, unexpired, unredeemed token of a runtime that is not removed
   * (of a tenant not deleted) is claimed, the runtime key made and the runtime `installed`, in one
   * transaction; anything else is one 401 that never says which.
   */
  async redeem(bootstrapToken: string, requestId: string): Promise<RuntimeBootstrapAnswer> {
    const publicUrl = this.#deps.publicUrl;
    if (!BOOTSTRAP_TOKEN_PATTERN.test(bootstrapToken) || publicUrl === undefined) throw bootstrapInvalid();
    return withTx(this.#deps.pool, async (tx) => {
      const row = await claimRuntimeBootstrap(tx, hashRuntimeBootstrapToken(bootstrapToken));
      if (!row) throw bootstrapInvalid();
      const actor = { id: `bootstrap:${row.id}`, role: 'bootstrap' };
      const { key, info } = await createKey(tx, {
        role: 'runtime',
        tenantId: row.tenant_id,
        name: `hybrid runtime ${row.name}`,
        createdBy: actor.id,
        runtimeId: row.id,
      });
      await setRuntimeKey(tx, row.id, info.id);
      await writeAudit(tx, actor, {
        action: 'runtime.bootstrap',
        targetType: 'runtime',
        targetId: row.id,
        after: { tenantId: row.tenant_id, name: row.name, state: 'installed', keyId: info.id, keyPrefix: info.prefix },
        requestId,
      });
      // The wire type the bootstrap Job reads (runtime/protocol/bootstrap.ts).
      const answer: BootstrapAnswer = {
        tenantId: row.tenant_id,
        runtimeId: row.id,
        name: row.name,
        runtimeToken: key,
        tunnelUrl: tunnelUrlOf(publicUrl),
        controlPlaneUrl: publicUrl,
        publicKey: this.#deps.publicKeyPem,
      };
      return answer;
    });
  }

  /**
   * What a runtime's install URL serves (`GET /v1/install/<bootstrap token>.yaml`): the complete
   * install as YAML (runtime/hybrid/install.ts), with the bootstrap token in its Secret. Reads
   * only: the token stays unredeemed until the bundle's Job exchanges it. Served while the runtime
   * awaits install with the token unexpired: a token not issued here (or of a removed runtime, a
   * deleted tenant) is 404, a redeemed or expired one 410, each saying what to do. Within the
   * runtime's and the tenant's bundle rates (429).
   */
  async installText(bootstrapToken: string): Promise<string> {
    const publicUrl = this.#deps.publicUrl;
    if (!BOOTSTRAP_TOKEN_PATTERN.test(bootstrapToken) || publicUrl === undefined) throw installNotFound();
    const row = await runtimeByBootstrapToken(this.#deps.pool, hashRuntimeBootstrapToken(bootstrapToken));
    if (!row || row.state === 'removed' || row.tenant_deleted) throw installNotFound();
    this.#rates.bundle(row.tenant_id, row.name);
    if (!row.usable) {
      if (row.bootstrap_redeemed_at)
        throw new AppError(
          'BOOTSTRAP_TOKEN_USED',
          `runtime '${row.name}' was installed with this URL's token at ${row.bootstrap_redeemed_at.toISOString()}: the URL served its install once; to upgrade it, apply the bundle GET /v1/tenants/${row.tenant_id}/runtimes/${row.name}/bundle answers`,
        );
      throw new AppError(
        'BOOTSTRAP_TOKEN_EXPIRED',
        `this install URL expired at ${row.bootstrap_expires_at?.toISOString() ?? 'its time'} before runtime '${row.name}' was installed: remove the runtime and register it again for a new one`,
      );
    }
    const input = this.#bundleInput(row, publicUrl);
    const bundle = this.#bundle({ ...input, bootstrapToken });
    let part = EMPTY_CHARTS_PART;
    if (row.argo === 'new') {
      const { charts } = await this.#renderedCharts(input.version);
      if ('unavailable' in charts)
        throw new AppError('INSTALL_CHARTS_UNAVAILABLE', charts.unavailable, {
          details: { setting: 'PROVISIONER_CHART_REPOSITORIES' },
        });
      // Its YAML is the bulk of the document (the Argo CD CRDs): written once per runtime and
      // version, in the build queue's turns, and kept with the generated bundles.
      part = await this.#generated.getQueued(
        bundleCacheKey('install-charts', row.tenant_id, row.name, input.version.version),
        row.tenant_id,
        () => chartsPart({ tenantId: row.tenant_id, name: row.name }, input.version, charts.rendered),
        (p: ChartsPart) => p.text.length + 1024,
      );
    }
    return installDocument(bundle, input.version, part).text;
  }

  /**
   * argo=new: the Argo charts at `version` as the control plane renders them (argo-charts.ts, once
   * per version), checked as the install writes them, with the images the catalog has no digest
   * for; or why the control plane cannot render them.
   */
  async #renderedCharts(version: RuntimeVersion): Promise<{ version: string; charts: RenderedCharts }> {
    const unavailable = this.#argoCharts.unavailable(version);
    if (unavailable !== undefined) return { version: version.version, charts: { unavailable } };
    try {
      const rendered = await this.#argoCharts.render(version);
      const objects = chartObjects({ tenantId: 'check', name: 'check' }, version, rendered);
      return { version: version.version, charts: { rendered, unpinnedImages: unpinnedImages(objects) } };
    } catch (err) {
      if (err instanceof InstallDocumentError || err instanceof ArgoChartsUnavailableError)
        return { version: version.version, charts: { unavailable: err.message } };
      throw err;
    }
  }

  /**
   * Removes a hybrid runtime: its key revoked (every replica drops it and closes what it holds
   * open), the state `removed`, and the command that deletes what the install created.
   */
  async remove(tenantId: string, name: string, by: Requester, reader: Reader): Promise<RuntimeRemoved> {
    const out = await withTx(this.#deps.pool, async (tx) => {
      const tenant = await getTenantRow(tx, tenantId);
      if (!tenant) throw errors.notFound('tenant', tenantId);
      const row = await getRuntimeByName(tx, tenantId, name, true);
      if (!row) throw errors.notFound('runtime', name);
      if (row.mode === 'hosted')
        throw new AppError(
          'HOSTED_RUNTIME_NOT_REMOVABLE',
          `the hosted runtime goes with its tenant: delete the tenant (DELETE /v1/tenants/${tenantId}) to remove it`,
          { field: 'name' },
        );
      // What it reported goes with it (it no longer counts against the tenant's budgets). The
      // tenant's ingest lock first: a batch being applied holds it and then writes the runtime's
      // heartbeat, so taking the runtime's row first could deadlock with it.
      await lockTenantObjects(tx, tenantId);
      await deleteRuntimeObjects(tx, { tenantId, runtimeId: row.id });
      if (row.runtime_key_id) await revokeKey(tx, row.runtime_key_id);
      const removed = await markRuntimeRemoved(tx, row.id);
      const runtime = this.#view(removed, tenant, reader);
      await writeAudit(tx, by.actor, {
        action: 'runtime.remove',
        targetType: 'runtime',
        targetId: row.id,
        before: { state: row.state, keyId: row.runtime_key_id },
        after: { state: removed.state, removedAt: iso(removed.removed_at) },
        requestId: by.requestId,
      });
      // The bundle's remove command depends only on the runtime's labels and its charts: made again
      // from the row (the upgrade bundle's, which needs no token, names the bootstrap objects too).
      const removeCommand = this.#bundle({
        ...this.#bundleInput(row, this.#deps.publicUrl ?? 'https://control-plane.invalid'),
        purpose: 'upgrade',
      }).removeCommand;
      return { runtime, removeCommand, keyId: row.runtime_key_id };
    });
    if (out.keyId) this.#deps.onKeyRevoked(out.keyId);
    return { runtime: out.runtime, removeCommand: out.removeCommand };
  }

  /**
   * A hybrid runtime's upgrade bundle at catalog version `to` (default: the version it is asked to
   * run) and its diff against `from` (default: the version before the last change when `to` is the
   * current one, else the current one). Changes nothing. Refused like an upgrade to `to` would be
   * for its availability: a withdrawn version never, a deprecated one not for a tenant key unless
   * the runtime runs it. Within the tenant's and the runtime's bundle rates (429).
   */
  async bundle(
    tenantId: string,
    name: string,
    q: { version?: string | undefined; from?: string | undefined },
    reader: Reader = 'operator',
  ): Promise<RuntimeUpgradeBundle> {
    // Before anything is read: a refused request costs no database round trip.
    this.#rates.bundle(tenantId, name);
    const publicUrl = this.#publicUrl();
    await this.#tenant(tenantId);
    const row = await getRuntimeByName(this.#deps.pool, tenantId, name);
    if (!row) throw errors.notFound('runtime', name);
    hybridOnly(row, tenantId);
    const to = q.version ?? row.version!;
    const from = q.from ?? (to === row.version ? (row.previous_version ?? to) : row.version!);
    if (!this.#deps.catalog.get(to)) throw errors.unknownVersion(to, 'version');
    const availability = await availabilityOf(this.#deps.pool, to);
    if (availability === 'withdrawn' || (availability === 'deprecated' && reader === 'tenant' && to !== row.version))
      throw errors.versionUnavailable(to, availability, 'version');
    return this.#upgradeBundle(row, publicUrl, from, to, { to: 'version', from: 'from' });
  }

  /**
   * Asks a hybrid runtime's customer to run another catalog version: checked like a tenant's own
   * version change (an allowed upgrade path; a rollback only to the version before, if the catalog
   * allows it; not withdrawn, not deprecated for a tenant), recorded with its audit row, and
   * answered with the upgrade bundle and its diff. The control plane changes nothing in the
   * customer's cluster: the customer applies the bundle (the runtime's agents then report the new
   * version). Asking for the version it already has changes nothing and answers the same bundle.
   */
  async upgrade(
    tenantId: string,
    name: string,
    version: string,
    by: Requester,
    reader: Reader,
  ): Promise<RuntimeUpgraded> {
    // The answer is a bundle: within the bundle rates, taken before anything is read.
    this.#rates.bundle(tenantId, name);
    const publicUrl = this.#publicUrl();
    return withTx(this.#deps.pool, async (tx) => {
      const tenant = await getTenantRow(tx, tenantId);
      if (!tenant) throw errors.notFound('tenant', tenantId);
      const row = await getRuntimeByName(tx, tenantId, name, true);
      if (!row) throw errors.notFound('runtime', name);
      hybridOnly(row, tenantId);
      const from = row.version!;
      if (!this.#deps.catalog.get(version)) throw errors.unknownVersion(version, 'version');
      if (version === from) {
        const upgrade = await this.#upgradeBundle(row, publicUrl, row.previous_version ?? from, from, {
          to: 'version',
        });
        const byAgent = row.upgrade_phase !== null && row.upgrade_to === from;
        return {
          runtime: this.#view(row, tenant, reader),
          changed: false,
          appliedBy: byAgent ? 'agent' : 'customer',
          customerActionReason: null,
          upgrade,
        };
      }
      if (row.state !== 'installed')
        throw new AppError(
          'RUNTIME_NOT_INSTALLED',
          `runtime '${name}' is not installed yet: apply its install bundle first (or remove it and register it again at version ${version})`,
          { field: 'name' },
        );
      if (row.upgrade_phase === 'applying' && (row.upgrade_age_seconds ?? 0) < UPGRADER_BUSY_SECONDS)
        throw new AppError(
          'RUNTIME_UPGRADE_IN_PROGRESS',
          `runtime '${name}' is being upgraded from ${row.upgrade_from} to ${row.upgrade_to} by its in-cluster upgrader: ask again once it reports the end (GET the runtime: upgrade.phase)`,
          { field: 'version' },
        );
      const availability = await availabilityOf(tx, version);
      if (availability === 'withdrawn' || (availability === 'deprecated' && by.actor.role === 'tenant'))
        throw errors.versionUnavailable(version, availability, 'version');
      checkVersionChange(this.#deps.catalog, {
        subject: 'runtime',
        from,
        to: version,
        previous: row.previous_version,
        field: 'version',
      });
      const upgrade = await this.#upgradeBundle(row, publicUrl, from, version, { to: 'version' });
      // Opted in, the upgrader applies it when every change is one it may make; else the customer does.
      const customerActionReason =
        row.upgrades === 'agent' ? (agentRefusal(upgrade, this.#patchable(row, publicUrl, version)) ?? null) : null;
      const byAgent = row.upgrades === 'agent' && customerActionReason === null;
      const changed = await setHybridRuntimeVersion(tx, row.id, version, byAgent);
      if (!changed) throw errors.notFound('runtime', name);
      const appliedBy = byAgent ? 'agent' : 'customer';
      await writeAudit(tx, by.actor, {
        action: 'runtime.upgrade',
        targetType: 'runtime',
        targetId: row.id,
        before: { version: from },
        after: { version, appliedBy, ...(customerActionReason ? { customerActionReason } : {}) },
        requestId: by.requestId,
      });
      return { runtime: this.#view(changed, tenant, reader), changed: true, appliedBy, customerActionReason, upgrade };
    });
  }

  /**
   * A fleet upgrade's wave moved a tenant's hosted runtime to `target`: its hybrid runtimes that
   * opted in to the in-cluster upgrader (installed, not at `target`, not applying another upgrade)
   * are asked for `target` too, in the caller's transaction and with its audit actor, where the
   * version change is allowed (the catalog's paths, availability) and every change of it is one the
   * upgrader may make. Answers the runtimes asked; the others stay the customer's (the fleet
   * upgrade lists them as customer action needed, with the reason).
   */
  async askUpgradesByAgent(
    tx: Queryable,
    tenantId: string,
    target: string,
    by: Requester,
    fleetUpgradeId: string,
  ): Promise<string[]> {
    const publicUrl = this.#deps.publicUrl;
    if (publicUrl === undefined || !this.#deps.catalog.get(target)) return [];
    const asked: string[] = [];
    for (const row of await listTenantRuntimes(tx, tenantId)) {
      if (row.mode !== 'hybrid' || row.upgrades !== 'agent' || row.state !== 'installed' || row.version === target)
        continue;
      if (row.upgrade_phase === 'applying' && (row.upgrade_age_seconds ?? 0) < UPGRADER_BUSY_SECONDS) continue;
      const availability = await availabilityOf(tx, target);
      if (availability === 'withdrawn') continue;
      try {
        checkVersionChange(this.#deps.catalog, {
          subject: 'runtime',
          from: row.version!,
          to: target,
          previous: row.previous_version,
          field: 'version',
        });
      } catch {
        continue;
      }
      const upgrade = await this.#upgradeBundle(row, publicUrl, row.version!, target, { to: 'version' });
      const refusal = agentRefusal(upgrade, this.#patchable(row, publicUrl, target));
      if (refusal !== undefined) continue;
      const changed = await setHybridRuntimeVersion(tx, row.id, target, true);
      if (!changed) continue;
      await writeAudit(tx, by.actor, {
        action: 'runtime.upgrade',
        targetType: 'runtime',
        targetId: row.id,
        before: { version: row.version },
        after: { version: target, appliedBy: 'agent', fleetUpgradeId },
        requestId: by.requestId,
      });
      asked.push(row.name);
    }
    return asked;
  }

  /**
   * The in-cluster upgrader's pull (its runtime key): the version the runtime is to run and, while
   * an upgrade by the upgrader is pending or applying, its plan: the objects to apply and the same
   * objects as the version before had them (runtime/hybrid/upgrader.ts).
   */
  async upgraderAssignment(runtimeId: string | null | undefined): Promise<UpgraderAssignment> {
    const row = await this.#upgraderRuntime(this.#deps.pool, runtimeId);
    const publicUrl = this.#publicUrl();
    const active = row.upgrade_phase === 'pending' || row.upgrade_phase === 'applying';
    if (!active || row.upgrade_from === null || row.upgrade_to === null)
      return { version: row.version!, upgrade: null };
    const before = this.#bundleAt(row, publicUrl, row.upgrade_from);
    const after = this.#bundleAt(row, publicUrl, row.upgrade_to);
    return {
      version: row.version!,
      upgrade: {
        from: row.upgrade_from,
        to: row.upgrade_to,
        phase: row.upgrade_phase as 'pending' | 'applying',
        ...upgraderPlan(before, after),
      },
    };
  }

  /**
   * What the in-cluster upgrader reports about the upgrade to `to`: recorded with its audit row
   * (the runtime key as the actor), one row per phase. 409 UPGRADE_SUPERSEDED when that upgrade is
   * no longer the one asked or has ended; 409 UPGRADE_PHASE_OUT_OF_ORDER for a phase its current
   * one may not be followed by (UPGRADER_NEXT: `succeeded` straight from `pending` would say an
   * upgrade rolled out that was never reported started). `rolled-back` makes the version before
   * the runtime's version again.
   */
  async upgraderReport(
    runtimeId: string | null | undefined,
    report: UpgraderReportBody,
    by: Requester,
  ): Promise<{ runtime: Runtime }> {
    return withTx(this.#deps.pool, async (tx) => {
      const row = await this.#upgraderRuntime(tx, runtimeId, true);
      const tenant = await getTenantRow(tx, row.tenant_id);
      if (!tenant) throw errors.notFound('tenant', row.tenant_id);
      const current = row.upgrade_phase;
      if (
        (current === 'pending' || current === 'applying') &&
        row.upgrade_to === report.to &&
        row.version === report.to
      ) {
        // The row is locked: the phases go in order, whatever the upgrader sends.
        if (current === 'applying' && report.phase === 'applying')
          return { runtime: this.#view(row, tenant, 'operator') };
        const allowed = UPGRADER_NEXT[current];
        if (!allowed.includes(report.phase))
          throw new AppError(
            'UPGRADE_PHASE_OUT_OF_ORDER',
            `the upgrade to ${report.to} is ${current}: its next report is ${allowed.join(' or ')}, not ${report.phase}`,
            { field: 'phase', details: { phase: current, allowed } },
          );
      }
      const changed = await recordUpgraderReport(tx, row.id, report.to, report.phase, report.message?.trim() || null);
      if (!changed)
        throw new AppError(
          'UPGRADE_SUPERSEDED',
          row.upgrade_to === report.to && row.upgrade_phase !== null
            ? `the upgrade to ${report.to} already ended (${row.upgrade_phase})`
            : `the upgrade to ${report.to} is not the one asked now (${row.upgrade_phase === 'pending' || row.upgrade_phase === 'applying' ? `${row.upgrade_to}, ${row.upgrade_phase}` : `none; the runtime is to run ${row.version}`})`,
          { field: 'to' },
        );
      await writeAudit(tx, by.actor, {
        action: `runtime.upgrade.${report.phase}`,
        targetType: 'runtime',
        targetId: row.id,
        before: { version: row.upgrade_from, target: report.to, phase: current },
        after: { version: changed.version, appliedBy: 'agent', phase: report.phase, message: changed.upgrade_message },
        requestId: by.requestId,
      });
      return { runtime: this.#view(changed, tenant, 'operator') };
    });
  }

  async #upgraderRuntime(db: Queryable, runtimeId: string | null | undefined, forUpdate = false): Promise<RuntimeRow> {
    const row = runtimeId ? await getRuntimeById(db, runtimeId, forUpdate) : undefined;
    if (!row || row.mode !== 'hybrid' || row.upgrades !== 'agent')
      throw new AppError(
        'UPGRADER_NOT_OPTED_IN',
        row?.mode === 'hybrid'
          ? `runtime '${row.name}' did not opt in to the in-cluster upgrader (upgrades: customer): its customer applies each upgrade`
          : 'only the key of a hybrid runtime that opted in to the in-cluster upgrader (upgrades: agent) may call the upgrader routes',
      );
    return row;
  }

  /** The upgrade bundle of `row` at `version` (what the upgrader's plan compares), built once per settings and version. */
  #bundleAt(row: RuntimeRow, publicUrl: string, version: string): InstallBundle {
    const entry = this.#deps.catalog.get(version);
    if (!entry) throw errors.unknownVersion(version, 'version');
    const { version: _version, ...input } = this.#bundleInput(row, publicUrl);
    return this.#generated.get(
      bundleCacheKey('install-bundle', input, version),
      () => hybridInstallBundle({ ...input, version: entry, purpose: 'upgrade' }),
      installBundleBytes,
    );
  }

  /** What the upgrader of `row` may patch (its Role, as its bundle at `version` grants it). */
  #patchable(row: RuntimeRow, publicUrl: string, version: string) {
    return upgraderPatchable(this.#bundleAt(row, publicUrl, version));
  }

  #publicUrl(): string {
    const publicUrl = this.#deps.publicUrl;
    if (publicUrl === undefined) throw hybridNotConfigured();
    return publicUrl;
  }

  async #upgradeBundle(
    row: RuntimeRow,
    publicUrl: string,
    from: string,
    to: string,
    fields: { to: string; from?: string },
  ): Promise<RuntimeUpgradeBundle> {
    const target = this.#deps.catalog.get(to);
    if (!target) throw errors.unknownVersion(to, fields.to);
    const base = this.#deps.catalog.get(from);
    if (!base) throw errors.unknownVersion(from, fields.from ?? fields.to);
    const { version: _version, ...input } = this.#bundleInput(row, publicUrl);
    // Keyed by everything the bundle is a function of: the settings (with the control plane's URL
    // and public key) and the two catalog versions. A tenant may ask for many pairs at once: the
    // builds wait their turn in the build queue (bundle-cache.ts).
    return this.#generated.getQueued(
      bundleCacheKey('upgrade-bundle', input, from, to),
      row.tenant_id,
      () => upgradeBundle(input, base, target),
      upgradeBundleBytes,
    );
  }

  #bundleInput(row: RuntimeRow, publicUrl: string): Omit<InstallBundleInput, 'bootstrapToken'> {
    return {
      runtime: {
        tenantId: row.tenant_id,
        runtimeId: row.id,
        name: row.name,
        access: row.access!,
        ...(row.ingress_url ? { ingressUrl: row.ingress_url } : {}),
        argo: row.argo!,
        ...(row.argo_namespace ? { argoNamespace: row.argo_namespace } : {}),
        ...(row.namespace ? { namespace: row.namespace } : {}),
        upgrader: row.upgrades === 'agent',
      },
      version: this.#deps.catalog.get(row.version!)!,
      controlPlaneUrl: publicUrl,
      tunnelUrl: tunnelUrlOf(publicUrl),
      publicKey: this.#deps.publicKeyPem,
    };
  }

  async #tenant(tenantId: string): Promise<TenantRow> {
    const tenant = await getTenantRow(this.#deps.pool, tenantId);
    if (!tenant) throw errors.notFound('tenant', tenantId);
    return tenant;
  }

  #view(r: RuntimeRow, tenantRow: TenantRow, reader: Reader): Runtime {
    const common = {
      id: r.id,
      tenantId: r.tenant_id,
      organization: tenantRow.organization,
      name: r.name,
      createdBy: r.created_by,
      createdAt: r.created_at.toISOString(),
      removedAt: iso(r.removed_at),
    };
    if (r.mode === 'hosted') {
      const t = toTenant(tenantRow);
      const tunnel = tunnelView(this.#deps.tunnelStatus(t.id), tenantRow, this.#deps.replicaId);
      const reported = t.status.runtimeVersion;
      return {
        ...common,
        mode: 'hosted',
        state: t.status.phase,
        version: t.spec.runtimeVersion,
        reportedVersion: reported,
        versionSkew: reported === null ? null : reported !== t.spec.runtimeVersion,
        previousVersion: tenantRow.previous_runtime_version,
        versionChangedAt: null,
        conditions: conditionsWithRuntime(t, tunnel, reader === 'tenant'),
        tunnel,
        access: null,
        ingressUrl: null,
        argo: null,
        argoNamespace: null,
        namespace: RUNTIME_NAMESPACE,
        upgrades: null,
        upgrade: null,
        bootstrapExpiresAt: null,
        installedAt: null,
        keyIssued: r.key_live,
        lastHeartbeatAt: t.status.reporting?.lastHeartbeatAt ?? null,
      };
    }
    // This replica knows its own tunnels; another's comes from the row it wrote and renews (within the lease).
    const tunnel =
      r.state === 'removed'
        ? { connected: false, since: null }
        : tunnelView(
            this.#deps.runtimeTunnelStatus(r.id),
            { tunnel_replica: r.tunnel_replica, tunnel_since: r.tunnel_connected_at },
            this.#deps.replicaId,
          );
    return {
      ...common,
      mode: 'hybrid',
      state: r.state!,
      version: r.version,
      reportedVersion: r.reported_version,
      versionSkew: r.reported_version === null ? null : r.reported_version !== r.version,
      previousVersion: r.previous_version,
      versionChangedAt: iso(r.version_changed_at),
      conditions: hybridConditions(r, tunnel),
      tunnel,
      access: r.access,
      ingressUrl: r.ingress_url,
      argo: r.argo,
      argoNamespace: r.argo_namespace,
      namespace: r.namespace ?? RUNTIME_NAMESPACE,
      upgrades: r.upgrades,
      upgrade:
        r.upgrade_phase && r.upgrade_from && r.upgrade_to && r.upgrade_updated_at
          ? {
              from: r.upgrade_from,
              to: r.upgrade_to,
              phase: r.upgrade_phase,
              message: r.upgrade_message,
              updatedAt: r.upgrade_updated_at.toISOString(),
            }
          : null,
      bootstrapExpiresAt: iso(r.bootstrap_expires_at),
      installedAt: iso(r.bootstrap_redeemed_at),
      keyIssued: r.key_live,
      lastHeartbeatAt: iso(r.last_heartbeat_at),
    };
  }
}

/**
 * A hybrid runtime's conditions, from its row: `Installed`; for access=tunnel `TunnelConnected`;
 * once installed `Reporting` (its agents' event batches: fresh while the newest is younger than
 * STALE_AFTER_SECONDS by the database's clock, as the hosted runtime's) and `Ready` (installed,
 * reporting, and for access=tunnel its tunnel connected); once its event reporter stated them
 * `VersionSkew` (the version it runs against the catalog version the bundle was made for) and
 * `ArgoCDReachable` (it lists and watches Argo CD Applications).
 */
export function hybridConditions(
  r: RuntimeRow,
  tunnel: { connected: boolean; since: string | null },
  now = new Date(),
): Condition[] {
  const at = (d: Date | null) => (d ?? r.created_at).toISOString();
  const ns = r.namespace ?? RUNTIME_NAMESPACE;
  const installed: Condition =
    r.state === 'removed'
      ? {
          type: 'Installed',
          status: 'False',
          reason: 'Removed',
          message: 'the runtime was removed: its key is revoked; run the remove command in your cluster',
          lastTransitionTime: at(r.removed_at),
        }
      : r.bootstrap_redeemed_at
        ? {
            type: 'Installed',
            status: 'True',
            reason: 'BootstrapRedeemed',
            message: "the install's bootstrap Job exchanged its token for the runtime key",
            lastTransitionTime: at(r.bootstrap_redeemed_at),
          }
        : r.bootstrap_expires_at && r.bootstrap_expires_at <= now
          ? {
              type: 'Installed',
              status: 'False',
              reason: 'BootstrapExpired',
              message: `the bootstrap token expired at ${r.bootstrap_expires_at.toISOString()} before it was redeemed: remove the runtime and register it again`,
              lastTransitionTime: at(r.bootstrap_expires_at),
            }
          : {
              type: 'Installed',
              status: 'False',
              reason: 'AwaitingInstall',
              message: `apply the install bundle in your cluster before ${r.bootstrap_expires_at?.toISOString() ?? 'the token expires'}`,
              lastTransitionTime: at(r.created_at),
            };
  const out = [installed];
  const tunnelCondition: Condition | undefined =
    r.access === 'tunnel' && r.state !== 'removed'
      ? tunnel.connected
        ? {
            type: 'TunnelConnected',
            status: 'True',
            reason: 'Connected',
            message:
              "the runtime's tunnel client is connected: requests reach it through /v1/tenants/:id/runtimes/:name/proxy/*",
            lastTransitionTime: tunnel.since ?? at(r.created_at),
          }
        : r.tunnel_lost_at
          ? {
              type: 'TunnelConnected',
              status: 'False',
              reason: 'ReplicaLost',
              message: `the control plane replica holding the runtime's tunnel stopped renewing it at ${r.tunnel_lost_at.toISOString()} (it stopped or cannot reach the database); the tunnel client reconnects to another replica`,
              lastTransitionTime: at(r.tunnel_lost_at),
            }
          : {
              type: 'TunnelConnected',
              status: 'False',
              reason: 'Disconnected',
              message: r.bootstrap_redeemed_at
                ? `the runtime's tunnel client is not connected: check the tunnel-client Deployment in namespace ${ns}`
                : 'the runtime is not installed yet',
              lastTransitionTime: at(r.bootstrap_redeemed_at ?? r.created_at),
            }
      : undefined;
  if (tunnelCondition) out.push(tunnelCondition);
  if (r.state !== 'installed') return out;

  const heard = r.last_heartbeat_at;
  const age = r.heartbeat_age_seconds;
  const reporting: Condition =
    heard === null || age === null
      ? {
          type: 'Reporting',
          status: 'False',
          reason: 'NeverReported',
          message: `the runtime's event reporter has not reported yet: check the event-reporter Deployment in namespace ${ns}`,
          lastTransitionTime: at(r.bootstrap_redeemed_at),
        }
      : age < STALE_AFTER_SECONDS
        ? {
            type: 'Reporting',
            status: 'True',
            reason: 'Heartbeat',
            message: `the runtime's agents reported ${Math.round(age)} s ago`,
            lastTransitionTime: heard.toISOString(),
          }
        : {
            type: 'Reporting',
            status: 'False',
            reason: 'Stale',
            message: `no report from the runtime's agents for ${Math.round(age)} s (last at ${heard.toISOString()}, stale after ${STALE_AFTER_SECONDS} s); stored application state may be out of date`,
            lastTransitionTime: new Date(heard.getTime() + STALE_AFTER_SECONDS * 1000).toISOString(),
          };
  out.push(reporting);
  const notReady =
    reporting.status !== 'True' ? reporting : tunnelCondition?.status === 'False' ? tunnelCondition : undefined;
  out.push(
    notReady
      ? {
          type: 'Ready',
          status: 'False',
          reason: notReady.type === 'Reporting' ? 'NotReporting' : 'TunnelDisconnected',
          message: notReady.message,
          lastTransitionTime: notReady.lastTransitionTime,
        }
      : {
          type: 'Ready',
          status: 'True',
          reason: 'Ready',
          message:
            r.access === 'tunnel'
              ? `runtime ${r.reported_version ?? r.version} is reporting and its tunnel is connected`
              : `runtime ${r.reported_version ?? r.version} is reporting`,
          lastTransitionTime: [reporting.lastTransitionTime, tunnelCondition?.lastTransitionTime ?? ''].sort().at(-1)!,
        },
  );
  if (r.reported_version !== null)
    out.push(
      r.reported_version !== r.version
        ? {
            type: 'VersionSkew',
            status: 'True',
            reason: 'VersionDiffers',
            message: `the runtime's agents run ${r.reported_version}; its bundle was made for ${r.version}: apply the bundle the control plane answers for this runtime`,
            lastTransitionTime: at(r.last_heartbeat_at),
          }
        : {
            type: 'VersionSkew',
            status: 'False',
            reason: 'VersionMatches',
            message: `the runtime's agents run ${r.version}, the version its bundle was made for`,
            lastTransitionTime: at(r.last_heartbeat_at),
          },
    );
  if (r.argo_cd_listed !== null)
    out.push(
      r.argo_cd_listed
        ? {
            type: 'ArgoCDReachable',
            status: 'True',
            reason: 'ApplicationsListed',
            message: `the event reporter lists and watches Argo CD Applications${r.argo === 'existing' ? ` in namespace ${r.argo_namespace}` : ''}`,
            lastTransitionTime: at(r.last_heartbeat_at),
          }
        : {
            type: 'ArgoCDReachable',
            status: 'False',
            reason: 'ApplicationsNotListed',
            message:
              r.argo === 'existing'
                ? `the event reporter cannot list Argo CD Applications in namespace ${r.argo_namespace}: check that Argo CD's CRDs are installed and the bundle's Role and RoleBinding ${ns}-event-reporter exist there`
                : "the event reporter cannot list Argo CD Applications: check that the bundle's Argo CD chart is installed (the install command)",
            lastTransitionTime: at(r.last_heartbeat_at),
          },
    );
  const upgraded = upgraderCondition(r);
  if (upgraded) out.push(upgraded);
  return out;
}

/** upgrades=agent: `Upgraded`, how the last upgrade the in-cluster upgrader was asked to apply went. */
function upgraderCondition(r: RuntimeRow): Condition | undefined {
  if (!r.upgrade_phase || !r.upgrade_updated_at) return undefined;
  const ns = r.namespace ?? RUNTIME_NAMESPACE;
  const at = r.upgrade_updated_at.toISOString();
  const step = `${r.upgrade_from} to ${r.upgrade_to}`;
  const said = r.upgrade_message ? `: ${r.upgrade_message}` : '';
  switch (r.upgrade_phase) {
    case 'pending':
      return {
        type: 'Upgraded',
        status: 'False',
        reason: 'Pending',
        message: `the upgrade from ${step} waits for the in-cluster upgrader (Deployment runtime-upgrader in namespace ${ns}) to pick it up`,
        lastTransitionTime: at,
      };
    case 'applying':
      return {
        type: 'Upgraded',
        status: 'False',
        reason: 'Applying',
        message: `the in-cluster upgrader applies the upgrade from ${step}${said}`,
        lastTransitionTime: at,
      };
    case 'succeeded':
      return {
        type: 'Upgraded',
        status: 'True',
        reason: 'Succeeded',
        message: `the in-cluster upgrader applied the upgrade from ${step}${said}`,
        lastTransitionTime: at,
      };
    case 'rolled-back':
      return {
        type: 'Upgraded',
        status: 'False',
        reason: 'RolledBack',
        message: `the upgrade from ${step} failed and the in-cluster upgrader put ${r.upgrade_from} back${said}`,
        lastTransitionTime: at,
      };
    case 'failed':
      return {
        type: 'Upgraded',
        status: 'False',
        reason: 'Failed',
        message: `the upgrade from ${step} failed and so did its rollback: look at the Deployments in namespace ${ns}${said}`,
        lastTransitionTime: at,
      };
  }
}

/** The checks a schema cannot state: which optional fields go with which choices. */
function checkShape(input: RegisterRuntime): void {
  if (input.name === 'hosted')
    throw errors.validation("the name 'hosted' is reserved for the tenant's hosted runtime; choose another", 'name');
  if (input.access === 'ingress') {
    if (input.ingressUrl === undefined)
      throw errors.validation(
        'access: ingress needs ingressUrl, the https URL your ingress serves the runtime at',
        'ingressUrl',
      );
    const problem = ingressUrlShapeProblem(input.ingressUrl);
    if (problem) throw errors.validation(problem, 'ingressUrl');
  } else if (input.ingressUrl !== undefined) {
    throw errors.validation('ingressUrl goes only with access: ingress', 'ingressUrl');
  }
  if (input.argo === 'existing') {
    if (input.argoNamespace === undefined)
      throw errors.validation('argo: existing needs argoNamespace, the namespace of your Argo CD', 'argoNamespace');
    if (input.argoNamespace === RUNTIME_NAMESPACE || input.argoNamespace === hybridNamespace(input.name))
      throw errors.validation(
        `argoNamespace cannot be ${input.argoNamespace}, a namespace the install creates for runtimes`,
        'argoNamespace',
      );
  } else if (input.argoNamespace !== undefined) {
    throw errors.validation('argoNamespace goes only with argo: existing', 'argoNamespace');
  }
}

/** argo=new: the Argo charts an install URL serves, rendered, with their images lacking a digest; or why there are none. */
type RenderedCharts = { rendered: RenderedChart[]; unpinnedImages: string[] } | { unavailable: string };

/** What a cached install bundle holds, roughly: its manifests twice (text and objects) and its charts. */
const installBundleBytes = (b: InstallBundle): number =>
  2 * b.manifests.length + b.charts.reduce((n, c) => n + c.values.length, 0) + 1024;

/** What a cached upgrade bundle holds, roughly: its manifests, charts and diff. */
const upgradeBundleBytes = (b: RuntimeUpgradeBundle): number =>
  b.install.manifests.length + b.install.charts.reduce((n, c) => n + c.values.length, 0) + b.diff.length + 1024;

const hybridNotConfigured = () =>
  new AppError(
    'HYBRID_RUNTIMES_NOT_CONFIGURED',
    "hybrid runtimes cannot be registered or upgraded here: PROVISIONER_PUBLIC_URL, the URL customers' clusters reach the control plane at, is not set; ask the operator to set it",
    { details: { setting: 'PROVISIONER_PUBLIC_URL' } },
  );

/** Bundles and upgrades are a hybrid runtime's: the hosted one is upgraded by the control plane. */
function hybridOnly(row: RuntimeRow, tenantId: string): void {
  if (row.mode === 'hosted')
    throw new AppError(
      'HOSTED_RUNTIME_NO_BUNDLE',
      `the hosted runtime is installed and upgraded by the control plane: upgrade it with POST /v1/tenants/${tenantId}/upgrade`,
      { field: 'name' },
    );
}

const runtimeExists = (name: string) =>
  new AppError(
    'RUNTIME_EXISTS',
    `the tenant already has a runtime named '${name}'; choose another name or remove it first`,
    {
      field: 'name',
    },
  );

const installNotFound = () =>
  new AppError(
    'INSTALL_NOT_FOUND',
    'no runtime install at this URL: the token in it is not one this control plane issued, or its runtime was removed; register the runtime for a new URL',
  );

const bootstrapInvalid = () =>
  new AppError(
    'BOOTSTRAP_TOKEN_INVALID',
    'the bootstrap token is not valid (unknown, expired, already used, or its runtime was removed): register the runtime again for a new one',
  );
