/**
 * Fleet upgrade benchmark (`npm run bench -- fleet`), on an embedded Postgres (or DATABASE_URL):
 *
 * 1. The plan of a fleet upgrade of 10,000 tenants (`dryRun=1`'s work: select, paths, waves)
 *    against the baseline of reading the same 10,000 rows. Target: < 2 s.
 * 2. The driver's decision loop ("tick": judge the steps under way, budget, start the next ones)
 *    for a fleet upgrade of 2,000 tenants at maxConcurrency 10, every tick of the whole run,
 *    against the same run for 20 tenants (baseline). The engine's part is played by SQL: after
 *    each tick every step under way is marked done, so each tick has a full set of decisions.
 *    Target: < 1 s per tick.
 * 3. Tenants upgraded per minute with the reconciler and the ScriptedEngine TEST DOUBLE (engine
 *    time BENCH_ENGINE_MS, 2000) at maxConcurrency 10, against the ideal (per wave:
 *    ceil(size / concurrency) × engine time), and the control plane's share of each upgrade's
 *    wall time (step start to gate passed, less the engine call). Target: < 2 %.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { SecretBox } from '../provisioner/crypto.ts';
import { createPool } from '../provisioner/db/database.ts';
import { startEmbeddedPostgres } from '../provisioner/db/embedded.ts';
import { migrate } from '../provisioner/db/migrate.ts';
import { Notifications } from '../provisioner/db/notifications.ts';
import { ScriptedEngine } from '../test/helpers/scripted-engine.ts';
import { FleetDriver } from '../provisioner/fleet/driver.ts';
import { FleetUpgradeService } from '../provisioner/fleet/service.ts';
import { Reconciler } from '../provisioner/reconciler/reconciler.ts';
import { catalog } from '../runtime/catalog.ts';
import { addClusters } from './fleet.ts';
import { setTenantStatus } from '../test/helpers/tenants.ts';
import { setOperationState } from '../test/helpers/operations.ts';
import { emptyPublicSchema } from '../test/helpers/postgres.ts';
import { fleetUpgradeState, readPlanRows, succeededStepTimes, upgradingSteps } from '../test/helpers/fleet.ts';
import { clearMaintenanceWindows, insertReadyTenantsBulk, spreadMaintenanceWindows } from '../test/helpers/bulk.ts';

const ENGINE_MS = Number(process.env.BENCH_ENGINE_MS ?? 2000);
const OPERATOR = { actor: { id: 'bench', role: 'operator' }, requestId: 'bench' };
const dir = await mkdtemp(join(tmpdir(), 'hrt-bench-fleet-'));
const server = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres(dir);
const url = process.env.DATABASE_URL ?? server!.url;
const pool = createPool(url, 20);
const box = new SecretBox(randomBytes(32));
await emptyPublicSchema(pool);
await migrate(pool);
await addClusters(pool, box, 10, 100_000);
const service = new FleetUpgradeService({ pool, catalog });

/** Tenants Ready on 1.4.1 (generation observed, Ready=True), spread over the clusters; ids in creation order. */
async function tenants(n: number, prefix: string): Promise<string[]> {
  return insertReadyTenantsBulk(pool, n, { prefix, email: 'b@bench.io', plan: 'team', runtimeVersion: '1.4.1' });
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const pct = (xs: number[], p: number): number =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))]!;
const ms = (x: number): string => `${x.toFixed(1)} ms`;

console.log(
  `machine: ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), load ${loadavg()
    .map((l) => l.toFixed(2))
    .join(' ')}`,
);

// 1. The plan of 10,000 tenants.
const all = await tenants(10_000, 'plan-');
const planMs: number[] = [];
const readMs: number[] = [];
for (let i = 0; i < 5; i++) {
  let t0 = performance.now();
  await readPlanRows(pool);
  readMs.push(performance.now() - t0);
  t0 = performance.now();
  const plan = await service.plan({ targetVersion: '1.5.0', selector: { all: true } });
  planMs.push(performance.now() - t0);
  if (plan.counts.upgradeable !== 10_000) throw new Error(`plan: ${plan.counts.upgradeable} upgradeable, not 10,000`);
}
console.log(
  `plan of 10,000 tenants: median ${ms(median(planMs))} (target < 2000 ms); reading the same rows (baseline) ${ms(median(readMs))}; ratio ${(median(planMs) / median(readMs)).toFixed(1)}x`,
);

// 1b. The same plan with maintenance windows: each tenant one of 1,200 distinct windows (every 6
// minutes of the day in 5 zones, daily or at weekends, 2 h), and a freeze: the plan judges every
// tenant's next window that fits (memoised per distinct window). Baseline: the plan without windows.
await spreadMaintenanceWindows(pool, 1200);
const windowedMs: number[] = [];
for (let i = 0; i < 3; i++) {
  const t0 = performance.now();
  const plan = await service.plan({
    targetVersion: '1.5.0',
    selector: { all: true },
    freezes: [
      { from: new Date(Date.now() + 86400e3).toISOString(), until: new Date(Date.now() + 2 * 86400e3).toISOString() },
    ],
  });
  windowedMs.push(performance.now() - t0);
  if (plan.counts.upgradeable !== 10_000)
    throw new Error(`plan with windows: ${plan.counts.upgradeable} upgradeable, not 10,000`);
}
console.log(
  `plan of 10,000 tenants with 1,200 distinct maintenance windows and a freeze: median ${ms(median(windowedMs))} (target < 2000 ms); without windows (baseline) ${ms(median(planMs))}; ratio ${(median(windowedMs) / median(planMs)).toFixed(1)}x`,
);
await clearMaintenanceWindows(pool);

// 2. The decision loop: 2,000 tenants at maxConcurrency 10, and 20 tenants (baseline).
async function decisionLoop(ids: string[]): Promise<number[]> {
  const created = await service.create(
    {
      targetVersion: '1.5.0',
      selector: { tenantIds: ids },
      waves: [{ count: 1 }, { percent: 100 }],
      maxConcurrency: 10,
      soakSeconds: 0,
      gate: { tunnel: false, applications: false },
    },
    OPERATOR,
  );
  const id = created.fleetUpgrade.id;
  const driver = new FleetDriver({ pool, catalog, clusterParallelism: 100 });
  const ticks: number[] = [];
  for (let i = 0; i < ids.length * 3 + 10; i++) {
    const t0 = performance.now();
    await driver.tickAll();
    ticks.push(performance.now() - t0);
    // The engine's part: every step under way is done (its operation succeeded, the status observed).
    const steps = await upgradingSteps(pool, id);
    if (steps.length > 0) {
      await setTenantStatus(
        pool,
        steps.map((s) => s.tenantId),
        { observed: true, runningSpec: true },
      );
      await setOperationState(
        pool,
        steps.map((s) => s.operationId),
        'succeeded',
        { finishedNow: true },
      );
    }
    const state = await fleetUpgradeState(pool, id);
    if (state !== 'running') {
      if (state !== 'completed') throw new Error(`fleet upgrade ended ${state}`);
      break;
    }
  }
  return ticks;
}
const small = await decisionLoop(await tenants(20, 'small-'));
const large = await decisionLoop(all.slice(0, 2000));
console.log(
  `decision loop, 2,000 tenants at maxConcurrency 10: ${large.length} ticks, median ${ms(median(large))}, p95 ${ms(pct(large, 0.95))}, max ${ms(Math.max(...large))} (target < 1000 ms); ` +
    `20 tenants (baseline): median ${ms(median(small))}, max ${ms(Math.max(...small))}; ratio of medians ${(median(large) / median(small)).toFixed(2)}x`,
);

// 3. Throughput with the reconciler and the scripted engine.
const ids = await tenants(100, 'run-');
const engine = new ScriptedEngine({ script: (c) => (c.kind === 'up' ? { delayMs: ENGINE_MS } : undefined) });
// As `provisioner serve` runs them: the reconciler hears tenant_due (a step's spec change) through the notifications hub.
const notifications = new Notifications({ pool });
const reconciler = new Reconciler({
  pool,
  engine,
  box,
  notifications,
  workers: 10,
  clusterParallelism: 100,
  pollMs: 1000,
  logFlushMs: 100,
});
const driver = new FleetDriver({ pool, catalog, clusterParallelism: 100 });
// When each of the driver's rounds committed (a step's engine run can start only after the round that started it).
const commits: number[] = [];
const tickOnce = driver.tick.bind(driver);
driver.tick = async (id: string) => {
  const held = await tickOnce(id);
  commits.push(Date.now());
  return held;
};
reconciler.onOperation = () => driver.kick();
await reconciler.start();
await notifications.start();
driver.start();
const began = performance.now();
const created = await service.create(
  {
    targetVersion: '1.5.0',
    selector: { tenantIds: ids },
    waves: [{ count: 1 }, { percent: 100 }],
    maxConcurrency: 10,
    soakSeconds: 0,
    gate: { tunnel: false, applications: false },
  },
  OPERATOR,
);
driver.kick();
for (;;) {
  if ((await fleetUpgradeState(pool, created.fleetUpgrade.id)) !== 'running') break;
  if (performance.now() - began > 600_000) throw new Error('the fleet upgrade did not finish in 10 minutes');
  await new Promise((r) => setTimeout(r, 50));
}
const wall = (performance.now() - began) / 1000;
const ideal = (Math.ceil(1 / 1) + Math.ceil(99 / 10)) * (ENGINE_MS / 1000);
const steps = await succeededStepTimes(pool, created.fleetUpgrade.id);
const overheads: number[] = [];
// Where the control plane's time of a step goes (database times are transaction starts):
// the step's start to its attempt's start (the driver's commit, the NOTIFY, the claim), the
// attempt's start to the engine call, the engine's end to the outcome, the outcome to the gate.
const phases = {
  toAttempt: [] as number[],
  toCommit: [] as number[],
  toEngine: [] as number[],
  toOutcome: [] as number[],
  toGate: [] as number[],
};
const shares = steps.map((s) => {
  const call = engine.calls.find((c) => c.kind === 'up' && c.tenantId === s.tenantId)!;
  const stepMs = s.finishedAt.getTime() - s.startedAt.getTime();
  overheads.push(stepMs - (call.endedAt! - call.startedAt));
  phases.toAttempt.push(s.operationStartedAt.getTime() - s.startedAt.getTime());
  const committed = commits.find((c) => c >= s.startedAt.getTime());
  if (committed !== undefined) phases.toCommit.push(committed - s.startedAt.getTime());
  phases.toEngine.push(call.startedAt - s.operationStartedAt.getTime());
  phases.toOutcome.push(s.operationFinishedAt.getTime() - call.endedAt!);
  phases.toGate.push(s.finishedAt.getTime() - s.operationFinishedAt.getTime());
  return (stepMs - (call.endedAt! - call.startedAt)) / stepMs;
});
console.log(
  `upgrades with the scripted engine (${ENGINE_MS} ms each), 100 tenants, canary 1 then maxConcurrency 10: ${steps.length} upgraded in ${wall.toFixed(1)} s = ${((steps.length / wall) * 60).toFixed(0)}/min; ` +
    `ideal ${((100 / ideal) * 60).toFixed(0)}/min (${ideal.toFixed(0)} s), ratio ${(ideal / wall).toFixed(2)}; ` +
    `control plane share of an upgrade's wall time: median ${(median(shares) * 100).toFixed(2)} %, p95 ${(pct(shares, 0.95) * 100).toFixed(2)} % (target < 2 %); the control plane's time per upgrade: median ${ms(median(overheads))}, p95 ${ms(pct(overheads, 0.95))}`,
);
console.log(
  `the control plane's time per upgrade by phase (medians): step start → attempt start ${ms(median(phases.toAttempt))} ` +
    `(of which until the driver's round committed ${ms(median(phases.toCommit))}), ` +
    `attempt start → engine call ${ms(median(phases.toEngine))}, engine end → outcome ${ms(median(phases.toOutcome))}, ` +
    `outcome → gate passed ${ms(median(phases.toGate))}`,
);
await driver.stop();
await reconciler.stop({ graceMs: 0 });
await notifications.stop();
await pool.end();
await server?.stop();
await rm(dir, { recursive: true, force: true });
