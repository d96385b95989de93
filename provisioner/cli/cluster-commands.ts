/** `provisioner clusters …`: root clusters (list, add, import from the root infra's output, cordon). */
import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { commandContext, readKubeconfig, readStdin, UsageError, type Io } from './command-context.ts';
import { table } from './format.ts';
import type { ClusterPutAnswer } from '../api/types.ts';

/** One entry of the root infra's `clusters` stack output (infra/root-cluster.ts, ClusterRegistryEntry). */
export interface ImportedCluster {
  name: string;
  region: string;
  capacity: number;
  labels?: Record<string, string>;
  kubeconfig: string;
}

/**
 * The `clusters` stack output (`pulumi stack output clusters --show-secrets --json`): a JSON list
 * of registry entries. A malformed document is a usage error naming the entry and field; a
 * kubeconfig still hidden as `[secret]` names the missing `--show-secrets`.
 */
export function parseClusterRegistry(text: string, source: string): ImportedCluster[] {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    throw new UsageError(
      `${source}: not JSON; expected the output of \`pulumi stack output clusters --show-secrets --json\``,
    );
  }
  if (!Array.isArray(doc)) throw new UsageError(`${source}: expected a JSON list of clusters`);
  if (doc.length === 0) throw new UsageError(`${source}: the list of clusters is empty`);
  return doc.map((entry: unknown, i) => {
    const at = `${source}: clusters[${i}]`;
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry))
      throw new UsageError(`${at} is not an object`);
    const e = entry as Record<string, unknown>;
    for (const key of ['name', 'region', 'kubeconfig'] as const) {
      if (typeof e[key] !== 'string' || e[key] === '') throw new UsageError(`${at}.${key} must be a non-empty string`);
    }
    if (e.kubeconfig === '[secret]')
      throw new UsageError(
        `${at}.kubeconfig is hidden ('[secret]'): run \`pulumi stack output clusters --show-secrets --json\``,
      );
    if (!Number.isInteger(e.capacity) || (e.capacity as number) < 0)
      throw new UsageError(`${at}.capacity must be a whole number`);
    if (e.labels !== undefined) {
      const labels = e.labels;
      if (
        typeof labels !== 'object' ||
        labels === null ||
        Array.isArray(labels) ||
        Object.values(labels).some((v) => typeof v !== 'string')
      )
        throw new UsageError(`${at}.labels must be an object of strings`);
    }
    return {
      name: e.name as string,
      region: e.region as string,
      capacity: e.capacity as number,
      ...(e.labels !== undefined ? { labels: e.labels as Record<string, string> } : {}),
      kubeconfig: e.kubeconfig as string,
    };
  });
}

export function addClusterCommands(program: Command, io: Io): void {
  const { client, print } = commandContext(program, io);

  const clusters = program.command('clusters').description('root clusters');
  clusters.command('list').action(async () => {
    const { items } = await client().call('GET /v1/clusters');
    print({ items }, () =>
      table(
        ['NAME', 'REGION', 'TENANTS', 'CAPACITY', 'CORDONED', 'PLANS'],
        items.map((c) => [c.name, c.region, c.tenants, c.capacity, c.cordoned, c.plans.join(',') || 'all']),
      ),
    );
  });
  clusters
    .command('add <name>')
    .requiredOption('--region <region>')
    .requiredOption('--capacity <n>')
    .requiredOption('--kubeconfig <file>')
    .option('--label <k=v...>', 'label (repeatable)')
    .option('--plans <list>', 'comma-separated plans allowed')
    .option(
      '--force',
      'register even when the API server cannot be reached, refuses the credentials or lacks permissions the tenants program needs',
    )
    .action(
      async (
        name: string,
        o: { region: string; capacity: string; kubeconfig: string; label?: string[]; plans?: string; force?: boolean },
      ) => {
        const capacity = Number(o.capacity);
        if (!Number.isInteger(capacity) || capacity < 0)
          throw new Error(`--capacity must be a whole number, got '${o.capacity}'`);
        const labels = Object.fromEntries(
          (o.label ?? []).map((kv) => {
            const i = kv.indexOf('=');
            if (i <= 0) throw new Error(`--label must be key=value, got '${kv}'`);
            return [kv.slice(0, i), kv.slice(i + 1)];
          }),
        );
        const kubeconfig = await readKubeconfig(o.kubeconfig);
        const c = await client().call('POST /v1/clusters', {
          body: {
            name,
            region: o.region,
            capacity,
            labels,
            kubeconfig,
            ...(o.plans ? { plans: o.plans.split(',').filter(Boolean) } : {}),
            ...(o.force ? { force: true } : {}),
          },
        });
        print(c, () => `registered cluster ${c.name} (${c.region}, capacity ${c.capacity})`);
      },
    );
  clusters
    .command('import <file>')
    .description(
      "register or update every cluster of the root infra's `clusters` stack output " +
        '(`pulumi stack output clusters --show-secrets --json | provisioner clusters import -`)',
    )
    .option('--force', 'store clusters whose API server cannot be reached or whose credentials fall short')
    .action(async (file: string, o: { force?: boolean }) => {
      let text: string;
      if (file === '-') text = await (io.stdin ?? readStdin)();
      else {
        try {
          text = await readFile(file, 'utf8');
        } catch (err) {
          throw new UsageError(`cannot read '${file}': ${(err as NodeJS.ErrnoException).code ?? String(err)}`, {
            cause: err,
          });
        }
      }
      const entries = parseClusterRegistry(text, file === '-' ? 'stdin' : file);
      const results: ClusterPutAnswer[] = [];
      for (const e of entries) {
        const { name, ...body } = e;
        results.push(
          await client().call('PUT /v1/clusters/:name', {
            params: { name },
            body: o.force ? { ...body, force: true } : body,
          }),
        );
      }
      print({ items: results }, () =>
        results
          .map((r) =>
            r.created
              ? `registered ${r.cluster.name} (${r.cluster.region}, capacity ${r.cluster.capacity})`
              : r.changed.length > 0
                ? `updated ${r.cluster.name}: ${r.changed.join(', ')}`
                : `unchanged ${r.cluster.name}`,
          )
          .join('\n'),
      );
    });
  for (const action of ['cordon', 'uncordon'] as const) {
    clusters.command(`${action} <name>`).action(async (name: string) => {
      const c = await client().call(`POST /v1/clusters/:name/${action}`, { params: { name } });
      print(
        c,
        () => `cluster ${c.name} ${c.cordoned ? 'cordoned: no new tenants will be placed on it' : 'uncordoned'}`,
      );
    });
  }
}
