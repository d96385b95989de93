/**
 * What `pulumi stack rm` leaves in a DIY Postgres state backend: the removed stack's checkpoint
 * backups (`.pulumi/backups/<project>/<stack>/…`), update history (`.pulumi/history/<project>/
 * <stack>/…`) and the last checkpoint's `.bak` copy. They hold the stack's full state (secrets
 * encrypted) and nothing reads them once the stack is gone, so a tenant's delete removes them
 * too. Only for postgres:// backends (the provisioner's own database by default); other backends
 * keep theirs.
 */
import { deleteStateObjects } from '../store/pulumi-state.ts';
import pg from 'pg';

/** LIKE patterns of the objects a removed stack leaves (names are [a-z0-9-]: no LIKE wildcards). */
export function leftoverPatterns(project: string, stack: string): string[] {
  for (const name of [project, stack]) {
    if (!/^[A-Za-z0-9-]+$/.test(name)) throw new Error(`'${name}' cannot be matched safely in the state backend`);
  }
  return [
    `%.pulumi/backups/${project}/${stack}/%`,
    `%.pulumi/history/${project}/${stack}/%`,
    `%.pulumi/stacks/${project}/${stack}.json.bak`,
    `%.pulumi/stacks/${project}/${stack}.json.gz.bak`,
  ];
}

/** The connection string and table of a postgres:// backend URL, or undefined for other backends. */
export function postgresBackend(backendUrl: string): { connectionString: string; table: string } | undefined {
  let url: URL;
  try {
    url = new URL(backendUrl);
  } catch {
    return undefined;
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') return undefined;
  const table = url.searchParams.get('table') ?? 'pulumi_state';
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(table)) return undefined;
  url.searchParams.delete('table');
  return { connectionString: url.toString(), table };
}

/**
 * Deletes a removed stack's leftovers from a postgres:// backend; returns how many objects went.
 * Returns 0 for other backends.
 */
export async function purgeRemovedStack(backendUrl: string, project: string, stack: string): Promise<number> {
  const backend = postgresBackend(backendUrl);
  if (!backend) return 0;
  const client = new pg.Client({ connectionString: backend.connectionString });
  await client.connect();
  try {
    return await deleteStateObjects(client, backend.table, leftoverPatterns(project, stack));
  } finally {
    await client.end();
  }
}
