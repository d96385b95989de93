/**
 * `provisioner products` and `provisioner promotions` (docs/promotions.md "What the control plane
 * sees and can do"): the GitOps Operator's products, with the release each environment holds, and
 * its promotions, with each step's phase, timing, commit and gates, and its previews (dry runs,
 * kind PromotionPreview), as the tenant's hosted runtime reported them (GET /v1/tenants/:id/products,
 * …/promotions, …/promotionpreviews, the change stream for --watch); and the actions on them through
 * the runtime (POST /v1/tenants/:id/runtime/api/products/…/promote | dry-run, …/promotions/…/retry |
 * abort, …/promotionpreviews/…/abort). Tables by default, the API's JSON with --json.
 */
import type { Command } from 'commander';
import { apiClientOf, type Io } from './api-commands.ts';
import type { ApiClient } from './client.ts';
import { age, cellText, keyValues, table } from './format.ts';
import type { RuntimeObject, RuntimeObjectPage } from '../api/types.ts';
import type { ProductSummary, PromotionSummary } from '../../runtime/protocol/events.ts';
import type { DryRunResource } from '../../runtime/protocol/promotions.ts';

type Path = 'products' | 'promotions' | 'promotionpreviews';
/** A promotion or a preview (a promotion's dry run). */
type RunPath = Exclude<Path, 'products'>;
type Step = NonNullable<PromotionSummary['steps']>[number];

const FINAL = new Set(['Succeeded', 'Failed', 'Aborted', 'Superseded']);

const productOf = (o: RuntimeObject): ProductSummary => o.summary;
const promotionOf = (o: RuntimeObject): PromotionSummary => o.summary;

/** "1m05s" between two ISO times (to now when the second is absent); "-" without a start. */
export function took(from: string | undefined, to: string | undefined, now = Date.now()): string {
  if (!from) return '-';
  const s = Math.max(0, Math.round(((to ? Date.parse(to) : now) - Date.parse(from)) / 1000));
  if (!Number.isFinite(s)) return '-';
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
}

/** `dev=1.2.0 staging=1.1.0 prod=-`: a product's release in each environment, in its order. */
export function releasesLine(p: ProductSummary): string {
  return (p.environments ?? []).map((e) => `${e.environment}=${e.release ?? '-'}`).join(' ');
}

/** `staging:Succeeded prod:Failed`: where a promotion is, step by step. */
export function stepsLine(p: PromotionSummary): string {
  return (p.steps ?? []).map((s) => `${s.environment}:${s.phase}`).join(' ');
}

const action = (a: Step['preAction']): string => (a ? `${a.workflow} ${a.phase ?? 'Running'}` : '-');
const short = (sha: string | undefined): string | undefined => sha?.slice(0, 12);

/** A promotion's timeline: what it moves, where it stands, and each step with its commit, gates and timing. */
export function promotionTimeline(o: RuntimeObject, now = Date.now()): string {
  const p = promotionOf(o);
  const head = keyValues([
    o.kind === 'PromotionPreview'
      ? ['preview', `${o.namespace}/${o.name} (dry run: nothing is changed)`]
      : ['promotion', `${o.namespace}/${o.name}${p.dryRun ? ' (spec.dryRun, refused: never run)' : ''}`],
    ['product', p.product ?? '-'],
    ...(p.rollback ? ([['rollback', `${p.rollback}${p.rollbackFrom ? ` from ${p.rollbackFrom}` : ''}`]] as const) : []),
    [
      'release',
      p.release ??
        (p.rollback ? 'the one before (read when it starts)' : "the trigger environment's (read when it starts)"),
    ],
    ['phase', `${p.phase ?? 'Pending'}${p.message ? ` — ${p.message}` : ''}`],
    ['requested by', p.requestedBy ?? '-'],
    [
      'started',
      p.startedAt
        ? `${p.startedAt} (${p.finishedAt ? `took ${took(p.startedAt, p.finishedAt, now)}` : `running for ${took(p.startedAt, undefined, now)}`})`
        : 'not yet',
    ],
  ]);
  const steps = p.steps ?? [];
  if (steps.length === 0) return head.join('\n');
  const previews = dryRunLines(p);
  const pulls = steps.flatMap((s) => {
    const pr = s.proposal?.pullRequest;
    return pr
      ? [
          `${s.environment}: pull request #${pr.number}${pr.state && pr.state !== 'open' ? ` (${pr.state})` : ''} ${pr.url} from ${s.proposal!.branch}`,
        ]
      : s.proposal && !s.commit
        ? [`${s.environment}: proposed on branch ${s.proposal.branch}`]
        : [];
  });
  return [
    ...head,
    '',
    table(
      ['STEP', 'PHASE', 'GIT COMMIT', 'REVERT', 'TOOK', 'PRE-ACTION', 'POST-ACTION', 'MESSAGE'],
      steps.map((s) => [
        s.environment,
        s.phase,
        short(s.commit),
        short(s.revert),
        took(s.startedAt, s.finishedAt, now),
        action(s.preAction),
        action(s.postAction),
        s.message,
      ]),
    ),
    ...(pulls.length > 0 ? ['', ...pulls] : []),
    ...(previews.length > 0 ? ['', ...previews] : []),
  ].join('\n');
}

/** `data.image, data.version (+3 more)`. */
function fieldList(r: DryRunResource): string {
  if (r.action !== 'modified') return '-';
  return `${r.fields.join(', ')}${r.moreFields ? ` (+${r.moreFields} more)` : ''}` || '-';
}

/**
 * Each environment's dry run: per application, every resource that would change from what runs
 * there now, its fields, and what of it the promotion's Git change does not cause.
 */
export function dryRunLines(p: PromotionSummary): string[] {
  const out: string[] = [];
  for (const s of p.steps ?? []) {
    const d = s.dryRun;
    if (!d) continue;
    out.push(
      `${s.environment}: ${d.commit ? `the change (${d.files.join(', ')}) previewed at scratch commit ${short(d.commit)}` : 'no Git change: previewed at the branch head'}`,
    );
    const rows: Array<Array<string | undefined>> = [];
    for (const a of d.applications) {
      if (a.error) rows.push([a.application, '-', '-', '-', `not previewed: ${a.error}`]);
      else if (a.resources.length === 0 && !a.moreResources) rows.push([a.application, '-', 'unchanged', '-', '-']);
      for (const r of a.resources)
        rows.push([
          a.application,
          `${r.kind} ${r.namespace ? `${r.namespace}/` : ''}${r.name}`,
          r.action,
          fieldList(r),
          r.notFromChange?.length
            ? `not from the change: ${r.notFromChange.includes('.') ? 'the whole resource' : r.notFromChange.join(', ')}`
            : '-',
        ]);
      if (a.moreResources) rows.push([a.application, `… ${a.moreResources} more`, '-', '-', '-']);
    }
    out.push(table(['APPLICATION', 'RESOURCE', 'CHANGE', 'FIELDS', 'OUTSIDE THE TEMPLATE'], rows));
  }
  return out;
}

/** A product with its release in each environment, its promotions and its previews (dry runs). */
export function productView(
  o: RuntimeObject,
  promotions: RuntimeObject[],
  previews: RuntimeObject[] = [],
  now = Date.now(),
): string {
  const p = productOf(o);
  return [
    ...keyValues([
      ['product', `${o.namespace}/${o.name}`],
      ['flow', p.flow ?? '-'],
      ['reported', `${age(o.updatedAt, now)} ago`],
    ]),
    '',
    table(
      ['ENVIRONMENT', 'RELEASE', 'REVISION'],
      (p.environments ?? []).map((e) => [e.environment, e.release, short(e.revision)]),
    ),
    '',
    promotions.length === 0
      ? 'no promotions reported'
      : table(
          ['PROMOTION', 'RELEASE', 'PHASE', 'STEPS', 'REQUESTED BY', 'AGE'],
          promotions.map((x) => {
            const s = promotionOf(x);
            return [x.name, s.release, s.phase, stepsLine(s), s.requestedBy, age(s.startedAt ?? x.updatedAt, now)];
          }),
        ),
    ...(previews.length === 0
      ? []
      : [
          '',
          table(
            ['PREVIEW (DRY RUN)', 'RELEASE', 'PHASE', 'STEPS', 'REQUESTED BY', 'AGE'],
            previews.map((x) => {
              const s = promotionOf(x);
              return [x.name, s.release, s.phase, stepsLine(s), s.requestedBy, age(s.startedAt ?? x.updatedAt, now)];
            }),
          ),
          `a preview's changes: provisioner promotions get <tenant> <preview> --preview`,
        ]),
  ].join('\n');
}

/** What the commands filter a listing on (the list route's query). */
type ListQuery = { namePrefix?: string; namespace?: string; phase?: string };

async function listAll(client: ApiClient, tenant: string, path: Path, query: ListQuery) {
  const items: RuntimeObject[] = [];
  let cursor: string | null = null;
  do {
    const page: RuntimeObjectPage = await client.call(`GET /v1/tenants/:id/${path}`, {
      params: { id: tenant },
      query: { limit: 500, ...query, ...(cursor ? { cursor } : {}) },
    });
    items.push(...page.items);
    cursor = page.nextCursor;
  } while (cursor);
  return items;
}

/**
 * The namespace of a product or promotion given by name: --namespace when given, else the one
 * namespace the runtime reported it in (an error names them when there are several).
 */
async function namespaceOf(
  client: ApiClient,
  tenant: string,
  path: Path,
  name: string,
  namespace: string | undefined,
): Promise<string> {
  if (namespace !== undefined) return namespace;
  const found = (await listAll(client, tenant, path, { namePrefix: name })).filter((o) => o.name === name);
  const what = WHAT[path];
  if (found.length === 0)
    throw new Error(
      `the tenant's runtime has reported no ${what} '${name}' (see 'provisioner ${path} list ${tenant}'; a new one shows once its event reporter reports it)`,
    );
  if (found.length > 1)
    throw new Error(
      `${what} '${name}' is in several namespaces (${found.map((o) => o.namespace).join(', ')}): pass --namespace`,
    );
  return found[0]!.namespace;
}

const WHAT: Record<Path, string> = { products: 'product', promotions: 'promotion', promotionpreviews: 'preview' };

/**
 * Whether a name is a promotion's or a preview's (previews when `preview`, else the promotions first,
 * then the previews), and its namespace.
 */
async function runOf(
  client: ApiClient,
  tenant: string,
  name: string,
  namespace: string | undefined,
  preview: boolean | undefined,
): Promise<{ path: RunPath; namespace: string }> {
  if (preview)
    return {
      path: 'promotionpreviews',
      namespace: await namespaceOf(client, tenant, 'promotionpreviews', name, namespace),
    };
  try {
    return { path: 'promotions', namespace: await namespaceOf(client, tenant, 'promotions', name, namespace) };
  } catch (err) {
    const previews = (await listAll(client, tenant, 'promotionpreviews', { namePrefix: name })).filter(
      (o) => o.name === name && (namespace === undefined || o.namespace === namespace),
    );
    if (previews.length === 1) return { path: 'promotionpreviews', namespace: previews[0]!.namespace };
    throw err;
  }
}

/** A product, promotion or preview as the runtime reported it (its stored object). */
const objectOf = (client: ApiClient, tenant: string, path: Path, namespace: string, name: string) =>
  client.call(`GET /v1/tenants/:id/${path}/:namespace/:name`, { params: { id: tenant, namespace, name } });

export function addPromotionCommands(program: Command, io: Io): void {
  const client = () => apiClientOf(program, io);
  const json = (): boolean => program.opts<{ json?: boolean }>().json === true;
  const printPromotion = (x: RuntimeObject) => io.out(json() ? JSON.stringify(x, null, 2) : promotionTimeline(x));

  /**
   * A promotion's timeline, printed again at every change until it ends. The change stream replays
   * every live promotion first (after=0), so nothing falls between a read and the watch; one not
   * reported yet (just asked for: the runtime's reporter sends it within seconds) is waited for.
   */
  async function follow(
    c: ApiClient,
    tenant: string,
    name: string,
    namespace: string | undefined,
    path: RunPath = 'promotions',
  ): Promise<void> {
    let last: string | undefined;
    let seen = false;
    const what = WHAT[path];
    const waiting = setTimeout(() => {
      if (!seen && !json()) io.out(`waiting for the runtime to report ${what} ${name}…`);
    }, 2000);
    try {
      for await (const ev of c.events('GET /v1/tenants/:id/changes', {
        params: { id: tenant },
        query: { after: '0', kind: path === 'promotions' ? 'promotion' : 'promotionpreview' },
        signal: io.signal,
      })) {
        if (ev.event === 'error') throw new Error(`${ev.data.code}: ${ev.data.message}`);
        if (ev.event !== 'change') continue;
        const { deleted, item } = ev.data;
        if (item.name !== name || (namespace !== undefined && item.namespace !== namespace)) continue;
        namespace = item.namespace;
        if (deleted) {
          if (seen) io.out(`${what} ${namespace}/${name} was deleted`);
          if (seen) return;
          continue;
        }
        if (item.resourceVersion === last) continue;
        if (seen && !json()) io.out('');
        seen = true;
        last = item.resourceVersion;
        printPromotion(item);
        if (FINAL.has(promotionOf(item).phase ?? '')) return;
      }
    } catch (err) {
      if (io.signal?.aborted) return;
      throw err;
    } finally {
      clearTimeout(waiting);
    }
  }

  const products = program
    .command('products')
    .description(
      "the GitOps Operator's products in the tenant's runtime: the release in each environment, and promoting one",
    );

  products
    .command('list <tenant>')
    .description('every product with the release each environment holds')
    .action(async (tenant: string) => {
      const items = await listAll(client(), tenant, 'products', {});
      if (json()) return io.out(JSON.stringify({ items }, null, 2));
      io.out(
        table(
          ['NAMESPACE', 'NAME', 'FLOW', 'RELEASES', 'AGE'],
          items.map((o) => [o.namespace, o.name, productOf(o).flow, releasesLine(productOf(o)), age(o.updatedAt)]),
        ),
      );
    });

  products
    .command('get <tenant> <product>')
    .description("a product's release in each environment, its promotions and its previews (dry runs), newest first")
    .option('-n, --namespace <ns>', "the product's namespace (default: the one it was reported in)")
    .action(async (tenant: string, name: string, o: { namespace?: string }) => {
      const c = client();
      const namespace = await namespaceOf(c, tenant, 'products', name, o.namespace);
      const product = await objectOf(c, tenant, 'products', namespace, name);
      const newestFirst = (items: RuntimeObject[]) =>
        items
          .filter((x) => promotionOf(x).product === name)
          .sort((a, b) =>
            (promotionOf(b).startedAt ?? b.updatedAt).localeCompare(promotionOf(a).startedAt ?? a.updatedAt),
          );
      const [promotions, previews] = await Promise.all([
        listAll(c, tenant, 'promotions', { namespace }).then(newestFirst),
        listAll(c, tenant, 'promotionpreviews', { namespace }).then(newestFirst),
      ]);
      if (json()) return io.out(JSON.stringify({ product, promotions, previews }, null, 2));
      io.out(productView(product, promotions.slice(0, 10), previews.slice(0, 5)));
    });

  products
    .command('promote <tenant> <product>')
    .description(
      'start a promotion of the product through its flow (the GitOps Operator runs it; a newer one supersedes one still waiting)',
    )
    .option('-n, --namespace <ns>', "the product's namespace (default: the one it was reported in)")
    .option('--release <release>', "the release to promote (default: what the flow's trigger environment holds)")
    .option(
      '--dry-run',
      "only show what each environment would get: a PromotionPreview, each step's change previewed against what runs there (no Git change, no sync)",
    )
    .option('-w, --watch', "then follow the promotion's timeline until it ends")
    .action(
      async (
        tenant: string,
        name: string,
        o: { namespace?: string; release?: string; watch?: boolean; dryRun?: boolean },
      ) => {
        const c = client();
        const namespace = await namespaceOf(c, tenant, 'products', name, o.namespace);
        const created = await c.runtimeAction(
          tenant,
          { resource: 'products', namespace, name, action: o.dryRun ? 'dry-run' : 'promote' },
          o.release !== undefined ? { body: { release: o.release } } : {},
        );
        if (json() && !o.watch) return io.out(JSON.stringify(created, null, 2));
        const promotion = created.metadata?.name ?? '?';
        const what = o.dryRun ? 'dry run' : 'promotion';
        if (o.watch && created.metadata?.name) {
          if (!json()) io.out(cellText(`${what} ${namespace}/${promotion} of ${name} started`));
          return follow(c, tenant, created.metadata.name, namespace, o.dryRun ? 'promotionpreviews' : 'promotions');
        }
        io.out(
          [
            `${what} ${namespace}/${promotion} of ${name} ${created.spec?.release ?? "(the trigger environment's release)"} started${o.dryRun ? ' (a PromotionPreview): nothing is changed' : ''}`,
            `follow it: provisioner promotions get ${tenant} ${promotion}${o.dryRun ? ' --preview' : ''} --watch`,
          ]
            .map(cellText)
            .join('\n'),
        );
      },
    );

  products
    .command('rollback <tenant> <product> <environment>')
    .description(
      'roll an environment back to the release it held before its current one (a promotion of one step, with its gates)',
    )
    .option('-n, --namespace <ns>', "the product's namespace (default: the one it was reported in)")
    .option('-w, --watch', "then follow the rollback's timeline until it ends")
    .action(async (tenant: string, name: string, environment: string, o: { namespace?: string; watch?: boolean }) => {
      const c = client();
      const namespace = await namespaceOf(c, tenant, 'products', name, o.namespace);
      const created = await c.runtimeAction(
        tenant,
        { resource: 'products', namespace, name, action: 'rollback' },
        { body: { environment } },
      );
      if (json() && !o.watch) return io.out(JSON.stringify(created, null, 2));
      const promotion = created.metadata?.name ?? '?';
      if (!json())
        io.out(
          cellText(
            `rollback ${namespace}/${promotion} of ${name} in ${environment} started: the GitOps Operator restores the release ${environment} held before`,
          ),
        );
      if (o.watch && created.metadata?.name) return follow(c, tenant, created.metadata.name, namespace);
      if (!json()) io.out(`follow it: provisioner promotions get ${cellText(tenant)} ${cellText(promotion)} --watch`);
    });

  const promotions = program
    .command('promotions')
    .description(
      "the GitOps Operator's promotions in the tenant's runtime: each step, its commit and gates; retry and abort",
    );

  promotions
    .command('list <tenant>')
    .description('promotions, newest first')
    .option('--product <product>', "only this product's")
    .option('--phase <phase>', 'Pending | Running | Succeeded | Failed | Aborted | Superseded')
    .option('--previews', 'the previews (dry runs) instead of the promotions')
    .action(async (tenant: string, o: { product?: string; phase?: string; previews?: boolean }) => {
      const path = o.previews ? 'promotionpreviews' : 'promotions';
      const items = (await listAll(client(), tenant, path, o.phase ? { phase: o.phase } : {}))
        .filter((x) => o.product === undefined || promotionOf(x).product === o.product)
        .sort((a, b) =>
          (promotionOf(b).startedAt ?? b.updatedAt).localeCompare(promotionOf(a).startedAt ?? a.updatedAt),
        );
      if (json()) return io.out(JSON.stringify({ items }, null, 2));
      io.out(
        table(
          ['NAMESPACE', 'NAME', 'PRODUCT', 'RELEASE', 'PHASE', 'STEPS', 'REQUESTED BY', 'TOOK', 'AGE'],
          items.map((x) => {
            const s = promotionOf(x);
            return [
              x.namespace,
              x.name,
              s.product,
              s.release,
              s.phase,
              stepsLine(s),
              s.requestedBy,
              took(s.startedAt, s.finishedAt),
              age(s.startedAt ?? x.updatedAt),
            ];
          }),
        ),
      );
    });

  promotions
    .command('get <tenant> <promotion>')
    .description(
      "a promotion's timeline: each step's phase, commit, gates and timing; a preview's: each environment's previewed changes",
    )
    .option('-n, --namespace <ns>', "the promotion's namespace (default: the one it was reported in)")
    .option('--preview', 'the name is a preview (a dry run, kind PromotionPreview); found by itself once reported')
    .option('-w, --watch', 'print the timeline again at every change until the promotion ends')
    .action(async (tenant: string, name: string, o: { namespace?: string; watch?: boolean; preview?: boolean }) => {
      const c = client();
      if (o.watch) {
        // One not reported yet is waited for as the kind asked for (a promotion by default).
        const known = await runOf(c, tenant, name, o.namespace, o.preview).catch(() => undefined);
        return follow(
          c,
          tenant,
          name,
          known?.namespace ?? o.namespace,
          known?.path ?? (o.preview ? 'promotionpreviews' : 'promotions'),
        );
      }
      const { path, namespace } = await runOf(c, tenant, name, o.namespace, o.preview);
      printPromotion(await objectOf(c, tenant, path, namespace, name));
    });

  for (const [act, description] of [
    ['retry', 'run a Failed promotion again from its failed step'],
    [
      'abort',
      'stop a promotion at the next safe point (a change already pushed for the running step is reverted), or a preview (its scratch branches deleted)',
    ],
  ] as const) {
    promotions
      .command(`${act} <tenant> <promotion>`)
      .description(description)
      .option('-n, --namespace <ns>', "the promotion's namespace (default: the one it was reported in)")
      .option('--preview', 'the name is a preview (a dry run, kind PromotionPreview)')
      .action(async (tenant: string, name: string, o: { namespace?: string; preview?: boolean }) => {
        const c = client();
        // Only promotions are retried: a preview is asked for again instead.
        const { path, namespace } =
          act === 'retry'
            ? { path: 'promotions' as const, namespace: await namespaceOf(c, tenant, 'promotions', name, o.namespace) }
            : await runOf(c, tenant, name, o.namespace, o.preview);
        const after =
          path === 'promotions'
            ? await c.runtimeAction(tenant, { resource: 'promotions', namespace, name, action: act })
            : await c.runtimeAction(tenant, { resource: 'promotionpreviews', namespace, name, action: 'abort' });
        if (json()) return io.out(JSON.stringify(after, null, 2));
        io.out(
          cellText(
            act === 'retry'
              ? `promotion ${namespace}/${name}: retry ${(after.spec as { retry?: number } | undefined)?.retry ?? '?'} asked; the GitOps Operator runs it again from its failed step`
              : `${WHAT[path]} ${namespace}/${name}: abort asked; the GitOps Operator stops it at the next ${path === 'promotions' ? 'safe point' : 'round'}`,
          ) +
            `\nfollow it: provisioner promotions get ${cellText(tenant)} ${cellText(name)}${path === 'promotionpreviews' ? ' --preview' : ''} --watch`,
        );
      });
  }
}
