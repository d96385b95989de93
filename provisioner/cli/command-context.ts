/**
 * What the CLI's commands share: the I/O they print to, the client the global options configure,
 * how a command prints (a table, or the API's JSON with --json), and the errors that set the exit
 * code. api-commands.ts re-exports it for the command modules that take it from there.
 */
import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { ApiClient } from './client.ts';

export interface Io {
  out: (s: string) => void;
  err: (s: string) => void;
  env: Record<string, string | undefined>;
  /** Ends commands that run until interrupted (--watch, --follow); the process's own CLI passes none. */
  signal?: AbortSignal;
  /** Standard input, read whole (`clusters import -`); default: the process's stdin. */
  stdin?: () => Promise<string>;
  /** Asks a confirmation on the terminal (`runtimes remove`); default: terminal-prompt.ts's. */
  ask?: (question: string) => Promise<string | undefined>;
}

export async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * A command line the CLI cannot act on (a bad option value, a file that cannot be read): printed as
 * its message alone, without the underlying error's text, and exits 1 like commander's own usage
 * errors.
 */
export class UsageError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'UsageError';
  }
}

/**
 * A command that had nothing to do (resume of a tenant that is not suspended, a fleet plan that
 * upgrades no tenant): its message is printed as `nothing to do: …` and the exit code is 4
 * (NOTHING_TO_DO_EXIT), so that a script can tell it from a change (0) and from a failure (1).
 */
export class NothingToDo extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NothingToDo';
  }
}
export const NOTHING_TO_DO_EXIT = 4;
/** API codes that mean the request was valid but there was nothing to do. */
export const NOTHING_TO_DO_CODES = new Set(['NOTHING_TO_RETRY', 'NOTHING_TO_UPGRADE']);

/** The file --kubeconfig names; a file that cannot be read is a usage error naming it and why. */
export async function readKubeconfig(file: string): Promise<string> {
  try {
    return await readFile(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why =
      code === 'ENOENT'
        ? 'no such file'
        : code === 'EISDIR'
          ? 'it is a directory'
          : code === 'EACCES'
            ? 'permission denied'
            : (err as Error).message;
    throw new UsageError(`--kubeconfig: cannot read the kubeconfig file '${file}': ${why}`, { cause: err });
  }
}

/** The API client the global options (--url, --token) or the environment configure. */
export function apiClientOf(program: Command, io: Io): ApiClient {
  const o = program.opts<{ url?: string; token?: string }>();
  return new ApiClient({
    baseUrl: o.url ?? io.env.PROVISIONER_URL ?? 'http://127.0.0.1:8080',
    token: o.token ?? io.env.PROVISIONER_TOKEN,
  });
}

/** What every command of a group uses: the client, whether --json was given, and the printer. */
export function commandContext(program: Command, io: Io) {
  const client = (): ApiClient => apiClientOf(program, io);
  const json = (): boolean => program.opts<{ json?: boolean }>().json === true;
  const print = (data: unknown, text: () => string) => io.out(json() ? JSON.stringify(data, null, 2) : text());
  return { client, json, print };
}
