/**
 * `provisioner managed-clusters list|add|remove TENANT …`: the clusters a tenant's Argo CD deploys
 * to (/v1/tenants/:id/managed-clusters). Credentials are read from files, never from the command
 * line (where `ps` would show them). Tables by default, the API's JSON with --json.
 */
import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { apiClientOf, readKubeconfig, UsageError, type Io } from './api-commands.ts';
import { age, table } from './format.ts';

interface ManagedCluster {
  name: string;
  server: string;
  namespaces: string[];
  authMethod: string;
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
    .action(
      async (
        tenant: string,
        name: string,
        o: { kubeconfig?: string; server?: string; tokenFile?: string; caFile?: string; namespace?: string[] },
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
          { name, ...(o.namespace ? { namespaces: o.namespace } : {}), ...credentials },
        );
        const m = out.managedCluster;
        print(
          out,
          () =>
            `registered managed cluster ${m.name} (${m.server}, Kubernetes ${m.serverVersion ?? 'unknown'}, ${
              m.namespaces.join(',') || 'cluster-wide'
            }); operation ${out.operationId} writes it into the tenant's Argo CD`,
        );
      },
    );

  group.command('remove <tenant> <name>').action(async (tenant: string, name: string) => {
    const out = await client().request<{ operationId: string } | undefined>('DELETE', path(tenant, name));
    print(out ?? { removed: false }, () =>
      out
        ? `removing managed cluster ${name}: operation ${out.operationId} deletes it from the tenant's Argo CD`
        : `no managed cluster ${name}: nothing to remove`,
    );
  });
}
