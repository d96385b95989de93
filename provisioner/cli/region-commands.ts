/** `provisioner regions`: the root clusters' regions and whether they accept new tenants. */
import type { Command } from 'commander';
import { commandContext, type Io } from './command-context.ts';
import { table } from './format.ts';

export function addRegionCommands(program: Command, io: Io): void {
  const { client, print } = commandContext(program, io);

  const regions = program.command('regions').description('regions of the root clusters (what a signup may ask for)');
  regions
    .command('list', { isDefault: true }) // `provisioner regions` lists too
    .description('regions and whether they accept new tenants')
    .action(async () => {
      const { items } = await client().call('GET /v1/regions');
      print({ items }, () =>
        table(
          ['REGION', 'ACCEPTING'],
          items.map((r) => [r.name, r.accepting]),
        ),
      );
    });
}
