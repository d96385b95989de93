/**
 * Short-lived credentials for managed clusters. When the tenant registers a ServiceAccount's token
 * and that account may request tokens for itself (`create serviceaccounts/token` on its own name,
 * the TokenRequest API), the control plane requests a token of `lifetimeSeconds` (about 1 h) at
 * registration and keeps that instead of the one given, then requests the next one every
 * `refreshMs` (half the lifetime by default) with the token it holds. A renewed token is stored
 * sealed in the same transaction that bumps the tenant's generation, so the tenant's program writes
 * it into the Argo CD cluster Secret; the previous token stays valid until its own expiry (the
 * other half of its life), so a rotation fails no request made with either.
 *
 * Each token is bound (TokenRequest `boundObjectRef`) to a Secret the control plane keeps in the
 * ServiceAccount's namespace, one per registration (`bindingSecretName`), created with the
 * registration's own credentials at registration and checked at each renewal: the API server
 * refuses a bound token once its Secret is gone, so DELETE revokes every token issued by deleting
 * it. When the credentials may not create Secrets there (403) the tokens are requested unbound and
 * the registration says so (`token_unbound`): each then stays valid until it expires.
 *
 * Every replica runs the refresher; a renewal is claimed in the database (`claimDueRefreshes`,
 * the same SKIP LOCKED lease as the health probe), so one replica renews a registration. Tokens
 * are never logged or put in audit rows, operation logs or metrics.
 */
import type pg from 'pg';
import type { Logger } from 'pino';
import type { SecretBox } from '../crypto.ts';
import { withTx } from '../db/tx.ts';
import { writeAudit } from '../store/audit.ts';
import { claimDueRefreshes, credentialsAad, recordRefresh, type DueRefresh } from '../store/managed-clusters.ts';
import { appendLog } from '../store/operations.ts';
import { changeSpec, getTenantRow } from '../store/tenants.ts';
import type { KubeconfigPolicy } from '../../kubeconfig-policy/policy.ts';
import { connectionFor, kubeRequest, type ClusterConnection, type StoredCredentials } from './kube-api.ts';
import { PeriodicLoop } from '../../runtime/loops/periodic.ts';

/** The shortest lifetime the Kubernetes API server grants a requested token. */
export const MIN_TOKEN_LIFETIME_SECONDS = 600;

export interface TokenSettings {
  /** Lifetime asked of each token (PROVISIONER_MANAGED_CLUSTER_TOKEN_SECONDS, default 3600, at least 600). */
  lifetimeSeconds: number;
  /** Time between two renewals (PROVISIONER_MANAGED_CLUSTER_TOKEN_REFRESH_SECONDS, default half the lifetime; 0 turns renewal off). */
  refreshMs: number;
}

export interface ServiceAccountRef {
  namespace: string;
  name: string;
}

/**
 * The ServiceAccount a bearer token was issued for, from its JWT claims (bound tokens'
 * `kubernetes.io` claim, or a legacy Secret-based token's). Not a verification: the cluster
 * verifies the token when it is used; undefined for anything that is not a ServiceAccount's token.
 */
export function serviceAccountOf(token: string | undefined): ServiceAccountRef | undefined {
  const parts = token?.split('.');
  if (!parts || parts.length !== 3) return undefined;
  let claims: Record<string, unknown>;
  try {
    claims = JSON.parse(Buffer.from(parts[1]!, 'base64url').toString('utf8')) as Record<string, unknown>;
  } catch {
    return undefined;
  }
  if (typeof claims !== 'object' || claims === null) return undefined;
  const bound = claims['kubernetes.io'] as { namespace?: unknown; serviceaccount?: { name?: unknown } } | undefined;
  const namespace = bound?.namespace ?? claims['kubernetes.io/serviceaccount/namespace'];
  const name = bound?.serviceaccount?.name ?? claims['kubernetes.io/serviceaccount/service-account.name'];
  if (typeof namespace !== 'string' || typeof name !== 'string' || namespace === '' || name === '') return undefined;
  return { namespace, name };
}

export interface IssuedToken {
  token: string;
  expiresAt: Date;
}

/** A Secret a token is bound to: the API server refuses the token once it is gone. */
export interface BindingRef {
  namespace: string;
  name: string;
  uid: string;
}

export const MANAGED_BY = { 'app.kubernetes.io/managed-by': 'hosted-runtimes' } as const;
const BINDING_PREFIX = 'hosted-runtimes-binding-';

/**
 * The name of a registration's binding Secret: stable, DNS-safe, at most 253 characters, and the
 * tenant's id in it, so two tenants registering the same cluster under one name bind to two Secrets.
 */
export function bindingSecretName(tenantId: string, registration: string): string {
  const safe = (s: string) =>
    s
      .toLowerCase()
      .replace(/[^a-z0-9-]/g, '-')
      .replace(/^-+|-+$/g, '');
  return `${BINDING_PREFIX}${safe(registration)}-${safe(tenantId)}`.slice(0, 253).replace(/-+$/, '');
}

/** `kubectl` deleting a binding Secret: what the tenant runs when the control plane could not. */
export const deleteBindingCommand = (namespace: string, name: string): string =>
  `kubectl -n ${namespace} delete secret ${name}`;

/**
 * Makes sure the binding Secret `name` exists in the namespace (type Opaque, no data, labelled as
 * the service's), with the connection's credentials: its uid, or why the tokens cannot be bound
 * (`unbound`: the credentials may not create or read Secrets there, or a Secret of that name is
 * not the service's). Throws on network errors and on other answers (401 included: the
 * credentials no longer work).
 */
export async function ensureBinding(
  conn: ClusterConnection,
  namespace: string,
  name: string,
  signal: AbortSignal,
): Promise<{ ref: BindingRef; created: boolean } | { unbound: string }> {
  const base = `/api/v1/namespaces/${encodeURIComponent(namespace)}/secrets`;
  const created = await kubeRequest(conn, 'POST', base, {
    signal,
    body: { apiVersion: 'v1', kind: 'Secret', type: 'Opaque', metadata: { name, namespace, labels: MANAGED_BY } },
  });
  const uidOf = (body: unknown): string | undefined => {
    const meta = (body as { metadata?: { uid?: unknown; labels?: Record<string, unknown> } } | undefined)?.metadata;
    return typeof meta?.uid === 'string' && meta.uid !== '' ? meta.uid : undefined;
  };
  if (created.status === 201 || created.status === 200) {
    const uid = uidOf(created.body);
    if (!uid) throw new Error(`creating the Secret ${namespace}/${name} was answered without its uid`);
    return { ref: { namespace, name, uid }, created: true };
  }
  if (created.status === 403)
    return { unbound: `the credentials may not create Secrets in namespace ${namespace} (HTTP 403)` };
  if (created.status !== 409)
    throw new Error(`creating the Secret ${namespace}/${name} was answered with HTTP ${created.status}`);
  const found = await kubeRequest(conn, 'GET', `${base}/${encodeURIComponent(name)}`, { signal });
  if (found.status === 403)
    return { unbound: `the credentials may not read the Secret ${namespace}/${name} (HTTP 403)` };
  if (found.status !== 200)
    throw new Error(`reading the Secret ${namespace}/${name} was answered with HTTP ${found.status}`);
  const labels = (found.body as { metadata?: { labels?: Record<string, unknown> } } | undefined)?.metadata?.labels;
  if (labels?.['app.kubernetes.io/managed-by'] !== MANAGED_BY['app.kubernetes.io/managed-by'])
    return { unbound: `a Secret ${namespace}/${name} not labelled as this service's is in the way` };
  const uid = uidOf(found.body);
  if (!uid) throw new Error(`the Secret ${namespace}/${name} was answered without its uid`);
  return { ref: { namespace, name, uid }, created: false };
}

/** What a registration's view says of unbound tokens: why, and that they outlive the removal. */
export const unboundNote = (why: string, lifetimeSeconds: number): string =>
  `the tokens are not bound to a Secret (${why}): after removal, each stays valid until it expires (up to ${lifetimeSeconds} s); ` +
  "grant create, get and delete on secrets in the ServiceAccount's namespace to bind them (docs/api.md)";

/**
 * Asks the cluster for a token of `sa` (TokenRequest) with the connection's credentials. Undefined
 * when the cluster or the credentials do not allow it (403, 404: no TokenRequest there); throws on
 * network errors and on answers that are not a token.
 */
export async function requestToken(
  conn: ClusterConnection,
  sa: ServiceAccountRef,
  lifetimeSeconds: number,
  signal: AbortSignal,
  boundTo?: BindingRef,
): Promise<IssuedToken | undefined> {
  const path = `/api/v1/namespaces/${encodeURIComponent(sa.namespace)}/serviceaccounts/${encodeURIComponent(sa.name)}/token`;
  const answer = await kubeRequest(conn, 'POST', path, {
    signal,
    body: {
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'TokenRequest',
      spec: {
        expirationSeconds: lifetimeSeconds,
        ...(boundTo
          ? { boundObjectRef: { kind: 'Secret', apiVersion: 'v1', name: boundTo.name, uid: boundTo.uid } }
          : {}),
      },
    },
  });
  if (answer.status === 403 || answer.status === 404 || answer.status === 405) return undefined;
  const status = (answer.body as { status?: { token?: unknown; expirationTimestamp?: unknown } } | undefined)?.status;
  if (answer.status !== 201 && answer.status !== 200)
    throw new Error(`the TokenRequest for ${sa.namespace}/${sa.name} was answered with HTTP ${answer.status}`);
  const expiresAt = new Date(typeof status?.expirationTimestamp === 'string' ? status.expirationTimestamp : NaN);
  if (typeof status?.token !== 'string' || status.token === '' || Number.isNaN(expiresAt.getTime()))
    throw new Error(`the TokenRequest for ${sa.namespace}/${sa.name} was answered without a token`);
  return { token: status.token, expiresAt };
}

/** A requested token, and the Secret it is bound to or why it is not. */
export interface BoundIssue {
  issued: IssuedToken | undefined;
  /** `namespace/name` of the Secret the token is bound to. */
  binding?: string;
  /** Why the token is not bound (`unboundNote`). */
  unbound?: string;
}

/**
 * Requests a token of `sa` bound to the registration's binding Secret (created when missing), or
 * unbound when the credentials may not create it. A Secret created for a TokenRequest the cluster
 * then refuses is deleted again.
 */
export async function requestBoundToken(
  conn: ClusterConnection,
  sa: ServiceAccountRef,
  secretName: string,
  lifetimeSeconds: number,
  signal: AbortSignal,
): Promise<BoundIssue> {
  const binding = await ensureBinding(conn, sa.namespace, secretName, signal);
  if ('unbound' in binding)
    return {
      issued: await requestToken(conn, sa, lifetimeSeconds, signal),
      unbound: unboundNote(binding.unbound, lifetimeSeconds),
    };
  const issued = await requestToken(conn, sa, lifetimeSeconds, signal, binding.ref);
  if (!issued && binding.created)
    await kubeRequest(
      conn,
      'DELETE',
      `/api/v1/namespaces/${encodeURIComponent(sa.namespace)}/secrets/${encodeURIComponent(secretName)}`,
      { signal },
    ).catch(() => undefined);
  return { issued, binding: `${sa.namespace}/${secretName}` };
}

/** What a bootstrap registration's view says: its tokens are revoked with the ServiceAccount. */
export const bootstrapNote = (serviceAccount: string): string =>
  `the tokens are not bound to a Secret: removal deletes the ServiceAccount ${serviceAccount}, which revokes them`;

/** Stored credentials with another bearer token. */
export const withToken = (c: StoredCredentials, token: string): StoredCredentials => ({
  server: c.server,
  config: { ...c.config, bearerToken: token },
});

/**
 * A renewal's outcome: stored, failed (the current token stays), or dropped (the registration was
 * removed, changed or renewed by another replica meanwhile, or its tenant deleted).
 */
export type RotationOutcome = 'rotated' | 'failed' | 'dropped';

export interface RefresherOptions {
  pool: pg.Pool;
  box: SecretBox;
  policy: KubeconfigPolicy;
  tokens: TokenSettings;
  logger?: Logger | undefined;
  /** Called once per renewal with its outcome (metrics). */
  onRotation?: ((outcome: RotationOutcome) => void) | undefined;
  /** Registrations claimed per round (default 16). */
  batch?: number;
}

/** Longest wait for one TokenRequest. */
const REQUEST_TIMEOUT_MS = 10_000;
const SYSTEM = { id: 'token-refresher', role: 'system' };

export class ManagedClusterTokenRefresher {
  readonly #options: RefresherOptions & { batch: number };
  /** The background loop (runtime/loops/periodic.ts): a round every stepMs, off when refreshMs is 0. */
  readonly loop: PeriodicLoop;

  constructor(o: RefresherOptions) {
    this.#options = { batch: 16, ...o };
    this.loop = new PeriodicLoop({
      name: 'managed-cluster-token-refresher',
      enabled: o.tokens.refreshMs > 0,
      round: () => this.round(),
      intervalMs: () => this.stepMs,
      retryMs: () => this.stepMs,
      onFailure: (err) => o.logger?.warn({ err }, 'managed cluster token renewal round failed; next round soon'),
    });
  }

  /** How often due renewals are looked for: a quarter of the refresh interval, at most every 5 s. */
  get stepMs(): number {
    return Math.max(100, Math.min(5_000, Math.floor(this.#options.tokens.refreshMs / 4)));
  }

  /** A failed renewal is tried again after this long (the claim's lease). */
  get retryMs(): number {
    return Math.max(1_000, Math.min(60_000, Math.floor(this.#options.tokens.refreshMs / 4)));
  }

  /** One round: claims the due registrations and renews their tokens one after the other. */
  async round(): Promise<void> {
    for (;;) {
      const due = await claimDueRefreshes(this.#options.pool, this.#options.batch, this.retryMs);
      for (const d of due) {
        if (this.loop.stopping) return;
        await this.#renew(d);
      }
      if (due.length < this.#options.batch || this.loop.stopping) return;
    }
  }

  async #renew(d: DueRefresh): Promise<void> {
    const log = { tenantId: d.tenantId, managedCluster: d.name, serviceAccount: d.serviceAccount };
    try {
      const stored = JSON.parse(
        this.#options.box.decrypt(d.credentialsEnc, credentialsAad(d.tenantId, d.name)).toString('utf8'),
      ) as StoredCredentials;
      const [namespace = '', name = ''] = d.serviceAccount.split('/');
      const conn = await connectionFor(stored, this.#options.policy);
      const signal = AbortSignal.timeout(REQUEST_TIMEOUT_MS);
      // A bootstrap's tokens are revoked by deleting its ServiceAccount; the others are bound.
      const { issued, binding, unbound }: BoundIssue = d.bootstrap
        ? {
            issued: await requestToken(conn, { namespace, name }, this.#options.tokens.lifetimeSeconds, signal),
            unbound: bootstrapNote(d.serviceAccount),
          }
        : await requestBoundToken(
            conn,
            { namespace, name },
            bindingSecretName(d.tenantId, d.name),
            this.#options.tokens.lifetimeSeconds,
            signal,
          );
      if (!issued) throw new Error(`the cluster no longer grants tokens for ${d.serviceAccount} (403 or 404)`);
      const sealed = this.#options.box.encrypt(
        JSON.stringify(withToken(stored, issued.token)),
        credentialsAad(d.tenantId, d.name),
      );
      const done = await withTx(this.#options.pool, async (tx) => {
        const row = await getTenantRow(tx, d.tenantId, true);
        if (!row || row.deleted) return false;
        const stored = await recordRefresh(tx, {
          id: d.id,
          previousEnc: d.credentialsEnc,
          credentialsEnc: sealed,
          expiresAt: issued.expiresAt,
          refreshInMs: this.#options.tokens.refreshMs,
          binding: binding ?? null,
          unbound: unbound ?? null,
        });
        if (!stored) return false;
        const message = `managed cluster '${d.name}': token of ${d.serviceAccount} renewed, valid until ${issued.expiresAt.toISOString()}`;
        const op = await changeSpec(tx, row, {}, 'update', message);
        await appendLog(tx, op.id, [{ stream: 'provisioner', line: message }]);
        await writeAudit(tx, SYSTEM, {
          action: 'managed-cluster.rotate-token',
          targetType: 'tenant',
          targetId: d.tenantId,
          after: {
            name: d.name,
            serviceAccount: d.serviceAccount,
            expiresAt: issued.expiresAt.toISOString(),
            boundTo: binding ?? null,
          },
        });
        return true;
      });
      if (!done) {
        this.#options.onRotation?.('dropped');
        return;
      }
      this.#options.onRotation?.('rotated');
      this.#options.logger?.info(
        { ...log, expiresAt: issued.expiresAt.toISOString(), boundTo: binding ?? null },
        'managed cluster token renewed',
      );
    } catch (err) {
      this.#options.onRotation?.('failed');
      this.#options.logger?.warn(
        { ...log, err: err instanceof Error ? err.message : String(err), retryInMs: this.retryMs },
        'managed cluster token renewal failed; the current token stays in use',
      );
    }
  }
}
