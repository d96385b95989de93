/**
 * API client commands: tenants, operations, clusters, regions, versions and keys. Each prints a readable
 * table, or the API's JSON with --json.
 */
import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { ApiClient } from './client.ts';
import { age, keyValues, table } from './format.ts';
import type {
  Accepted,
  ApiKeyInfo,
  Cluster,
  ClusterPutAnswer,
  CreatedKey,
  LogPage,
  MaintenanceWindow,
  Operation,
  OperationLogEvents,
  OperationPage,
  PathInfo,
  RegionInfo,
  RuntimeVersionInfo,
  RuntimeVersionList,
  Tenant,
} from '../http/api-types.ts';

export interface Io {
  out: (s: string) => void;
  err: (s: string) => void;
  env: Record<string, string | undefined>;
  /** Ends commands that run until interrupted (--watch, --follow); the process's own CLI passes none. */
  signal?: AbortSignal;
  /** Standard input, read whole (`clusters import -`); default: the process's stdin. */
  stdin?: () => Promise<string>;
  /** Asks a confirmation on the terminal (`runtimes remove`); default: terminal-prompt.ts's. */
  ask?: (question: string) => Promise<string | undefined>;
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** One entry of the root infra's `clusters` stack output (infra/root-cluster.ts, ClusterRegistryEntry). */
export interface ImportedCluster {
  name: string;
  region: string;
  capacity: number;
  labels?: Record<string, string>;
  kubeconfig: string;
}

/**
 * The `clusters` stack output (`pulumi stack output clusters --show-secrets --json`): a JSON list
 * of registry entries. A malformed document is a usage error naming the entry and field; a
 * kubeconfig still hidden as `[secret]` names the missing `--show-secrets`.
 */
export function parseClusterRegistry(text: string, source: string): ImportedCluster[] {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    throw new UsageError(
      `${source}: not JSON; expected the output of \`pulumi stack output clusters --show-secrets --json\``,
    );
  }
  if (!Array.isArray(doc)) throw new UsageError(`${source}: expected a JSON list of clusters`);
  if (doc.length === 0) throw new UsageError(`${source}: the list of clusters is empty`);
  return doc.map((entry: unknown, i) => {
    const at = `${source}: clusters[${i}]`;
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry))
      throw new UsageError(`${at} is not an object`);
    const e = entry as Record<string, unknown>;
    for (const key of ['name', 'region', 'kubeconfig'] as const) {
      if (typeof e[key] !== 'string' || e[key] === '') throw new UsageError(`${at}.${key} must be a non-empty string`);
    }
    if (e.kubeconfig === '[secret]')
      throw new UsageError(
        `${at}.kubeconfig is hidden ('[secret]'): run \`pulumi stack output clusters --show-secrets --json\``,
      );
    if (!Number.isInteger(e.capacity) || (e.capacity as number) < 0)
      throw new UsageError(`${at}.capacity must be a whole number`);
    if (e.labels !== undefined) {
      const labels = e.labels;
      if (
        typeof labels !== 'object' ||
        labels === null ||
        Array.isArray(labels) ||
        Object.values(labels).some((v) => typeof v !== 'string')
      )
        throw new UsageError(`${at}.labels must be an object of strings`);
    }
    return {
      name: e.name as string,
      region: e.region as string,
      capacity: e.capacity as number,
      ...(e.labels !== undefined ? { labels: e.labels as Record<string, string> } : {}),
      kubeconfig: e.kubeconfig as string,
    };
  });
}

/** `RRULE ZONE MINUTES [DTSTART]`, e.g. `FREQ=WEEKLY;BYDAY=SA;BYHOUR=2 Europe/Berlin 240` (the API checks the rest). */
export function parseWindow(spec: string): MaintenanceWindow {
  const parts = spec.trim().split(/\s+/);
  if (parts.length < 3 || parts.length > 4 || !/^\d+$/.test(parts[2]!))
    throw new UsageError(
      `--window '${spec}': give "RRULE TIME-ZONE MINUTES [DTSTART]", e.g. "FREQ=WEEKLY;BYDAY=SA;BYHOUR=2 Europe/Berlin 240"`,
    );
  return {
    rrule: parts[0]!,
    timeZone: parts[1]!,
    durationMinutes: Number(parts[2]),
    ...(parts[3] !== undefined ? { dtstart: parts[3] } : {}),
  };
}
/**
 * A command line the CLI cannot act on (a bad option value, a file that cannot be read): printed as
 * its message alone, without the underlying error's text, and exits 1 like commander's own usage
 * errors.
 */
export class UsageError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'UsageError';
  }
}

/**
 * A command that had nothing to do (resume of a tenant that is not suspended, a fleet plan that
 * upgrades no tenant): its message is printed as `nothing to do: …` and the exit code is 4
 * (NOTHING_TO_DO_EXIT), so that a script can tell it from a change (0) and from a failure (1).
 */
export class NothingToDo extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NothingToDo';
  }
}
export const NOTHING_TO_DO_EXIT = 4;
/** API codes that mean the request was valid but there was nothing to do. */
export const NOTHING_TO_DO_CODES = new Set(['NOTHING_TO_RETRY', 'NOTHING_TO_UPGRADE']);

/** The file --kubeconfig names; a file that cannot be read is a usage error naming it and why. */
export async function readKubeconfig(file: string): Promise<string> {
  try {
    return await readFile(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why =
      code === 'ENOENT'
        ? 'no such file'
        : code === 'EISDIR'
          ? 'it is a directory'
          : code === 'EACCES'
            ? 'permission denied'
            : (err as Error).message;
    throw new UsageError(`--kubeconfig: cannot read the kubeconfig file '${file}': ${why}`, { cause: err });
  }
}

/** The Argo applications a version runs, by the names users know them, with their chart's key. */
const APPS: ReadonlyArray<readonly [key: string, name: string]> = [
  ['argoCd', 'Argo CD'],
  ['argoWorkflows', 'Argo Workflows'],
  ['argoRollouts', 'Argo Rollouts'],
  ['argoEvents', 'Argo Events'],
];

/** `versions get`: a runtime version, what it runs, and where a tenant can go from it and come to it. */
function describeVersion(v: RuntimeVersionInfo, from: PathInfo[], to: PathInfo[]): string {
  const move = (p: PathInfo, other: string) =>
    p.allowed
      ? `  ${other}: direct`
      : p.path.length > 0
        ? `  ${other}: through ${p.path.join(' -> ')} (${p.reason ?? 'not directly'})`
        : `  ${other}: no way (${p.reason ?? 'refused'})`;
  return [
    ...keyValues([
      ['version', `${v.version}${v.default ? ' (the default for signups)' : ''}`],
      ['channel', v.channel],
      ['availability', v.availability],
      ['released', v.releaseDate],
      ...APPS.map(([key, name]) => [name, `${v.appVersions[key] ?? '-'} (chart ${v.components[key] ?? '-'})`] as const),
      ['vcluster', `${v.components.vcluster ?? '-'} (Kubernetes ${v.components.kubernetes ?? '-'})`],
      ['agents', v.components.agents ?? '-'],
      [
        'upgrade',
        [
          v.upgrade.minFrom ? `from ${v.upgrade.minFrom} or newer` : 'from any older version',
          ...(v.upgrade.steppingStone ? ['a stepping stone: no upgrade jumps over it'] : []),
        ].join('; '),
      ],
      [
        'rollback',
        v.rollback.allowed ? 'allowed (catalog rules)' : `refused${v.rollback.reason ? `: ${v.rollback.reason}` : ''}`,
      ],
      ...(v.notes ? [['notes', v.notes] as const] : []),
    ]),
    'from this version to:',
    ...from.map((p) => move(p, p.to)),
    'to this version from:',
    ...to.map((p) => move(p, p.from)),
  ].join('\n');
}

/** What `RuntimeConnected=False` reasons read as in a table cell. */
const NOT_CONNECTED: Record<string, string> = {
  TunnelNotConnected: 'runtime not connected',
  Waking: 'waking (runtime starting)',
  NeverReported: 'runtime never reported',
  ReportingStale: 'runtime stopped reporting',
};

/**
 * A tenant's health in words, for the STATUS column (and, `long`, the `status` line of `tenants get`
 * with the condition's message): a Ready tenant is `healthy` only while its runtime is connected
 * (RuntimeConnected, provisioner/http/tenant-view.ts); otherwise the reason it is not, or what it waits for.
 */
export function tenantStatus(t: Tenant, long = false): string {
  const cond = (type: string, status: string) =>
    t.status.conditions.find((c) => c.type === type && c.status === status);
  const say = (short: string, c: { reason: string; message: string } | undefined) =>
    long && c ? `${short} (${c.reason}): ${c.message}` : short;
  if (t.spec.deleted) return t.status.phase === 'Deleted' ? '-' : 'deleting';
  if (t.status.phase === 'Suspended') return 'suspended';
  if (t.status.phase === 'Sleeping') return say('asleep', cond('Ready', 'False'));
  if (t.status.phase === 'Waking') return 'waking';
  const runtime = cond('RuntimeConnected', 'False');
  if (runtime) return say(NOT_CONNECTED[runtime.reason] ?? `runtime: ${runtime.reason}`, runtime);
  const stalled = cond('Stalled', 'True');
  if (stalled) return say(stalled.reason, stalled);
  if (t.status.phase !== 'Ready') {
    const notReady = cond('Ready', 'False');
    return notReady ? say(notReady.reason, notReady) : t.status.phase.toLowerCase();
  }
  const action = cond('ActionRequired', 'True');
  if (action) return say(`action required: ${action.reason}`, action);
  return cond('RuntimeConnected', 'True') ? 'healthy' : t.spec.suspended ? 'suspending' : '-';
}

const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'superseded']);

/** The API client the global options (--url, --token) or the environment configure. */
export function apiClientOf(program: Command, io: Io): ApiClient {
  const o = program.opts<{ url?: string; token?: string }>();
  return new ApiClient({
    url: o.url ?? io.env.PROVISIONER_URL ?? 'http://127.0.0.1:8080',
    token: o.token ?? io.env.PROVISIONER_TOKEN,
  });
}

export function addApiCommands(program: Command, io: Io): void {
  const client = (): ApiClient => apiClientOf(program, io);
  const json = (): boolean => program.opts<{ json?: boolean }>().json === true;
  const print = (data: unknown, text: () => string) => io.out(json() ? JSON.stringify(data, null, 2) : text());

  const showTenant = (t: Tenant) =>
    [
      ...keyValues([
        ['id', t.id],
        ['organization', t.organization],
        ['phase', `${t.status.phase}${t.spec.deleted ? ' (deleted)' : ''}`],
        ['status', tenantStatus(t, true)],
        ['plan', t.spec.plan],
        ['region', t.spec.region ?? 'any'],
        ['version', `${t.status.runtimeVersion ?? '-'} (desired ${t.spec.runtimeVersion})`],
        ['suspended', String(t.spec.suspended)],
        ...(t.status.sleep
          ? ([
              [
                'sleep',
                t.status.sleep.asleep
                  ? `asleep since ${t.status.sleep.since ?? '-'}; the next request to its runtime (or tenants wake) wakes it`
                  : `awake, last activity ${t.status.sleep.lastActivityAt} (${age(t.status.sleep.lastActivityAt)} ago)`,
              ],
            ] as Array<[string, string]>)
          : []),
        ['generation', `${t.generation} (observed ${t.status.observedGeneration})`],
        ['cluster', t.status.cluster ?? '-'],
        ...Object.entries(t.status.endpoints),
        ['last operation', t.status.lastOperationId ?? '-'],
        [
          'windows',
          (t.maintenanceWindows ?? []).length === 0
            ? 'none (fleet upgrades may upgrade it any time)'
            : t.maintenanceWindows
                .map((w) => `${w.rrule} ${w.timeZone} ${w.durationMinutes} min${w.dtstart ? ` from ${w.dtstart}` : ''}`)
                .join('; '),
        ],
      ]),
      'conditions:',
      table(
        ['TYPE', 'STATUS', 'REASON', 'AGE', 'MESSAGE'],
        t.status.conditions.map((c) => [c.type, c.status, c.reason, age(c.lastTransitionTime), c.message]),
      ),
    ].join('\n');

  /** Prints what a change queued; one that queued nothing is NothingToDo, with `why` saying what the tenant is. */
  const accepted = (a: Accepted, verb: string, why?: (a: Accepted) => string) => {
    if (a.queued === false) {
      if (json()) io.out(JSON.stringify(a, null, 2));
      const what = why?.(a) ?? 'already has that spec';
      throw new NothingToDo(`tenant ${a.tenant.organization} (${a.tenant.id}) ${what}; no operation was queued`);
    }
    print(
      a,
      () =>
        `${verb} ${a.tenant.organization} (${a.tenant.id}): generation ${a.tenant.generation}, operation ${a.operationId}\n` +
        `follow it with: provisioner operations logs ${a.operationId} --follow`,
    );
  };
  const suspendedBy = (t: Tenant) =>
    t.status.suspension
      ? ` (by ${t.status.suspension.by}${t.status.suspension.reason ? `: ${t.status.suspension.reason}` : ''})`
      : '';

  const tenants = program.command('tenants').description('list, inspect and change tenants');
  tenants
    .command('list')
    .option('--phase <phase>')
    .option('--version <version>')
    .option('--cluster <name>')
    .option('--plan <plan>')
    .option('--region <region>')
    .option('--limit <n>', 'page size', '50')
    .option('--all', 'follow every page')
    .action(
      async (o: {
        phase?: string;
        version?: string;
        cluster?: string;
        plan?: string;
        region?: string;
        limit: string;
        all?: boolean;
      }) => {
        const items: Tenant[] = [];
        let cursor: string | null = null;
        do {
          const q = new URLSearchParams({ limit: o.limit });
          if (o.phase) q.set('phase', o.phase);
          if (o.version) q.set('runtimeVersion', o.version);
          if (o.cluster) q.set('cluster', o.cluster);
          if (o.plan) q.set('plan', o.plan);
          if (o.region) q.set('region', o.region);
          if (cursor) q.set('cursor', cursor);
          const page: { items: Tenant[]; nextCursor: string | null } = await client().request(
            'GET',
            `/v1/tenants?${q.toString()}`,
          );
          items.push(...page.items);
          cursor = o.all ? page.nextCursor : null;
        } while (cursor);
        print({ items }, () =>
          table(
            ['ID', 'ORGANIZATION', 'PHASE', 'STATUS', 'PLAN', 'VERSION', 'DESIRED', 'CLUSTER', 'AGE'],
            items.map((t) => [
              t.id,
              t.organization,
              t.status.phase,
              tenantStatus(t),
              t.spec.plan,
              t.status.runtimeVersion,
              t.spec.runtimeVersion,
              t.status.cluster,
              age(t.createdAt),
            ]),
          ),
        );
      },
    );
  tenants.command('get <id>').action(async (id: string) => {
    const t = await client().request<Tenant>('GET', `/v1/tenants/${encodeURIComponent(id)}`);
    print(t, () => showTenant(t));
  });
  tenants
    .command('upgrade <id> <version>')
    .description('upgrade (or roll back) one tenant')
    .action(async (id: string, version: string) => {
      accepted(
        await client().request<Accepted>('POST', `/v1/tenants/${encodeURIComponent(id)}/upgrade`, { version }),
        `upgrading to ${version}:`,
        ({ tenant: t }) =>
          `already names ${t.spec.runtimeVersion} (running ${t.status.runtimeVersion ?? 'nothing yet'})`,
      );
    });
  tenants
    .command('suspend <id>')
    .description("stop the runtime (its data is kept); an operator's suspension is lifted only by an operator")
    .option('--reason <text>', 'why (operators; the tenant sees it, and the audit log keeps it)')
    .action(async (id: string, o: { reason?: string }) => {
      accepted(
        await client().request<Accepted>(
          'POST',
          `/v1/tenants/${encodeURIComponent(id)}/suspend`,
          o.reason !== undefined ? { reason: o.reason } : undefined,
        ),
        'suspending',
        ({ tenant: t }) => `is already suspended${suspendedBy(t)}`,
      );
    });
  tenants
    .command('resume <id>')
    .description('start a suspended runtime again')
    .action(async (id: string) => {
      accepted(
        await client().request<Accepted>('POST', `/v1/tenants/${encodeURIComponent(id)}/resume`),
        'resuming',
        () => 'is not suspended',
      );
    });
  tenants
    .command('sleep <id>')
    .description(
      'put an idle runtime to sleep now (vcluster and runtime scaled to zero, data kept); the next request to it wakes it',
    )
    .action(async (id: string) => {
      accepted(
        await client().request<Accepted>('POST', `/v1/tenants/${encodeURIComponent(id)}/sleep`),
        'putting to sleep',
        () => 'is already asleep',
      );
    });
  tenants
    .command('wake <id>')
    .description('wake a sleeping runtime now (a request to its runtime does too)')
    .action(async (id: string) => {
      accepted(
        await client().request<Accepted>('POST', `/v1/tenants/${encodeURIComponent(id)}/wake`),
        'waking',
        (a) => `is not asleep (phase ${a.tenant.status.phase})`,
      );
    });
  tenants
    .command('webhook-url <id>')
    .description(
      "a new public URL for the tenant's Git provider's webhooks (the previous one stops working); its secret is shown only now",
    )
    .action(async (id: string) => {
      const a = await client().request<{ url: string }>('POST', `/v1/tenants/${encodeURIComponent(id)}/webhook-url`);
      print(a, () =>
        [
          a.url,
          "add the event source's path after it in the Git provider (for example …/github for an event source on /github);",
          'webhooks sent there are kept and delivered to the runtime in order, also while it sleeps',
        ].join('\n'),
      );
    });
  tenants
    .command('retry <id>')
    .description('a new attempt now for a Stalled or failing tenant')
    .action(async (id: string) => {
      accepted(
        await client().request<Accepted>('POST', `/v1/tenants/${encodeURIComponent(id)}/retry`),
        'retrying',
        (a) => `is ${a.tenant.status.phase}, not stalled or failing, and operation ${a.operationId} is under way`,
      );
    });
  tenants
    .command('set-windows <id>')
    .description('set the maintenance windows fleet upgrades may upgrade the tenant in (replaces them)')
    .option(
      '--window <spec>',
      'a window "RRULE TIME-ZONE MINUTES [DTSTART]", e.g. "FREQ=WEEKLY;BYDAY=SA;BYHOUR=2 Europe/Berlin 240" (repeatable)',
      (v: string, prev: string[]) => [...prev, v],
      [] as string[],
    )
    .option('--clear', 'no windows: fleet upgrades may upgrade it any time')
    .action(async (id: string, o: { window: string[]; clear?: boolean }) => {
      if (o.clear === true && o.window.length > 0) throw new UsageError('give --window or --clear, not both');
      if (o.clear !== true && o.window.length === 0)
        throw new UsageError('give at least one --window "RRULE TIME-ZONE MINUTES", or --clear');
      const windows = o.window.map(parseWindow);
      const a = await client().request<Accepted>('PATCH', `/v1/tenants/${encodeURIComponent(id)}`, {
        maintenanceWindows: windows,
      });
      print(a, () =>
        windows.length === 0
          ? `${a.tenant.organization} (${a.tenant.id}): no maintenance windows, fleet upgrades may upgrade it any time`
          : `${a.tenant.organization} (${a.tenant.id}): ${windows.length} maintenance window${windows.length === 1 ? '' : 's'} set`,
      );
    });
  tenants.command('delete <id>').action(async (id: string) => {
    accepted(
      await client().request<Accepted>('DELETE', `/v1/tenants/${encodeURIComponent(id)}`),
      'deleting',
      () => 'is already being deleted',
    );
  });

  const ops = program.command('operations').description('operations and their logs');
  ops
    .command('list <tenantId>')
    .option('--limit <n>', 'how many', '20')
    .action(async (tenantId: string, o: { limit: string }) => {
      const page = await client().request<OperationPage>(
        'GET',
        `/v1/tenants/${encodeURIComponent(tenantId)}/operations?limit=${encodeURIComponent(o.limit)}`,
      );
      print(page, () =>
        table(
          ['ID', 'KIND', 'STATE', 'ATTEMPT', 'FROM', 'TO', 'AGE', 'ERROR'],
          page.items.map((p) => [
            p.id,
            p.kind,
            p.state,
            p.attempt,
            p.fromVersion,
            p.toVersion,
            age(p.createdAt),
            p.error?.message,
          ]),
        ),
      );
    });
  ops.command('get <id>').action(async (id: string) => {
    const p = await client().request<Operation>('GET', `/v1/operations/${encodeURIComponent(id)}`);
    print(p, () =>
      table(
        ['FIELD', 'VALUE'],
        Object.entries(p).map(([k, v]) => [k, typeof v === 'object' && v !== null ? JSON.stringify(v) : (v as string)]),
      ),
    );
  });
  ops
    .command('logs <id>')
    .option('-f, --follow', 'stream new lines until the operation ends')
    .action(async (id: string, o: { follow?: boolean }) => {
      const path = `/v1/operations/${encodeURIComponent(id)}/log${o.follow ? '?follow=1' : ''}`;
      if (!o.follow) {
        const log = await client().request<LogPage>('GET', path);
        print(log, () => log.items.map((l) => l.line).join('\n'));
        return;
      }
      let state = 'unknown';
      const started = Date.now();
      for await (const ev of client().events<OperationLogEvents>(path)) {
        if (ev.event === 'line') {
          const l = ev.data;
          io.out(json() ? JSON.stringify(l) : l.line);
        } else if (ev.event === 'state') {
          const s = ev.data;
          if (s.state !== state && !json())
            io.err(`-- operation ${id}: ${s.state} (${Math.round((Date.now() - started) / 1000)}s)`);
          state = s.state;
        } else if (ev.event === 'end') {
          state = ev.data.state;
          if (!json()) io.err(`-- operation ${id} ended: ${state}`);
        }
      }
      if (!TERMINAL.has(state)) throw new Error(`log stream ended before the operation finished (state ${state})`);
      if (state === 'failed') throw new Error(`operation ${id} failed`);
    });

  const clusters = program.command('clusters').description('root clusters');
  clusters.command('list').action(async () => {
    const { items } = await client().request<{ items: Cluster[] }>('GET', '/v1/clusters');
    print({ items }, () =>
      table(
        ['NAME', 'REGION', 'TENANTS', 'CAPACITY', 'CORDONED', 'PLANS'],
        items.map((c) => [c.name, c.region, c.tenants, c.capacity, c.cordoned, c.plans.join(',') || 'all']),
      ),
    );
  });
  clusters
    .command('add <name>')
    .requiredOption('--region <region>')
    .requiredOption('--capacity <n>')
    .requiredOption('--kubeconfig <file>')
    .option('--label <k=v...>', 'label (repeatable)')
    .option('--plans <list>', 'comma-separated plans allowed')
    .option(
      '--force',
      'register even when the API server cannot be reached, refuses the credentials or lacks permissions the tenants program needs',
    )
    .action(
      async (
        name: string,
        o: { region: string; capacity: string; kubeconfig: string; label?: string[]; plans?: string; force?: boolean },
      ) => {
        const capacity = Number(o.capacity);
        if (!Number.isInteger(capacity) || capacity < 0)
          throw new Error(`--capacity must be a whole number, got '${o.capacity}'`);
        const labels = Object.fromEntries(
          (o.label ?? []).map((kv) => {
            const i = kv.indexOf('=');
            if (i <= 0) throw new Error(`--label must be key=value, got '${kv}'`);
            return [kv.slice(0, i), kv.slice(i + 1)];
          }),
        );
        const kubeconfig = await readKubeconfig(o.kubeconfig);
        const c = await client().request<Cluster>('POST', '/v1/clusters', {
          name,
          region: o.region,
          capacity,
          labels,
          kubeconfig,
          ...(o.plans ? { plans: o.plans.split(',').filter(Boolean) } : {}),
          ...(o.force ? { force: true } : {}),
        });
        print(c, () => `registered cluster ${c.name} (${c.region}, capacity ${c.capacity})`);
      },
    );
  clusters
    .command('import <file>')
    .description(
      "register or update every cluster of the root infra's `clusters` stack output " +
        '(`pulumi stack output clusters --show-secrets --json | provisioner clusters import -`)',
    )
    .option('--force', 'store clusters whose API server cannot be reached or whose credentials fall short')
    .action(async (file: string, o: { force?: boolean }) => {
      let text: string;
      if (file === '-') text = await (io.stdin ?? readStdin)();
      else {
        try {
          text = await readFile(file, 'utf8');
        } catch (err) {
          throw new UsageError(`cannot read '${file}': ${(err as NodeJS.ErrnoException).code ?? String(err)}`, {
            cause: err,
          });
        }
      }
      const entries = parseClusterRegistry(text, file === '-' ? 'stdin' : file);
      const results: Array<{ cluster: Cluster; created: boolean; changed: string[] }> = [];
      for (const e of entries) {
        const { name, ...body } = e;
        results.push(
          await client().request<ClusterPutAnswer>(
            'PUT',
            `/v1/clusters/${encodeURIComponent(name)}`,
            o.force ? { ...body, force: true } : body,
          ),
        );
      }
      print({ items: results }, () =>
        results
          .map((r) =>
            r.created
              ? `registered ${r.cluster.name} (${r.cluster.region}, capacity ${r.cluster.capacity})`
              : r.changed.length > 0
                ? `updated ${r.cluster.name}: ${r.changed.join(', ')}`
                : `unchanged ${r.cluster.name}`,
          )
          .join('\n'),
      );
    });
  for (const action of ['cordon', 'uncordon'] as const) {
    clusters.command(`${action} <name>`).action(async (name: string) => {
      const c = await client().request<Cluster>('POST', `/v1/clusters/${encodeURIComponent(name)}/${action}`);
      print(
        c,
        () => `cluster ${c.name} ${c.cordoned ? 'cordoned: no new tenants will be placed on it' : 'uncordoned'}`,
      );
    });
  }

  const regions = program.command('regions').description('regions of the root clusters (what a signup may ask for)');
  regions
    .command('list', { isDefault: true }) // `provisioner regions` lists too
    .description('regions and whether they accept new tenants')
    .action(async () => {
      const { items } = await client().request<{ items: RegionInfo[] }>('GET', '/v1/regions');
      print({ items }, () =>
        table(
          ['REGION', 'ACCEPTING'],
          items.map((r) => [r.name, r.accepting]),
        ),
      );
    });

  const versions = program.command('versions').description('runtime versions');
  versions
    .command('list')
    .description("the catalog: each version's availability and the Argo CD and vcluster it runs")
    .action(async () => {
      const v = await client().request<RuntimeVersionList>('GET', '/v1/runtime-versions');
      print(v, () =>
        table(
          ['VERSION', 'CHANNEL', 'AVAILABILITY', 'DEFAULT', 'RELEASED', 'ARGO CD', 'ARGO CD CHART', 'VCLUSTER'],
          v.items.map((x) => [
            x.version,
            x.channel,
            x.availability,
            x.default ? '*' : '',
            x.releaseDate,
            x.appVersions.argoCd,
            x.components.argoCd,
            x.components.vcluster,
          ]),
        ),
      );
    });
  versions
    .command('get <version>')
    .description(
      'one version: availability, the applications it runs and their chart versions, release notes, and the upgrade and rollback paths to and from it',
    )
    .action(async (version: string) => {
      const [list, paths] = await Promise.all([
        client().request<RuntimeVersionList>('GET', '/v1/runtime-versions'),
        client().request<{ items: PathInfo[] }>('GET', '/v1/runtime-versions/paths'),
      ]);
      const v = list.items.find((x) => x.version === version);
      if (!v)
        throw new UsageError(
          `versions get: no runtime version '${version}' in the catalog (it has ${list.items.map((x) => x.version).join(', ')})`,
        );
      const from = paths.items.filter((p) => p.from === version);
      const to = paths.items.filter((p) => p.to === version);
      print({ ...v, pathsFrom: from, pathsTo: to }, () => describeVersion(v, from, to));
    });
  versions
    .command('set <version> <availability>')
    .description('mark a version available, deprecated or withdrawn')
    .action(async (version: string, availability: string) => {
      const v = await client().request<RuntimeVersionInfo>(
        'PUT',
        `/v1/runtime-versions/${encodeURIComponent(version)}/availability`,
        { availability },
      );
      print(v, () => `runtime version ${v.version} is now ${v.availability}`);
    });

  const keys = program.command('keys').description('API keys (admin)');
  keys
    .command('create')
    .requiredOption('--role <role>', 'admin | operator | tenant | runtime')
    .requiredOption('--name <name>')
    .option('--tenant <id>', 'tenant the key is bound to (tenant and runtime keys)')
    .action(async (o: { role: string; name: string; tenant?: string }) => {
      const r = await client().request<CreatedKey>('POST', '/v1/keys', {
        role: o.role,
        name: o.name,
        ...(o.tenant ? { tenantId: o.tenant } : {}),
      });
      print(r, () => `created ${r.info.role} key ${r.info.id}; it is shown only now:\n${r.key}`);
    });
  keys
    .command('list')
    .option('--revoked', 'include revoked keys')
    .action(async (o: { revoked?: boolean }) => {
      const r = await client().request<{ items: ApiKeyInfo[] }>(
        'GET',
        `/v1/keys${o.revoked ? '?includeRevoked=true' : ''}`,
      );
      print(r, () =>
        table(
          ['ID', 'PREFIX', 'ROLE', 'NAME', 'TENANT', 'AGE', 'REVOKED'],
          r.items.map((k) => [k.id, k.prefix + '…', k.role, k.name, k.tenantId, age(k.createdAt), k.revokedAt]),
        ),
      );
    });
  keys.command('revoke <id>').action(async (id: string) => {
    const r = await client().request<ApiKeyInfo>('DELETE', `/v1/keys/${encodeURIComponent(id)}`);
    print(r, () => `revoked key ${r.id} at ${r.revokedAt}`);
  });
}
