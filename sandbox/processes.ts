/**
 * Child processes of the end-to-end harness: every process runs in its own process group
 * (detached), writes to a log file, and is killed with its whole group on teardown, even when a
 * test failed. Also free loopback ports, and `until` (sandbox/until.ts) re-exported.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, readdirSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { randomInt } from 'node:crypto';
import { createServer } from 'node:net';

export interface ManagedProcess {
  readonly name: string;
  readonly pid: number;
  readonly logFile: string;
  /** Resolves with the exit code (or signal) once the process has exited. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  readonly logClosed: Promise<void>;
  running(): boolean;
  /** SIGTERM to the group, then SIGKILL after `graceMs`; resolves when the process exited. */
  stop(graceMs?: number): Promise<void>;
  /** SIGKILL to the whole group and every descendant at once (a crash, as of a container). */
  kill(): Promise<void>;
  /** The last lines of the log file. */
  tail(lines?: number): Promise<string>;
}

const live = new Set<ManagedProcess>();

function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    try {
      child.kill(signal);
    } catch {
      // already gone
    }
  }
}

/** Whether a process with this pid exists (signal 0 checks without sending anything). */
export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Every process descended from `pid` (Linux /proc), found before anything is killed: the Pulumi
 * CLI starts its plugins in process groups of their own, so killing the provisioner's group
 * alone would leave them running as orphans, which a crashed container would not.
 */
export function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // Field 4 (ppid) follows the command name, which is in parentheses and may hold spaces.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const list = children.get(ppid) ?? [];
      list.push(Number(entry));
      children.set(ppid, list);
    } catch {
      // exited meanwhile
    }
  }
  const out: number[] = [];
  const queue = [pid];
  while (queue.length > 0) {
    for (const c of children.get(queue.shift()!) ?? []) {
      out.push(c);
      queue.push(c);
    }
  }
  return out;
}

function killAll(pids: number[]): void {
  for (const p of pids) {
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      // gone
    }
  }
}

export interface StartOptions {
  env?: Record<string, string | undefined>;
  cwd?: string;
}

/** Starts `command args` in its own process group, output appended to `logFile`. */
export function startProcess(
  name: string,
  command: string,
  args: string[],
  logFile: string,
  opts: StartOptions = {},
): ManagedProcess {
  const out = createWriteStream(logFile, { flags: 'a' });
  const child = spawn(command, args, {
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: opts.env ?? process.env,
    ...(opts.cwd ? { cwd: opts.cwd } : {}),
  });
  child.stdout?.pipe(out, { end: false });
  child.stderr?.pipe(out, { end: false });
  let alive = true;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('error', (err) => {
      alive = false;
      out.write(`\n[harness] ${name} could not start: ${err.message}\n`);
      resolve({ code: -1, signal: null });
    });
    child.once('exit', (code, signal) => {
      alive = false;
      resolve({ code, signal });
    });
  });
  // The log ends when both pipes have closed, or shortly after the exit: a descendant that outlived
  // the leader may hold the pipes open, and its later output must not be written to an ended log
  // (a write after end, uncaught). The pipes are unpiped and closed first; such a descendant's next
  // write fails (EPIPE).
  const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
  const logClosed = exited.then(async () => {
    live.delete(proc);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([closed, new Promise<void>((resolve) => (timer = setTimeout(resolve, 200)))]);
    clearTimeout(timer);
    for (const stream of [child.stdout, child.stderr]) {
      stream?.unpipe(out);
      stream?.destroy();
    }
    await new Promise<void>((resolve) => out.end(resolve));
  });
  if (child.pid === undefined) throw new Error(`${name}: spawn of ${command} failed`);
  const proc: ManagedProcess = {
    name,
    pid: child.pid,
    logFile,
    exited,
    logClosed,
    running: () => alive,
    async stop(graceMs = 5000) {
      if (!alive) return;
      const tree = descendants(child.pid!);
      signalGroup(child, 'SIGTERM');
      let timer: NodeJS.Timeout | undefined;
      const timedOut = await Promise.race([
        exited.then(() => false),
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(true), graceMs);
        }),
      ]);
      clearTimeout(timer);
      if (timedOut) signalGroup(child, 'SIGKILL');
      await exited;
      // Children of the leader may outlive it: make sure the group and the whole tree are gone.
      signalGroup(child, 'SIGKILL');
      killAll(tree);
    },
    async kill() {
      const tree = descendants(child.pid!);
      signalGroup(child, 'SIGKILL');
      killAll(tree);
      await exited;
    },
    async tail(lines = 30) {
      try {
        const text = await readFile(logFile, 'utf8');
        return text.split('\n').slice(-lines).join('\n');
      } catch {
        return '(no log)';
      }
    },
  };
  live.add(proc);
  return proc;
}

/** Kills every process this module started that is still running (last resort on exit). */
export function killAllStarted(): void {
  for (const p of live) {
    try {
      process.kill(-p.pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
  live.clear();
}
process.once('exit', killAllStarted);

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
export { sleep };

export { StopWaiting, TimeoutError, until } from './until.ts';

/** A free TCP port on 127.0.0.1 (the provisioner's own helper). */
import { freePort } from '../provisioner/db/embedded.ts';
export { freePort };

/** Whether 127.0.0.1:`port` can be listened on now. */
function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

const handedOut = new Set<number>();

/**
 * A free port for a server process to bind, below the kernel's ephemeral range (32768 and up on
 * Linux). A port-0 port (freePort) is free when asked, but between then and the child's bind the
 * kernel may hand it to any outgoing connection or port-0 listener of the busy machine (an etcd
 * once failed to start on "address already in use" that way), and a server restarted on its
 * old port meets the same race. Below the range only an explicit bind takes a port. Ports are not
 * handed out twice by one process; other processes pick at random from 12,000.
 */
export async function serverPort(): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const port = randomInt(20_000, 32_000);
    if (handedOut.has(port)) continue;
    handedOut.add(port);
    if (await canListen(port)) return port;
  }
  return freePort();
}

/** Runs a command to completion; rejects with its output when it fails or runs past `timeoutMs`. */
export async function run(
  command: string,
  args: string[],
  opts: StartOptions & { timeoutMs?: number; input?: string } = {},
): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      stdio: [opts.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      env: opts.env ?? process.env,
      ...(opts.cwd ? { cwd: opts.cwd } : {}),
    });
    let stdout = '';
    let stderr = '';
    child.stdout?.setEncoding('utf8').on('data', (d: string) => {
      stdout += d;
    });
    child.stderr?.setEncoding('utf8').on('data', (d: string) => {
      stderr += d;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 120_000);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve({ stdout, stderr });
      else {
        const err = new Error(
          `${command} ${args.join(' ')} exited with ${code ?? signal}: ${(stderr || stdout).slice(-2000)}`,
        );
        Object.assign(err, { stdout, stderr, exitCode: code });
        reject(err);
      }
    });
    if (opts.input !== undefined && child.stdin) {
      child.stdin.once('error', () => {}); // a command that exits without reading its input
      child.stdin.end(opts.input);
    }
  });
}
