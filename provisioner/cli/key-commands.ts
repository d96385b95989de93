/** `provisioner keys …`: API keys (admin): create (shown once), list, revoke. */
import type { Command } from 'commander';
import { commandContext, type Io } from './command-context.ts';
import { age, table } from './format.ts';
import type { CreatedKey } from '../api/types.ts';

export function addKeyCommands(program: Command, io: Io): void {
  const { client, print } = commandContext(program, io);

  const keys = program.command('keys').description('API keys (admin)');
  keys
    .command('create')
    .requiredOption('--role <role>', 'admin | operator | tenant | runtime')
    .requiredOption('--name <name>')
    .option('--tenant <id>', 'tenant the key is bound to (tenant and runtime keys)')
    .action(async (o: { role: string; name: string; tenant?: string }) => {
      const r = await client().call('POST /v1/keys', {
        body: {
          role: o.role as CreatedKey['info']['role'], // as given: the API checks it
          name: o.name,
          ...(o.tenant ? { tenantId: o.tenant } : {}),
        },
      });
      print(r, () => `created ${r.info.role} key ${r.info.id}; it is shown only now:\n${r.key}`);
    });
  keys
    .command('list')
    .option('--revoked', 'include revoked keys')
    .action(async (o: { revoked?: boolean }) => {
      const r = await client().call('GET /v1/keys', { query: o.revoked ? { includeRevoked: true } : {} });
      print(r, () =>
        table(
          ['ID', 'PREFIX', 'ROLE', 'NAME', 'TENANT', 'AGE', 'REVOKED'],
          r.items.map((k) => [k.id, k.prefix + '…', k.role, k.name, k.tenantId, age(k.createdAt), k.revokedAt]),
        ),
      );
    });
  keys.command('revoke <id>').action(async (id: string) => {
    const r = await client().call('DELETE /v1/keys/:id', { params: { id } });
    print(r, () => `revoked key ${r.id} at ${r.revokedAt}`);
  });
}
