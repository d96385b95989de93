/** Source Server configuration, from the environment (validated once at start). */
import { readFileSync } from 'node:fs';
import { ARGOCD_SERVER_URL } from '../../component/argo-releases.ts';
import { sourceServerPassword } from '../../component/source-server-account.ts';
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
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;

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
  /**
   * ARGOCD_TOKEN or ARGOCD_TOKEN_FILE: an Argo CD API token (an account with `apiKey`) used instead
   * of a login: a hybrid runtime beside the customer's own Argo CD, whose accounts the runtime does
   * not manage. The file is read at every use and may not exist yet (its Secret is optional): then
   * the answer is 503 naming the Secret to create. Undefined: the account logs in with its password.
   */
  argoCdToken: (() => string | undefined) | undefined;
  /** Where the token is expected (the file, or `ARGOCD_TOKEN`), for the message when it is missing. */
  argoCdTokenSource: string | undefined;
  /**
   * ARGOCD_ACCOUNT_SETUP=argocd-secret: the password is derived from RUNTIME_TOKEN, and when Argo
   * CD refuses the login the Source Server writes the password's hash into `argocd-secret` itself
   * (a hybrid runtime whose Argo CD its bundle installed: argocd-setup.ts). Default `none`.
   */
  argoCdAccountSetup: boolean;
  /**
   * ARGOCD_CA_SECRET: with an https ARGOCD_SERVER_URL, a kubernetes.io/tls Secret in
   * ARGOCD_NAMESPACE whose certificate (ca.crt, else tls.crt) is the one Argo CD's server is
   * verified against (`argocd-server-tls`, where Argo CD itself reads its certificate). Absent
   * Secret: Argo CD serves a certificate it generated at start and stores nowhere, which nothing can
   * verify; the connection is then encrypted but unverified, said once in the log (docs/hybrid.md).
   */
  argoCdCaSecret: string | undefined;
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
  const setup = str(env, 'ARGOCD_ACCOUNT_SETUP', 'none');
  if (setup !== 'none' && setup !== 'argocd-secret')
    throw new ConfigError('ARGOCD_ACCOUNT_SETUP', `'${setup.slice(0, 40)}' is not one of none, argocd-secret`);
  const tokenFile = env.ARGOCD_TOKEN_FILE ? env.ARGOCD_TOKEN_FILE : undefined;
  const tokenValue = env.ARGOCD_TOKEN?.trim() ? env.ARGOCD_TOKEN.trim() : undefined;
  let argoCdToken: (() => string | undefined) | undefined;
  let argoCdTokenSource: string | undefined;
  let argoCdPassword: () => string;
  if (tokenFile !== undefined) {
    if (!tokenFile.startsWith('/'))
      throw new ConfigError('ARGOCD_TOKEN_FILE', `'${tokenFile.slice(0, 200)}' is not an absolute path`);
    argoCdTokenSource = tokenFile;
    argoCdToken = () => {
      try {
        const v = readFileSync(tokenFile, 'utf8').trim();
        return v === '' ? undefined : v;
      } catch {
        return undefined;
      }
    };
  } else if (tokenValue !== undefined) {
    argoCdTokenSource = 'ARGOCD_TOKEN';
    argoCdToken = () => tokenValue;
  }
  if (argoCdToken !== undefined) {
    if (setup !== 'none') throw new ConfigError('ARGOCD_ACCOUNT_SETUP', 'cannot be used with an Argo CD token');
    argoCdPassword = () => '';
  } else if (setup === 'argocd-secret') {
    const token = secret(env, 'RUNTIME_TOKEN');
    if (token.value === '')
      throw new ConfigError('RUNTIME_TOKEN', 'is required with ARGOCD_ACCOUNT_SETUP=argocd-secret');
    const password = sourceServerPassword(token.value);
    argoCdPassword = () => password;
  } else {
    const first = secret(env, 'ARGOCD_PASSWORD');
    const passwordVar = first.file ? 'ARGOCD_PASSWORD_FILE' : 'ARGOCD_PASSWORD';
    if (first.value === '') throw new ConfigError(passwordVar, 'is empty');
    const file = first.file;
    argoCdPassword =
      file === undefined ? () => first.value : () => secret({ ARGOCD_PASSWORD_FILE: file }, 'ARGOCD_PASSWORD').value;
  }
  const caSecret = env.ARGOCD_CA_SECRET ? env.ARGOCD_CA_SECRET : undefined;
  if (caSecret !== undefined && (!DNS_SUBDOMAIN.test(caSecret) || caSecret.length > 253))
    throw new ConfigError('ARGOCD_CA_SECRET', `'${caSecret.slice(0, 80)}' is not a Secret name`);
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
    argoCdToken,
    argoCdTokenSource,
    argoCdAccountSetup: setup === 'argocd-secret',
    argoCdCaSecret: caSecret,
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
