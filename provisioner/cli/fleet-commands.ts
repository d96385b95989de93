/**
 * `provisioner fleet`: fleet upgrades (docs/fleet-upgrades.md) — plan, start, status (with
 * --follow: a progress bar per wave, from the progress stream, until it ends), pause, resume,
 * abort, and skip-gate (a tenant's gate checks, for its step under way). A client of the API only.
 */
import type { Command } from 'commander';
import { apiClientOf, NothingToDo, UsageError, type Io } from './api-commands.ts';
import { ApiError, type ApiClient } from './client.ts';
import { age, table } from './format.ts';
import type { FleetEvent, FleetPlan, FleetUpgrade, FleetUpgradeTenant } from '../api/types.ts';
import { SKIPPABLE_GATE_CHECKS, type SkippableGateCheck } from '../store/states.ts';
import type { BodyOf } from '../http/api-client.ts';

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

/** The fleet upgrade the options ask for (what the options leave unchecked, the API checks: a 400 names the field). */
function requestBody(version: string, o: PlanOptions): BodyOf<'POST /v1/fleet-upgrades'> {
  const selector: BodyOf<'POST /v1/fleet-upgrades'>['selector'] = {};
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
  const body: BodyOf<'POST /v1/fleet-upgrades'> = {
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

/** Tenant decisions worth a line of their own while following (the bars show the rest). */
const TENANT_LINES = new Set([
  'gate_skipped',
  'tenant_rollback',
  'tenant_quarantined',
  'tenant_skipped',
  'tenant_left',
  'tenant_interrupted',
]);

/** A line for a decision while following, or null for the routine ones the bars already show. */
export function describeEvent(e: FleetEvent): string | null {
  if (e.tenantId !== null && !TENANT_LINES.has(e.action)) return null;
  if (e.action === 'gate_skipped') {
    const checks = Array.isArray(e.data?.checks) ? e.data.checks.join(', ') : '?';
    const by = typeof e.data?.by === 'string' ? e.data.by : 'an unknown key';
    const reason = typeof e.data?.reason === 'string' ? e.data.reason : '';
    return `  ${e.at} gate_skipped ${e.tenantId}: ${checks} skipped by key ${by}: ${reason}`;
  }
  const reason = typeof e.data?.reason === 'string' ? `: ${e.data.reason}` : '';
  const wave = typeof e.data?.wave === 'number' ? ` ${e.data.wave === 0 ? 'canary' : `wave ${e.data.wave}`}` : '';
  return `  ${e.at} ${e.action}${e.tenantId !== null ? ` ${e.tenantId}` : wave}${reason}`;
}

export function describeFleet(f: FleetUpgrade, deferredUntil?: readonly string[]): string[] {
  const lines = [
    `fleet upgrade ${f.id} to ${f.targetVersion}: ${f.state}${f.stateReason ? ` (${f.stateReason})` : ''}` +
      (f.etaSeconds !== null ? `, about ${Math.ceil(f.etaSeconds / 60)} min left` : ''),
  ];
  if (f.windowsOverride)
    lines.push(
      `  maintenance windows overridden by ${f.windowsOverride.by} at ${f.windowsOverride.at}: ${f.windowsOverride.reason}`,
    );
  const waiting =
    deferredUntil ??
    (f.tenants ?? []).filter((t) => t.state === 'pending' && t.deferredUntil).map((t) => t.deferredUntil!);
  if (waiting.length > 0)
    lines.push(
      `  ${waiting.length} waiting for their maintenance window (the first opens at ${[...waiting].sort()[0]!})`,
    );
  for (const w of f.waves) {
    const done = DONE_STATES.reduce((s, k) => s + (w.counts[k] ?? 0), 0);
    const running = (w.counts.upgrading ?? 0) + (w.counts.rolling_back ?? 0) + (w.counts.reverting ?? 0);
    const failed = w.counts.quarantined ?? 0;
    lines.push(
      `  ${w.name.padEnd(8)} ${bar(done, w.size)} ${done}/${w.size} done, ${running} running${failed ? `, ${failed} failed` : ''}  ${w.state}`,
    );
  }
  lines.push(...describeGateWaits(f));
  const agents = f.upgradedByAgent ?? [];
  if (agents.length > 0) {
    const by = (p: string) => agents.filter((a) => a.phase === p).length;
    lines.push(
      `  hybrid runtimes moved by their in-cluster upgraders: ${agents.length} (${by('succeeded')} succeeded, ${by('pending') + by('applying')} under way, ${by('waiting')} waiting for their tenant's wave)`,
    );
    for (const a of agents.filter((x) => x.phase !== 'succeeded').slice(0, HYBRID_LINES))
      lines.push(`    ${a.tenantId} ${a.runtime} (${a.version}): ${a.phase}`);
  }
  const customers = f.customerActionNeeded ?? [];
  if (customers.length > 0) {
    lines.push(
      `  customer action needed: ${customers.length} hybrid runtime${customers.length === 1 ? '' : 's'} of these tenants (the fleet upgrade moves hosted runtimes, and hybrid ones only through the in-cluster upgrader they opted in to)`,
    );
    for (const c of customers.slice(0, HYBRID_LINES))
      lines.push(
        `    ${c.tenantId} ${c.runtime} (${c.version}${c.reportedVersion ? `, runs ${c.reportedVersion}` : ''}): ${c.message}`,
      );
    if (customers.length > HYBRID_LINES)
      lines.push(`    … and ${customers.length - HYBRID_LINES} more (--json lists them all)`);
  }
  return lines;
}

/** `2026-11-28 14:05 UTC`: an instant as people read it (the API's answer keeps the full one). */
export function shortTime(iso: string): string {
  return iso.replace('T', ' ').replace(/:\d\d(\.\d+)?Z$/, ' UTC');
}

/** `45 s`, `28 min`, `2 h 5 min`. */
export function duration(seconds: number): string {
  if (seconds < 60) return `${seconds} s`;
  const min = Math.ceil(seconds / 60);
  if (min < 60) return `${min} min`;
  return `${Math.floor(min / 60)} h${min % 60 ? ` ${min % 60} min` : ''}`;
}

/** Tenants waiting on their gate listed one per line by `fleet status`. */
const GATE_LINES = 10;

/**
 * The steps waiting on their health gate, soonest timeout first: which checks each waits on,
 * since when, the time left and what happens then, and what the operator can do about it.
 */
export function describeGateWaits(f: FleetUpgrade): string[] {
  const waiting = (f.tenants ?? [])
    .filter((t) => t.gateWait !== null)
    .sort((a, b) => a.gateWait!.timeoutAt.localeCompare(b.gateWait!.timeoutAt));
  if (waiting.length === 0) return [];
  const lines = [`  waiting on their health gate: ${waiting.length} tenant${waiting.length === 1 ? '' : 's'}`];
  for (const t of waiting.slice(0, GATE_LINES)) {
    const w = t.gateWait!;
    const on =
      w.waitingOn.length === 0
        ? "the driver's next judgment"
        : w.waitingOn.map((c) => `${c.name} (${c.detail})`).join(', ');
    lines.push(
      `    ${t.organization} (${t.tenantId}) ${w.step} ${t.step?.from ?? '?'} -> ${t.step?.to ?? '?'}`,
      `      gate waits on: ${on}`,
      `      since ${shortTime(w.since)}; ${w.secondsLeft > 0 ? `${duration(w.secondsLeft)} left` : 'timed out'} (times out at ${shortTime(w.timeoutAt)})`,
      `      then: ${w.onTimeout}`,
      '      what you can do:',
      ...gateActions(f, t).map((a) => `        ${a}`),
    );
  }
  if (waiting.length > GATE_LINES) lines.push(`    … and ${waiting.length - GATE_LINES} more (--json lists them all)`);
  if (f.state === 'running')
    lines.push(`  or pause: provisioner fleet pause ${f.id}   (nothing new starts; these steps are still judged)`);
  if (f.state === 'paused' || f.state === 'halted') lines.push(`  or resume: provisioner fleet resume ${f.id}`);
  return lines;
}

/** The three actions for one tenant's step waiting on its gate: wait (the time left), skip its checks, abort. */
export function gateActions(f: FleetUpgrade, t: FleetUpgradeTenant): string[] {
  const w = t.gateWait!;
  const wait =
    w.secondsLeft > 0
      ? `wait: ${duration(w.secondsLeft)} left before the gate times out; it passes as soon as its checks do`
      : "wait: the gate timed out; the driver's next round fails it";
  const skippable: readonly string[] = SKIPPABLE_GATE_CHECKS;
  const mayskip = w.waitingOn.map((c) => c.name).filter((n) => skippable.includes(n));
  const others = w.waitingOn.map((c) => c.name).filter((n) => !skippable.includes(n));
  let skip: string;
  if (mayskip.length > 0)
    skip =
      `skip: provisioner fleet skip-gate ${f.id} ${t.tenantId} ${mayskip.map((c) => `--check ${c}`).join(' ')} --reason "<why>"` +
      `   (for this step only; audited${others.length > 0 ? `; it still waits on ${others.join(', ')}` : ''})`;
  else if (others.length > 0)
    skip = `skip: not for ${others.join(', ')}: they say whether the step's change was applied (only ${SKIPPABLE_GATE_CHECKS.join(' and ')} can be skipped)`;
  else skip = "skip: nothing to skip before the driver's next judgment";
  const abort =
    f.state === 'aborting'
      ? 'abort: under way already'
      : `abort: provisioner fleet abort ${f.id} [--rollback]   (the whole fleet upgrade; --rollback moves the upgraded tenants back)`;
  return [wait, skip, abort];
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A tenant of the fleet upgrade by its id, or by its organization (looked up among the fleet upgrade's tenants). */
async function tenantOfFleet(api: ApiClient, id: string, tenant: string): Promise<string> {
  if (UUID.test(tenant)) return tenant;
  const f = await api.call('GET /v1/fleet-upgrades/:id', { params: { id } });
  const found = (f.tenants ?? []).filter((t) => t.organization === tenant);
  if (found.length === 1) return found[0]!.tenantId;
  if (found.length === 0)
    throw new UsageError(`fleet upgrade ${id} has no tenant of organization '${tenant}': give its id or organization`);
  throw new UsageError(
    `fleet upgrade ${id} has ${found.length} tenants of organization '${tenant}': give the id (${found.map((t) => t.tenantId).join(', ')})`,
  );
}

/** Hybrid runtimes listed one per line by `fleet status`. */
const HYBRID_LINES = 20;

/** Consecutive failed connections to the progress stream before `--follow` gives up (about a minute). */
const FOLLOW_MAX_FAILURES = 15;

/** Retryable: the provisioner could not be reached, failed, or has too many streams open for the key just now. */
function retryable(err: unknown): boolean {
  if (err instanceof ApiError) return err.status === 0 || err.status === 429 || err.status >= 500;
  return !(err instanceof UsageError);
}

/**
 * `fleet status ID --follow`: reads the fleet upgrade's progress stream (SSE), redraws the bars on
 * each `state`/`progress` that changes them, prints fleet decisions and tenant failures as they
 * come, and resumes with Last-Event-ID after a dropped connection, so no decision is missed or
 * shown twice. Returns when it completed; a UsageError (exit 1) when it halted or was aborted.
 */
async function followFleet(client: ApiClient, id: string, io: Io, json: boolean): Promise<void> {
  let lastId: string | undefined;
  let last = '';
  let view: FleetUpgrade | undefined;
  let failures = 0;
  const deferred = new Map<string, string>();
  const stopped = (state: string): UsageError =>
    new UsageError(`fleet upgrade ${view?.id ?? id} is ${state}${view?.stateReason ? `: ${view.stateReason}` : ''}`);
  for (;;) {
    try {
      for await (const ev of client.events('GET /v1/fleet-upgrades/:id/events', {
        params: { id },
        lastEventId: lastId,
        ...(io.signal ? { signal: io.signal } : {}),
      })) {
        failures = 0;
        if (ev.id !== undefined) lastId = ev.id;
        if (ev.event === 'event') {
          const e = ev.data;
          if (e.action === 'tenant_deferred' && e.tenantId && typeof e.data?.until === 'string')
            deferred.set(e.tenantId, e.data.until);
          else if (e.action === 'override_windows') deferred.clear();
          else if (e.tenantId) deferred.delete(e.tenantId);
          if (json) io.out(JSON.stringify(e));
          else {
            const line = describeEvent(e);
            if (line !== null) io.out(line);
          }
        } else if (ev.event === 'state' || ev.event === 'progress') {
          view = ev.data;
          const text = json ? JSON.stringify(view, null, 2) : describeFleet(view, [...deferred.values()]).join('\n');
          if (text !== last) io.out(text);
          last = text;
          if (view.state === 'halted') throw stopped('halted');
        } else if (ev.event === 'end') {
          const state = ev.data.state;
          if (state !== 'completed') throw stopped(state);
          return;
        }
      }
      if (io.signal?.aborted) return;
    } catch (err) {
      if (io.signal?.aborted) return;
      if (!retryable(err) || failures + 1 >= FOLLOW_MAX_FAILURES) throw err;
      failures += 1;
      io.err(
        `provisioner: the progress stream was interrupted (${err instanceof Error ? err.message : String(err)}); resuming${
          lastId !== undefined ? ` after event ${lastId}` : ''
        }`,
      );
    }
    // The stream ended without its `end` (a replica restarted, a proxy cut it): resume where it was.
    const delay = failures === 0 ? 250 : Math.min(5000, 500 * 2 ** (failures - 1));
    await new Promise<void>((resolve) => {
      const t = setTimeout(done, delay);
      io.signal?.addEventListener('abort', done);
      function done(): void {
        clearTimeout(t);
        io.signal?.removeEventListener('abort', done);
        resolve();
      }
    });
    if (io.signal?.aborted) return;
  }
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

  const printPlan = (p: FleetPlan) => {
    if (p.tenants.length > 0) printUpgradeable(p);
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
  const printUpgradeable = (p: FleetPlan) => {
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
  };

  planOptions(fleet.command('plan <version>').description('what a fleet upgrade would do (nothing is changed)')).action(
    async (version: string, o: PlanOptions) => {
      const answer = await client().call('POST /v1/fleet-upgrades', {
        query: { dryRun: '1' },
        body: requestBody(version, o),
      });
      // A dry run answers the plan alone (200); the created fleet upgrade's answer holds it too.
      const p = 'fleetUpgrade' in answer ? answer.plan : answer;
      if (json()) io.out(JSON.stringify(p, null, 2));
      else printPlan(p);
      // `fleet start` would be refused (NOTHING_TO_UPGRADE): say so, and exit 4.
      if (p.tenants.length === 0)
        throw new NothingToDo(
          p.counts.selected === 0
            ? `no tenant matches the selection`
            : `none of the ${p.counts.selected} selected tenants can be upgraded to ${version}${json() ? '' : ' (why: above)'}`,
        );
    },
  );

  planOptions(fleet.command('start <version>').description('start a fleet upgrade')).action(
    async (version: string, o: PlanOptions) => {
      const out = await client().call('POST /v1/fleet-upgrades', { body: requestBody(version, o) });
      if (!('fleetUpgrade' in out)) throw new Error('the provisioner answered with a plan, not a fleet upgrade');
      if (json()) return io.out(JSON.stringify(out, null, 2));
      printPlan(out.plan);
      io.out(`started fleet upgrade ${out.fleetUpgrade.id}`);
    },
  );

  const listFleetUpgrades = async () => {
    const { items } = await client().call('GET /v1/fleet-upgrades');
    if (json()) return io.out(JSON.stringify({ items }, null, 2));
    io.out(
      table(
        ['ID', 'TARGET', 'STATE', 'WAVE', 'UPGRADING', 'SUCCEEDED', 'FAILED', 'PENDING', 'AGE'],
        items.map((f) => [
          f.id,
          f.targetVersion,
          f.state,
          f.waves[f.currentWave]?.name ?? '-',
          f.counts.upgrading,
          f.counts.succeeded,
          f.counts.quarantined,
          f.counts.pending,
          age(f.createdAt),
        ]),
      ),
    );
  };

  fleet
    .command('list')
    .description('the fleet upgrades, newest first, with their state and counts')
    .action(listFleetUpgrades);

  fleet
    .command('status [id]')
    .description('a fleet upgrade with a progress bar per wave (without id: the list, as `fleet list`)')
    .option(
      '-f, --follow',
      'follow its progress stream, redrawing on every change, until it ends (exit 1 when it halts or is aborted)',
    )
    .action(async (id: string | undefined, o: { follow?: boolean }) => {
      if (!id) return listFleetUpgrades();
      if (o.follow) return followFleet(client(), id, io, json());
      const f = await client().call('GET /v1/fleet-upgrades/:id', { params: { id } });
      if (json()) return io.out(JSON.stringify(f, null, 2));
      io.out(describeFleet(f).join('\n'));
      const failed = (f.tenants ?? []).filter((t) => t.reason && t.state !== 'excluded');
      if (failed.length > 0)
        io.out(
          table(
            ['TENANT', 'WAVE', 'STATE', 'REASON'],
            failed.map((t) => [t.tenantId, t.wave, t.state, t.reason]),
          ),
        );
    });

  const act = (name: 'pause' | 'resume' | 'abort', description: string) => {
    const cmd = fleet.command(`${name} <id>`).description(description);
    if (name !== 'resume') cmd.option('--reason <text>', 'why (audited)');
    if (name === 'abort') cmd.option('--rollback', 'roll the moved tenants back, newest wave first');
    cmd.action(async (id: string, o: { reason?: string; rollback?: boolean }) => {
      const body = { ...(o.reason ? { reason: o.reason } : {}), ...(o.rollback ? { rollback: true } : {}) };
      const f =
        name === 'resume'
          ? await client().call('POST /v1/fleet-upgrades/:id/resume', { params: { id } })
          : await client().call(`POST /v1/fleet-upgrades/:id/${name}`, { params: { id }, body });
      io.out(json() ? JSON.stringify(f, null, 2) : describeFleet(f).join('\n'));
    });
  };
  fleet
    .command('override-windows <id>')
    .description('start its tenants without waiting for their maintenance windows (freezes still hold); audited')
    .requiredOption('--reason <text>', 'why (required, audited)')
    .action(async (id: string, o: { reason: string }) => {
      const f = await client().call('POST /v1/fleet-upgrades/:id/override-windows', {
        params: { id },
        body: { reason: o.reason },
      });
      io.out(json() ? JSON.stringify(f, null, 2) : describeFleet(f).join('\n'));
    });
  fleet
    .command('skip-gate <id> <tenant>')
    .description(
      `skip health-gate checks (${SKIPPABLE_GATE_CHECKS.join(', ')}) the step of a tenant (id or organization) waits on, for that step only; audited`,
    )
    .option(
      '--check <name>',
      `a check to skip, as \`fleet status\` names it: ${SKIPPABLE_GATE_CHECKS.join(' or ')} (repeatable)`,
      (v: string, prev: string[]) => [...prev, v],
      [] as string[],
    )
    .requiredOption('--reason <text>', 'why (required, audited)')
    .action(async (id: string, tenant: string, o: { check: string[]; reason: string }) => {
      if (o.check.length === 0)
        throw new UsageError(`say which checks to skip: --check ${SKIPPABLE_GATE_CHECKS.join(' and/or --check ')}`);
      const api = client();
      const tenantId = await tenantOfFleet(api, id, tenant);
      const f = await api.call('POST /v1/fleet-upgrades/:id/tenants/:tenantId/skip-gate', {
        params: { id, tenantId },
        body: { checks: o.check as SkippableGateCheck[], reason: o.reason }, // as given: the API checks them
      });
      if (json()) return io.out(JSON.stringify(f, null, 2));
      const t = f.tenants?.[0];
      const last = t?.gateSkipped.at(-1);
      if (!t || !last) return io.out(JSON.stringify(f, null, 2));
      const now = t.gateWait
        ? t.gateWait.waitingOn.length > 0
          ? `its gate still waits on ${t.gateWait.waitingOn.map((c) => c.name).join(', ')}`
          : 'the driver moves it on at its next judgment if the other checks pass'
        : `it is ${t.state} now`;
      io.out(
        `${t.organization} (${t.tenantId}): ${last.checks.join(', ')} skipped for its ${last.step.kind} ${last.step.from} -> ${last.step.to}; ${now}`,
      );
    });
  act('pause', 'nothing new starts; upgrades under way finish');
  act('resume', 'go on after a pause or a halt');
  act('abort', 'stop; tenants not started are cancelled');
}
