/**
 * What the reporter says about one object: the per-kind summary the contract documents and the
 * object itself, cleaned and trimmed. Cleaning removes what must never leave the cluster or is
 * noise (`data`/`stringData` at any depth, managedFields, the last-applied annotation); trimming
 * keeps the JSON under MAX_OBJECT_BYTES by dropping the largest known status lists first and, as
 * the last resort, everything but identifying metadata (`truncated: true`).
 */
import {
  MAX_OBJECT_BYTES,
  type ApplicationSummary,
  type DeleteItem,
  type ObjectSummary,
  type ProductSummary,
  type PromotionSummary,
  type RolloutSummary,
  type UpsertItem,
  type WorkflowSummary,
} from '../../protocol/events.ts';
import type { ReportedKind } from '../../protocol/kinds.ts';
import {
  type DryRunResource,
  MAX_DRY_RUN_FIELDS,
  MAX_DRY_RUN_RESOURCES,
  type StepDryRun,
} from '../../protocol/promotions.ts';

type Obj = Record<string, unknown>;

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const rec = (v: unknown): Obj => (isObj(v) ? v : {});
const text = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);
const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

/** Drops keys whose value is undefined, so summaries carry only what the object has. */
function compact<T extends Obj>(o: T): T {
  for (const k of Object.keys(o)) if (o[k] === undefined) delete o[k];
  return o;
}

/** Sources of a multi-source Application whose revisions are reported at most (Argo CD has no limit; 20 is many). */
const MAX_SOURCES = 20;
/** Longest revision kept (a SHA-256 commit is 64 characters; a chart version a few). */
const MAX_REVISION_CHARS = 256;

export function applicationSummary(app: Obj): ApplicationSummary {
  const spec = rec(app.spec);
  const status = rec(app.status);
  const dest = rec(spec.destination);
  const sources = Array.isArray(spec.sources) ? spec.sources : [];
  const source = isObj(spec.source) ? spec.source : rec(sources[0]);
  const sync = rec(status.sync);
  const conditions = Array.isArray(status.conditions)
    ? status.conditions.filter(isObj).map((c) => compact({ type: text(c.type) ?? 'Unknown', message: text(c.message) }))
    : undefined;
  const revisions = Array.isArray(sync.revisions) ? sync.revisions : [];
  const opState = rec(status.operationState);
  const syncResult = rec(opState.syncResult);
  const opSync = rec(rec(app.operation).sync);
  const resultRevisions = Array.isArray(syncResult.revisions) ? syncResult.revisions : [];
  const opRevisions = Array.isArray(opSync.revisions) ? opSync.revisions : [];
  return compact({
    syncStatus: text(sync.status),
    healthStatus: text(rec(status.health).status),
    revision: text(sync.revision) ?? text(revisions[0]),
    revisions:
      sources.length > 0 && revisions.length > 0
        ? revisions.slice(0, MAX_SOURCES).map((r) => (typeof r === 'string' ? r.slice(0, MAX_REVISION_CHARS) : ''))
        : undefined,
    operationPhase: text(opState.phase),
    // The revision the last (or running) sync is for: what it synced once it has a result, what
    // it was asked to sync before (the running operation's, else the state's own copy of it).
    operationRevision:
      text(syncResult.revision) ??
      text(resultRevisions[0]) ??
      text(opSync.revision) ??
      text(opRevisions[0]) ??
      text(rec(rec(opState.operation).sync).revision),
    operationStartedAt: text(opState.startedAt),
    operationFinishedAt: text(opState.finishedAt),
    operationMessage: text(opState.message),
    conditions: conditions && conditions.length > 0 ? conditions : undefined,
    destination: isObj(spec.destination)
      ? compact({ server: text(dest.server), name: text(dest.name), namespace: text(dest.namespace) })
      : undefined,
    source:
      Object.keys(source).length > 0
        ? compact({
            repoURL: text(source.repoURL),
            path: text(source.path),
            targetRevision: text(source.targetRevision),
            chart: text(source.chart),
          })
        : undefined,
  });
}

export function rolloutSummary(rollout: Obj): RolloutSummary {
  const status = rec(rollout.status);
  return compact({
    phase: text(status.phase),
    currentStep: num(status.currentStepIndex),
    stableRevision: text(status.stableRS),
    canaryRevision: text(status.currentPodHash),
    message: text(status.message),
  });
}

export function workflowSummary(wf: Obj): WorkflowSummary {
  const status = rec(wf.status);
  return compact({
    phase: text(status.phase),
    startedAt: text(status.startedAt),
    finishedAt: text(status.finishedAt),
    progress: text(status.progress),
    message: text(status.message),
  });
}

/** At most this many environments or steps are summarized (the flow's CRD allows 50). */
const MAX_PROMOTION_ITEMS = 50;
const MAX_PROMOTION_TEXT = 1000;
const bounded = (v: unknown): string | undefined => text(v)?.slice(0, MAX_PROMOTION_TEXT);

function productSummary(obj: Obj): ProductSummary {
  const spec = rec(obj.spec);
  const status = rec(obj.status);
  const envs = Array.isArray(status.environments) ? status.environments.slice(0, MAX_PROMOTION_ITEMS) : [];
  return compact({
    flow: bounded(spec.flow),
    environments: envs.length
      ? envs.map((e) => {
          const x = rec(e);
          return compact({
            environment: bounded(x.environment) ?? '',
            release: bounded(x.release),
            revision: bounded(x.revision),
          });
        })
      : undefined,
  });
}

function promotionSummary(obj: Obj): PromotionSummary {
  const spec = rec(obj.spec);
  const status = rec(obj.status);
  const steps = Array.isArray(status.steps) ? status.steps.slice(0, MAX_PROMOTION_ITEMS) : [];
  const summary: PromotionSummary = compact({
    product: bounded(spec.product),
    release: bounded(status.release) ?? bounded(spec.release),
    phase: bounded(status.phase) ?? 'Pending',
    message: bounded(status.message),
    requestedBy: bounded(spec.requestedBy),
    rollback: bounded(rec(spec.rollback).environment),
    rollbackFrom: bounded(status.rollbackFrom),
    startedAt: bounded(status.startedAt),
    finishedAt: bounded(status.finishedAt),
    steps: steps.length
      ? steps.map((s) => {
          const x = rec(s);
          return compact({
            environment: bounded(x.environment) ?? '',
            phase: bounded(x.phase) ?? 'Pending',
            commit: bounded(x.commit),
            revert: bounded(x.revert),
            startedAt: bounded(x.startedAt),
            finishedAt: bounded(x.finishedAt),
            message: bounded(x.message),
            preAction: actionSummary(x.preAction),
            postAction: actionSummary(x.postAction),
            proposal: proposalSummary(x.proposal),
            dryRun: dryRunSummary(x.dryRun),
          });
        })
      : undefined,
    dryRun: spec.dryRun === true ? true : undefined,
  });
  // A dry run's results within MAX_DRY_RUN_SUMMARY_BYTES: the last steps' resources go first
  // (counted in moreResources).
  const results = (summary.steps ?? []).map((s) => s.dryRun).filter((d) => d !== undefined);
  let size = Buffer.byteLength(JSON.stringify(results));
  for (let i = results.length - 1; i >= 0 && size > MAX_DRY_RUN_SUMMARY_BYTES; i--)
    for (const app of results[i]!.applications) {
      if (app.resources.length === 0) continue;
      const was = Buffer.byteLength(JSON.stringify(app));
      app.moreResources = (app.moreResources ?? 0) + app.resources.length;
      app.resources = [];
      size += Buffer.byteLength(JSON.stringify(app)) - was;
    }
  return summary;
}

/** Bytes of JSON the dry-run results of one promotion's summary take at most. */
export const MAX_DRY_RUN_SUMMARY_BYTES = 64 * 1024;
const MAX_DRY_RUN_APPLICATIONS = 20;
const MAX_FIELD_TEXT = 200;

/** A step's dry run (protocol StepDryRun) as reported: bounded counts and texts. */
function dryRunSummary(v: unknown): StepDryRun | undefined {
  const d = rec(v);
  if (!Array.isArray(d.applications)) return undefined;
  const fields = (x: unknown) =>
    Array.isArray(x)
      ? x
          .slice(0, MAX_DRY_RUN_FIELDS)
          .map((f) => text(f)?.slice(0, MAX_FIELD_TEXT))
          .filter((f) => f !== undefined)
      : [];
  return compact({
    at: bounded(d.at) ?? '',
    commit: bounded(d.commit),
    files: fields(d.files),
    applications: d.applications.slice(0, MAX_DRY_RUN_APPLICATIONS).map((a) => {
      const x = rec(a);
      const resources = Array.isArray(x.resources) ? x.resources.slice(0, MAX_DRY_RUN_RESOURCES) : [];
      const more =
        (num(x.moreResources) ?? 0) + (Array.isArray(x.resources) ? x.resources.length - resources.length : 0);
      return compact({
        application: bounded(x.application) ?? '',
        current: bounded(x.current),
        error: bounded(x.error),
        moreResources: more > 0 ? more : undefined,
        resources: resources.map((r) => {
          const y = rec(r);
          const action = y.action === 'added' || y.action === 'removed' ? y.action : 'modified';
          const outside = fields(y.notFromChange);
          return compact({
            group: bounded(y.group),
            kind: bounded(y.kind) ?? '',
            namespace: bounded(y.namespace) ?? '',
            name: bounded(y.name) ?? '',
            action,
            fields: fields(y.fields),
            moreFields: num(y.moreFields),
            notFromChange: outside.length > 0 ? outside : undefined,
          }) as unknown as DryRunResource;
        }),
      });
    }),
  });
}

function proposalSummary(v: unknown): NonNullable<PromotionSummary['steps']>[number]['proposal'] {
  const a = rec(v);
  const branch = bounded(a.branch);
  const pr = rec(a.pullRequest);
  const provider = PULL_REQUEST_PROVIDERS.find((x) => x === pr.provider);
  const number = typeof pr.number === 'number' && Number.isSafeInteger(pr.number) ? pr.number : undefined;
  const url = bounded(pr.url);
  const state = (['open', 'closed', 'merged'] as const).find((x) => x === pr.state);
  const pullRequest =
    provider && number !== undefined && url && /^https?:\/\//.test(url)
      ? compact({ provider, number, url, state })
      : undefined;
  return branch === undefined ? undefined : compact({ branch, commit: bounded(a.commit), pullRequest });
}

const PULL_REQUEST_PROVIDERS = ['github', 'gitea', 'gitlab'] as const;

function actionSummary(v: unknown): { workflow: string; phase?: string; message?: string } | undefined {
  const a = rec(v);
  const workflow = bounded(a.workflow);
  return workflow === undefined
    ? undefined
    : compact({ workflow, phase: bounded(a.phase), message: bounded(a.message) });
}

export function summarize(kind: ReportedKind, obj: Obj): ObjectSummary {
  switch (kind) {
    case 'Application':
      return applicationSummary(obj);
    case 'Rollout':
      return rolloutSummary(obj);
    case 'Workflow':
      return workflowSummary(obj);
    case 'Product':
      return productSummary(obj);
    case 'Promotion':
      return promotionSummary(obj);
    case 'PromotionPreview': {
      // A preview is reported like a promotion, within the same budgets (no rollback, no dryRun flag).
      const { rollback: _r, rollbackFrom: _f, dryRun: _d, ...summary } = promotionSummary(obj);
      return summary;
    }
  }
}

const NEVER_REPORTED = new Set(['data', 'stringData']);
const LAST_APPLIED = 'kubectl.kubernetes.io/last-applied-configuration';

/** A deep copy without `data`/`stringData` (at any depth), managedFields and the last-applied annotation. */
export function clean(obj: Obj): Obj {
  const copy = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(copy);
    if (!isObj(v)) return v;
    const out: Obj = {};
    for (const [k, x] of Object.entries(v)) if (!NEVER_REPORTED.has(k)) out[k] = copy(x);
    return out;
  };
  const out = copy(obj) as Obj;
  const meta = rec(out.metadata);
  delete meta.managedFields;
  if (isObj(meta.annotations)) delete meta.annotations[LAST_APPLIED];
  return out;
}

/**
 * Paths dropped, in this order, while the object is larger than the bound: the lists Argo
 * controllers grow without limit (an Application's resources and history, a Workflow's nodes and
 * stored templates, a sync result's resources), then the spec's templates.
 */
const DROP_ORDER: readonly (readonly string[])[] = [
  ['status', 'resources'],
  ['status', 'operationState', 'syncResult', 'resources'],
  ['status', 'history'],
  ['status', 'nodes'],
  ['status', 'storedTemplates'],
  ['status', 'storedWorkflowTemplateSpec'],
  ['status', 'artifactGCStatus'],
  ['status', 'conditions'],
  ['spec', 'templates'],
];

export const byteSize = (v: unknown): number => Buffer.byteLength(JSON.stringify(v), 'utf8');

function dropPath(obj: Obj, path: readonly string[]): boolean {
  let cur: unknown = obj;
  for (const p of path.slice(0, -1)) {
    if (!isObj(cur)) return false;
    cur = cur[p];
  }
  const last = path[path.length - 1]!;
  if (!isObj(cur) || !(last in cur)) return false;
  delete cur[last];
  return true;
}

/** The cleaned object within `maxBytes` of JSON, and whether anything had to go for that. */
export function trimObject(obj: Obj, maxBytes = MAX_OBJECT_BYTES): { object: Obj; truncated: boolean } {
  const out = clean(obj);
  if (byteSize(out) <= maxBytes) return { object: out, truncated: false };
  for (const path of DROP_ORDER) {
    if (dropPath(out, path) && byteSize(out) <= maxBytes) return { object: out, truncated: true };
  }
  // Last resort: identity only. Labels and annotations stay when they fit (they usually do).
  const meta = rec(out.metadata);
  const identity: Obj = {
    name: meta.name,
    namespace: meta.namespace,
    uid: meta.uid,
    resourceVersion: meta.resourceVersion,
    generation: meta.generation,
    creationTimestamp: meta.creationTimestamp,
    deletionTimestamp: meta.deletionTimestamp,
  };
  const minimal: Obj = { apiVersion: out.apiVersion, kind: out.kind, metadata: compact(identity) };
  for (const extra of ['labels', 'annotations'] as const) {
    if (meta[extra] === undefined) continue;
    const tried = { ...minimal, metadata: { ...rec(minimal.metadata), [extra]: meta[extra] } };
    if (byteSize(tried) <= maxBytes) Object.assign(minimal, tried);
  }
  return { object: minimal, truncated: true };
}

export interface ObjectMeta {
  namespace: string;
  name: string;
  uid: string;
  resourceVersion: string;
  generation: number;
}

/** The identity of a watched object, or undefined when it lacks one (never reported). */
export function metaOf(obj: Obj): ObjectMeta | undefined {
  const m = rec(obj.metadata);
  const name = text(m.name);
  const uid = text(m.uid);
  const resourceVersion = text(m.resourceVersion);
  if (!name || !uid || !resourceVersion) return undefined;
  return { namespace: text(m.namespace) ?? '', name, uid, resourceVersion, generation: num(m.generation) ?? 0 };
}

/** The upsert item for an object's current state (undefined when it has no name, uid or resourceVersion). */
export function upsertItem(kind: ReportedKind, obj: Obj, observedAt = new Date()): UpsertItem | undefined {
  const meta = metaOf(obj);
  if (!meta) return undefined;
  const { object, truncated } = trimObject(obj);
  return {
    type: 'upsert',
    kind,
    ...meta,
    observedAt: observedAt.toISOString(),
    summary: summarize(kind, obj),
    object,
    truncated,
  };
}

export function deleteItem(
  kind: ReportedKind,
  meta: Pick<ObjectMeta, 'namespace' | 'name' | 'uid'>,
  resourceVersion: string,
  observedAt = new Date(),
): DeleteItem {
  return {
    type: 'delete',
    kind,
    namespace: meta.namespace,
    name: meta.name,
    uid: meta.uid,
    resourceVersion,
    observedAt: observedAt.toISOString(),
  };
}

/**
 * An item as the reporter keeps it, in its cache and queue: identity and the item's JSON, made
 * once. Kept as text, an object costs its JSON's length in memory (a parsed object costs several
 * times that), and a batch is the items' texts joined, not serialised again.
 */
export interface PreparedItem {
  type: 'upsert' | 'delete';
  namespace: string;
  name: string;
  uid: string;
  resourceVersion: string;
  observedAt: string;
  json: string;
}

/**
 * What the reporter's cache keeps of an object: its identity and resourceVersion always (digests,
 * relists), the item's JSON while it may still have to be sent. Once the control plane has an
 * owned object's state, only the identity stays (`json` undefined): if the object's ownership
 * later comes back to this replica, its state is read from the API server then.
 */
export type CachedItem = Omit<PreparedItem, 'json'> & { json?: string };

export function prepare(item: UpsertItem | DeleteItem): PreparedItem {
  return {
    type: item.type,
    namespace: item.namespace,
    name: item.name,
    uid: item.uid,
    resourceVersion: item.resourceVersion,
    observedAt: item.observedAt,
    json: JSON.stringify(item),
  };
}
