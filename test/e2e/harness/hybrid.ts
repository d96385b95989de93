/**
 * What the hybrid-runtime end-to-end files share: the control plane as the `provisioner serve`
 * process (no engine: the customer's cluster is the customer's) at a URL fixed before it starts
 * (its bundles name it), a tenant signed up there, and the customer's side of an install: a
 * kubeconfig as one of the install's ServiceAccounts (its token, as its pod would mount it), a
 * workload's environment as its pod would get it, and the remove command's kubectl arguments.
 */
import { execFile } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { createTestDatabase } from '../../helpers/postgres.ts';
import type { kubectlRunner } from '../../helpers/kubectl.ts';
import { newSecrets, startProvisioner } from '../../../sandbox/provisioner-process.ts';
import { serverPort } from '../../../sandbox/processes.ts';
import {
  BOOTSTRAP_SECRET,
  BOOTSTRAP_TOKEN_KEY,
  CREDENTIAL_KEYS,
  CREDENTIALS_SECRET,
} from '../../../runtime/protocol/bootstrap.ts';

/** The runtime's namespace in the customer's cluster. */
/**
 * The namespace of hybrid runtime `name` in the customer's cluster: each runtime registered now has
 * its own (docs/hybrid.md, "Names"); the runtime's `namespace` field says it.
 */
export function runtimeNamespace(name: string): string {
  return `hosted-runtime-${name}`;
}

type Kubectl = ReturnType<typeof kubectlRunner>;
export type Answer<T> = { status: number; body: T & { error?: { code: string; message: string } } };

export interface HybridControlPlane {
  publicUrl: string;
  call: <T>(method: string, path: string, key: string, body?: unknown) => Promise<Answer<T>>;
  /** A new tenant: its id and API key. */
  signup: (prefix: string) => Promise<{ tenantId: string; apiKey: string }>;
}

/** `provisioner serve` with its own database under `dir`, stopped at the test's teardown. */
export async function startHybridControlPlane(
  t: { teardown(fn: () => unknown): void },
  bin: string,
  dir: string,
): Promise<HybridControlPlane> {
  const db = await createTestDatabase();
  t.teardown(() => db.drop());
  const port = await serverPort();
  const publicUrl = `http://127.0.0.1:${port}`;
  const dataDir = join(dir, 'provisioner');
  await mkdir(dataDir, { recursive: true });
  const provisioner = await startProvisioner(
    {
      toolchainBin: bin,
      pluginBin: bin,
      databaseUrl: db.url,
      dataDir,
      pulumiHome: join(dir, 'pulumi-home'),
      chartDir: dir,
      ...newSecrets('hybrid'),
      logFile: join(dir, 'provisioner.log'),
      env: { PROVISIONER_ENGINE: 'none', PROVISIONER_PUBLIC_URL: publicUrl },
    },
    port,
  );
  t.teardown(() => provisioner.process.stop());
  const call = async <T>(method: string, path: string, key: string, body?: unknown): Promise<Answer<T>> => {
    const res = await fetch(publicUrl + path, {
      method,
      headers: {
        authorization: `Bearer ${key}`,
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    return { status: res.status, body: (text ? JSON.parse(text) : {}) as Answer<T>['body'] };
  };
  const signup = async (prefix: string) => {
    const res = await fetch(`${publicUrl}/v1/signup`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ organization: `${prefix}-${Date.now()}`, email: 'owner@example.com' }),
    });
    if (res.status !== 202) throw new Error(`signup answered ${res.status}: ${await res.text()}`);
    const body = (await res.json()) as { tenant: { id: string }; apiKey: string };
    return { tenantId: body.tenant.id, apiKey: body.apiKey };
  };
  return { publicUrl, call, signup };
}

/** A kubeconfig file under `dir` for the cluster of `adminKubeconfig`, as ServiceAccount `account` of the runtime's namespace. */
export async function kubeconfigAs(
  kubectl: Kubectl,
  adminKubeconfig: string,
  dir: string,
  account: string,
  namespace: string,
): Promise<string> {
  const token = await kubectl(['create', 'token', account, '-n', namespace, '--duration', '1h']);
  if (token.code !== 0) throw new Error(`no token for ${account}: ${token.output}`);
  const doc = JSON.parse(adminKubeconfig) as { users: Array<{ user: Record<string, string> }> };
  doc.users[0]!.user = { token: token.stdout.trim() };
  const file = join(dir, `${account}.kubeconfig`);
  await writeFile(file, JSON.stringify(doc), { mode: 0o600 });
  return file;
}

/** A Secret of the runtime's namespace, its values decoded. */
export async function secretValues(kubectl: Kubectl, name: string, namespace: string): Promise<Record<string, string>> {
  const r = await kubectl(['get', 'secret', name, '-n', namespace, '-o', 'json']);
  if (r.code !== 0) throw new Error(`no Secret ${name}: ${r.output}`);
  const data = (JSON.parse(r.stdout) as { data?: Record<string, string> }).data ?? {};
  return Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]));
}

/**
 * A workload's container environment in `manifests` as its pod would get it: the plain values,
 * the Secrets' values it references (read from the cluster), the downward API's namespace and name.
 * The Secret volumes its container mounts are written under `dir` (one folder per volume, the keys
 * as files, as the kubelet would project them) and a variable naming a file under a mountPath
 * (RUNTIME_TOKEN_FILE) names that file instead: the agent runs as a process, not in a mount namespace.
 */
export async function workloadEnv(
  kubectl: Kubectl,
  manifests: string,
  kind: string,
  name: string,
  namespace: string,
  dir: string,
): Promise<Record<string, string>> {
  type Env = {
    name: string;
    value?: string;
    valueFrom?: { secretKeyRef?: { name: string; key: string }; fieldRef?: { fieldPath: string } };
  };
  type Volume = {
    name: string;
    secret?: { secretName: string; optional?: boolean; items?: Array<{ key: string; path: string }> };
  };
  type W = {
    kind: string;
    metadata: { name: string };
    spec: {
      template: {
        spec: {
          containers: Array<{ env?: Env[]; volumeMounts?: Array<{ name: string; mountPath: string }> }>;
          volumes?: Volume[];
        };
      };
    };
  };
  const w = parseAllDocuments(manifests)
    .map((d) => d.toJS() as W)
    .find((o) => o?.kind === kind && o.metadata.name === name);
  if (!w) throw new Error(`the bundle has no ${kind} ${name}`);
  const container = w.spec.template.spec.containers[0];
  const mounts: Array<{ mountPath: string; local: string }> = [];
  for (const m of container?.volumeMounts ?? []) {
    const volume = (w.spec.template.spec.volumes ?? []).find((v) => v.name === m.name);
    if (!volume?.secret) continue;
    const local = join(dir, `${kind.toLowerCase()}-${name}-volumes`, m.name);
    await mkdir(local, { recursive: true, mode: 0o700 });
    // An optional Secret that does not exist yet is an empty volume, as the kubelet mounts it.
    const values = await secretValues(kubectl, volume.secret.secretName, namespace).catch(
      (err: Error): Record<string, string> => {
        if (volume.secret?.optional && /NotFound/.test(err.message)) return {};
        throw err;
      },
    );
    const items = volume.secret.items ?? Object.keys(values).map((key) => ({ key, path: key }));
    for (const item of items) {
      if (values[item.key] !== undefined) await writeFile(join(local, item.path), values[item.key]!, { mode: 0o600 });
    }
    mounts.push({ mountPath: m.mountPath.replace(/\/$/, ''), local });
  }
  const localPath = (value: string) => {
    const m = mounts.find((x) => value.startsWith(`${x.mountPath}/`));
    return m ? m.local + value.slice(m.mountPath.length) : value;
  };
  const out: Record<string, string> = {};
  for (const e of container?.env ?? []) {
    if (e.value !== undefined) out[e.name] = localPath(e.value);
    else if (e.valueFrom?.secretKeyRef)
      out[e.name] =
        (await secretValues(kubectl, e.valueFrom.secretKeyRef.name, namespace))[e.valueFrom.secretKeyRef.key] ?? '';
    else if (e.valueFrom?.fieldRef?.fieldPath === 'metadata.namespace') out[e.name] = namespace;
    else if (e.valueFrom?.fieldRef?.fieldPath === 'metadata.name') out[e.name] = `${name}-0`;
  }
  return out;
}

/** The kubectl arguments of the remove command's first line (`kubectl delete … -l '…'`), quotes taken off. */
export function removeCommandArgs(removeCommand: string): string[] {
  return removeCommand
    .split('\n')[0]!
    .split(' ')
    .slice(1)
    .map((a) => a.replace(/^'|'$/g, ''));
}

const bootstrapMain = fileURLToPath(new URL('../../../runtime/agents/bootstrap/main.ts', import.meta.url));

/**
 * The install's bootstrap Job, run as its pod would: the bootstrap Secret's token as a mounted
 * file, the Job's environment, its ServiceAccount's token. Answers how it ended and the runtime key
 * it wrote into the credentials Secret.
 */
export async function runBootstrapProgram(
  kubectl: Kubectl,
  adminKubeconfig: string,
  dir: string,
  manifests: string,
  namespace: string,
): Promise<{ code: number; output: string; runtimeKey: string | undefined }> {
  const tokenDir = join(dir, 'bootstrap-token');
  await mkdir(tokenDir, { recursive: true });
  const tokenFile = join(tokenDir, BOOTSTRAP_TOKEN_KEY);
  await writeFile(tokenFile, (await secretValues(kubectl, BOOTSTRAP_SECRET, namespace))[BOOTSTRAP_TOKEN_KEY] ?? '');
  const env = {
    PATH: process.env.PATH ?? '',
    ...(await workloadEnv(kubectl, manifests, 'Job', 'runtime-bootstrap', namespace, dir)),
    BOOTSTRAP_TOKEN_FILE: tokenFile,
    KUBECONFIG: await kubeconfigAs(kubectl, adminKubeconfig, dir, 'runtime-bootstrap', namespace),
  };
  const run = await new Promise<{ code: number; output: string }>((resolve) =>
    execFile(process.execPath, [bootstrapMain], { env, timeout: 120_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, output: stdout + stderr }),
    ),
  );
  const credentials = run.code === 0 ? await secretValues(kubectl, CREDENTIALS_SECRET, namespace) : {};
  return { ...run, runtimeKey: credentials[CREDENTIAL_KEYS.token] };
}
