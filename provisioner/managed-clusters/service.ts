/**
 * Managed clusters on the API side: the clusters a tenant's Argo CD deploys to. A registration is
 * checked before anything is written (the kubeconfig policy, no second registration of the name
 * or the server, isolation from the service's own clusters, then the cluster itself within
 * 10 s: reachable, a Kubernetes API server, credentials accepted, Argo CD's permissions), then
 * written in one transaction with the tenant's generation bump (the tenant's program writes the
 * Argo CD cluster Secret into the vcluster), its queued operation and its audit row. Credentials
 * are sealed with the secret box and never returned or logged.
 */
import { sealedClusterKubeconfigs } from '../store/clusters.ts';
import { otherVclusterEndpoints } from '../store/tenants.ts';
import { isIP } from 'node:net';
import { lookup } from 'node:dns/promises';
import type pg from 'pg';
import type { SecretBox } from '../crypto.ts';
import { pgCode, pgConstraint, withTx, type Queryable } from '../db/tx.ts';
import { DEFAULT_TENANT_BUDGETS } from '../config.ts';
import { AppError, errors } from '../errors.ts';
import { hostOf } from '../../kubeconfig-policy/address.ts';
import { admitKubeconfig } from '../clusters/admit-kubeconfig.ts';
import { checkKubeconfig, KubeconfigPolicyError, type KubeconfigPolicy } from '../../kubeconfig-policy/policy.ts';
import { writeAudit, type Requester } from '../store/audit.ts';
import {
  countManagedClusters,
  claimBootstrap,
  credentialsAad,
  deleteManagedCluster,
  insertBootstrap,
  releaseBootstrap,
  findConflict,
  getManagedCluster,
  insertManagedCluster,
  listManagedClusters,
  revocableOf,
  sealedManagedClusters,
  type ManagedCluster,
  type ManagedClusterReach,
  type CreatedObjects,
} from '../store/managed-clusters.ts';
import { changeSpec, condition, getTenantRow, type TenantRow } from '../store/tenants.ts';
import type { ManagedClusterConfig } from '../../runtime/component/cluster-secret.ts';
import {
  connectionFor,
  connectionOf,
  credentialsOf,
  kubeconfigOf,
  serverKey,
  serverUrl,
  type StoredCredentials,
} from './kube-api.ts';
import { checkError, validateCluster } from './validate.ts';
import { checkThroughRuntime, RuntimeCheckError } from './via-runtime.ts';
import type { TunnelServer } from '../tunnel/server.ts';
import {
  BOOTSTRAP_NAMESPACE,
  bootstrapAccount,
  BOOTSTRAP_TTL_SECONDS,
  connectCommand,
  hashBootstrapToken,
  jobManifest,
  newBootstrapToken,
  revokeCreated,
  type Revocation,
} from './bootstrap.ts';
import {
  bindingSecretName,
  bootstrapNote,
  deleteBindingCommand,
  requestBoundToken,
  requestToken,
  serviceAccountOf,
  withToken,
  type BoundIssue,
  type TokenSettings,
} from './tokens.ts';
import { ClusterNetworkError, kubeRequest } from './kube-api.ts';

/** How long a registration may spend on the cluster and on name lookups before it is refused. */
export const VALIDATION_TIMEOUT_MS = 10_000;

export interface ManagedClusterServiceDeps {
  pool: pg.Pool;
  box: SecretBox;
  /** What a tenant's managed-cluster credentials may hold (config.managedClusters.kubeconfig). */
  policy: KubeconfigPolicy;
  /** The operators' policy, to read the root clusters' servers (config.kubeconfig). */
  rootPolicy: KubeconfigPolicy;
  /** When the first health probe of a new registration is due. */
  probeIntervalMs: number;
  /** Short-lived credentials: the lifetime of a requested token and the time between renewals. */
  tokens: TokenSettings;
  /** The image of the bootstrap Job (config.managedClusters.bootstrapImage). */
  bootstrapImage?: string | undefined;
  /** The runtimes' tunnels: checks of a cluster only the runtime reaches (`reach: runtime`) go through them. */
  tunnel?: Pick<TunnelServer, 'forward'> | undefined;
  /** Managed clusters (and pending bootstraps) per tenant (config.budgets.managedClusters; default 50). */
  perTenant?: number;
}

/** A request for a bootstrap token. */
export interface BootstrapRequest {
  name: string;
  namespaces?: string[] | undefined;
  clusterWide?: boolean | undefined;
  /** The URL the control plane reaches the cluster's API server at (for the Job manifest). */
  server?: string | undefined;
}

export interface IssuedBootstrap {
  name: string;
  token: string;
  expiresAt: string;
  namespaces: string[];
  clusterWide: boolean;
  /** The manifest to apply on the cluster (YAML): the ServiceAccount, its RBAC and the Job redeeming the token. */
  job: string;
  /** The same from the tenant's machine. */
  command: string;
}

/** What the bootstrap's ServiceAccount sends to redeem a bootstrap token. */
export interface Redemption {
  server: string;
  token: string;
  caData?: string | undefined;
}

export interface Removed {
  operationId: string;
  /**
   * The revocation of the tokens the control plane requested: the bootstrap's ServiceAccount
   * deleted, or the Secret they are bound to (absent when the credentials were kept as given).
   */
  revocation?: Revocation;
}

/** A registration request: a kubeconfig, or a server with a bearer token and its CA. */
export interface ManagedClusterRegistration {
  name: string;
  namespaces?: string[] | undefined;
  kubeconfig?: string | undefined;
  server?: string | undefined;
  token?: string | undefined;
  /** The server's CA: PEM, or base64 of PEM as in a kubeconfig's certificate-authority-data. */
  caData?: string | undefined;
  /** Where the cluster is reached from (default controlPlane); `runtime`: only through the tenant's runtime. */
  reach?: ManagedClusterReach | undefined;
}

export interface Registered {
  managedCluster: ManagedCluster;
  operationId: string;
}

/** A registration as the tenant's program gets it (credentials in plaintext: never log them). */
export interface ProgramManagedCluster {
  name: string;
  server: string;
  namespaces?: string[];
  config: ManagedClusterConfig;
}

export class ManagedClusterService {
  readonly #deps: ManagedClusterServiceDeps;

  constructor(deps: ManagedClusterServiceDeps) {
    this.#deps = deps;
  }

  /** Refuses (409 TENANT_LIMIT_REACHED) when the tenant has as many managed clusters as its budget allows. */
  async #withinBudget(db: Queryable, tenantId: string): Promise<void> {
    const limit = this.#deps.perTenant ?? DEFAULT_TENANT_BUDGETS.managedClusters;
    if ((await countManagedClusters(db, tenantId)) >= limit)
      throw errors.tenantLimitReached(
        'managed clusters (registered, or bootstrap tokens not yet redeemed)',
        limit,
        'PROVISIONER_MANAGED_CLUSTERS_PER_TENANT',
      );
  }

  async list(tenantId: string): Promise<ManagedCluster[]> {
    await this.#tenant(tenantId);
    return listManagedClusters(this.#deps.pool, tenantId);
  }

  async get(tenantId: string, name: string): Promise<ManagedCluster> {
    await this.#tenant(tenantId);
    const found = await getManagedCluster(this.#deps.pool, tenantId, name);
    if (!found) throw errors.notFound('managed cluster', name);
    return found;
  }

  async register(
    tenantId: string,
    input: ManagedClusterRegistration,
    by: Requester,
    createdObjects?: CreatedObjects,
  ): Promise<Registered> {
    const signal = AbortSignal.timeout(VALIDATION_TIMEOUT_MS);
    const tenant = await this.#tenant(tenantId);
    if (tenant.deleted) throw errors.tenantDeleted(tenantId);
    // Before any connection is made; again under the tenant's row lock below.
    await this.#withinBudget(this.#deps.pool, tenantId);
    const namespaces = [...new Set(input.namespaces ?? [])].sort();
    const { text, field, authMethod } = registrationKubeconfig(input);
    const reach = input.reach ?? 'controlPlane';
    let credentials = this.#credentials(
      text,
      field,
      reach === 'runtime' ? { ...this.#deps.policy, allowedCidrs: ANY_INTERNAL_ADDRESS } : this.#deps.policy,
    );
    // The control plane's address policy applies to the clusters it connects to; a cluster the
    // runtime reaches is connected to from the runtime's network (docs/decisions.md).
    const conn =
      reach === 'controlPlane' ? connectionOf((await admitKubeconfig(text, this.#deps.policy, field)).text) : undefined;
    const key = serverKey(credentials.server);

    const conflict = await findConflict(this.#deps.pool, tenantId, input.name, key);
    if (conflict?.sameName) throw managedClusterExists(input.name);
    if (conflict) throw serverTaken(credentials.server, conflict.name);
    if (conn) await this.#checkIsolation(tenantId, credentials.server, conn.url, signal);
    else {
      // By URL, and by every address the name resolves to here (the runtime may resolve it otherwise).
      const url = new URL(credentials.server);
      await this.#checkIsolation(tenantId, credentials.server, url, signal);
      for (const address of await addressesOf(hostOf(url), signal))
        if (address !== hostOf(url))
          await this.#checkIsolation(tenantId, credentials.server, withHost(url, address), signal);
    }

    const version = conn
      ? await validateCluster(conn, credentials.server, namespaces, signal)
      : await this.#validateThroughRuntime(tenantId, credentials, namespaces, signal);
    // Short-lived tokens are requested and renewed from the control plane: not for a runtime-reached cluster.
    const sa = conn && this.#deps.tokens.refreshMs > 0 ? serviceAccountOf(credentials.config.bearerToken) : undefined;
    let token: BoundIssue = { issued: undefined };
    if (sa && conn) {
      try {
        // A bootstrap's tokens are revoked by deleting its ServiceAccount; the others are bound to
        // a Secret created with the credentials given, which removal deletes.
        token = createdObjects
          ? {
              issued: await requestToken(conn, sa, this.#deps.tokens.lifetimeSeconds, signal),
              unbound: bootstrapNote(`${sa.namespace}/${sa.name}`),
            }
          : await requestBoundToken(
              conn,
              sa,
              bindingSecretName(tenantId, input.name),
              this.#deps.tokens.lifetimeSeconds,
              signal,
            );
      } catch {
        token = { issued: undefined }; // no short-lived token from this cluster: the credentials as given are kept
      }
      if (token.issued) credentials = withToken(credentials, token.issued.token);
    }
    const issued = token.issued;
    const serviceAccount = sa && issued ? `${sa.namespace}/${sa.name}` : undefined;
    const reachable = condition(
      'Reachable',
      'True',
      'Validated',
      `Kubernetes ${version} answered${reach === 'runtime' ? ' the runtime' : ''} and granted Argo CD's permissions at registration`,
    );
    return withTx(this.#deps.pool, async (tx) => {
      const row = await getTenantRow(tx, tenantId, true);
      if (!row) throw errors.notFound('tenant', tenantId);
      if (row.deleted) throw errors.tenantDeleted(tenantId);
      await this.#withinBudget(tx, tenantId);
      let managedCluster: ManagedCluster;
      try {
        managedCluster = await insertManagedCluster(tx, {
          tenantId,
          name: input.name,
          server: credentials.server,
          serverKey: key,
          namespaces,
          authMethod,
          reach,
          credentialsEnc: this.#deps.box.encrypt(JSON.stringify(credentials), credentialsAad(tenantId, input.name)),
          serverVersion: version,
          conditions: [reachable],
          probeInMs: this.#deps.probeIntervalMs,
          createdObjects,
          token:
            serviceAccount && issued
              ? {
                  serviceAccount,
                  expiresAt: issued.expiresAt,
                  refreshInMs: this.#deps.tokens.refreshMs,
                  binding: token.binding,
                  unbound: token.unbound,
                }
              : undefined,
        });
      } catch (err) {
        if (pgCode(err) === '23505' && pgConstraint(err) === 'managed_clusters_name')
          throw managedClusterExists(input.name);
        if (pgCode(err) === '23505' && pgConstraint(err) === 'managed_clusters_server')
          throw serverTaken(credentials.server, 'another registration');
        throw err;
      }
      const op = await changeSpec(tx, row, {}, 'update', `managed cluster '${input.name}' registered`);
      await writeAudit(tx, by.actor, {
        action: 'managed-cluster.register',
        targetType: 'tenant',
        targetId: tenantId,
        after: {
          name: input.name,
          server: credentials.server,
          namespaces,
          authMethod,
          reach,
          serverVersion: version,
          ...(serviceAccount ? { tokenServiceAccount: serviceAccount, tokenBinding: token.binding ?? null } : {}),
          ...(createdObjects ? { bootstrap: createdObjects } : {}),
        },
        requestId: by.requestId,
      });
      return { managedCluster, operationId: op.id };
    });
  }

  /**
   * Removes a registration: the tenant's program deletes its cluster Secret from the vcluster. The
   * tokens the control plane requested are revoked first, with the credentials it holds: when a
   * bootstrap created the ServiceAccount, that account is deleted (and with `removeRbac` the Roles
   * it got); otherwise the Secret the tokens are bound to is deleted. Either way every token issued
   * is refused from then on. A cluster that cannot be reached does not stop the removal: the answer
   * says what was not revoked and how to do it. Undefined when there was no registration.
   */
  async remove(
    tenantId: string,
    name: string,
    by: Requester,
    opts: { removeRbac?: boolean } = {},
  ): Promise<Removed | undefined> {
    const found = await revocableOf(this.#deps.pool, tenantId, name);
    let revocation: Revocation | undefined;
    const connection = async () => {
      const stored = JSON.parse(
        this.#deps.box.decrypt(found!.credentialsEnc, credentialsAad(tenantId, name)).toString('utf8'),
      ) as StoredCredentials;
      return connectionFor(stored, this.#deps.policy);
    };
    if (found?.createdObjects) {
      const created = found.createdObjects;
      try {
        revocation = await revokeCreated(
          await connection(),
          created,
          opts.removeRbac === true,
          AbortSignal.timeout(VALIDATION_TIMEOUT_MS),
        );
      } catch (err) {
        revocation = {
          serviceAccount: created.serviceAccount,
          revoked: false,
          removed: [],
          error: err instanceof Error ? err.message : String(err),
        };
      }
    } else if (found?.tokenServiceAccount && found.tokenBinding) {
      const [namespace = '', secret = ''] = found.tokenBinding.split('/');
      const out: Revocation = {
        serviceAccount: found.tokenServiceAccount,
        binding: found.tokenBinding,
        revoked: false,
        removed: [],
      };
      try {
        const answer = await kubeRequest(
          await connection(),
          'DELETE',
          `/api/v1/namespaces/${encodeURIComponent(namespace)}/secrets/${encodeURIComponent(secret)}`,
          { signal: AbortSignal.timeout(VALIDATION_TIMEOUT_MS) },
        );
        if (answer.status === 200 || answer.status === 202 || answer.status === 404) out.revoked = true;
        else out.error = `deleting the Secret ${found.tokenBinding} was answered with HTTP ${answer.status}`;
      } catch (err) {
        out.error =
          err instanceof ClusterNetworkError
            ? `the cluster could not be reached: ${err.message}`
            : err instanceof Error
              ? err.message
              : String(err);
      }
      revocation = out.revoked ? out : { ...out, command: deleteBindingCommand(namespace, secret) };
    } else if (found?.tokenServiceAccount) {
      const until = found.tokenExpiresAt?.toISOString();
      revocation = {
        serviceAccount: found.tokenServiceAccount,
        revoked: false,
        removed: [],
        ...(until ? { validUntil: until } : {}),
        error: `the tokens were not bound to a Secret, so removal cannot revoke them: the last one issued stays valid until it expires${until ? ` at ${until}` : ''}`,
      };
    }
    return withTx(this.#deps.pool, async (tx) => {
      const row = await getTenantRow(tx, tenantId, true);
      if (!row) throw errors.notFound('tenant', tenantId);
      const removed = await deleteManagedCluster(tx, tenantId, name);
      if (!removed) return undefined;
      if (row.deleted) throw errors.tenantDeleted(tenantId);
      const op = await changeSpec(tx, row, {}, 'update', `managed cluster '${name}' removed`);
      await writeAudit(tx, by.actor, {
        action: 'managed-cluster.remove',
        targetType: 'tenant',
        targetId: tenantId,
        before: { name, server: removed.server, namespaces: removed.namespaces },
        ...(revocation ? { after: { revocation } } : {}),
        requestId: by.requestId,
      });
      return { operationId: op.id, ...(revocation ? { revocation } : {}) };
    });
  }

  /**
   * A single-use bootstrap token (valid for an hour at most, stored hashed) and what redeems it: a
   * Job manifest for the tenant's cluster and the equivalent `connect` command. Nothing is
   * registered until it is redeemed.
   */
  async issueBootstrap(
    tenantId: string,
    input: BootstrapRequest,
    by: Requester,
    redeemUrl: string,
  ): Promise<IssuedBootstrap> {
    const tenant = await this.#tenant(tenantId);
    if (tenant.deleted) throw errors.tenantDeleted(tenantId);
    const namespaces = [...new Set(input.namespaces ?? [])].sort();
    const clusterWide = input.clusterWide === true;
    if (clusterWide && namespaces.length > 0)
      throw errors.validation('give either namespaces or clusterWide: true, not both', 'bootstrap.namespaces');
    if (!clusterWide && namespaces.length === 0)
      throw errors.validation(
        'list the namespaces Argo CD may manage (bootstrap.namespaces), or ask for clusterWide: true explicitly',
        'bootstrap.namespaces',
      );
    let server = 'https://REPLACE-WITH-THE-API-SERVER-URL:6443';
    if (input.server !== undefined) {
      try {
        server = serverUrl(new URL(input.server));
      } catch {
        throw errors.validation(`server '${input.server}' is not a URL`, 'bootstrap.server');
      }
    }
    if (await getManagedCluster(this.#deps.pool, tenantId, input.name)) throw managedClusterExists(input.name);
    const { token, hash } = newBootstrapToken();
    return withTx(this.#deps.pool, async (tx) => {
      // Under the tenant's row lock, as a registration: two at once cannot both take the last place.
      await getTenantRow(tx, tenantId, true);
      await this.#withinBudget(tx, tenantId);
      const b = await insertBootstrap(tx, {
        tenantId,
        name: input.name,
        namespaces,
        clusterWide,
        tokenHash: hash,
        ttlSeconds: BOOTSTRAP_TTL_SECONDS,
        createdBy: by.actor.id,
      });
      await writeAudit(tx, by.actor, {
        action: 'managed-cluster.bootstrap',
        targetType: 'tenant',
        targetId: tenantId,
        after: { name: input.name, namespaces, clusterWide, expiresAt: b.expiresAt },
        requestId: by.requestId,
      });
      return {
        name: input.name,
        token,
        expiresAt: b.expiresAt,
        namespaces,
        clusterWide,
        job: jobManifest({
          registration: { tenantId, name: input.name },
          namespaces,
          clusterWide,
          bootstrapToken: token,
          redeemUrl,
          server,
          image: this.#deps.bootstrapImage ?? DEFAULT_BOOTSTRAP_IMAGE,
        }),
        command: connectCommand(tenantId, input.name, namespaces, clusterWide),
      };
    });
  }

  /**
   * Redeems a bootstrap token: registers the cluster with the bootstrap's ServiceAccount token, with
   * every check of a registration. The token is claimed first (once); a registration the checks
   * refuse gives it back, so a corrected retry can use it until it expires.
   */
  async redeem(
    bootstrapToken: string,
    input: Redemption,
    requestId: string,
  ): Promise<Registered & { tenantId: string }> {
    const claimed = await claimBootstrap(this.#deps.pool, hashBootstrapToken(bootstrapToken));
    if ('refused' in claimed) throw bootstrapRefused(claimed.refused, claimed.at);
    const by: Requester = { actor: { id: `bootstrap:${claimed.id}`, role: 'bootstrap' }, requestId };
    try {
      const sa = serviceAccountOf(input.token);
      // Each registration's bootstrap has its own account (bootstrapAccount): only its token redeems.
      const account = bootstrapAccount({ tenantId: claimed.tenantId, name: claimed.name });
      if (sa?.namespace !== BOOTSTRAP_NAMESPACE || sa.name !== account)
        throw errors.validation(
          `the token must be the bootstrap's ServiceAccount's (${BOOTSTRAP_NAMESPACE}/${account}), from TokenRequest or its pod`,
          'token',
        );
      const registered = await this.register(
        claimed.tenantId,
        {
          name: claimed.name,
          namespaces: claimed.namespaces,
          server: input.server,
          token: input.token,
          caData: input.caData,
        },
        by,
        {
          serviceAccount: `${sa.namespace}/${sa.name}`,
          namespaces: claimed.namespaces,
          clusterWide: claimed.clusterWide,
        },
      );
      return { ...registered, tenantId: claimed.tenantId };
    } catch (err) {
      await releaseBootstrap(this.#deps.pool, claimed.id).catch(() => undefined);
      throw err;
    }
  }

  /** A tenant's registrations with their credentials, for the tenant's program (reconciler). */
  async forProgram(db: pg.Pool | pg.PoolClient, tenantId: string): Promise<ProgramManagedCluster[]> {
    const sealed = await sealedManagedClusters(db, tenantId);
    return sealed.map((s) => {
      const stored = JSON.parse(
        this.#deps.box.decrypt(s.credentialsEnc, credentialsAad(tenantId, s.name)).toString('utf8'),
      ) as StoredCredentials;
      return {
        name: s.name,
        server: s.server,
        ...(s.namespaces.length ? { namespaces: s.namespaces } : {}),
        config: stored.config,
      };
    });
  }

  /**
   * The registration's checks made by the tenant's runtime (via-runtime.ts): the same refusals as
   * the control plane's own, and 503 RUNTIME_UNREACHABLE when the runtime cannot make them.
   */
  async #validateThroughRuntime(
    tenantId: string,
    credentials: StoredCredentials,
    namespaces: readonly string[],
    signal: AbortSignal,
  ): Promise<string> {
    const refuse = (message: string, cause?: unknown) =>
      new AppError(
        'RUNTIME_UNREACHABLE',
        `${message}: a cluster registered with reach 'runtime' is checked by the tenant's runtime; retry once it is connected`,
        { field: 'reach', ...(cause === undefined ? {} : { cause }) },
      );
    if (!this.#deps.tunnel) throw refuse("the runtime's tunnel is not connected");
    let checked;
    try {
      checked = await checkThroughRuntime(
        this.#deps.tunnel,
        tenantId,
        { server: credentials.server, config: credentials.config, namespaces },
        signal,
      );
    } catch (err) {
      if (err instanceof RuntimeCheckError) throw refuse(err.message, err);
      throw err;
    }
    if (!checked.ok) throw checkError(credentials.server, checked);
    return checked.version;
  }

  async #tenant(tenantId: string): Promise<TenantRow> {
    const row = await getTenantRow(this.#deps.pool, tenantId);
    if (!row) throw errors.notFound('tenant', tenantId);
    return row;
  }

  /** The credentials Argo CD will get, from the kubeconfig as the policy checked it; 400 when refused. */
  #credentials(text: string, field: string, policy: KubeconfigPolicy): StoredCredentials {
    let checked;
    try {
      checked = checkKubeconfig(text, policy);
    } catch (err) {
      if (err instanceof KubeconfigPolicyError)
        throw errors.validation(`${field} ${err.message}`, field, err.path ? { path: err.path } : undefined);
      throw err;
    }
    const credentials = credentialsOf(checked.text);
    if ('problem' in credentials)
      throw errors.validation(`${field} ${credentials.path}: ${credentials.problem}`, field, {
        path: credentials.path,
      });
    return credentials;
  }

  /**
   * Refuses a server that is one of the service's root clusters or another tenant's vcluster: by
   * its URL, and by the address it resolves to (a root cluster's name is looked up too).
   */
  async #checkIsolation(tenantId: string, server: string, connected: URL, signal: AbortSignal): Promise<void> {
    const key = serverKey(server);
    const port = portOf(connected);
    const address = hostOf(connected);
    const refuse = (what: string) =>
      new AppError(
        'MANAGED_CLUSTER_ISOLATION',
        `${server} is ${what}: a tenant's Argo CD may only deploy to the tenant's own clusters`,
        { field: 'server' },
      );
    const roots = await sealedClusterKubeconfigs(this.#deps.pool);
    for (const root of roots) {
      let rootServer: URL;
      try {
        const text = this.#deps.box.decrypt(root.kubeconfig_enc, `cluster/${root.name}`).toString('utf8');
        rootServer = checkKubeconfig(text, this.#deps.rootPolicy).server;
      } catch {
        continue; // a root kubeconfig that no longer passes is not used by anything either
      }
      if (serverKey(rootServer) === key) throw refuse("one of the service's root clusters");
      if (portOf(rootServer) === port && (await addressesOf(hostOf(rootServer), signal)).includes(address))
        throw refuse("one of the service's root clusters");
    }
    for (const endpoint of await otherVclusterEndpoints(this.#deps.pool, tenantId)) {
      let url: URL;
      try {
        url = new URL(endpoint);
      } catch {
        continue;
      }
      // By URL, and by address when the vcluster's endpoint is an address (its in-cluster
      // service names do not resolve outside the root cluster).
      if (serverKey(url) === key || (isIP(hostOf(url)) !== 0 && hostOf(url) === address && portOf(url) === port))
        throw refuse("another tenant's virtual cluster");
    }
  }
}

/**
 * The address ranges a runtime-reached cluster's server may be written as: every loopback and
 * private range (the runtime's network decides), never link-local, unspecified or multicast
 * addresses (address.ts), which no API server of a tenant is at.
 */
const ANY_INTERNAL_ADDRESS = Object.freeze(['0.0.0.0/0', '::/0']);

function withHost(url: URL, address: string): URL {
  const copy = new URL(url.href);
  copy.hostname = address.includes(':') ? `[${address}]` : address;
  return copy;
}

const portOf = (url: URL): string => url.port || (url.protocol === 'https:' ? '443' : '80');

async function addressesOf(host: string, signal: AbortSignal): Promise<string[]> {
  if (isIP(host) !== 0) return [host];
  if (signal.aborted) return [];
  try {
    const found = await lookup(host, { all: true, verbatim: true });
    return found.map((a) => a.address);
  } catch {
    return [];
  }
}

/** The Job's image unless configured (PROVISIONER_MANAGED_CLUSTER_BOOTSTRAP_IMAGE): the tunnel client's, which has Node. */
export const DEFAULT_BOOTSTRAP_IMAGE = 'hosted-runtimes/tunnel-client:latest';

function bootstrapRefused(why: 'unknown' | 'redeemed' | 'expired', at?: string): AppError {
  if (why === 'unknown')
    return new AppError('BOOTSTRAP_TOKEN_INVALID', 'the bootstrap token is not one this service issued', {
      field: 'authorization',
    });
  if (why === 'redeemed')
    return new AppError(
      'BOOTSTRAP_TOKEN_USED',
      `the bootstrap token was already redeemed${at ? ` at ${at}` : ''}: a bootstrap token is single-use; ask for a new one`,
      { field: 'authorization' },
    );
  return new AppError(
    'BOOTSTRAP_TOKEN_EXPIRED',
    `the bootstrap token expired at ${at ?? 'its expiry'}: ask for a new one (valid for an hour)`,
    { field: 'authorization' },
  );
}

function managedClusterExists(name: string): AppError {
  return new AppError('MANAGED_CLUSTER_EXISTS', `the tenant already has a managed cluster named '${name}'`, {
    field: 'name',
  });
}

function serverTaken(server: string, by: string): AppError {
  return new AppError(
    'MANAGED_CLUSTER_SERVER_TAKEN',
    `${server} is already registered for this tenant as '${by}': one registration per API server (Argo CD keys clusters by server URL)`,
    { field: 'server' },
  );
}

/** The kubeconfig a registration describes, the request field its problems are about, and the method. */
function registrationKubeconfig(input: ManagedClusterRegistration): {
  text: string;
  field: string;
  authMethod: 'kubeconfig' | 'token';
} {
  const tokenFields = [input.server, input.token, input.caData].filter((v) => v !== undefined).length;
  if (input.kubeconfig !== undefined) {
    if (tokenFields > 0)
      throw errors.validation('give either kubeconfig, or server with token (and caData), not both', 'kubeconfig');
    return { text: input.kubeconfig, field: 'kubeconfig', authMethod: 'kubeconfig' };
  }
  if (input.server === undefined) throw errors.validation('give a kubeconfig, or a server with a token', 'server');
  if (input.token === undefined) throw errors.validation('a token is required with server', 'token');
  let url: URL;
  try {
    url = new URL(input.server);
  } catch {
    throw errors.validation(`server '${input.server}' is not a URL`, 'server');
  }
  const caData =
    input.caData === undefined
      ? undefined
      : input.caData.includes('-----BEGIN')
        ? Buffer.from(input.caData).toString('base64')
        : input.caData;
  if (caData !== undefined && !Buffer.from(caData, 'base64').toString('utf8').includes('-----BEGIN CERTIFICATE'))
    throw errors.validation('caData must be a PEM certificate, or base64 of one', 'caData');
  const text = kubeconfigOf({
    server: serverUrl(url),
    config: { bearerToken: input.token, tlsClientConfig: caData ? { caData } : {} },
  });
  return { text, field: 'server', authMethod: 'token' };
}
