/**
 * CPU and memory of a process tree over a time window, from Linux /proc (bench/engine.bench.ts).
 *
 * The tree is a root process (the provisioner, or the bench's engine child) and every process
 * descended from it while the window is open (the Pulumi CLI, the provider plugins). Every
 * `intervalMs` the sampler scans /proc for the root's descendants and reads each one's
 * /proc/<pid>/stat (utime + stime, in clock ticks) and /proc/<pid>/status (VmRSS, VmHWM).
 *
 * CPU, two ways:
 * - exact: the root's cutime + cstime (the CPU of children it has waited for, and of their
 *   waited-for descendants) grows by each engine process's whole CPU when it exits and is reaped;
 *   plus the CPU so far of descendants still running at the end; minus what descendants alive
 *   at the start had used by then. Exact to a clock tick (10 ms) per process, as long as every
 *   parent waits for its children (Node and Go's os/exec do).
 * - sampled: the sum of each descendant's last seen utime + stime. It misses what a process used
 *   after its last sample, and processes that lived less than one interval; `exact − sampled` is
 *   that error and is reported.
 * The root's own utime + stime is reported apart: for the provisioner it is the inline program's
 *   evaluation (the Automation API runs the program in the process that calls it) plus the
 *   control plane's own work.
 *
 * Memory: the peak over samples of the summed VmRSS of the descendants alive at that sample (a
 * lower bound of the true concurrent peak: a spike between samples is missed), the sum of each
 * descendant's VmHWM (its own peak; an upper bound of the concurrent peak), and the root's VmRSS
 * growth over its value at the start.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';

const TICK_MS = 10; // getconf CLK_TCK = 100 on Linux x86-64

interface Stat {
  ppid: number;
  /** utime + stime, ms */
  cpuMs: number;
  /** cutime + cstime, ms */
  childCpuMs: number;
  startTicks: number;
  comm: string;
}

function readStat(pid: number): Stat | undefined {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const close = s.lastIndexOf(')');
    const comm = s.slice(s.indexOf('(') + 1, close);
    // Fields after the command name, from field 3 (state): ppid is 4, utime 14, stime 15, cutime 16, cstime 17, starttime 22.
    const f = s.slice(close + 2).split(' ');
    const n = (field: number) => Number(f[field - 3]);
    return {
      ppid: n(4),
      cpuMs: (n(14) + n(15)) * TICK_MS,
      childCpuMs: (n(16) + n(17)) * TICK_MS,
      startTicks: n(22),
      comm,
    };
  } catch {
    return undefined; // exited meanwhile
  }
}

function readMemory(pid: number): { rssKb: number; hwmKb: number } | undefined {
  try {
    const s = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(s)?.[1] ?? 0);
    return { rssKb: kb('VmRSS'), hwmKb: kb('VmHWM') };
  } catch {
    return undefined;
  }
}

/** Every process descended from `root` now, with its stat. */
function descendantsOf(root: number): Map<number, Stat> {
  const stats = new Map<number, Stat>();
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (entry.charCodeAt(0) > 57) continue; // not a pid
    const pid = Number(entry);
    if (!Number.isInteger(pid)) continue;
    const st = readStat(pid);
    if (!st) continue;
    stats.set(pid, st);
    const list = children.get(st.ppid) ?? [];
    list.push(pid);
    children.set(st.ppid, list);
  }
  const out = new Map<number, Stat>();
  const queue = [root];
  while (queue.length > 0) {
    for (const c of children.get(queue.shift()!) ?? []) {
      out.set(c, stats.get(c)!);
      queue.push(c);
    }
  }
  return out;
}

export interface TreeUsage {
  wallMs: number;
  /** CPU of the descendants (engine processes), exact (see above). */
  treeCpuMs: number;
  /** The same, from samples only. */
  sampledCpuMs: number;
  /** The root process's own CPU over the window. */
  rootCpuMs: number;
  /** Peak over samples of the summed RSS of the descendants (MiB). */
  peakTreeRssMb: number;
  /** Sum of each descendant's own peak RSS (MiB): an upper bound of the concurrent peak. */
  sumHwmMb: number;
  /** Peak growth of the root's RSS over its value at the start (MiB). */
  rootRssGrowthMb: number;
  /** Descendants seen, by command name. */
  processes: Record<string, number>;
  /** The largest own peak RSS (VmHWM, MiB) of any one process, by command name. */
  peakByCommandMb: Record<string, number>;
  samples: number;
  /** Mean time one sample took (ms): the sampler's own cost. */
  sampleMs: number;
}

export class TreeSampler {
  readonly #root: number;
  readonly #intervalMs: number;
  #timer: NodeJS.Timeout | undefined;
  #started = 0;
  #rootStart: Stat | undefined;
  #rootRssStartKb = 0;
  #rootRssMaxKb = 0;
  /** Descendants alive at the start (key pid:starttime) with their CPU then. */
  #atStart = new Map<string, number>();
  #seen = new Map<string, { comm: string; cpuMs: number; hwmKb: number }>();
  #peakRssKb = 0;
  #samples = 0;
  #sampleTotalMs = 0;

  constructor(root: number, intervalMs = 50) {
    this.#root = root;
    this.#intervalMs = intervalMs;
  }

  start(): void {
    this.#started = performance.now();
    this.#rootStart = readStat(this.#root);
    if (!this.#rootStart) throw new Error(`process ${this.#root} is gone`);
    this.#rootRssStartKb = readMemory(this.#root)?.rssKb ?? 0;
    this.#rootRssMaxKb = this.#rootRssStartKb;
    for (const [pid, st] of descendantsOf(this.#root)) this.#atStart.set(`${pid}:${st.startTicks}`, st.cpuMs);
    this.#sample();
    this.#timer = setInterval(() => this.#sample(), this.#intervalMs);
  }

  #sample(): void {
    const began = performance.now();
    let rss = 0;
    for (const [pid, st] of descendantsOf(this.#root)) {
      const key = `${pid}:${st.startTicks}`;
      const mem = readMemory(pid);
      const entry = this.#seen.get(key) ?? { comm: st.comm, cpuMs: 0, hwmKb: 0 };
      entry.cpuMs = Math.max(entry.cpuMs, st.cpuMs - (this.#atStart.get(key) ?? 0));
      if (mem) {
        rss += mem.rssKb;
        entry.hwmKb = Math.max(entry.hwmKb, mem.hwmKb);
      }
      this.#seen.set(key, entry);
    }
    this.#peakRssKb = Math.max(this.#peakRssKb, rss);
    this.#rootRssMaxKb = Math.max(this.#rootRssMaxKb, readMemory(this.#root)?.rssKb ?? 0);
    this.#samples += 1;
    this.#sampleTotalMs += performance.now() - began;
  }

  /** Stops sampling; call once the engine's processes have exited (they are then reaped and counted exactly). */
  stop(): TreeUsage {
    if (this.#timer) clearInterval(this.#timer);
    this.#sample();
    const wallMs = performance.now() - this.#started;
    const end = readStat(this.#root);
    if (!end || !this.#rootStart) throw new Error(`process ${this.#root} is gone`);
    const alive = descendantsOf(this.#root);
    let aliveCpu = 0;
    for (const [pid, st] of alive) aliveCpu += st.cpuMs - (this.#atStart.get(`${pid}:${st.startTicks}`) ?? 0);
    // What descendants alive at the start had used before it, and that their reaping adds to cutime.
    let reapedStartCpu = 0;
    for (const [key, cpu] of this.#atStart) {
      const [pid, start] = key.split(':').map(Number);
      if (alive.get(pid!)?.startTicks !== start) reapedStartCpu += cpu;
    }
    const processes: Record<string, number> = {};
    const peakByCommandMb: Record<string, number> = {};
    let sampledCpuMs = 0;
    let hwmKb = 0;
    for (const p of this.#seen.values()) {
      processes[p.comm] = (processes[p.comm] ?? 0) + 1;
      peakByCommandMb[p.comm] = Math.max(peakByCommandMb[p.comm] ?? 0, Math.round(p.hwmKb / 1024));
      sampledCpuMs += p.cpuMs;
      hwmKb += p.hwmKb;
    }
    return {
      wallMs,
      treeCpuMs: end.childCpuMs - this.#rootStart.childCpuMs - reapedStartCpu + aliveCpu,
      sampledCpuMs,
      rootCpuMs: end.cpuMs - this.#rootStart.cpuMs,
      peakTreeRssMb: this.#peakRssKb / 1024,
      sumHwmMb: hwmKb / 1024,
      rootRssGrowthMb: (this.#rootRssMaxKb - this.#rootRssStartKb) / 1024,
      processes,
      peakByCommandMb,
      samples: this.#samples,
      sampleMs: this.#sampleTotalMs / this.#samples,
    };
  }
}

/** Waits until `root` has no descendants left (its engine processes exited and were reaped), at most `timeoutMs`. */
export async function quiescent(root: number, timeoutMs = 10_000): Promise<boolean> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (descendantsOf(root).size === 0) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

/**
 * CPU time (µs) of the embedded Postgres so far: the postmaster with its ended backends, and its
 * live backends (from /proc; USER_HZ is 100 on Linux). A cost per object that depends less on what
 * else the machine runs than objects per second do.
 */
export async function postgresCpuUs(postmaster: number | undefined): Promise<number> {
  if (postmaster === undefined) return 0;
  let ticks = 0;
  for (const pid of await readdir('/proc').catch(() => [] as string[])) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      // Fields after the command: state, ppid, … utime (12th), stime, cutime, cstime.
      const f = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]!.split(' ');
      if (Number(pid) === postmaster) ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
      else if (Number(f[1]) === postmaster) ticks += Number(f[11]) + Number(f[12]);
    } catch {
      // the process ended meanwhile
    }
  }
  return ticks * 1e4;
}
