/**
 * `npm run bench -- startup`: the CPU a provisioner process spends before it serves, the cost every
 * test file, CLI call and `provisioner serve` pays (docs/benchmarks.md, "Start-up"). Each figure is
 * the median of 5 new processes, the CPU (user + system) of the process and what it ran:
 *
 * - `node -e ''`: Node.js start-up alone, the floor, measured in the same run;
 * - a CLI call (`node bin/provisioner.ts tenants list --help`) with Node's compile cache (filled by
 *   the call before) and without it (NODE_DISABLE_COMPILE_CACHE=1);
 * - a provisioner process (bench/startup-child.ts): its modules loaded, a first and a second
 *   replica started (services and the fastify app, ready), the first answers of three routes; with
 *   and without the compile cache.
 *
 * STARTUP_BENCH_ROOT=<checkout> measures another checkout's code (before/after) in the same way.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { readFileSync } from 'node:fs';
import { startEmbeddedPostgres } from '../provisioner/db/embedded.ts';

const run = promisify(execFile);
const HERE = fileURLToPath(new URL('../', import.meta.url));
const ROOT = process.env.STARTUP_BENCH_ROOT ?? HERE;
const RUNS = 5;

/** CPU (ms) of this process's waited-for children so far: /proc/self/stat cutime + cstime. */
function childrenCpuMs(): number {
  const stat = readFileSync('/proc/self/stat', 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[13]) + Number(f[14])) * 10;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function cpuOf(file: string, args: string[], env: NodeJS.ProcessEnv): Promise<{ cpu: number; stdout: string }> {
  const before = childrenCpuMs();
  const { stdout } = await run(file, args, { env, cwd: ROOT, maxBuffer: 1 << 20 });
  return { cpu: childrenCpuMs() - before, stdout };
}

let pg: { url: string; stop(): Promise<void> } | undefined;
let pgDir: string | undefined;
if (!process.env.DATABASE_URL && !process.env.TEST_PG_URL) {
  pgDir = await mkdtemp(join(tmpdir(), 'hrt-bench-pg-'));
  pg = await startEmbeddedPostgres(pgDir);
}
const cacheDir = await mkdtemp(join(tmpdir(), 'hrt-bench-compile-cache-'));
try {
  const base: NodeJS.ProcessEnv = { ...process.env, ...(pg ? { TEST_PG_URL: pg.url } : {}) };
  delete base.NODE_OPTIONS;
  delete base.NODE_DISABLE_COMPILE_CACHE;
  const cached: NodeJS.ProcessEnv = { ...base, NODE_COMPILE_CACHE: cacheDir };
  const uncached: NodeJS.ProcessEnv = { ...base, NODE_DISABLE_COMPILE_CACHE: '1' };
  console.log(
    `load average before: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')} (${ROOT})`,
  );

  const floor: number[] = [];
  for (let i = 0; i < RUNS; i++) floor.push((await cpuOf(process.execPath, ['-e', ''], base)).cpu);
  const node = median(floor);
  console.log(`node -e '': median ${node} ms CPU`);

  const cli = [`${ROOT}/bin/provisioner.ts`, 'tenants', 'list', '--help'];
  await cpuOf(process.execPath, cli, cached); // fills the cache
  const cliRuns = { cached: [] as number[], uncached: [] as number[] };
  for (let i = 0; i < RUNS; i++) {
    cliRuns.cached.push((await cpuOf(process.execPath, cli, cached)).cpu);
    cliRuns.uncached.push((await cpuOf(process.execPath, cli, uncached)).cpu);
  }
  const [cliCached, cliUncached] = [median(cliRuns.cached), median(cliRuns.uncached)];
  console.log(
    `CLI call: ${cliUncached} ms CPU without the compile cache, ${cliCached} ms with it ` +
      `(${(cliUncached / node).toFixed(1)}x and ${(cliCached / node).toFixed(1)}x node start-up)`,
  );

  type Child = { loadMs: number; firstAppMs: number; secondAppMs: number; firstAnswersMs: number; cpu: number };
  const child = async (env: NodeJS.ProcessEnv): Promise<Child> => {
    const { cpu, stdout } = await cpuOf(process.execPath, [join(HERE, 'bench', 'startup-child.ts'), ROOT], env);
    return { ...(JSON.parse(stdout.trim().split('\n').at(-1)!) as Omit<Child, 'cpu'>), cpu };
  };
  await child(cached); // fills the cache
  for (const [label, env] of [
    ['without the compile cache', uncached],
    ['with the compile cache', cached],
  ] as const) {
    const runs: Child[] = [];
    for (let i = 0; i < RUNS; i++) runs.push(await child(env));
    const m = (k: keyof Child) => median(runs.map((r) => r[k]));
    console.log(
      `provisioner process ${label}: modules ${m('loadMs')} ms, first replica ${m('firstAppMs')} ms, ` +
        `second ${m('secondAppMs')} ms, first answers of 3 routes ${m('firstAnswersMs')} ms; ` +
        `whole process ${m('cpu')} ms CPU (${(m('cpu') / node).toFixed(1)}x node start-up)`,
    );
  }
  console.log(
    `load average after: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
} finally {
  await rm(cacheDir, { recursive: true, force: true });
  await pg?.stop();
  if (pgDir) await rm(pgDir, { recursive: true, force: true });
}
