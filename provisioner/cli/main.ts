/**
 * Command line entry. `serve` and `migrate` act locally; every other command is a client of the
 * HTTP API (api-commands.ts), configured by --url/--token or PROVISIONER_URL/PROVISIONER_TOKEN.
 *
 * The server, the database and the Pulumi engine are imported only by the commands that use them:
 * loading them costs over a second, and an API call such as `tenants list` needs none of them.
 *
 * Exit codes: 0 done; 1 refused or failed (the API's error, a usage error); 2 invalid
 * configuration; 3 the API cannot be reached; 4 nothing to do (NothingToDo: a resume of a tenant
 * that is not suspended, a retry of one that is not failing, a fleet plan that upgrades no tenant).
 */
import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import { ConfigError } from '../../runtime/agents/common/config.ts';
import {
  addApiCommands,
  NOTHING_TO_DO_CODES,
  NOTHING_TO_DO_EXIT,
  NothingToDo,
  UsageError,
  type Io,
} from './api-commands.ts';
import { addAppCommands } from './app-commands.ts';
import { addFleetCommands } from './fleet-commands.ts';
import { addDoctorCommand, ExitCode } from './doctor.ts';
import { addManagedClusterCommands } from './managed-cluster-commands.ts';
import { addCapacityCommands } from './capacity-commands.ts';
import { addPromotionCommands } from './promotion-commands.ts';
import { addRuntimeRenderCommands } from './render-commands.ts';
import { addRuntimesCommands } from './runtimes-commands.ts';
import { ApiError } from './client.ts';
import { terminalSafeOutput } from './format.ts';

const defaultIo: Io = {
  out: (s) => process.stdout.write(s + '\n'),
  err: (s) => process.stderr.write(s + '\n'),
  env: process.env,
};

export async function main(argv: string[], rawIo: Io = defaultIo): Promise<number> {
  // Everything printed (tables, plain text, --json, errors) with terminal controls escaped: format.ts.
  const io = terminalSafeOutput(rawIo);
  const program = new Command('provisioner')
    .description('Control plane for hosted GitOps runtimes')
    .option('--url <url>', 'provisioner API URL (env PROVISIONER_URL, default http://127.0.0.1:8080)')
    .option('--token <key>', 'API key (env PROVISIONER_TOKEN)')
    .option('--json', 'print the API JSON instead of tables')
    .exitOverride()
    .configureOutput({ writeOut: (s) => io.out(s.trimEnd()), writeErr: (s) => io.err(s.trimEnd()) });

  program
    .command('version')
    .description('print the version and the Node.js it runs on (also: provisioner --version)')
    .action(() => io.out(versionLine()));

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
  addPromotionCommands(program, io);
  addCapacityCommands(program, io);
  addRuntimeRenderCommands(program, io);
  addRuntimesCommands(program, io);

  // Only as the first argument: a program option is recognised after a subcommand too, where
  // `tenants list --version 1.4.1` means a runtime version.
  if (argv[0] === '--version' || argv[0] === '-V') argv = ['version', ...argv.slice(1)];
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
    if (err instanceof NothingToDo) {
      // With --json stdout holds the answer alone.
      (program.opts<{ json?: boolean }>().json ? io.err : io.out)(`nothing to do: ${err.message}`);
      return NOTHING_TO_DO_EXIT;
    }
    if (err instanceof UsageError) {
      io.err(`provisioner: ${err.message}`);
      return 1;
    }
    if (err instanceof ApiError) {
      io.err(`provisioner: ${err.code}: ${err.message}${err.field ? ` (field: ${err.field})` : ''}`);
      return err.status === 0 ? 3 : NOTHING_TO_DO_CODES.has(err.code) ? NOTHING_TO_DO_EXIT : 1;
    }
    io.err(`provisioner: ${explain(err)}`);
    return 1;
  }
}

/** `provisioner 0.1.0 (Node.js v24.…)`: which checkout, and which Node.js the launcher chose. */
function versionLine(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return `provisioner ${pkg.version} (Node.js ${process.version})`;
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
