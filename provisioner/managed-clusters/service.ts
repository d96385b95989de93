/**
 * Managed clusters on the API side: the clusters a tenant's Argo CD deploys to. A registration is
 * checked before anything is written (the kubeconfig policy, no second registration of the name
 * or the server, isolation from the service's own clusters, then the cluster itself within
 * 10 s: reachable, a Kubernetes API server, credentials accepted, Argo CD's permissions), then
 * written in one transaction with the tenant's generation bump (the tenant's program writes the
 * Argo CD cluster Secret into the vcluster), its queued operation and its audit row. Credentials
 * are sealed with the secret box and never returned or logged.
 */
import { isIP } from 'node:net';
import { lookup } from 'node:dns/promises';
import type pg from 'pg';
import type { SecretBox } from '../crypto.ts';
import { pgCode, pgConstraint, withTx } from '../db/tx.ts';
import { AppError, errors } from '../errors.ts';
import { hostOf } from '../kubeconfig/address.ts';
import { admitKubeconfig } from '../kubeconfig/admit.ts';
import { checkKubeconfig, KubeconfigPolicyError, type KubeconfigPolicy } from '../kubeconfig/policy.ts';
import { writeAudit, type Requester } from '../store/audit.ts';
import {
  credentialsAad,
  deleteManagedCluster,
  findConflict,
  getManagedCluster,
  insertManagedCluster,
  listManagedClusters,
  sealedManagedClusters,
  type ManagedCluster,
} from '../store/managed-clusters.ts';
import { changeSpec, condition, getTenantRow, type TenantRow } from '../store/tenants.ts';
import type { ManagedClusterConfig } from '../../runtime/component/cluster-secret.ts';
import { connectionOf, credentialsOf, kubeconfigOf, serverKey, serverUrl, type StoredCredentials } from './kube-api.ts';
import { validateCluster } from './validate.ts';
import { requestToken, serviceAccountOf, withToken, type IssuedToken, type TokenSettings } from './tokens.ts';

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

  async register(tenantId: string, input: ManagedClusterRegistration, by: Requester): Promise<Registered> {
    const signal = AbortSignal.timeout(VALIDATION_TIMEOUT_MS);
    const tenant = await this.#tenant(tenantId);
    if (tenant.deleted) throw errors.tenantDeleted(tenantId);
    const namespaces = [...new Set(input.namespaces ?? [])].sort();
    const { text, field, authMethod } = registrationKubeconfig(input);
    let credentials = this.#credentials(text, field);
    const pinned = await admitKubeconfig(text, this.#deps.policy, field);
    const conn = connectionOf(pinned.text);
    const key = serverKey(credentials.server);

    const conflict = await findConflict(this.#deps.pool, tenantId, input.name, key);
    if (conflict?.sameName) throw managedClusterExists(input.name);
    if (conflict) throw serverTaken(credentials.server, conflict.name);
    await this.#checkIsolation(tenantId, credentials.server, conn.url, signal);

    const version = await validateCluster(conn, credentials.server, namespaces, signal);
    const sa = this.#deps.tokens.refreshMs > 0 ? serviceAccountOf(credentials.config.bearerToken) : undefined;
    let issued: IssuedToken | undefined;
    if (sa) {
      try {
        issued = await requestToken(conn, sa, this.#deps.tokens.lifetimeSeconds, signal);
      } catch {
        issued = undefined; // no short-lived token from this cluster: the credentials as given are kept
      }
      if (issued) credentials = withToken(credentials, issued.token);
    }
    const serviceAccount = sa && issued ? `${sa.namespace}/${sa.name}` : undefined;
    const reachable = condition(
      'Reachable',
      'True',
      'Validated',
      `Kubernetes ${version} answered and granted Argo CD's permissions at registration`,
    );
    return withTx(this.#deps.pool, async (tx) => {
      const row = await getTenantRow(tx, tenantId, true);
      if (!row) throw errors.notFound('tenant', tenantId);
      if (row.deleted) throw errors.tenantDeleted(tenantId);
      let managedCluster: ManagedCluster;
      try {
        managedCluster = await insertManagedCluster(tx, {
          tenantId,
          name: input.name,
          server: credentials.server,
          serverKey: key,
          namespaces,
          authMethod,
          credentialsEnc: this.#deps.box.encrypt(JSON.stringify(credentials), credentialsAad(tenantId, input.name)),
          serverVersion: version,
          conditions: [reachable],
          probeInMs: this.#deps.probeIntervalMs,
          token:
            serviceAccount && issued
              ? { serviceAccount, expiresAt: issued.expiresAt, refreshInMs: this.#deps.tokens.refreshMs }
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
          serverVersion: version,
          ...(serviceAccount ? { tokenServiceAccount: serviceAccount } : {}),
        },
        requestId: by.requestId,
      });
      return { managedCluster, operationId: op.id };
    });
  }

  /**
   * Removes a registration: the tenant's program deletes its cluster Secret from the vcluster.
   * Undefined when there was none (already removed: nothing to do).
   */
  async remove(tenantId: string, name: string, by: Requester): Promise<{ operationId: string } | undefined> {
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
        requestId: by.requestId,
      });
      return { operationId: op.id };
    });
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

  async #tenant(tenantId: string): Promise<TenantRow> {
    const row = await getTenantRow(this.#deps.pool, tenantId);
    if (!row) throw errors.notFound('tenant', tenantId);
    return row;
  }

  /** The credentials Argo CD will get, from the kubeconfig as the policy checked it; 400 when refused. */
  #credentials(text: string, field: string): StoredCredentials {
    let checked;
    try {
      checked = checkKubeconfig(text, this.#deps.policy);
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
    const { rows: roots } = await this.#deps.pool.query<{ name: string; kubeconfig_enc: Buffer }>(
      'SELECT name, kubeconfig_enc FROM root_clusters',
    );
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
    const { rows: vclusters } = await this.#deps.pool.query<{ endpoint: string }>(
      `SELECT endpoints->>'vclusterEndpoint' AS endpoint FROM tenants
        WHERE id <> $1 AND phase <> 'Deleted' AND endpoints ? 'vclusterEndpoint'`,
      [tenantId],
    );
    for (const { endpoint } of vclusters) {
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
