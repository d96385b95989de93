/**
 * Command line entry. `serve` and `migrate` act locally; every other command is a client of the
 * HTTP API (api-commands.ts), configured by --url/--token or PROVISIONER_URL/PROVISIONER_TOKEN.
 *
 * The server, the database and the Pulumi engine are imported only by the commands that use them:
 * loading them costs over a second, and an API call such as `tenants list` needs none of them.
 */
import { Command, CommanderError } from 'commander';
import { ConfigError } from '../../runtime/agents/common/config.ts';
import { addApiCommands, UsageError, type Io } from './api-commands.ts';
import { addAppCommands } from './app-commands.ts';
import { addFleetCommands } from './fleet-commands.ts';
import { addDoctorCommand, ExitCode } from './doctor.ts';
import { addManagedClusterCommands } from './managed-cluster-commands.ts';
import { ApiError } from './client.ts';

const defaultIo: Io = {
  out: (s) => process.stdout.write(s + '\n'),
  err: (s) => process.stderr.write(s + '\n'),
  env: process.env,
};

export async function main(argv: string[], io: Io = defaultIo): Promise<number> {
  const program = new Command('provisioner')
    .description('Control plane for hosted GitOps runtimes')
    .option('--url <url>', 'provisioner API URL (env PROVISIONER_URL, default http://127.0.0.1:8080)')
    .option('--token <key>', 'API key (env PROVISIONER_TOKEN)')
    .option('--json', 'print the API JSON instead of tables')
    .exitOverride()
    .configureOutput({ writeOut: (s) => io.out(s.trimEnd()), writeErr: (s) => io.err(s.trimEnd()) });

  program
    .command('serve')
    .description('run the provisioner API (embedded PostgreSQL when DATABASE_URL is unset)')
    .action(async () => {
      const { serve } = await import('../server.ts');
      await serve(io.env);
      await new Promise(() => {}); // runs until a signal handler exits the process
    });

  program
    .command('migrate')
    .description('apply database migrations and exit')
    .action(async () => {
      const { loadConfig } = await import('../config.ts');
      const { openDatabase } = await import('../db/database.ts');
      const config = loadConfig(io.env);
      const db = await openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir });
      await db.close();
      io.out('migrations applied');
    });

  addApiCommands(program, io);
  addAppCommands(program, io);
  addFleetCommands(program, io);
  addDoctorCommand(program, io);
  addManagedClusterCommands(program, io);

  try {
    await program.parseAsync(argv, { from: 'user' });
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) return err.exitCode;
    if (err instanceof ExitCode) return err.code;
    if (err instanceof ConfigError) {
      io.err(`provisioner: invalid configuration: ${err.message}`);
      return 2;
    }
    if (err instanceof UsageError) {
      io.err(`provisioner: ${err.message}`);
      return 1;
    }
    if (err instanceof ApiError) {
      io.err(`provisioner: ${err.code}: ${err.message}${err.field ? ` (field: ${err.field})` : ''}`);
      return err.status === 0 ? 3 : 1;
    }
    io.err(`provisioner: ${explain(err)}`);
    return 1;
  }
}

/** An error and the errors it wraps, each message once: the real cause, never `undefined`. */
export function explain(err: unknown): string {
  const parts: string[] = [];
  for (let e: unknown = err, depth = 0; depth < 6; depth++) {
    if (e === undefined || e === null) {
      if (depth === 0) parts.push(`failed without an error message (${String(e)})`);
      break;
    }
    const message = e instanceof Error ? e.message || e.name : typeof e === 'string' ? e : JSON.stringify(e);
    if (!parts.some((p) => p.includes(message))) parts.push(message);
    e = e instanceof Error ? e.cause : undefined;
  }
  return parts.join(': ');
}
