/**
 * `provisioner managed-clusters list|add|remove TENANT …`: the clusters a tenant's Argo CD deploys
 * to (/v1/tenants/:id/managed-clusters). Credentials are read from files, never from the command
 * line (where `ps` would show them). Tables by default, the API's JSON with --json.
 *
 * `connect` runs on the tenant's machine with the tenant's kubeconfig (a file the local user names;
 * the API never reads one): it asks for a bootstrap token, creates the bootstrap's ServiceAccount
 * and RBAC on the cluster with the tenant's credentials, requests a token for the account and
 * redeems the bootstrap token with it. `remove --remove-rbac --kubeconfig` deletes, with the same
 * kind of file, what a bootstrap created for the registration (managed-cluster-cleanup.ts).
 */
import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import type { KubeConfig, KubernetesObjectApi } from '@kubernetes/client-node';
import { apiClientOf, readKubeconfig, UsageError, type Io } from './api-commands.ts';
import { ApiClient, ApiError } from './client.ts';
import { ExitCode } from './doctor.ts';
import {
  describe as describeObject,
  kubectlDelete,
  leftAfterDelete,
  removeRegistrationObjects,
  type ObjectRef,
} from './managed-cluster-cleanup.ts';
import {
  BOOTSTRAP_NAMESPACE,
  bootstrapAccount,
  bootstrapObjects,
  type KubeObject,
} from '../managed-clusters/bootstrap.ts';
import { age, table } from './format.ts';
import type { ManagedCluster } from '../api/types.ts';

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
  const group = program
    .command('managed-clusters')
    .description('the clusters a tenant\'s Argo CD deploys to (docs/api.md "Managed clusters")');

  group.command('list <tenant>').action(async (tenant: string) => {
    const { items } = await client().call('GET /v1/tenants/:id/managed-clusters', { params: { id: tenant } });
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
        const out = await client().call('POST /v1/tenants/:id/managed-clusters', {
          params: { id: tenant },
          body: {
            name,
            ...(o.namespace ? { namespaces: o.namespace } : {}),
            ...(o.viaRuntime ? { reach: 'runtime' as const } : {}),
            ...credentials,
          },
        });
        // Credentials given: the registration (a bootstrap's token is the other answer of this route).
        if (!('managedCluster' in out)) throw new Error('the control plane answered a bootstrap to a registration');
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
    .description(
      'remove a registration (idempotent); with --remove-rbac --kubeconfig FILE also every object a bootstrap created for it on the cluster',
    )
    .option(
      '--remove-rbac',
      'also delete the RBAC a bootstrap created: the API deletes the Roles; the bindings need --kubeconfig (without it, they are listed)',
    )
    .option(
      '--kubeconfig <file>',
      'with --remove-rbac: your kubeconfig for the cluster, to delete what the bootstrap created for this registration (used here only, never sent)',
    )
    .option('--context <name>', 'the kubeconfig context (default: its current context)')
    .action(
      async (tenant: string, name: string, o: { removeRbac?: boolean; kubeconfig?: string; context?: string }) => {
        if ((o.kubeconfig !== undefined || o.context !== undefined) && !o.removeRbac)
          throw new UsageError('--kubeconfig and --context are for --remove-rbac');
        if (o.context !== undefined && o.kubeconfig === undefined)
          throw new UsageError('--context names a context of --kubeconfig FILE: give the file too');
        // The kubeconfig is loaded first: a mistake in it stops the command before anything is removed.
        const kc = o.kubeconfig !== undefined ? await loadKubeconfig(o.kubeconfig, o.context) : undefined;
        const api = client();
        let registration: ManagedCluster | undefined;
        if (o.removeRbac) {
          try {
            registration = await api.call('GET /v1/tenants/:id/managed-clusters/:name', {
              params: { id: tenant, name },
            });
          } catch (err) {
            if (!(err instanceof ApiError && err.code === 'MANAGED_CLUSTER_NOT_FOUND')) throw err;
          }
        }
        const out = await api.call('DELETE /v1/tenants/:id/managed-clusters/:name', {
          params: { id: tenant, name },
          query: o.removeRbac ? { removeRbac: '1' } : {},
        });
        const revocation = out?.revocation;
        // A bootstrap's account is deleted; a tenant's own account keeps existing, the Secret its
        // tokens are bound to is deleted (`binding`), or its unbound tokens run out (`validUntil`).
        const rerun = revocation?.command ? ` (run: ${revocation.command})` : '';
        const revoked = !revocation
          ? ''
          : revocation.binding !== undefined || revocation.validUntil !== undefined
            ? revocation.revoked
              ? `; the tokens of ServiceAccount ${revocation.serviceAccount} no longer work (Secret ${revocation.binding} deleted)`
              : `; the tokens of ServiceAccount ${revocation.serviceAccount} were NOT revoked: ${revocation.error ?? 'unknown'}${rerun}`
            : revocation.revoked
              ? `; ServiceAccount ${revocation.serviceAccount} deleted (its tokens no longer work)`
              : `; ServiceAccount ${revocation.serviceAccount} NOT deleted: ${revocation.error ?? 'unknown'}${rerun}`;
        const lines = [
          out
            ? `removing managed cluster ${name}: operation ${out.operationId} deletes it from the tenant's Argo CD${revoked}`
            : `no managed cluster ${name}: nothing to remove`,
        ];
        const kubectlArgs = `${o.kubeconfig !== undefined ? ` --kubeconfig ${o.kubeconfig}` : ''}${
          o.context !== undefined ? ` --context ${o.context}` : ''
        }`;
        if (kc) {
          const cleanup = await removeRegistrationObjects(
            kc,
            { tenantId: tenant, name },
            registration ? { namespaces: registration.namespaces } : undefined,
            kubectlArgs,
          );
          if (cleanup.deleted.length > 0)
            lines.push(
              `deleted on the cluster (${cleanup.selector}):`,
              ...cleanup.deleted.map((d) => `  ${describeObject(d)}`),
            );
          else if (cleanup.failed.length === 0)
            lines.push(`nothing on the cluster belongs to managed cluster ${name} (${cleanup.selector})`);
          if (cleanup.failed.length > 0)
            lines.push(
              'NOT deleted (finish with your own credentials):',
              ...cleanup.failed.flatMap((f) => [`  ${describeObject(f)}: ${f.error}`, `    ${f.command}`]),
            );
          if (cleanup.deleted.length > 0)
            lines.push(
              `namespace ${BOOTSTRAP_NAMESPACE} kept (other registrations of this cluster may use it): kubectl${kubectlArgs} delete namespace ${BOOTSTRAP_NAMESPACE} once nothing else is in it`,
            );
          print({ ...(out ?? { removed: false }), cluster: cleanup }, () => lines.join('\n'));
          if (cleanup.failed.length > 0) throw new ExitCode(1);
          return;
        }
        // Without the tenant's credentials: what the API's DELETE leaves, and how to remove it.
        let left: ObjectRef[] = [];
        // A bootstrap's account (its own, or the one older bootstraps shared) is in the bootstrap namespace.
        const [saNamespace, account] = revocation?.serviceAccount.split('/') ?? [];
        const bootstrapped =
          saNamespace === BOOTSTRAP_NAMESPACE &&
          account !== undefined &&
          revocation?.binding === undefined &&
          revocation?.validUntil === undefined;
        if (o.removeRbac && registration && revocation && bootstrapped)
          left = leftAfterDelete(account, registration.namespaces, revocation.removed ?? [], revocation.revoked);
        if (left.length > 0)
          lines.push(
            'left on the cluster (the account cannot delete its RoleBindings once their Roles are gone; they grant nothing without them):',
            ...left.map((l) => `  ${describeObject(l)}`),
            'remove them with your own credentials for the cluster:',
            `  provisioner managed-clusters remove ${tenant} ${name} --remove-rbac --kubeconfig FILE`,
            'or:',
            ...left.map((l) => `  ${kubectlDelete(l, '')}`),
          );
        print(
          { ...(out ?? { removed: false }), ...(o.removeRbac && registration ? { leftOnCluster: left } : {}) },
          () => lines.join('\n'),
        );
      },
    );

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
        const kc = await loadKubeconfig(o.kubeconfig, o.context);
        const cluster = kc.getCurrentCluster();
        if (!cluster) throw new UsageError(`--kubeconfig: '${o.kubeconfig}' has no current cluster`);
        const server = o.server ?? cluster.server;
        const caData = cluster.caData
          ? Buffer.from(cluster.caData, 'base64').toString('utf8')
          : cluster.caFile
            ? await readSecretFile('--kubeconfig certificate-authority', cluster.caFile)
            : undefined;

        const api = client();
        const asked = await api.call('POST /v1/tenants/:id/managed-clusters', {
          params: { id: tenant },
          body: {
            name,
            bootstrap: { ...(namespaces.length ? { namespaces } : {}), clusterWide: o.clusterWide === true, server },
          },
        });
        // A bootstrap asked: its token (a registration is the other answer of this route).
        if (!('bootstrap' in asked)) throw new Error('the control plane answered a registration to a bootstrap');
        const { bootstrap } = asked;
        const account = bootstrapAccount({ tenantId: tenant, name });
        const objects = k8s.KubernetesObjectApi.makeApiClient(kc);
        for (const object of bootstrapObjects({ tenantId: tenant, name }, namespaces, o.clusterWide === true))
          await ensure(objects, object);
        const issued = await kc.makeApiClient(k8s.CoreV1Api).createNamespacedServiceAccountToken({
          name: account,
          namespace: BOOTSTRAP_NAMESPACE,
          body: { spec: { audiences: [], expirationSeconds: 600 } },
        });
        const token = issued.status?.token;
        if (!token) throw new UsageError('the cluster answered the TokenRequest without a token');
        const redeemer = new ApiClient({ baseUrl: apiUrlOf(program, io), token: bootstrap.token });
        const out = await redeemer.call('POST /v1/managed-clusters/redeem', {
          body: { server, token, ...(caData ? { caData } : {}) },
        });
        const m = out.managedCluster;
        print(
          out,
          () =>
            `connected managed cluster ${m.name} (${m.server}, Kubernetes ${m.serverVersion ?? 'unknown'}, ${
              m.namespaces.join(',') || 'cluster-wide'
            }) as ServiceAccount ${BOOTSTRAP_NAMESPACE}/${account}; operation ${out.operationId} writes it into the tenant's Argo CD`,
        );
      },
    );
}

/** The tenant's kubeconfig file (and context); the Kubernetes client is loaded here, by the commands needing it only. */
async function loadKubeconfig(file: string, context: string | undefined): Promise<KubeConfig> {
  const k8s = await import('@kubernetes/client-node');
  const kc = new k8s.KubeConfig();
  try {
    kc.loadFromFile(file);
    if (context) kc.setCurrentContext(context);
  } catch (err) {
    throw new UsageError(`--kubeconfig: cannot load '${file}': ${(err as Error).message}`, { cause: err });
  }
  if (!kc.getCurrentCluster()) throw new UsageError(`--kubeconfig: '${file}' has no current cluster`);
  return kc;
}

/** The API's URL as the global options or the environment give it. */
function apiUrlOf(program: Command, io: Io): string {
  return program.opts<{ url?: string }>().url ?? io.env.PROVISIONER_URL ?? 'http://127.0.0.1:8080';
}

/**
 * Creates an object; an existing one is left (the namespace), given this registration's labels
 * (the account, whose tokens stay valid) or replaced (RBAC, to its least-privilege form).
 */
async function ensure(api: KubernetesObjectApi, object: KubeObject): Promise<void> {
  try {
    await api.create(object);
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code !== 409) throw err;
    if (object.kind === 'Namespace') return;
    if (object.kind === 'ServiceAccount') {
      const { PatchStrategy } = await import('@kubernetes/client-node');
      const { apiVersion, kind, metadata } = object;
      await api.patch(
        { apiVersion, kind, metadata },
        undefined,
        undefined,
        undefined,
        undefined,
        PatchStrategy.MergePatch,
      );
      return;
    }
    await api.replace(object);
  }
}
