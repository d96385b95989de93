/**
 * Requests to a tenant's managed cluster with the credentials the tenant gave. Only what the
 * kubeconfig policy let through is used (kubeconfig-policy/policy.ts): inline CA, token,
 * client certificate or basic auth; nothing is read from disk or executed, and the connection goes
 * to the address the policy checked (pinKubeconfig), never to a second DNS answer. Answers are
 * bounded in size and time.
 */
import { hostOf } from '../../kubeconfig-policy/address.ts';
import { checkKubeconfig, pinKubeconfig, type KubeconfigPolicy } from '../../kubeconfig-policy/policy.ts';
import type { ManagedClusterConfig } from '../../runtime/component/cluster-secret.ts';
import type { ClusterConnection } from '../../runtime/kube/cluster-check.ts';

// The requests themselves are shared with the runtime's app-proxy (runtime/kube/cluster-check.ts).
export { ClusterNetworkError, kubeRequest, type ClusterConnection } from '../../runtime/kube/cluster-check.ts';

/** The credentials as Argo CD reads them (cluster Secret `config`), and the server as given. */
export interface StoredCredentials {
  server: string;
  config: ManagedClusterConfig;
}

type Json = Record<string, unknown>;

const decode = (b64: unknown): string | undefined =>
  typeof b64 === 'string' && b64 !== '' ? Buffer.from(b64, 'base64').toString('utf8') : undefined;

/** The connection a pinned, sanitised kubeconfig (pinKubeconfig's text) describes. */
export function connectionOf(pinnedText: string): ClusterConnection {
  const doc = JSON.parse(pinnedText) as { clusters: [{ cluster: Json }]; users: [{ user: Json }] };
  const cluster = doc.clusters[0].cluster;
  const user = doc.users[0].user;
  const conn: ClusterConnection = { url: new URL(String(cluster.server)) };
  if (typeof cluster['tls-server-name'] === 'string') conn.servername = cluster['tls-server-name'];
  const ca = decode(cluster['certificate-authority-data']);
  if (ca) conn.ca = ca;
  const cert = decode(user['client-certificate-data']);
  const key = decode(user['client-key-data']);
  if (cert && key) {
    conn.cert = cert;
    conn.key = key;
  }
  if (typeof user.token === 'string' && user.token !== '') conn.authorization = `Bearer ${user.token}`;
  else if (typeof user.username === 'string' && typeof user.password === 'string')
    conn.authorization = `Basic ${Buffer.from(`${user.username}:${user.password}`).toString('base64')}`;
  return conn;
}

/** The server URL in its canonical spelling: one registration per server and tenant. */
export function serverKey(server: string | URL): string {
  const url = typeof server === 'string' ? new URL(server) : server;
  const port = url.port || (url.protocol === 'https:' ? '443' : '80');
  return `${url.protocol}//${hostOf(url).toLowerCase()}:${port}${url.pathname.replace(/\/+$/, '')}`;
}

/** The server as Argo CD is given it: the URL without a trailing slash. */
export function serverUrl(url: URL): string {
  return url.href.replace(/\/+$/, '');
}

/**
 * The credentials of a checked (not pinned) kubeconfig, as Argo CD's cluster config. Refuses what
 * Argo CD could not use the same way (impersonation), naming the field.
 */
export function credentialsOf(checkedText: string): StoredCredentials | { problem: string; path: string } {
  const doc = JSON.parse(checkedText) as {
    clusters: [{ cluster: Json }];
    users: [{ user: Json }];
  };
  const cluster = doc.clusters[0].cluster;
  const user = doc.users[0].user;
  for (const field of ['as', 'as-uid', 'as-groups', 'as-user-extra'])
    if (user[field] !== undefined)
      return {
        path: `users[0].user.${field}`,
        problem: 'impersonation is not supported for a managed cluster: give the credentials Argo CD should use',
      };
  const hasToken = typeof user.token === 'string' && user.token !== '';
  const hasCert = typeof user['client-certificate-data'] === 'string' && typeof user['client-key-data'] === 'string';
  const hasBasic = typeof user.username === 'string' && typeof user.password === 'string';
  if (!hasToken && !hasCert && !hasBasic)
    return {
      path: 'users[0].user',
      problem: 'holds no credentials: give a token, a client certificate and key, or a username and password',
    };
  const tls: NonNullable<ManagedClusterConfig['tlsClientConfig']> = { insecure: false };
  if (typeof cluster['certificate-authority-data'] === 'string') tls.caData = cluster['certificate-authority-data'];
  if (typeof cluster['tls-server-name'] === 'string') tls.serverName = cluster['tls-server-name'];
  if (hasCert) {
    tls.certData = String(user['client-certificate-data']);
    tls.keyData = String(user['client-key-data']);
  }
  const config: ManagedClusterConfig = { tlsClientConfig: tls };
  if (hasToken) config.bearerToken = String(user.token);
  else if (hasBasic) {
    config.username = String(user.username);
    config.password = String(user.password);
  }
  return { server: serverUrl(new URL(String(cluster.server))), config };
}

/** A kubeconfig (JSON) for stored credentials, to be checked and pinned again before each use. */
export function kubeconfigOf(c: StoredCredentials): string {
  const tls = c.config.tlsClientConfig ?? {};
  const cluster: Json = { server: c.server };
  if (tls.caData) cluster['certificate-authority-data'] = tls.caData;
  if (tls.serverName) cluster['tls-server-name'] = tls.serverName;
  const user: Json = {};
  if (c.config.bearerToken) user.token = c.config.bearerToken;
  if (tls.certData && tls.keyData) {
    user['client-certificate-data'] = tls.certData;
    user['client-key-data'] = tls.keyData;
  }
  if (c.config.username !== undefined && c.config.password !== undefined) {
    user.username = c.config.username;
    user.password = c.config.password;
  }
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'managed', cluster }],
    users: [{ name: 'managed', user }],
    contexts: [{ name: 'managed', context: { cluster: 'managed', user: 'managed' } }],
    'current-context': 'managed',
  });
}

/** Stored credentials checked against the policy again and pinned to a checked address. */
export async function connectionFor(c: StoredCredentials, policy: KubeconfigPolicy): Promise<ClusterConnection> {
  const text = kubeconfigOf(c);
  checkKubeconfig(text, policy);
  return connectionOf((await pinKubeconfig(text, policy)).text);
}
