/**
 * `provisioner capacity` (GET /v1/capacity): per plan, the tenants awake, asleep and waking and what
 * they reserve, when the plan sleeps, the warm pool against its size (in all, and per root
 * cluster), and the last day's signups (warm or cold) and wakes (docs/operations.md "Sleep", "Warm
 * pool"). A table, or the API's JSON with --json.
 */
import type { Command } from 'commander';
import { apiClientOf, type Io } from './api-commands.ts';
import { table } from './format.ts';
import type { Capacity } from '../api/types.ts';

type Reservation = Capacity['plans'][number]['reservation']['now'];

const cpu = (m: number) => (m >= 1000 ? `${(m / 1000).toFixed(m % 1000 === 0 ? 0 : 2)}` : `${m}m`);
const mem = (b: number) => (b >= 1024 ** 3 ? `${(b / 1024 ** 3).toFixed(2)}Gi` : `${Math.round(b / 1024 ** 2)}Mi`);
const reserved = (r: Reservation) =>
  r.cpuMillicores === 0 && r.memoryBytes === 0 ? '0' : `${cpu(r.cpuMillicores)}, ${mem(r.memoryBytes)}`;
const duration = (s: number | null) =>
  s === null
    ? '-'
    : s >= 3600
      ? `${Math.round(s / 360) / 10}h`
      : s >= 60
        ? `${Math.round(s / 60)}m`
        : `${Math.round(s)}s`;

export function capacityText(c: Capacity): string {
  const rows = c.plans.map((p) => [
    p.plan,
    String(p.tenants.awake),
    String(p.tenants.asleep),
    String(p.tenants.waking),
    reserved(p.reservation.awakeTenant),
    reserved(p.reservation.now),
    p.sleepAfterSeconds === null ? 'never' : duration(p.sleepAfterSeconds),
    p.warmPool.size === 0
      ? '-'
      : `${p.warmPool.ready}/${p.warmPool.target} ready${p.warmPool.provisioning ? `, ${p.warmPool.provisioning} coming` : ''}${p.warmPool.failing ? `, ${p.warmPool.failing} failing` : ''}`,
    duration(p.warmPool.oldestReadySeconds),
    `${p.signups24h.warm} warm, ${p.signups24h.cold} cold`,
  ]);
  const w = c.wakes24h;
  // The pool per root cluster: one line per pooled plan with entries.
  const perCluster = c.plans
    .filter((p) => p.warmPool.size > 0 && p.warmPool.clusters.length > 0)
    .map(
      (p) =>
        `warm pool ${p.plan} per root cluster (${p.warmPool.size} each): ${p.warmPool.clusters
          .map(
            (x) =>
              `${x.cluster} ${x.ready}/${p.warmPool.size} ready${x.provisioning ? `, ${x.provisioning} coming` : ''}${x.failing ? `, ${x.failing} failing` : ''}`,
          )
          .join('; ')}`,
    );
  return [
    table(
      [
        'PLAN',
        'AWAKE',
        'ASLEEP',
        'WAKING',
        'PER TENANT AWAKE',
        'RESERVED NOW',
        'SLEEPS AFTER',
        'WARM POOL',
        'OLDEST',
        'SIGNUPS 24H',
      ],
      rows,
    ),
    ...perCluster,
    `an asleep tenant reserves nothing; new tenants and warm pool entries run ${c.defaultVersion}`,
    `wakes in 24 h: ${w.count}${w.count ? `, median ${duration(w.p50Seconds)}, longest ${duration(w.maxSeconds)} (the wake operation's run)` : ''}`,
  ].join('\n');
}

export function addCapacityCommands(program: Command, io: Io): void {
  program
    .command('capacity')
    .description(
      'tenants awake and asleep per plan with what they reserve, the warm pool, signups warm and cold, wakes',
    )
    .action(async () => {
      const c = await apiClientOf(program, io).call('GET /v1/capacity');
      io.out(program.opts<{ json?: boolean }>().json ? JSON.stringify(c, null, 2) : capacityText(c));
    });
}
