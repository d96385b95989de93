/**
 * `provisioner managed-clusters list|add|remove TENANT …`: the clusters a tenant's Argo CD deploys
 * to (/v1/tenants/:id/managed-clusters). Credentials are read from files, never from the command
 * line (where `ps` would show them). Tables by default, the API's JSON with --json.
 *
 * `connect` runs on the tenant's machine with the tenant's kubeconfig (a file the local user names;
 * the API never reads one): it asks for a bootstrap token, creates the bootstrap's ServiceAccount
 * and RBAC on the cluster with the tenant's credentials, requests a token for the account and
 * redeems the bootstrap token with it.
 */
import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import type { KubernetesObjectApi } from '@kubernetes/client-node';
import { apiClientOf, readKubeconfig, UsageError, type Io } from './api-commands.ts';
import { ApiClient } from './client.ts';
import {
  BOOTSTRAP_ACCOUNT,
  BOOTSTRAP_NAMESPACE,
  bootstrapObjects,
  type KubeObject,
} from '../managed-clusters/bootstrap.ts';
import { age, table } from './format.ts';

interface ManagedCluster {
  name: string;
  server: string;
  namespaces: string[];
  authMethod: string;
  /** Absent from an older server's answer. */
  reach?: 'controlPlane' | 'runtime';
  serverVersion: string | null;
  conditions: Array<{ type: string; status: string; reason: string; message: string }>;
  lastProbeAt: string | null;
}

async function readSecretFile(option: string, file: string): Promise<string> {
  try {
    return (await readFile(file, 'utf8')).trim();
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === 'ENOENT' ? 'no such file' : code === 'EISDIR' ? 'it is a directory' : (err as Error).message;
    throw new UsageError(`${option}: cannot read '${file}': ${why}`, { cause: err });
  }
}

const reachable = (m: ManagedCluster) => {
  const c = m.conditions.find((x) => x.type === 'Reachable');
  return c ? `${c.status} (${c.reason})` : 'Unknown';
};

export function addManagedClusterCommands(program: Command, io: Io): void {
  const client = () => apiClientOf(program, io);
  const json = (): boolean => program.opts<{ json?: boolean }>().json === true;
  const print = (data: unknown, text: () => string) => io.out(json() ? JSON.stringify(data, null, 2) : text());
  const path = (tenant: string, name?: string) =>
    `/v1/tenants/${encodeURIComponent(tenant)}/managed-clusters${name ? `/${encodeURIComponent(name)}` : ''}`;

  const group = program
    .command('managed-clusters')
    .description('the clusters a tenant\'s Argo CD deploys to (docs/api.md "Managed clusters")');

  group.command('list <tenant>').action(async (tenant: string) => {
    const { items } = await client().request<{ items: ManagedCluster[] }>('GET', path(tenant));
    print({ items }, () =>
      table(
        ['NAME', 'SERVER', 'NAMESPACES', 'REACHABLE', 'VERSION', 'PROBED'],
        items.map((m) => [
          m.name,
          m.server,
          m.namespaces.join(',') || '(cluster-wide)',
          reachable(m),
          m.serverVersion,
          m.lastProbeAt ? `${age(m.lastProbeAt)} ago` : '',
        ]),
      ),
    );
  });

  group
    .command('add <tenant> <name>')
    .description(
      'register a cluster, checked against it first: --kubeconfig FILE, or --server URL --token-file FILE [--ca-file FILE]',
    )
    .option('--kubeconfig <file>', 'kubeconfig with inline credentials (no exec, auth-provider or file paths)')
    .option('--server <url>', 'https URL of the API server (with --token-file)')
    .option('--token-file <file>', 'file holding the bearer token')
    .option('--ca-file <file>', "file holding the API server's CA certificate (PEM)")
    .option('--namespace <ns...>', 'namespace Argo CD deploys to (repeatable); none: the whole cluster')
    .option(
      '--via-runtime',
      "the cluster is reachable only from the tenant's runtime: checked and probed through the runtime's tunnel",
    )
    .action(
      async (
        tenant: string,
        name: string,
        o: {
          kubeconfig?: string;
          server?: string;
          tokenFile?: string;
          caFile?: string;
          namespace?: string[];
          viaRuntime?: boolean;
        },
      ) => {
        let credentials: Record<string, string>;
        if (o.kubeconfig !== undefined) {
          if (o.server !== undefined || o.tokenFile !== undefined || o.caFile !== undefined)
            throw new UsageError('give either --kubeconfig, or --server with --token-file (and --ca-file), not both');
          credentials = { kubeconfig: await readKubeconfig(o.kubeconfig) };
        } else {
          if (o.server === undefined || o.tokenFile === undefined)
            throw new UsageError('give --kubeconfig FILE, or --server URL with --token-file FILE');
          credentials = {
            server: o.server,
            token: await readSecretFile('--token-file', o.tokenFile),
            ...(o.caFile !== undefined ? { caData: await readSecretFile('--ca-file', o.caFile) } : {}),
          };
        }
        const out = await client().request<{ managedCluster: ManagedCluster; operationId: string }>(
          'POST',
          path(tenant),
          {
            name,
            ...(o.namespace ? { namespaces: o.namespace } : {}),
            ...(o.viaRuntime ? { reach: 'runtime' } : {}),
            ...credentials,
          },
        );
        const m = out.managedCluster;
        print(
          out,
          () =>
            `registered managed cluster ${m.name} (${m.server}, Kubernetes ${m.serverVersion ?? 'unknown'}, ${
              m.namespaces.join(',') || 'cluster-wide'
            }${m.reach === 'runtime' ? ', reached through the runtime' : ''}); operation ${out.operationId} writes it into the tenant's Argo CD`,
        );
      },
    );

  group
    .command('remove <tenant> <name>')
    .option('--remove-rbac', 'also delete the Roles and bindings a bootstrap created')
    .action(async (tenant: string, name: string, o: { removeRbac?: boolean }) => {
      const out = await client().request<
        { operationId: string; revocation?: { serviceAccount: string; revoked: boolean; error?: string } } | undefined
      >('DELETE', `${path(tenant, name)}${o.removeRbac ? '?removeRbac=1' : ''}`);
      const revoked = out?.revocation
        ? out.revocation.revoked
          ? `; ServiceAccount ${out.revocation.serviceAccount} deleted (its tokens no longer work)`
          : `; ServiceAccount ${out.revocation.serviceAccount} NOT deleted: ${out.revocation.error ?? 'unknown'}`
        : '';
      print(out ?? { removed: false }, () =>
        out
          ? `removing managed cluster ${name}: operation ${out.operationId} deletes it from the tenant's Argo CD${revoked}`
          : `no managed cluster ${name}: nothing to remove`,
      );
    });

  group
    .command('connect <tenant> <name>')
    .description(
      'create a least-privilege ServiceAccount on the cluster with your kubeconfig and register it (short-lived tokens)',
    )
    .requiredOption('--kubeconfig <file>', 'your kubeconfig for the cluster (used here only, never sent)')
    .option('--context <name>', 'the kubeconfig context (default: its current context)')
    .option('--namespaces <list>', 'comma-separated namespaces Argo CD deploys to')
    .option('--cluster-wide', 'grant every namespace (a ClusterRole): only when needed')
    .option('--server <url>', "the URL the service reaches the API server at (default: the kubeconfig's)")
    .action(
      async (
        tenant: string,
        name: string,
        o: { kubeconfig: string; context?: string; namespaces?: string; clusterWide?: boolean; server?: string },
      ) => {
        const namespaces = (o.namespaces ?? '')
          .split(',')
          .map((n) => n.trim())
          .filter((n) => n !== '');
        if (namespaces.length === 0 && !o.clusterWide)
          throw new UsageError('give --namespaces a,b (or --cluster-wide to grant the whole cluster)');
        // Loaded here only: the other commands start without the Kubernetes client.
        const k8s = await import('@kubernetes/client-node');
        const kc = new k8s.KubeConfig();
        try {
          kc.loadFromFile(o.kubeconfig);
          if (o.context) kc.setCurrentContext(o.context);
        } catch (err) {
          throw new UsageError(`--kubeconfig: cannot load '${o.kubeconfig}': ${(err as Error).message}`, {
            cause: err,
          });
        }
        const cluster = kc.getCurrentCluster();
        if (!cluster) throw new UsageError(`--kubeconfig: '${o.kubeconfig}' has no current cluster`);
        const server = o.server ?? cluster.server;
        const caData = cluster.caData
          ? Buffer.from(cluster.caData, 'base64').toString('utf8')
          : cluster.caFile
            ? await readSecretFile('--kubeconfig certificate-authority', cluster.caFile)
            : undefined;

        const api = client();
        const { bootstrap } = await api.request<{ bootstrap: { token: string; expiresAt: string } }>(
          'POST',
          path(tenant),
          {
            name,
            bootstrap: { ...(namespaces.length ? { namespaces } : {}), clusterWide: o.clusterWide === true, server },
          },
        );
        const objects = k8s.KubernetesObjectApi.makeApiClient(kc);
        for (const object of bootstrapObjects(namespaces, o.clusterWide === true)) await ensure(objects, object);
        const issued = await kc.makeApiClient(k8s.CoreV1Api).createNamespacedServiceAccountToken({
          name: BOOTSTRAP_ACCOUNT,
          namespace: BOOTSTRAP_NAMESPACE,
          body: { spec: { audiences: [], expirationSeconds: 600 } },
        });
        const token = issued.status?.token;
        if (!token) throw new UsageError('the cluster answered the TokenRequest without a token');
        const redeemer = new ApiClient({ url: apiUrlOf(program, io), token: bootstrap.token });
        const out = await redeemer.request<{ managedCluster: ManagedCluster; operationId: string }>(
          'POST',
          '/v1/managed-clusters/redeem',
          { server, token, ...(caData ? { caData } : {}) },
        );
        const m = out.managedCluster;
        print(
          out,
          () =>
            `connected managed cluster ${m.name} (${m.server}, Kubernetes ${m.serverVersion ?? 'unknown'}, ${
              m.namespaces.join(',') || 'cluster-wide'
            }) as ServiceAccount ${BOOTSTRAP_NAMESPACE}/${BOOTSTRAP_ACCOUNT}; operation ${out.operationId} writes it into the tenant's Argo CD`,
        );
      },
    );
}

/** The API's URL as the global options or the environment give it. */
function apiUrlOf(program: Command, io: Io): string {
  return program.opts<{ url?: string }>().url ?? io.env.PROVISIONER_URL ?? 'http://127.0.0.1:8080';
}

/** Creates an object; an existing one is left (namespace, account) or replaced (RBAC, to its least-privilege form). */
async function ensure(api: KubernetesObjectApi, object: KubeObject): Promise<void> {
  try {
    await api.create(object);
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code !== 409) throw err;
    if (object.kind === 'Namespace' || object.kind === 'ServiceAccount') return;
    await api.replace(object);
  }
}
