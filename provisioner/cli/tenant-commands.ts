/** `provisioner tenants …`: list, inspect and change tenants; `tenants signup` signs one up. */
import type { Command } from 'commander';
import { commandContext, NothingToDo, UsageError, type Io } from './command-context.ts';
import { age, keyValues, table } from './format.ts';
import type { Accepted, MaintenanceWindow, Tenant, TenantPage } from '../api/types.ts';
import type { Phase } from '../store/states.ts';

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

export function addTenantCommands(program: Command, io: Io): void {
  const { client, json, print } = commandContext(program, io);

  const showTenant = (t: Tenant) =>
    [
      ...keyValues([
        ['id', t.id],
        ['organization', t.organization],
        ['phase', `${t.status.phase}${t.spec.deleted ? ' (deleted)' : ''}`],
        ['status', tenantStatus(t, true)],
        ['plan', t.spec.plan],
        ['region', t.spec.region ?? 'any'],
        ['time zone', t.timeZone ?? "none (a plan's keep-awake windows are read in their own zone)"],
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

  const tenants = program.command('tenants').description('list, inspect and change tenants; sign a new one up');
  tenants
    .command('signup <organization>')
    .description(
      'sign a new tenant up (POST /v1/signup, no key needed): prints the tenant and its API key, which is shown only now',
    )
    .requiredOption('--email <address>', "the tenant owner's email")
    .option('--plan <plan>', 'plan (provisioner: GET /v1/plans); default the free plan')
    .option('--region <region>', 'place the runtime in this region (provisioner regions); default any')
    .option('--version <version>', "runtime version; default the catalog's default")
    .option(
      '--time-zone <zone>',
      "the tenant's IANA time zone, e.g. Europe/Berlin: its plan's keep-awake windows are read in it; default none",
    )
    .option(
      '--idempotency-key <key>',
      'a random secret of 22+ characters (a UUID): the same key and input give the first answer again, with its key, for an hour',
    )
    .action(
      async (
        organization: string,
        o: {
          email: string;
          plan?: string;
          region?: string;
          version?: string;
          timeZone?: string;
          idempotencyKey?: string;
        },
      ) => {
        const s = await client().call('POST /v1/signup', {
          body: {
            organization,
            email: o.email,
            ...(o.plan !== undefined ? { plan: o.plan } : {}),
            ...(o.region !== undefined ? { region: o.region } : {}),
            ...(o.version !== undefined ? { runtimeVersion: o.version } : {}),
            ...(o.timeZone !== undefined ? { timeZone: o.timeZone } : {}),
          },
          ...(o.idempotencyKey !== undefined ? { headers: { 'idempotency-key': o.idempotencyKey } } : {}),
        });
        const t = s.tenant;
        print(s, () =>
          [
            `signed up ${t.organization} (${t.id}): plan ${t.spec.plan}, region ${t.spec.region ?? 'any'}, runtime ${t.spec.runtimeVersion}${t.timeZone ? `, time zone ${t.timeZone}` : ''}`,
            s.warm === true
              ? `a runtime from the warm pool is Ready; operation ${s.operationId} gives it the tenant's names`
              : `provisioning: operation ${s.operationId} (follow it with: provisioner operations logs ${s.operationId} --follow)`,
            'the tenant API key, shown only now (keep it; provisioner keys can revoke it):',
            s.apiKey,
          ].join('\n'),
        );
      },
    );
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
          const page: TenantPage = await client().call('GET /v1/tenants', {
            query: {
              // The flags as given: the API checks them (a 400 names the field).
              limit: Number(o.limit),
              phase: o.phase as Phase | undefined,
              runtimeVersion: o.version,
              cluster: o.cluster,
              plan: o.plan,
              region: o.region,
              ...(cursor ? { cursor } : {}),
            },
          });
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
    const t = await client().call('GET /v1/tenants/:id', { params: { id } });
    print(t, () => showTenant(t));
  });
  tenants
    .command('upgrade <id> <version>')
    .description('upgrade (or roll back) one tenant')
    .action(async (id: string, version: string) => {
      accepted(
        await client().call('POST /v1/tenants/:id/upgrade', { params: { id }, body: { version } }),
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
        await client().call('POST /v1/tenants/:id/suspend', {
          params: { id },
          body: o.reason !== undefined ? { reason: o.reason } : undefined,
        }),
        'suspending',
        ({ tenant: t }) => `is already suspended${suspendedBy(t)}`,
      );
    });
  tenants
    .command('resume <id>')
    .description('start a suspended runtime again')
    .action(async (id: string) => {
      accepted(
        await client().call('POST /v1/tenants/:id/resume', { params: { id } }),
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
        await client().call('POST /v1/tenants/:id/sleep', { params: { id } }),
        'putting to sleep',
        () => 'is already asleep',
      );
    });
  tenants
    .command('wake <id>')
    .description('wake a sleeping runtime now (a request to its runtime does too)')
    .action(async (id: string) => {
      accepted(
        await client().call('POST /v1/tenants/:id/wake', { params: { id } }),
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
      const a = await client().call('POST /v1/tenants/:id/webhook-url', { params: { id } });
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
        await client().call('POST /v1/tenants/:id/retry', { params: { id } }),
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
      const a = await client().call('PATCH /v1/tenants/:id', { params: { id }, body: { maintenanceWindows: windows } });
      print(a, () =>
        windows.length === 0
          ? `${a.tenant.organization} (${a.tenant.id}): no maintenance windows, fleet upgrades may upgrade it any time`
          : `${a.tenant.organization} (${a.tenant.id}): ${windows.length} maintenance window${windows.length === 1 ? '' : 's'} set`,
      );
    });
  tenants
    .command('set-time-zone <id> [zone]')
    .description(
      "set the tenant's IANA time zone (e.g. Europe/Berlin): its plan's keep-awake windows are read in it (no operation)",
    )
    .option('--clear', "no time zone: a plan's keep-awake windows are read in their own zone")
    .action(async (id: string, zone: string | undefined, o: { clear?: boolean }) => {
      if (o.clear === true && zone !== undefined) throw new UsageError('give a zone or --clear, not both');
      if (o.clear !== true && zone === undefined)
        throw new UsageError('give an IANA time zone (e.g. Europe/Berlin), or --clear');
      const a = await client().call('PATCH /v1/tenants/:id', { params: { id }, body: { timeZone: zone ?? null } });
      print(a, () =>
        a.tenant.timeZone === null
          ? `${a.tenant.organization} (${a.tenant.id}): no time zone, its plan's keep-awake windows are read in their own zone`
          : `${a.tenant.organization} (${a.tenant.id}): time zone ${a.tenant.timeZone}`,
      );
    });
  tenants.command('delete <id>').action(async (id: string) => {
    accepted(
      await client().call('DELETE /v1/tenants/:id', { params: { id } }),
      'deleting',
      () => 'is already being deleted',
    );
  });
}
