/**
 * `provisioner apps`: the applications, rollouts and workflows a tenant's runtime reported
 * (GET /v1/tenants/:id/applications …, /changes), actions on them through the runtime
 * (`apps act`: POST /v1/tenants/:id/runtime/api/…), and an application's history and diff
 * (`apps history`, `apps diff`: app-history-commands.ts). Tables by default, the API's JSON with --json.
 */
import type { Command } from 'commander';
import { apiClientOf, type Io } from './api-commands.ts';
import { addAppHistoryCommands } from './app-history-commands.ts';
import { age, cellText, table } from './format.ts';
import type { RuntimeObject, RuntimeObjectPage } from '../api/types.ts';

/** A stored object as the API answers it (the route's schema; a type import, nothing of the server is loaded). */
type StoredObject = RuntimeObject;

const KINDS = {
  application: 'applications',
  rollout: 'rollouts',
  workflow: 'workflows',
  product: 'products',
  promotion: 'promotions',
  promotionpreview: 'promotionpreviews',
} as const;
type KindName = keyof typeof KINDS;
/** A kind's path in the API's object routes (`GET /v1/tenants/:id/<path>`, …) and the runtime's actions. */
type KindPath = (typeof KINDS)[KindName];
/** The kind the change stream's `kind` filter takes, by its path. */
const KIND_OF = Object.fromEntries(Object.entries(KINDS).map(([k, p]) => [p, k])) as Record<KindPath, KindName>;

/** What `apps list` filters on: the list route's query, and what a watch prints. */
interface Filters {
  health: string | undefined;
  sync: string | undefined;
  phase: string | undefined;
  namespace: string | undefined;
  namePrefix: string | undefined;
}

function kindPath(kind: string): KindPath {
  const k = kind.toLowerCase().replace(/s$/, '') as KindName;
  if (!(k in KINDS)) throw new Error(`kind must be one of: ${Object.keys(KINDS).join(', ')} (got '${kind}')`);
  return KINDS[k];
}

const HEADERS = ['NAMESPACE', 'NAME', 'HEALTH', 'SYNC', 'PHASE', 'REVISION', 'AGE'];
const row = (o: StoredObject) => [
  o.namespace,
  o.name,
  o.health,
  o.sync,
  o.phase,
  (o.summary.revision as string | undefined) ?? (o.summary.stableRevision as string | undefined),
  age(o.updatedAt),
];

interface ListOptions {
  kind: string;
  health?: string;
  sync?: string;
  phase?: string;
  namespace?: string;
  namePrefix?: string;
  limit: string;
  all?: boolean;
  watch?: boolean;
}

export function addAppCommands(program: Command, io: Io): void {
  const client = () => apiClientOf(program, io);
  const json = (): boolean => program.opts<{ json?: boolean }>().json === true;
  const apps = program
    .command('apps')
    .description("the applications, rollouts and workflows a tenant's runtime reported");

  apps
    .command('list <tenant>')
    .option('--kind <kind>', 'application | rollout | workflow | product | promotion | promotionpreview', 'application')
    .option('--health <status>', 'e.g. Healthy, Degraded, Progressing')
    .option('--sync <status>', 'Synced | OutOfSync | Unknown')
    .option('--phase <phase>', 'operation phase, rollout or workflow phase')
    .option('--namespace <ns>')
    .option('--name-prefix <prefix>')
    .option('--limit <n>', 'page size', '100')
    .option('--all', 'follow every page')
    .option('-w, --watch', 'then print every change as it is reported, until interrupted')
    .action(async (tenant: string, o: ListOptions) => {
      const path = kindPath(o.kind);
      const filters: Filters = {
        health: o.health,
        sync: o.sync,
        phase: o.phase,
        namespace: o.namespace,
        namePrefix: o.namePrefix,
      };
      if (o.watch) return watch(tenant, path, filters);
      const items: StoredObject[] = [];
      let cursor: string | null = null;
      do {
        const page: RuntimeObjectPage = await client().call(`GET /v1/tenants/:id/${path}`, {
          params: { id: tenant },
          // A --limit that is not a number goes as it is: the API's 400 names it.
          query: { limit: Number(o.limit), ...filters, ...(cursor ? { cursor } : {}) },
        });
        items.push(...page.items);
        cursor = o.all ? page.nextCursor : null;
      } while (cursor);
      io.out(json() ? JSON.stringify({ items }, null, 2) : table(HEADERS, items.map(row)));
    });

  /**
   * The current objects, then each change: the stream replays every live object first (after=0),
   * so nothing falls between a listing and the watch. Filters apply to what is printed; a
   * deletion is printed when its namespace and name match.
   */
  async function watch(tenant: string, path: KindPath, want: Filters): Promise<void> {
    const matches = (o: StoredObject, deleted: boolean) =>
      (want.namespace === undefined || o.namespace === want.namespace) &&
      (want.namePrefix === undefined || o.name.startsWith(want.namePrefix)) &&
      (deleted ||
        ((want.health === undefined || o.health === want.health) &&
          (want.sync === undefined || o.sync === want.sync) &&
          (want.phase === undefined || o.phase === want.phase)));
    const kind = KIND_OF[path];
    if (!json()) io.out(table(['EVENT', ...HEADERS], []));
    try {
      for await (const ev of client().events('GET /v1/tenants/:id/changes', {
        params: { id: tenant },
        query: { after: '0', kind },
        signal: io.signal,
      })) {
        if (ev.event === 'error') {
          throw new Error(`${ev.data.code}: ${ev.data.message}`);
        }
        if (ev.event !== 'change') continue;
        const { deleted, item } = ev.data;
        if (!matches(item, deleted)) continue;
        io.out(
          json()
            ? JSON.stringify(ev.data)
            : [deleted ? 'DELETED' : 'UPDATED', ...row(item)]
                .map((c) => (c == null ? '-' : cellText(String(c))))
                .join('  '),
        );
      }
    } catch (err) {
      if (io.signal?.aborted) return;
      throw err;
    }
  }

  apps
    .command('get <tenant> <kind> <namespace> <name>')
    .description(
      'one object with its stored state (kind: application | rollout | workflow | product | promotion | promotionpreview)',
    )
    .action(async (tenant: string, kind: string, namespace: string, name: string) => {
      const o = await client().call(`GET /v1/tenants/:id/${kindPath(kind)}/:namespace/:name`, {
        params: { id: tenant, namespace, name },
      });
      if (json()) return io.out(JSON.stringify(o, null, 2));
      const s = o.summary;
      // Every reported value on one line of its own: its newlines and tabs escaped (cellText).
      const v = (x: unknown): string => (x == null ? '-' : cellText(typeof x === 'string' ? x : JSON.stringify(x)));
      io.out(
        [
          `kind:             ${v(o.kind)}`,
          `name:             ${v(`${o.namespace}/${o.name}`)}`,
          `uid:              ${v(o.uid)}`,
          `resourceVersion:  ${v(o.resourceVersion)}`,
          `health:           ${v(o.health)}`,
          `sync:             ${v(o.sync)}`,
          `phase:            ${v(o.phase)}`,
          ...Object.entries(s)
            .filter(([k]) => !['healthStatus', 'syncStatus', 'operationPhase', 'phase'].includes(k))
            .map(([k, x]) => `${cellText(k + ':').padEnd(18)}${v(x)}`),
          `reported by:      ${v(o.reportedBy)}, observed ${o.observedAt}, stored ${age(o.updatedAt)} ago`,
          `object:${o.truncated ? ' (truncated)' : ''}`,
          JSON.stringify(o.object, null, 2),
        ].join('\n'),
      );
    });

  apps
    .command('act <tenant> <kind> <namespace> <name> <action>')
    .description(
      "an action on an object in the tenant's runtime: application refresh | sync, rollout promote | abort | retry, workflow terminate | stop",
    )
    .option('--revision <revision>', "sync: the revision to sync to (default: the source's targetRevision)")
    .option('--prune', 'sync: delete resources that are no longer in git (off by default)')
    .option('--dry-run', 'sync: a dry run')
    .option('--normal', 'refresh: a normal refresh instead of a hard one')
    .option('--full', 'promote: a full promotion, skipping the remaining steps, pauses and analysis')
    .action(
      async (
        tenant: string,
        kind: string,
        namespace: string,
        name: string,
        action: string,
        o: { revision?: string; prune?: boolean; dryRun?: boolean; normal?: boolean; full?: boolean },
      ) => {
        const body = {
          ...(o.revision !== undefined ? { revision: o.revision } : {}),
          ...(o.prune ? { prune: true } : {}),
          ...(o.dryRun ? { dryRun: true } : {}),
          ...(o.normal ? { type: 'normal' } : {}),
          ...(o.full ? { full: true } : {}),
        };
        const after = await client().runtimeAction(
          tenant,
          { resource: kindPath(kind), namespace, name, action },
          Object.keys(body).length > 0 ? { body } : {},
        );
        if (json()) return io.out(JSON.stringify(after, null, 2));
        io.out(
          `${kind.toLowerCase().replace(/s$/, '')} ${namespace}/${name}: ${action} done (resourceVersion ${after.metadata?.resourceVersion ?? '?'})`,
        );
      },
    );

  addAppHistoryCommands(apps, io, client, json);
}
