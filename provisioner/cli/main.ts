/**
 * Command line entry. `serve` and `migrate` act locally; every other command is a client of the
 * HTTP API (see api-commands.ts).
 */
import { Command, CommanderError } from 'commander';
import { ConfigError, loadConfig } from '../config.ts';
import { openDatabase } from '../db/database.ts';
import { serve } from '../server.ts';

export async function main(argv: string[]): Promise<number> {
  const program = new Command('provisioner')
    .description('Control plane for hosted GitOps runtimes')
    .exitOverride()
    .configureOutput({ writeErr: (s) => process.stderr.write(s) });

  program.command('serve')
    .description('run the provisioner API (embedded PostgreSQL when DATABASE_URL is unset)')
    .action(async () => {
      await serve();
      await new Promise(() => {}); // runs until a signal handler exits the process
    });

  program.command('migrate')
    .description('apply database migrations and exit')
    .action(async () => {
      const config = loadConfig();
      const db = await openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir });
      await db.close();
      process.stdout.write('migrations applied\n');
    });

  try {
    await program.parseAsync(argv, { from: 'user' });
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) return err.exitCode;
    if (err instanceof ConfigError) {
      process.stderr.write(`provisioner: invalid configuration: ${err.message}\n`);
      return 2;
    }
    process.stderr.write(`provisioner: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  }
}
