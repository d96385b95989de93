/** Source Server configuration, from the environment (validated once at start). */
import { ARGOCD_SERVER_URL } from '../../component/argo-releases.ts';
import {
  ConfigError,
  type Env,
  int,
  kubeconfigFile,
  type LogLevel,
  logLevel,
  secret,
  str,
  url,
} from '../common/config.ts';

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

export interface SourceServerConfig {
  /** PORT (default 8080) and HOST (default 0.0.0.0). */
  port: number;
  host: string;
  /** ARGOCD_SERVER_URL: Argo CD's API server (default the runtime's `argocd-server` Service). No trailing slash. */
  argoCdServerUrl: string;
  /** ARGOCD_USERNAME: the local account the Source Server logs in as (default `source-server`). */
  argoCdUsername: string;
  /**
   * ARGOCD_PASSWORD or ARGOCD_PASSWORD_FILE: that account's password. A function, so that the
   * value is never part of an object that could be logged, and a mounted file is re-read at
   * every login (a rotated password is picked up without a restart).
   */
  argoCdPassword: () => string;
  /** ARGOCD_NAMESPACE: where Argo CD keeps its repository Secrets (default argocd). */
  argoCdNamespace: string;
  /** GIT_CACHE_DIR: where the bare Git mirrors live (default /tmp/source-server-git; an emptyDir). */
  gitCacheDir: string;
  /** CACHE_MAX_BYTES: memory held by cached manifests and answers (default 64 MiB). */
  cacheMaxBytes: number;
  /** ARGOCD_TIMEOUT_MS (default 30000): longest wait for one Argo CD call before answering 503. */
  argoCdTimeoutMs: number;
  /** GIT_TIMEOUT_MS (default 120000): longest run of one git command (a first fetch of a large repository). */
  gitTimeoutMs: number;
  /** GIT_REFRESH_SECONDS (default 15): a mirror is fetched again for a branch or tag at most this often. */
  gitRefreshSeconds: number;
  /** KUBECONFIG: a kubeconfig file (tests, development); unset, the pod's service account. */
  kubeconfig: string | undefined;
  logLevel: LogLevel;
}

export function loadSourceServerConfig(env: Env = process.env): SourceServerConfig {
  const argoCdServerUrl = url(env, 'ARGOCD_SERVER_URL', ['http:', 'https:'], ARGOCD_SERVER_URL)
    .toString()
    .replace(/\/+$/, '');
  const first = secret(env, 'ARGOCD_PASSWORD');
  const passwordVar = first.file ? 'ARGOCD_PASSWORD_FILE' : 'ARGOCD_PASSWORD';
  if (first.value === '') throw new ConfigError(passwordVar, 'is empty');
  const file = first.file;
  const argoCdPassword =
    file === undefined ? () => first.value : () => secret({ ARGOCD_PASSWORD_FILE: file }, 'ARGOCD_PASSWORD').value;
  const argoCdNamespace = str(env, 'ARGOCD_NAMESPACE', 'argocd');
  if (!DNS_LABEL.test(argoCdNamespace) || argoCdNamespace.length > 63)
    throw new ConfigError('ARGOCD_NAMESPACE', `'${argoCdNamespace.slice(0, 80)}' is not a namespace name`);
  const gitCacheDir = str(env, 'GIT_CACHE_DIR', '/tmp/source-server-git');
  if (!gitCacheDir.startsWith('/')) throw new ConfigError('GIT_CACHE_DIR', `'${gitCacheDir}' is not an absolute path`);
  return {
    port: int(env, 'PORT', 8080, 0, 65535),
    host: str(env, 'HOST', '0.0.0.0'),
    argoCdServerUrl,
    argoCdUsername: str(env, 'ARGOCD_USERNAME', 'source-server'),
    argoCdPassword,
    argoCdNamespace,
    gitCacheDir,
    cacheMaxBytes: int(env, 'CACHE_MAX_BYTES', 64 * 1024 * 1024, 1024 * 1024, 4 * 1024 * 1024 * 1024),
    argoCdTimeoutMs: int(env, 'ARGOCD_TIMEOUT_MS', 30_000, 100, 600_000),
    gitTimeoutMs: int(env, 'GIT_TIMEOUT_MS', 120_000, 100, 1_800_000),
    gitRefreshSeconds: int(env, 'GIT_REFRESH_SECONDS', 15, 0, 3600),
    kubeconfig: kubeconfigFile(env),
    logLevel: logLevel(env),
  };
}
