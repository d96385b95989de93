/**
 * How the Source Server reaches an Argo CD it does not get from a Pulumi run: a hybrid runtime's
 * (docs/hybrid.md "Source Server").
 *
 *  - argoCdAccountSetup (argo=new, ARGOCD_ACCOUNT_SETUP=argocd-secret): the bundle's Argo CD
 *    values declare the local account `source-server` (login only, role:readonly), but the
 *    bundle cannot carry its password: its one secret is the bootstrap token, and the runtime token
 *    the password is derived from exists only after the bootstrap exchange, inside the cluster.
 *    So when Argo CD refuses the login, the Source Server writes the bcrypt hash of its derived
 *    password into `argocd-secret` (`accounts.source-server.password` and `passwordMtime`, the keys
 *    Argo CD reads), with a merge patch of those two keys only. Its Role may get and patch that one
 *    Secret by name. It already reads every Secret of Argo CD's namespace (the repository
 *    credentials; RBAC cannot narrow a rule by label), argocd-secret's signing key among them, so
 *    the patch grants nothing that read did not: docs/runtime.md "Source Server".
 *  - argoCdTls (argo=existing, ARGOCD_CA_SECRET): Argo CD's server answers https with the
 *    certificate in `argocd-server-tls` when the customer put one there, else with one it
 *    generated at start and stored nowhere. With the Secret, the connection verifies against its
 *    certificate (ca.crt, else tls.crt); without it nothing can be verified, and the connection is
 *    encrypted but unverified, said once in the log and in the metrics. The Secret is read again
 *    at most every CA_TTL_MS, so a certificate put there later is used without a restart.
 */
import bcrypt from 'bcryptjs';
import { Agent, type Dispatcher } from 'undici';
import { ARGOCD_SECRET } from '../../component/agents.ts';
import type { KubeTransport } from '../../kube/transport.ts';

export { ARGOCD_SECRET };
const BCRYPT_ROUNDS = 10;
const CA_TTL_MS = 5 * 60_000;

export interface SetupLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/**
 * A setupAccount for ArgoCdClient: writes the account's password hash into argocd-secret unless
 * the hash there already matches the password (then the refusal has another cause, and nothing is
 * written). Resolves true when it wrote.
 */
export function argoCdAccountSetup(o: {
  kube: KubeTransport;
  namespace: string;
  account: string;
  password: () => string;
  log: SetupLog;
  now?: () => Date;
}): () => Promise<boolean> {
  const path = `/api/v1/namespaces/${o.namespace}/secrets/${ARGOCD_SECRET}`;
  const key = `accounts.${o.account}.password`;
  return async () => {
    const password = o.password();
    const current = await o.kube.request(path);
    if (current.status !== 200) {
      o.log.warn(
        { status: current.status, secret: `${o.namespace}/${ARGOCD_SECRET}` },
        'the Argo CD account cannot be set up: its Secret cannot be read',
      );
      return false;
    }
    const data = (current.body as { data?: Record<string, string> }).data ?? {};
    const stored = data[key] ? Buffer.from(data[key], 'base64').toString('utf8') : undefined;
    if (stored !== undefined && (await bcrypt.compare(password, stored))) {
      o.log.warn(
        { account: o.account },
        'Argo CD refused the login although its password is set: is the account declared in argocd-cm (accounts.<name>: login) and enabled?',
      );
      return false;
    }
    const hash = await bcrypt.hash(password, BCRYPT_ROUNDS);
    const b64 = (v: string) => Buffer.from(v, 'utf8').toString('base64');
    const res = await o.kube.request(path, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: {
        data: {
          [key]: b64(hash),
          // Argo CD refuses sessions issued before this time (there are none of this password).
          [`accounts.${o.account}.passwordMtime`]: b64((o.now?.() ?? new Date()).toISOString().replace(/\.\d+Z$/, 'Z')),
        },
      },
    });
    if (res.status !== 200) {
      o.log.warn({ status: res.status }, 'the Argo CD account cannot be set up: argocd-secret cannot be patched');
      return false;
    }
    o.log.info({ account: o.account }, 'the Argo CD account password was written to argocd-secret');
    return true;
  };
}

export interface ArgoCdTls {
  /** The dispatcher for the next request. */
  dispatcher: () => Promise<Dispatcher | undefined>;
  /** `verified` (against the Secret's certificate), `unverified` (no Secret), or undefined before the first use. */
  mode: () => 'verified' | 'unverified' | undefined;
}

/** The certificate of a kubernetes.io/tls Secret (ca.crt, else tls.crt), or undefined when there is none. */
function certificateOf(body: unknown): string | undefined {
  const data = (body as { data?: Record<string, string> }).data ?? {};
  for (const k of ['ca.crt', 'tls.crt']) {
    const v = data[k];
    if (v) {
      const pem = Buffer.from(v, 'base64').toString('utf8');
      if (pem.includes('-----BEGIN CERTIFICATE-----')) return pem;
    }
  }
  return undefined;
}

export function argoCdTls(o: {
  kube: KubeTransport;
  namespace: string;
  secret: string;
  log: SetupLog;
  ttlMs?: number;
}): ArgoCdTls {
  const ttl = o.ttlMs ?? CA_TTL_MS;
  let current: { at: number; pem: string | undefined; agent: Agent } | undefined;
  let mode: 'verified' | 'unverified' | undefined;
  let pending: Promise<Agent> | undefined;
  const load = async (): Promise<Agent> => {
    const res = await o.kube.request(`/api/v1/namespaces/${o.namespace}/secrets/${o.secret}`);
    if (res.status !== 200 && res.status !== 404)
      throw new Error(`Secret ${o.namespace}/${o.secret} cannot be read: HTTP ${res.status}`);
    const pem = res.status === 200 ? certificateOf(res.body) : undefined;
    if (current && current.pem === pem) {
      current.at = Date.now();
      return current.agent;
    }
    const agent = new Agent(pem ? { connect: { ca: pem } } : { connect: { rejectUnauthorized: false } });
    const old = current?.agent;
    current = { at: Date.now(), pem, agent };
    mode = pem ? 'verified' : 'unverified';
    if (pem)
      o.log.info({ secret: `${o.namespace}/${o.secret}` }, "Argo CD's server is verified against its certificate");
    else
      o.log.warn(
        { secret: `${o.namespace}/${o.secret}` },
        "Argo CD's server certificate cannot be verified: no certificate in its Secret (Argo CD generated one at start); the connection is encrypted but unverified",
      );
    void old?.close().catch(() => undefined);
    return agent;
  };
  return {
    dispatcher: async () => {
      if (current && Date.now() - current.at < ttl) return current.agent;
      pending ??= load().finally(() => {
        pending = undefined;
      });
      return pending;
    },
    mode: () => mode,
  };
}
