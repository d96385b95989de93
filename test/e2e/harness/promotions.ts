/**
 * What the promotion tests set up around the GitOps Operator (docs/promotions.md), shared by
 * promotions.test.ts and gitea-promotions.test.ts: the promotion CRDs, an Argo CD repository
 * Secret (which the operator pushes with, and whose password is the pull requests' token), and
 * the operator itself as a process with its own ServiceAccount's token and exactly its Role.
 */
import { PROMOTIONS_API_VERSION } from '../../../runtime/protocol/promotions.ts';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { serverPort, startProcess, until, type ManagedProcess } from '../../../sandbox/processes.ts';
import type { KubectlRun } from '../../helpers/kubectl.ts';
import { gitopsOperatorRbac, promotionCrds } from '../../../runtime/component/promotion-crds.ts';

type Kubectl = (args: string[]) => Promise<KubectlRun>;

/** `kubectl apply` of a list of objects, kept as `<dir>/<name>.json`. */
export function applier(kubectl: Kubectl, dir: string) {
  return async (name: string, objects: unknown[]): Promise<void> => {
    const file = join(dir, `${name}.json`);
    await writeFile(file, JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objects }));
    const r = await kubectl(['apply', '-f', file]);
    if (r.code !== 0) throw new Error(`kubectl apply ${name}: ${r.output}`);
  };
}

/** A promotion object (Environment, PromotionTemplate, Policy, Flow, Product…) in namespace NS. */
export function promotionObject(ns: string) {
  return (kind: string, name: string, spec: unknown) => ({
    apiVersion: PROMOTIONS_API_VERSION,
    kind,
    metadata: { name, namespace: ns },
    spec,
  });
}

/** The promotion CRDs (runtime/component/promotion-crds.ts), applied and Established. */
export async function installPromotionCrds(kubectl: Kubectl, dir: string): Promise<void> {
  await applier(kubectl, dir)('promotion-crds', promotionCrds());
  const established = await kubectl([
    'wait',
    '--for=condition=Established',
    '--timeout=60s',
    ...promotionCrds().map((c) => `crd/${(c.metadata as { name: string }).name}`),
  ]);
  if (established.code !== 0) throw new Error(`the promotion CRDs: ${established.output}`);
}

/** An Argo CD repository Secret (`argocd.argoproj.io/secret-type=repository`) with HTTP credentials. */
export async function argoCdRepositorySecret(
  kubectl: Kubectl,
  namespace: string,
  o: { name: string; url: string; username: string; password: string },
): Promise<void> {
  const secret = await kubectl([
    'create',
    'secret',
    'generic',
    o.name,
    '-n',
    namespace,
    '--from-literal=type=git',
    `--from-literal=url=${o.url}`,
    `--from-literal=username=${o.username}`,
    `--from-literal=password=${o.password}`,
  ]);
  if (secret.code !== 0) throw new Error(`the repository Secret: ${secret.output}`);
  const label = await kubectl([
    'label',
    'secret',
    o.name,
    '-n',
    namespace,
    'argocd.argoproj.io/secret-type=repository',
  ]);
  if (label.code !== 0) throw new Error(`the repository Secret's label: ${label.output}`);
}

export interface GitopsOperator {
  /** Starts it (again: a restarted container keeps its pod's name) and waits for its /healthz. */
  start(): Promise<void>;
  /** The running process (after `start`). */
  process(): ManagedProcess | undefined;
  /** Resolves once it has finished `n` more rounds (its /readyz reports each round's time). */
  rounds(n: number): Promise<void>;
  /** The last lines of its log, for a failure's message. */
  tail(lines?: number): Promise<string>;
}

/**
 * The GitOps Operator (runtime/agents/gitops-operator/main.ts) as a process watching
 * `namespace` (Argo CD's), as ServiceAccount `gitops-operator` of `runtimeNamespace` with the
 * Role the runtime gives it (a kubeconfig with its token); `env` adds to its environment.
 */
export async function gitopsOperator(
  t: { teardown(fn: () => unknown): void },
  o: {
    kubectl: Kubectl;
    /** The cluster's admin kubeconfig (JSON), whose user is replaced by the operator's token. */
    adminKubeconfig: string;
    namespace: string;
    runtimeNamespace: string;
    dir: string;
    env?: Record<string, string>;
  },
): Promise<GitopsOperator> {
  const made = await o.kubectl(['create', 'namespace', o.runtimeNamespace]);
  if (made.code !== 0 && !/AlreadyExists/.test(made.output)) throw new Error(`the namespace: ${made.output}`);
  await applier(o.kubectl, o.dir)('operator-rbac', gitopsOperatorRbac(o.namespace, o.runtimeNamespace));
  const token = await o.kubectl(['create', 'token', 'gitops-operator', '-n', o.runtimeNamespace, '--duration', '2h']);
  if (token.code !== 0) throw new Error(`no token: ${token.output}`);
  const doc = JSON.parse(o.adminKubeconfig) as { users: Array<{ user: Record<string, string> }> };
  doc.users[0]!.user = { token: token.stdout.trim() };
  const kubeconfig = join(o.dir, 'gitops-operator.kubeconfig');
  await writeFile(kubeconfig, JSON.stringify(doc), { mode: 0o600 });

  const main = fileURLToPath(new URL('../../../runtime/agents/gitops-operator/main.ts', import.meta.url));
  let proc: ManagedProcess | undefined;
  let starts = 0;
  let port = 0;
  t.teardown(() => proc?.stop());
  return {
    process: () => proc,
    tail: async (lines = 15) => (proc ? proc.tail(lines) : 'not started'),
    start: async () => {
      port = await serverPort();
      starts++;
      const p = startProcess('gitops-operator', process.execPath, [main], join(o.dir, `operator-${starts}.log`), {
        env: {
          PATH: process.env.PATH ?? '',
          KUBECONFIG: kubeconfig,
          PROMOTIONS_NAMESPACE: o.namespace,
          // A container restarted in its pod keeps the pod's name: it holds the Lease again at once.
          POD_NAME: 'gitops-operator-0',
          PORT: String(port),
          HOST: '127.0.0.1',
          GIT_WORK_DIR: join(o.dir, `operator-git-${starts}`),
          POLL_MS: '500',
          SYNC_TIMEOUT_SECONDS: '240',
          ...o.env,
        },
      });
      proc = p;
      const at = port;
      await until('the operator’s /healthz', 60_000, async () => {
        if (!p.running()) throw new Error(`the operator exited: ${await p.tail(20)}`);
        return (await fetch(`http://127.0.0.1:${at}/healthz`).catch(() => undefined))?.ok ?? false;
      });
    },
    rounds: async (n: number) => {
      const seen = new Set<number>();
      const since = Date.now();
      await until(`${n} operator rounds`, 60_000, async () => {
        const r = await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => undefined);
        const at = ((await r?.json().catch(() => undefined)) as { at?: number } | undefined)?.at;
        if (at !== undefined && at > since) seen.add(at);
        return seen.size >= n;
      });
    },
  };
}
