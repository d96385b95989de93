/**
 * Evaluation time of the per-tenant program under Pulumi mocks: how long the program takes to
 * build its resource graph (no engine, no cluster). Baseline, measured in the same run: a
 * program registering one ConfigMap through one provider under the same mocks, i.e. the fixed
 * cost of a mocked Pulumi run. Reported: one tenant (cold, then warm median), and 100 tenants
 * one after the other in one process (as the provisioner's engine runs inline programs).
 *
 *   bash scripts/run-node.sh node bench/tenant-program.bench.ts
 */
import * as k8s from '@pulumi/kubernetes';
import { cpus } from 'node:os';
import { catalog } from '../runtime/catalog.ts';
import { createTenantProgram } from '../tenants/program.ts';
import { PLAN_NAMES } from '../tenants/plans.ts';
import { runProgram } from '../test/unit/pulumi/harness.ts';
import { tenantConfig } from '../test/unit/pulumi/fixtures.ts';

const program = createTenantProgram({
  waitForSecret: () => Promise.resolve(),
  rootAccess: {
    whoAmI: () => Promise.resolve({ kind: 'ServiceAccount', name: 'provisioner', namespace: 'hosted-platform' }),
    waitForAccess: () => Promise.resolve(),
  },
});

function baseline(): Promise<Record<string, unknown>> {
  const provider = new k8s.Provider('root', { kubeconfig: 'apiVersion: v1\nkind: Config\n' });
  const cm = new k8s.core.v1.ConfigMap(
    'baseline',
    { metadata: { name: 'baseline', namespace: 'default' }, data: { a: 'b' } },
    { provider },
  );
  return Promise.resolve({ name: cm.metadata.name });
}

const tenantId = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
const configFor = (i: number) =>
  tenantConfig({
    tenantId: tenantId(i),
    plan: PLAN_NAMES[i % PLAN_NAMES.length]!,
    runtimeVersion: catalog.versions[i % catalog.versions.length]!.version,
  });

async function time(fn: () => Promise<unknown>): Promise<number> {
  const start = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - start) / 1e6;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const p95 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.95)]!;

let resources = 0;
const cold = await time(async () => {
  resources = (await runProgram(program, configFor(0), { stack: 'cold' })).resources.length;
});
const baseRuns: number[] = [];
for (let i = 0; i < 20; i++) baseRuns.push(await time(() => runProgram(baseline, {}, { stack: `base-${i}` })));
const warm: number[] = [];
for (let i = 0; i < 20; i++) warm.push(await time(() => runProgram(program, configFor(i), { stack: `warm-${i}` })));

const hundred: number[] = [];
const heapBefore = process.memoryUsage().heapUsed;
const total = await time(async () => {
  for (let i = 0; i < 100; i++) hundred.push(await time(() => runProgram(program, configFor(i), { stack: `t-${i}` })));
});
globalThis.gc?.();
const heapAfter = process.memoryUsage().heapUsed;

const ms = (x: number) => `${x.toFixed(1)} ms`;
console.log(
  `machine: ${cpus().length} cores (${cpus()[0]?.model ?? 'unknown'}), node ${process.version}, ${new Date().toISOString().slice(0, 10)}`,
);
console.log(`resources per tenant: ${resources}`);
console.log(`baseline (1 ConfigMap) median: ${ms(median(baseRuns))}`);
console.log(`one tenant, cold (first run, module warm-up): ${ms(cold)}`);
console.log(
  `one tenant, warm median: ${ms(median(warm))}  (${(median(warm) / median(baseRuns)).toFixed(1)}x baseline; target < 1000 ms)`,
);
console.log(
  `100 tenants in one process: total ${ms(total)}, median ${ms(median(hundred))}, p95 ${ms(p95(hundred))}, ` +
    `last/first ${(hundred.at(-1)! / hundred[0]!).toFixed(2)}x, heap after GC ${(heapAfter / 1048576).toFixed(0)} MiB (before: ${(heapBefore / 1048576).toFixed(0)} MiB)`,
);
if (median(warm) >= 1000) process.exitCode = 1;
