/**
 * `provisioner fleet`: fleet upgrades (docs/fleet-upgrades.md) — plan, start, status (with
 * --follow: a progress bar per wave until it ends), pause, resume, abort. A client of the API only.
 */
import type { Command } from 'commander';
import { apiClientOf, UsageError, type Io } from './api-commands.ts';
import { table } from './format.ts';

interface WaveView {
  wave: number;
  name: string;
  size: number;
  state: string;
  counts: Record<string, number>;
}

interface FleetView {
  id: string;
  targetVersion: string;
  state: string;
  stateReason: string | null;
  currentWave: number;
  counts: Record<string, number>;
  etaSeconds: number | null;
  createdAt: string;
  windowsOverride?: { by: string; reason: string; at: string } | null;
  waves: WaveView[];
  tenants?: Array<{
    tenantId: string;
    organization: string;
    wave: number | null;
    state: string;
    reason: string | null;
    deferredUntil?: string | null;
  }>;
}

interface PlanView {
  waves: Array<{ wave: number; size: number; maxConcurrency: number; tenants: string[] }>;
  tenants: Array<{
    tenantId: string;
    organization: string;
    fromVersion: string;
    path: string[];
    wave: number;
    earliestStart?: string | null;
  }>;
  excluded: Array<{ tenantId: string; organization: string; version: string; reason: string }>;
  counts: { selected: number; upgradeable: number; excluded: number };
}

interface PlanOptions {
  all?: boolean;
  fromVersion?: string;
  plan?: string;
  region?: string;
  cluster?: string;
  tenants?: string;
  waves?: string;
  maxConcurrency?: string;
  maxUnavailable?: string;
  soak?: string;
  gateTimeout?: string;
  maxFailures?: string;
  maxFailurePercent?: string;
  tunnelGate?: boolean;
  appsGate?: boolean;
  freeze: string[];
  windowWait?: string;
  defaultUpgradeSeconds?: string;
  overrideWindows?: string;
}

/** `FROM/UNTIL` (instants with an offset), e.g. 2026-12-24T00:00:00Z/2026-12-27T00:00:00Z. */
export function parseFreeze(spec: string): { from: string; until: string } {
  const [from, until, ...rest] = spec.split('/');
  if (!from || !until || rest.length > 0)
    throw new UsageError(`--freeze '${spec}': give FROM/UNTIL, e.g. 2026-12-24T00:00:00Z/2026-12-27T00:00:00Z`);
  return { from, until };
}

const FINISHED = new Set(['completed', 'aborted']);
const DONE_STATES = ['succeeded', 'quarantined', 'skipped', 'cancelled', 'reverted', 'left', 'interrupted'];

const list = (s: string | undefined): string[] | undefined =>
  s === undefined
    ? undefined
    : s
        .split(',')
        .map((x) => x.trim())
        .filter(Boolean);

function int(name: string, s: string | undefined): number | undefined {
  if (s === undefined) return undefined;
  if (!/^\d+$/.test(s)) throw new UsageError(`${name} must be a whole number (got '${s}')`);
  return Number(s);
}

/** `1,5%,25%,100%`: counts, or cumulative percentages with %. */
export function parseWaves(s: string): Array<{ count: number } | { percent: number }> {
  return s.split(',').map((part) => {
    const p = part.trim();
    const m = /^(\d+)(%?)$/.exec(p);
    if (!m) throw new UsageError(`--waves: '${p}' is neither a count (5) nor a percentage (25%)`);
    return m[2] ? { percent: Number(m[1]) } : { count: Number(m[1]) };
  });
}

function requestBody(version: string, o: PlanOptions): Record<string, unknown> {
  const selector: Record<string, unknown> = {};
  if (o.all) selector.all = true;
  if (o.fromVersion) selector.versions = list(o.fromVersion);
  if (o.plan) selector.plans = list(o.plan);
  if (o.region) selector.regions = list(o.region);
  if (o.cluster) selector.clusters = list(o.cluster);
  if (o.tenants) selector.tenantIds = list(o.tenants);
  if (Object.keys(selector).length === 0)
    throw new UsageError('say which tenants: --all, or --from-version, --plan, --region, --cluster, --tenants');
  const maxFailures = int('--max-failures', o.maxFailures);
  const maxPercent = int('--max-failure-percent', o.maxFailurePercent);
  const body: Record<string, unknown> = {
    targetVersion: version,
    selector,
    ...(o.waves ? { waves: parseWaves(o.waves) } : {}),
    ...(o.maxConcurrency ? { maxConcurrency: int('--max-concurrency', o.maxConcurrency) } : {}),
    ...(o.maxUnavailable ? { maxUnavailable: int('--max-unavailable', o.maxUnavailable) } : {}),
    ...(o.soak ? { soakSeconds: int('--soak', o.soak) } : {}),
    ...(o.gateTimeout ? { gateTimeoutSeconds: int('--gate-timeout', o.gateTimeout) } : {}),
    ...(maxFailures !== undefined || maxPercent !== undefined
      ? {
          failureBudget: {
            ...(maxFailures !== undefined ? { maxFailures } : {}),
            ...(maxPercent !== undefined ? { maxPercent } : {}),
          },
        }
      : {}),
  };
  if (o.tunnelGate === false || o.appsGate === false)
    body.gate = { tunnel: o.tunnelGate !== false, applications: o.appsGate !== false };
  if (o.freeze.length > 0) body.freezes = o.freeze.map(parseFreeze);
  if (o.windowWait) body.windowWaitSeconds = int('--window-wait', o.windowWait);
  if (o.defaultUpgradeSeconds) body.defaultUpgradeSeconds = int('--default-upgrade-seconds', o.defaultUpgradeSeconds);
  if (o.overrideWindows !== undefined) body.overrideWindows = { reason: o.overrideWindows };
  return body;
}

/** A progress bar of `width` characters for done out of total. */
export function bar(done: number, total: number, width = 20): string {
  const filled = total === 0 ? width : Math.round((done / total) * width);
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}]`;
}

export function describeFleet(f: FleetView): string[] {
  const lines = [
    `fleet upgrade ${f.id} to ${f.targetVersion}: ${f.state}${f.stateReason ? ` (${f.stateReason})` : ''}` +
      (f.etaSeconds !== null ? `, about ${Math.ceil(f.etaSeconds / 60)} min left` : ''),
  ];
  if (f.windowsOverride)
    lines.push(
      `  maintenance windows overridden by ${f.windowsOverride.by} at ${f.windowsOverride.at}: ${f.windowsOverride.reason}`,
    );
  const waiting = (f.tenants ?? []).filter((t) => t.state === 'pending' && t.deferredUntil);
  if (waiting.length > 0)
    lines.push(
      `  ${waiting.length} waiting for their maintenance window (the first opens at ${
        waiting.map((t) => t.deferredUntil!).sort()[0]!
      })`,
    );
  for (const w of f.waves) {
    const done = DONE_STATES.reduce((s, k) => s + (w.counts[k] ?? 0), 0);
    const running = (w.counts.upgrading ?? 0) + (w.counts.rolling_back ?? 0) + (w.counts.reverting ?? 0);
    const failed = w.counts.quarantined ?? 0;
    lines.push(
      `  ${w.name.padEnd(8)} ${bar(done, w.size)} ${done}/${w.size} done, ${running} running${failed ? `, ${failed} failed` : ''}  ${w.state}`,
    );
  }
  return lines;
}

function planOptions(cmd: Command): Command {
  return cmd
    .option('--all', 'every live tenant')
    .option('--from-version <versions>', 'tenants on these versions (comma-separated)')
    .option('--plan <plans>', 'tenants of these plans')
    .option('--region <regions>', 'tenants in these regions')
    .option('--cluster <clusters>', 'tenants on these root clusters')
    .option('--tenants <ids>', 'these tenants (comma-separated ids)')
    .option('--waves <list>', 'canary count, then counts or cumulative percentages, e.g. 1,5%,25%,100%')
    .option('--max-concurrency <n>')
    .option('--max-unavailable <n>')
    .option('--soak <seconds>')
    .option('--gate-timeout <seconds>')
    .option('--max-failures <n>')
    .option('--max-failure-percent <p>')
    .option('--no-tunnel-gate', 'do not wait for the tunnel to reconnect')
    .option('--no-apps-gate', 'do not compare Applications with before')
    .option(
      '--freeze <from/until>',
      'a deny period, e.g. 2026-12-24T00:00:00Z/2026-12-27T00:00:00Z (repeatable); a freeze always wins',
      (v: string, prev: string[]) => [...prev, v],
      [] as string[],
    )
    .option('--window-wait <seconds>', "how long a wave waits for its tenants' maintenance windows (default 8 days)")
    .option('--default-upgrade-seconds <n>', 'expected duration of a hop with no upgrade history (default 1800)')
    .option(
      '--override-windows <reason>',
      "ignore the tenants' maintenance windows and the duration-fits rule (freezes still hold); the reason is audited",
    );
}

export function addFleetCommands(program: Command, io: Io): void {
  const client = () => apiClientOf(program, io);
  const json = (): boolean => program.opts<{ json?: boolean }>().json === true;
  const fleet = program.command('fleet').description('fleet upgrades: many tenants to one version, in waves');

  const printPlan = (p: PlanView) => {
    io.out(
      table(
        ['TENANT', 'ORGANIZATION', 'FROM', 'PATH', 'WAVE', 'WINDOW'],
        p.tenants.map((t) => [
          t.tenantId,
          t.organization,
          t.fromVersion,
          t.path.join(' -> '),
          t.wave === 0 ? 'canary' : t.wave,
          t.earliestStart ? `opens ${t.earliestStart}` : 'now',
        ]),
      ),
    );
    io.out(`waves: ${p.waves.map((w) => `${w.wave === 0 ? 'canary' : `wave ${w.wave}`} ${w.size}`).join(', ')}`);
    if (p.excluded.length > 0) {
      io.out(`not upgradeable (${p.excluded.length}):`);
      io.out(
        table(
          ['TENANT', 'ORGANIZATION', 'VERSION', 'REASON'],
          p.excluded.map((e) => [e.tenantId, e.organization, e.version, e.reason]),
        ),
      );
    }
  };

  planOptions(fleet.command('plan <version>').description('what a fleet upgrade would do (nothing is changed)')).action(
    async (version: string, o: PlanOptions) => {
      const p = await client().request<PlanView>('POST', '/v1/fleet-upgrades?dryRun=1', requestBody(version, o));
      if (json()) io.out(JSON.stringify(p, null, 2));
      else printPlan(p);
    },
  );

  planOptions(fleet.command('start <version>').description('start a fleet upgrade')).action(
    async (version: string, o: PlanOptions) => {
      const out = await client().request<{ fleetUpgrade: FleetView; plan: PlanView }>(
        'POST',
        '/v1/fleet-upgrades',
        requestBody(version, o),
      );
      if (json()) return io.out(JSON.stringify(out, null, 2));
      printPlan(out.plan);
      io.out(`started fleet upgrade ${out.fleetUpgrade.id}`);
    },
  );

  fleet
    .command('status [id]')
    .description('a fleet upgrade with a progress bar per wave (without id: the list)')
    .option('-f, --follow', 'redraw every 2 s until it ends (exit 1 when it halts or is aborted)')
    .action(async (id: string | undefined, o: { follow?: boolean }) => {
      if (!id) {
        const { items } = await client().request<{ items: FleetView[] }>('GET', '/v1/fleet-upgrades');
        if (json()) return io.out(JSON.stringify({ items }, null, 2));
        return io.out(
          table(
            ['ID', 'TARGET', 'STATE', 'WAVE', 'SUCCEEDED', 'FAILED', 'PENDING', 'CREATED'],
            items.map((f) => [
              f.id,
              f.targetVersion,
              f.state,
              f.waves[f.currentWave]?.name ?? '-',
              f.counts.succeeded,
              f.counts.quarantined,
              f.counts.pending,
              f.createdAt,
            ]),
          ),
        );
      }
      const path = `/v1/fleet-upgrades/${encodeURIComponent(id)}`;
      let last = '';
      for (;;) {
        const f = await client().request<FleetView>('GET', path);
        const text = json() ? JSON.stringify(f, null, 2) : describeFleet(f).join('\n');
        if (text !== last) io.out(text);
        last = text;
        if (!o.follow) {
          if (!json()) {
            const failed = (f.tenants ?? []).filter((t) => t.reason && t.state !== 'excluded');
            if (failed.length > 0)
              io.out(
                table(
                  ['TENANT', 'WAVE', 'STATE', 'REASON'],
                  failed.map((t) => [t.tenantId, t.wave, t.state, t.reason]),
                ),
              );
          }
          return;
        }
        if (FINISHED.has(f.state) || f.state === 'halted') {
          if (f.state !== 'completed')
            throw new UsageError(`fleet upgrade ${f.id} is ${f.state}${f.stateReason ? `: ${f.stateReason}` : ''}`);
          return;
        }
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, 2000);
          io.signal?.addEventListener('abort', () => {
            clearTimeout(t);
            resolve();
          });
        });
        if (io.signal?.aborted) return;
      }
    });

  const act = (name: 'pause' | 'resume' | 'abort', description: string) => {
    const cmd = fleet.command(`${name} <id>`).description(description);
    if (name !== 'resume') cmd.option('--reason <text>', 'why (audited)');
    if (name === 'abort') cmd.option('--rollback', 'roll the moved tenants back, newest wave first');
    cmd.action(async (id: string, o: { reason?: string; rollback?: boolean }) => {
      const body =
        name === 'resume'
          ? undefined
          : { ...(o.reason ? { reason: o.reason } : {}), ...(o.rollback ? { rollback: true } : {}) };
      const f = await client().request<FleetView>('POST', `/v1/fleet-upgrades/${encodeURIComponent(id)}/${name}`, body);
      io.out(json() ? JSON.stringify(f, null, 2) : describeFleet(f).join('\n'));
    });
  };
  fleet
    .command('override-windows <id>')
    .description('start its tenants without waiting for their maintenance windows (freezes still hold); audited')
    .requiredOption('--reason <text>', 'why (required, audited)')
    .action(async (id: string, o: { reason: string }) => {
      const f = await client().request<FleetView>(
        'POST',
        `/v1/fleet-upgrades/${encodeURIComponent(id)}/override-windows`,
        { reason: o.reason },
      );
      io.out(json() ? JSON.stringify(f, null, 2) : describeFleet(f).join('\n'));
    });
  act('pause', 'nothing new starts; upgrades under way finish');
  act('resume', 'go on after a pause or a halt');
  act('abort', 'stop; tenants not started are cancelled');
}
