/**
 * How an agent runs git (the Source Server's mirrors, the GitOps Operator's commits): execFile,
 * never a shell; only http and https remotes; the system and global git configuration not read;
 * git never prompts; credentials never in argv, in a repository's config or in a log — a constant
 * credential helper prints them from two environment variables of that one git process; every
 * run killed after its timeout. What a failure means is the caller's to decide (its stderr comes
 * back with credentials in URLs taken out).
 */
import { execFile } from 'node:child_process';

export interface GitCredentials {
  username: string;
  password: string;
}

/** Prints the credentials of the git process's environment when git asks for them (`get`); nothing else. */
const CREDENTIAL_HELPER =
  '!f() { test "$1" = get || exit 0; printf \'username=%s\\npassword=%s\\n\' "$HRT_GIT_USERNAME" "$HRT_GIT_PASSWORD"; }; f';

export const GIT_SAFE_CONFIG = [
  '-c',
  'protocol.allow=never',
  '-c',
  'protocol.http.allow=always',
  '-c',
  'protocol.https.allow=always',
  '-c',
  'credential.helper=',
  '-c',
  'core.askPass=',
  '-c',
  'gc.auto=0',
];

const MAX_OUTPUT_BYTES = 4 * 1024 * 1024;

export interface GitRun {
  stdout: string;
  stderr: string;
}

/** A failed run: the error, and git's stderr without credentials. */
export class GitRunError extends Error {
  readonly stderr: string;
  readonly killed: boolean;
  constructor(message: string, stderr: string, killed: boolean) {
    super(message);
    this.name = 'GitRunError';
    this.stderr = stderr;
    this.killed = killed;
  }
}

export function redactGitText(text: string): string {
  return text.replace(/(https?:\/\/)[^/@\s]*@/g, '$1');
}

export function runGit(
  args: string[],
  o: {
    /** HOME of the git process (a folder of the agent's). */
    home: string;
    cwd?: string;
    credentials?: GitCredentials | undefined;
    timeoutMs: number;
    /** More environment (an author's name and email). */
    env?: Record<string, string>;
    /** Sent to git's stdin (a commit message). */
    input?: string;
  },
): Promise<GitRun> {
  return new Promise<GitRun>((resolve, reject) => {
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: o.home,
      LC_ALL: 'C',
      GIT_TERMINAL_PROMPT: '0',
      GIT_CONFIG_NOSYSTEM: '1',
      GIT_CONFIG_GLOBAL: '/dev/null',
      ...o.env,
    };
    const config = [...GIT_SAFE_CONFIG];
    if (o.credentials) {
      env.HRT_GIT_USERNAME = o.credentials.username;
      env.HRT_GIT_PASSWORD = o.credentials.password;
      config.push('-c', `credential.helper=${CREDENTIAL_HELPER}`);
    }
    const child = execFile(
      'git',
      [...config, ...args],
      {
        env,
        cwd: o.cwd,
        timeout: o.timeoutMs,
        killSignal: 'SIGKILL',
        maxBuffer: MAX_OUTPUT_BYTES,
        encoding: 'utf8',
      },
      (err, stdout, stderr) => {
        if (!err) {
          resolve({ stdout, stderr });
          return;
        }
        const e = err as Error & { killed?: boolean; signal?: string | null };
        reject(new GitRunError(e.message, redactGitText(stderr), Boolean(e.killed) || e.signal === 'SIGKILL'));
      },
    );
    if (o.input !== undefined) child.stdin?.end(o.input);
  });
}
