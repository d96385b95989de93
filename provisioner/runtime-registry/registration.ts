/**
 * A hybrid runtime's registration and removal. Registration writes the row (awaiting install), its
 * single-use bootstrap token (bootstrap.ts) and answers the install bundle made for it; removal
 * revokes the runtime key (which closes whatever it holds open) and answers the command that
 * deletes what the install created. Each is written with its audit row in one transaction; the
 * bootstrap token and the runtime key are never written to a log or an audit row.
 */
import { withTx, pgConstraint } from '../db/tx.ts';
import { AppError, errors } from '../errors.ts';
import { writeAudit, type Requester } from '../store/audit.ts';
import { revokeKey } from '../store/keys.ts';
import { claimKey, requestHash, storeResponse } from '../store/idempotency.ts';
import {
  countHybridRuntimes,
  getRuntimeByName,
  insertHybridRuntime,
  markRuntimeRemoved,
  type HybridAccess,
  type HybridArgo,
  type HybridUpgrades,
  type RuntimeRow,
} from '../store/runtimes.ts';
import { getTenantRow } from '../store/tenants.ts';
import { deleteRuntimeObjects, lockTenantObjects } from '../store/runtime-objects.ts';
import { availabilityOf } from '../store/versions.ts';
import type { RuntimeRegistered, RuntimeRemoved } from '../api/types.ts';
import { HybridBundleError, hybridNamespace, type InstallBundle } from '../../runtime/hybrid/bundle.ts';
import { installPath, installUrlCommand } from '../../runtime/hybrid/install.ts';
import { RUNTIME_NAMESPACE } from '../../runtime/component/agents.ts';
import { ingressRegistrationProblem, ingressUrlShapeProblem, normalIngressUrl } from '../tunnel/ingress-address.ts';
import { newRuntimeBootstrapToken } from './bootstrap.ts';
import { bundleInput, renderedCharts, type RenderedCharts } from './bundles.ts';
import { iso, requirePublicUrl, type Reader, type Runtimes } from './context.ts';
import { runtimeView } from './views.ts';

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

/**
 * Registers a hybrid runtime: the row (awaiting install), its single-use bootstrap token (stored
 * as its SHA-256) and the install bundle made for it. With an Idempotency-Key the same key and
 * body answer the first answer again (status and body).
 */
export async function registerRuntime(
  rt: Runtimes,
  tenantId: string,
  input: RegisterRuntime,
  idempotencyKey: string | undefined,
  by: Requester,
  reader: Reader,
): Promise<{ status: number; body: RuntimeRegistered }> {
  rt.rates.registration(tenantId);
  const publicUrl = requirePublicUrl(rt);
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
    const problem = await ingressRegistrationProblem(ingressUrl, rt.deps.ingressPolicy, rt.deps.lookup);
    if (problem) throw errors.validation(problem, 'ingressUrl');
  }
  // argo=new: the charts its install URL serves, rendered before the transaction (the first time
  // for a version takes a second or two) at the version the runtime is to get.
  const expected = rt.deps.catalog.get(
    input.version ?? (await getTenantRow(rt.deps.pool, tenantId))?.runtime_version ?? '',
  );
  const prepared = input.argo === 'new' && expected ? await renderedCharts(rt, expected) : undefined;
  return withTx(rt.deps.pool, async (tx) => {
    const scope = `runtime-register:${tenantId}`;
    if (idempotencyKey !== undefined) {
      const claim = await claimKey(tx, rt.deps.box, scope, idempotencyKey, requestHash(input));
      if (claim.kind === 'replay') return { status: claim.status, body: claim.body as RuntimeRegistered };
      if (claim.kind === 'mismatch') throw errors.idempotencyMismatch();
      if (claim.kind === 'in-progress') throw errors.idempotencyInProgress();
    }
    // Under the tenant's row lock: two registrations at once cannot both take the last place.
    const tenant = await getTenantRow(tx, tenantId, true);
    if (!tenant) throw errors.notFound('tenant', tenantId);
    if (tenant.deleted) throw errors.tenantDeleted(tenantId);
    const versionName = input.version ?? tenant.runtime_version;
    const version = rt.deps.catalog.get(versionName);
    if (!version) throw errors.unknownVersion(versionName, 'version');
    if (input.version !== undefined) {
      // An explicit version must be installable as a tenant's would be; the default is what the
      // tenant's hosted runtime already runs.
      const availability = await availabilityOf(tx, versionName);
      if (availability === 'withdrawn' || (availability === 'deprecated' && by.actor.role === 'tenant'))
        throw errors.versionUnavailable(versionName, availability, 'version');
    }
    if ((await countHybridRuntimes(tx, tenantId)) >= rt.deps.perTenant)
      throw errors.tenantLimitReached(
        'hybrid runtimes (installed or awaiting install)',
        rt.deps.perTenant,
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
        ttlSeconds: rt.deps.bootstrapTtlSeconds,
        createdBy: by.actor.id,
      });
    } catch (err) {
      if (pgConstraint(err) === 'runtimes_tenant_name') throw runtimeExists(input.name);
      throw err;
    }
    let bundle: InstallBundle;
    try {
      bundle = rt.bundle({ ...bundleInput(rt, row, publicUrl), bootstrapToken: token });
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
    const runtime = runtimeView(rt, row, tenant, reader);
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
    if (idempotencyKey !== undefined) await storeResponse(tx, rt.deps.box, scope, idempotencyKey, 201, body);
    return { status: 201, body };
  });
}

/**
 * Removes a hybrid runtime: its key revoked (every replica drops it and closes what it holds
 * open), the state `removed`, and the command that deletes what the install created.
 */
export async function removeRuntime(
  rt: Runtimes,
  tenantId: string,
  name: string,
  by: Requester,
  reader: Reader,
): Promise<RuntimeRemoved> {
  const out = await withTx(rt.deps.pool, async (tx) => {
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
    const runtime = runtimeView(rt, removed, tenant, reader);
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
    const removeCommand = rt.bundle({
      ...bundleInput(rt, row, rt.deps.publicUrl ?? 'https://control-plane.invalid'),
      purpose: 'upgrade',
    }).removeCommand;
    return { runtime, removeCommand, keyId: row.runtime_key_id };
  });
  if (out.keyId) rt.deps.onKeyRevoked(out.keyId);
  return { runtime: out.runtime, removeCommand: out.removeCommand };
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

const runtimeExists = (name: string) =>
  new AppError(
    'RUNTIME_EXISTS',
    `the tenant already has a runtime named '${name}'; choose another name or remove it first`,
    {
      field: 'name',
    },
  );
