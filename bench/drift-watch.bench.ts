/**
 * Root-cluster watch at fleet size (issue 15's targets):
 *
 *   npm run bench -- drift-watch     (DRIFT_WATCH_TENANTS=10000 by default)
 *
 * Runs test/e2e/drift-watch-scale.test.ts (three real kube-apiservers, the tenants' objects
 * written by the test, the watch in the test's process) at 10,000 tenants, 40,000 objects, which
 * the e2e tier runs at 2,000 for its correctness checks, and reads the figures it prints: the time
 * to the first lists, the heap the watch retains (after a full GC, with the watch against without
 * it: a ratio to the process's own baseline) and its CPU at rest. Checked against the targets:
 * retained heap < 300 MiB and CPU at rest < 0.1 core. Needs the e2e toolchain (etcd and
 * kube-apiserver: scripts/toolchain.sh, or HRT_TOOLCHAIN_BIN).
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TENANTS = Number(process.env.DRIFT_WATCH_TENANTS ?? 10_000);
const HEAP_TARGET_MIB = 300;
const CPU_TARGET_CORES = 0.1;

const out: string[] = [];
const code = await new Promise<number>((resolve, reject) => {
  const child = spawn('tap', ['--reporter=tap', '--timeout=1500', 'test/e2e/drift-watch-scale.test.ts'], {
    cwd: ROOT,
    env: { ...process.env, DRIFT_WATCH_TENANTS: String(TENANTS) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (chunk: string) => out.push(chunk));
  child.on('error', reject);
  child.on('exit', (c) => resolve(c ?? 1));
});
const text = out.join('');
const seeded = /seeded (\d+) tenants \((\d+) objects\) on (\d+) root clusters in (\d+) s/.exec(text);
const figures =
  /watch over (\d+) objects: first lists ([\d.]+) s; retained heap ([\d.]+) MiB \((\d+) B\/object\); process RSS (\d+) MiB; CPU at rest ([\d.]+) % of a core/.exec(
    text,
  );
if (code !== 0 || !figures) {
  console.log(
    text
      .split('\n')
      .filter((l) => /not ok|# \{|Error|timed out/.test(l))
      .join('\n'),
  );
  console.error(`drift-watch bench: the scale run failed (tap exit ${code}${figures ? '' : ', no figures printed'})`);
  process.exit(1);
}
const [, objects, lists, heap, perObject, rss, cpuPct] = figures;
const cores = Number(cpuPct) / 100;
console.log(
  JSON.stringify(
    {
      tenants: TENANTS,
      objects: Number(objects),
      seedSeconds: seeded ? Number(seeded[4]) : null,
      firstListsSeconds: Number(lists),
      retainedHeapMiB: Number(heap),
      bytesPerObject: Number(perObject),
      processRssMiB: Number(rss),
      cpuAtRestCores: cores,
      heapTargetMiB: HEAP_TARGET_MIB,
      cpuTargetCores: CPU_TARGET_CORES,
    },
    null,
    2,
  ),
);
const misses = [
  ...(Number(heap) < HEAP_TARGET_MIB ? [] : [`retained heap ${heap} MiB ≥ ${HEAP_TARGET_MIB} MiB`]),
  ...(cores < CPU_TARGET_CORES ? [] : [`CPU at rest ${cores.toFixed(3)} ≥ ${CPU_TARGET_CORES} core`]),
];
if (misses.length) {
  console.error(`drift-watch bench: targets missed: ${misses.join('; ')}`);
  process.exit(1);
}
console.log(`drift-watch bench: targets met at ${TENANTS} tenants`);
