/** GitOps Operator configuration, from the environment (validated once at start). */
import { ConfigError, type Env, int, kubeconfigFile, type LogLevel, logLevel, str, url } from '../common/config.ts';

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

export interface OperatorConfig {
  /** PORT (default 8080) and HOST (default 0.0.0.0): health and metrics. */
  port: number;
  host: string;
  /** PROMOTIONS_NAMESPACE (default argocd): the promotion resources, Argo CD's Applications and the actions' Workflows. */
  namespace: string;
  /** POD_NAME: this replica in the operator's Lease (default the host name). */
  identity: string;
  /** GIT_WORK_DIR (default /tmp/gitops-operator-git): the working clones (an emptyDir). */
  gitWorkDir: string;
  /** GIT_TIMEOUT_MS (default 120000): longest run of one git command. */
  gitTimeoutMs: number;
  /** POLL_MS (default 3000): how often the operator looks at products and promotions. */
  pollMs: number;
  /** SYNC_TIMEOUT_SECONDS (default 900): the longest wait for a step's applications unless its policy says. */
  syncTimeoutSeconds: number;
  /** COMMIT_AUTHOR_NAME, COMMIT_AUTHOR_EMAIL: the author of the promotions' commits. */
  author: { name: string; email: string };
  /**
   * SOURCE_SERVER_URL: the runtime's Source Server, asked what a dry run's scratch commit would
   * change in each application (unset: dry runs fail, saying so). No trailing slash.
   */
  sourceServerUrl: string | undefined;
  /**
   * PRODUCTS_URL: the console's page of the runtime's products (`<PRODUCTS_URL>/<product>` is a
   * product's), linked from the pull requests of `action: pr` (unset: they name the CLI command).
   */
  productsUrl: string | undefined;
  kubeconfig: string | undefined;
  logLevel: LogLevel;
}

export function loadOperatorConfig(env: Env = process.env): OperatorConfig {
  const namespace = str(env, 'PROMOTIONS_NAMESPACE', 'argocd');
  if (!DNS_LABEL.test(namespace) || namespace.length > 63)
    throw new ConfigError('PROMOTIONS_NAMESPACE', `'${namespace.slice(0, 80)}' is not a namespace name`);
  const gitWorkDir = str(env, 'GIT_WORK_DIR', '/tmp/gitops-operator-git');
  if (!gitWorkDir.startsWith('/')) throw new ConfigError('GIT_WORK_DIR', `'${gitWorkDir}' is not an absolute path`);
  const email = str(env, 'COMMIT_AUTHOR_EMAIL', 'gitops-operator@hosted-runtimes.invalid');
  if (!/^[^\s<>@]+@[^\s<>@]+$/.test(email))
    throw new ConfigError('COMMIT_AUTHOR_EMAIL', `'${email.slice(0, 80)}' is not an email address`);
  const name = str(env, 'COMMIT_AUTHOR_NAME', 'GitOps Operator');
  if (/[<>\n]/.test(name) || name.length > 100) throw new ConfigError('COMMIT_AUTHOR_NAME', 'is not a plain name');
  return {
    port: int(env, 'PORT', 8080, 0, 65535),
    host: str(env, 'HOST', '0.0.0.0'),
    namespace,
    identity: str(env, 'POD_NAME', process.env.HOSTNAME ?? `gitops-operator-${process.pid}`),
    gitWorkDir,
    gitTimeoutMs: int(env, 'GIT_TIMEOUT_MS', 120_000, 100, 1_800_000),
    pollMs: int(env, 'POLL_MS', 3000, 100, 600_000),
    syncTimeoutSeconds: int(env, 'SYNC_TIMEOUT_SECONDS', 900, 1, 86_400),
    author: { name, email },
    sourceServerUrl: env.SOURCE_SERVER_URL
      ? url(env, 'SOURCE_SERVER_URL', ['http:', 'https:']).toString().replace(/\/+$/, '')
      : undefined,
    productsUrl: env.PRODUCTS_URL
      ? url(env, 'PRODUCTS_URL', ['http:', 'https:']).toString().replace(/\/+$/, '')
      : undefined,
    kubeconfig: kubeconfigFile(env),
    logLevel: logLevel(env),
  };
}
