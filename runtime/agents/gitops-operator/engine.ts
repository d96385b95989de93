/**
 * The GitOps Operator's promotion engine (docs/promotions.md). Every `tick()`, while it holds the
 * operator's Lease:
 *
 *  1. Products: the release each environment holds at the branch's head (the template's `version`
 *     field), written to the Product's status. A release of the trigger environment that differs
 *     from the last one seen starts a Promotion (named after the product and the release: a
 *     restarted operator does not start it twice).
 *  2. Promotions, per product in creation order: one runs at a time; a newer Pending one
 *     supersedes an older Pending one; the running one advances by one transition, written to its
 *     status before the next (the status is the whole state: a restarted operator continues from
 *     it).
 *
 * A step: Pending → PreAction (a Workflow from the policy's WorkflowTemplate; its result decides)
 * → Committing (the template's fields copied from the environment before, one commit with the
 * promotion's trailers, found again rather than made twice) → Syncing (every application of the
 * product there synced to that commit or a later one, Synced and Healthy; an operation that
 * failed at it, or Degraded health, fails the step) → PostAction → Succeeded. `spec.abort` stops
 * at the next tick and reverts the running step's commit (the environments before keep theirs);
 * `spec.retry` raised by one runs a failed promotion again from its failed step.
 *
 * A dry run is a PromotionPreview, a kind of its own (an operator that predates it does not watch
 * it, so it can never run one as a real promotion). Previews run beside the product's promotions,
 * one at a time per product, with the promotions' lifecycle (Pending, superseded, abort): each
 * environment's change is committed on a scratch branch, previewed by the Source Server, the branch
 * deleted; nothing else happens (#advanceDryRun). The finished ones beyond MAX_FINISHED_PREVIEWS per
 * product are deleted, oldest first. A Promotion with the former `spec.dryRun` is failed at once,
 * never run. A policy's `dryRun` runs the same preview in a real step before its commit, and with
 * `onlyTemplateChanges` fails the step on changes the Git change does not cause.
 */
import { createHash } from 'node:crypto';
import { isMap, isSeq, parseDocument } from 'yaml';
import type { KubeTransport } from '../../kube/transport.ts';
import {
  DRY_RUN_PROMOTION_REFUSED,
  FINAL_PHASES,
  MAX_FINISHED_PREVIEWS,
  orderSteps,
  parseJsonPath,
  policiesFor,
  PROMOTIONS_API_VERSION,
  PROMOTIONS_GROUP,
  PROMOTIONS_VERSION,
  sourceEnvironment,
  TRAILER_ENVIRONMENT,
  TRAILER_PROMOTION,
  TRAILER_REVERT,
  type FlowStep,
  type HookName,
  type Product,
  type Promotion,
  type PromotionFlow,
  type PromotionPreview,
  type PromotionPolicy,
  type PromotionStatus,
  type PromotionTemplate,
  type ProductEnvironment,
  type StepDryRun,
  type StepStatus,
  changesOutsideTemplate,
} from '../../protocol/promotions.ts';
import {
  type Author,
  type CredentialSource,
  type FileChange,
  PromotionGit,
  PromotionGitError,
  repoPath,
} from './git.ts';
import { ProviderError, PullRequestClient, repoRef, type RepoRef } from './pull-requests.ts';
import { boundPreview, PreviewError, type PreviewSource, scratchBranch } from './dry-run.ts';

export interface EngineLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export interface EngineOptions {
  kube: KubeTransport;
  git: PromotionGit;
  /** Where the promotion resources, Argo CD's Applications and the Workflows are. */
  namespace: string;
  /** This process, in the Lease. */
  identity: string;
  author: Author;
  log: EngineLog;
  /** Default wait for a step's applications (a policy may set its own). */
  syncTimeoutSeconds?: number;
  /** How long a Lease not renewed stays another operator's. */
  leaseSeconds?: number;
  /**
   * `action: pr` with a policy's `pullRequest`: the repository credentials whose password is the
   * provider's token (absent: such a step fails, saying so).
   */
  credentials?: CredentialSource;
  /** The product's page that a pull request's description links back to (`<base>/<product>`); absent: no link. */
  productLinkBase?: string;
  /** Options of the provider client (tests: shorter timeouts and backoff). */
  pullRequestClient?: { timeoutMs?: number; attempts?: number; backoffMs?: number };
  /** The Source Server's preview of an Application at a revision (dry runs); absent: dry runs fail, saying so. */
  preview?: PreviewSource;
  now?: () => Date;
}

export const LEASE_NAME = 'gitops-operator';
const ARGO = 'argoproj.io/v1alpha1';

type Obj = Record<string, unknown>;

export interface Application {
  metadata: { name: string };
  status?: {
    sync?: { status?: string; revision?: string };
    health?: { status?: string; message?: string };
    operationState?: { phase?: string; message?: string; syncResult?: { revision?: string } };
    /** Its resources; `health` only where Argo CD persists resource health in the Application. */
    resources?: Array<{
      group?: string;
      kind?: string;
      namespace?: string;
      name?: string;
      health?: { status?: string; message?: string };
    }>;
  };
}

/**
 * Whether an Application's Degraded health fails a step: only once Argo CD has applied the promoted
 * revision (`reached`: its synced revision is the commit or a later one) and reports it Synced.
 * Argo CD moves the synced revision to a new commit when it compares, before its sync applies it:
 * while it is OutOfSync there its health is still the old live state's — a Rollout aborted by the
 * previous release's failed analysis stays Degraded until the new revision reaches it.
 */
export function degradedAt(app: Application, reached: boolean): boolean {
  const st = app.status ?? {};
  return reached && st.sync?.status === 'Synced' && st.health?.status === 'Degraded';
}

/**
 * Why a promotion's step fails on an Application Argo CD reports Degraded at the promoted revision,
 * naming what is degraded: each resource whose persisted health is Degraded, with Argo CD's
 * message for it (for a Rollout whose canary analysis failed: "Rollout aborted update to revision
 * 2: Metric "…" assessed Failed …"). Argo CD 3 keeps resource health in its resource tree rather
 * than in the Application unless `controller.resource.health.persist` is on; then the Rollouts
 * among the Application's resources are named (a failed canary analysis is what degrades an
 * Application at a new revision most often), else only the Application's own health message.
 */
export function degradedReason(name: string, app: Application): string {
  const resources = app.status?.resources ?? [];
  const id = (r: (typeof resources)[number]) =>
    `${r.kind ?? 'resource'} ${r.namespace ? `${r.namespace}/` : ''}${r.name ?? ''}`;
  const degraded = resources.filter((r) => r.health?.status === 'Degraded');
  if (degraded.length > 0)
    return `${name} is Degraded at the promoted revision: ${degraded
      .map((r) => `${id(r)}: ${r.health?.message || 'Degraded'}`)
      .join('; ')}`;
  const rollouts = resources.filter((r) => r.kind === 'Rollout' && r.group === 'argoproj.io' && !r.health);
  const message = app.status?.health?.message ?? '';
  if (rollouts.length > 0) {
    const names = rollouts.map((r) => `${r.namespace ? `${r.namespace}/` : ''}${r.name ?? ''}`).join(', ');
    return `${name} is Degraded at the promoted revision${message ? ` (${message})` : ''}: check its ${
      rollouts.length === 1 ? 'Rollout' : 'Rollouts'
    } ${names} (a failed canary analysis aborts a Rollout and degrades it)`;
  }
  return `${name} is Degraded at the promoted revision: ${message}`.trim();
}

/** A YAML text with the field at `path` set to `value` (comments and layout kept); an error names a missing parent. */
export function setField(text: string, jsonPath: string, value: unknown): string {
  const doc = parseDocument(text);
  if (doc.errors.length > 0) throw new Error(`it is not YAML: ${doc.errors[0]!.message.split('\n')[0]}`);
  doc.setIn(parseJsonPath(jsonPath), value);
  return doc.toString();
}

/** A release as text: a string, number or boolean field; undefined for anything else. */
export function releaseText(v: unknown): string | undefined {
  return typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean' ? String(v) : undefined;
}

/** The value at `path` of a YAML text, or undefined. */
export function getField(text: string | undefined, jsonPath: string): unknown {
  if (text === undefined) return undefined;
  const doc = parseDocument(text);
  if (doc.errors.length > 0) return undefined;
  const node: unknown = doc.getIn(parseJsonPath(jsonPath), false);
  return isMap(node) || isSeq(node) ? (node.toJSON() as unknown) : node;
}

export class PromotionEngine {
  readonly #o: EngineOptions;
  readonly #base: string;

  constructor(o: EngineOptions) {
    this.#o = o;
    this.#base = `/apis/${PROMOTIONS_GROUP}/${PROMOTIONS_VERSION}/namespaces/${o.namespace}`;
  }

  #now(): Date {
    return this.#o.now?.() ?? new Date();
  }

  /** One round; answers false when another operator holds the Lease (nothing done). */
  async tick(): Promise<boolean> {
    if (!(await this.#lease())) return false;
    const [products, templates, flows, policies, listed, previews] = await Promise.all([
      this.#list<Product>('products'),
      this.#list<PromotionTemplate>('promotiontemplates'),
      this.#list<PromotionFlow>('promotionflows'),
      this.#list<PromotionPolicy>('promotionpolicies'),
      this.#list<Promotion>('promotions'),
      // A cluster whose CRDs an older runtime's bundle applied may lack the kind: no previews then.
      this.#list<PromotionPreview>('promotionpreviews', true),
    ]);
    // The former dry-run form is never run: failed at once, naming the kind to use.
    const promotions: Promotion[] = [];
    for (const p of listed) {
      if (p.spec.dryRun !== true) promotions.push(p);
      else if (!FINAL_PHASES.includes(p.status?.phase ?? 'Pending')) await this.#refuseDryRunPromotion(p, products);
    }
    const byName = <T extends { metadata: { name: string } }>(xs: T[]) => new Map(xs.map((x) => [x.metadata.name, x]));
    const ctx = { templates: byName(templates), flows: byName(flows), policies };
    for (const product of products) {
      try {
        await this.#observe(product, ctx, promotions);
      } catch (err) {
        this.#o.log.warn({ product: product.metadata.name, err: message(err) }, 'product not observed');
      }
    }
    const productsByName = byName(products);
    const groups = new Map<string, Promotion[]>();
    // Previews change no Git branch of the product's: they run beside its promotions, one at a time.
    const groupOf = (p: Promotion) => `${p.spec.product}\0${isPreview(p) ? 'preview' : ''}`;
    for (const p of [...promotions, ...previews.map((x) => ({ ...x, kind: 'PromotionPreview' }))])
      groups.set(groupOf(p), [...(groups.get(groupOf(p)) ?? []), p]);
    for (const [group, list] of groups) {
      const productName = group.split('\0')[0]!;
      list.sort((a, b) => (a.metadata.creationTimestamp ?? '').localeCompare(b.metadata.creationTimestamp ?? ''));
      try {
        await this.#advanceProduct(productsByName.get(productName), list, ctx);
        if (isPreview(list[0]!)) await this.#prunePreviews(list);
      } catch (err) {
        this.#o.log.warn({ product: productName, err: message(err) }, 'promotions not advanced this round');
      }
    }
    return true;
  }

  /**
   * A Promotion with `spec.dryRun` (the former dry-run form, which an operator that predates dry
   * runs would run as a real promotion): failed at once, never run. One an earlier operator had
   * started as a dry run has its scratch branches deleted.
   */
  async #refuseDryRunPromotion(p: Promotion, products: Product[]): Promise<void> {
    const product = products.find((x) => x.metadata.name === p.spec.product);
    const steps = p.status?.steps ?? [];
    const committed = steps.filter((s) => s.commit && !s.dryRun).map((s) => `${s.environment} (${s.commit ?? ''})`);
    if (product)
      for (const s of steps)
        if (s.dryRun) await this.#o.git.deleteBranch(product.spec.repository, scratchBranch(p, s.environment));
    const now = this.#now().toISOString();
    await this.#writeStatus(pluralOf(p), p, {
      ...p.status,
      phase: 'Failed',
      finishedAt: now,
      steps: steps.map((s) => (FINAL_STEP_PHASES.includes(s.phase) ? s : { ...s, phase: 'Skipped' as const })),
      message:
        committed.length === 0
          ? DRY_RUN_PROMOTION_REFUSED
          : `${DRY_RUN_PROMOTION_REFUSED.replace(/; this Promotion was not run and changed nothing$/, '')}; an operator without this check had run it as a promotion: its commits stay (${committed.join(', ')})`,
    });
    this.#o.log.warn(
      { promotion: p.metadata.name },
      'a Promotion with spec.dryRun refused: a dry run is a PromotionPreview',
    );
  }

  /** Finished previews of one product beyond MAX_FINISHED_PREVIEWS deleted, oldest first. */
  async #prunePreviews(list: Promotion[]): Promise<void> {
    const finished = list
      .filter((p) => FINAL_PHASES.includes(p.status?.phase ?? 'Pending'))
      .sort((a, b) =>
        (b.status?.finishedAt ?? b.metadata.creationTimestamp ?? '').localeCompare(
          a.status?.finishedAt ?? a.metadata.creationTimestamp ?? '',
        ),
      );
    for (const old of finished.slice(MAX_FINISHED_PREVIEWS)) {
      const res = await this.#o.kube.request(`${this.#base}/promotionpreviews/${old.metadata.name}`, {
        method: 'DELETE',
        body: { apiVersion: 'v1', kind: 'DeleteOptions', preconditions: { uid: old.metadata.uid } },
      });
      if (res.status !== 200 && res.status !== 202 && res.status !== 404 && res.status !== 409)
        throw new Error(`deleting PromotionPreview ${old.metadata.name}: HTTP ${res.status}`);
      if (res.status === 200 || res.status === 202)
        this.#o.log.info({ preview: old.metadata.name }, 'finished preview deleted (the oldest beyond the kept ones)');
    }
  }

  // ---------------------------------------------------------------- products and triggers

  async #observe(
    product: Product,
    ctx: { templates: Map<string, PromotionTemplate>; flows: Map<string, PromotionFlow> },
    promotions: Promotion[],
  ): Promise<void> {
    const template = ctx.templates.get(product.spec.template);
    const flow = ctx.flows.get(product.spec.flow);
    if (!template || !flow) return;
    const files = product.spec.environments.map((e) => repoPath(e.path, template.spec.version.file));
    const { head, files: read } = await this.#o.git.read(product.spec.repository, product.spec.branch, files);
    const environments = product.spec.environments.map((e, i) => {
      const release = releaseText(getField(read.get(files[i]!), template.spec.version.jsonPath));
      return {
        environment: e.environment,
        ...(release === undefined ? {} : { release }),
        revision: head,
      };
    });
    const trigger = environments.find((e) => e.environment === flow.spec.triggerEnvironment)?.release;
    const status = { ...product.status };
    let start: string | undefined;
    if (trigger !== undefined && status.lastTriggeredRelease !== trigger) {
      // The first release seen is where the product stands, not a change to promote.
      if (
        status.lastTriggeredRelease !== undefined &&
        !promotions.some((p) => p.spec.product === product.metadata.name && p.spec.release === trigger)
      )
        start = trigger;
      status.lastTriggeredRelease = trigger;
    }
    const changed =
      JSON.stringify(status.environments) !== JSON.stringify(environments) ||
      start !== undefined ||
      product.status?.lastTriggeredRelease !== status.lastTriggeredRelease;
    if (start !== undefined) await this.#startPromotion(product, start, 'trigger');
    if (changed) {
      status.environments = environments;
      status.observedAt = this.#now().toISOString();
      await this.#writeStatus('products', product, status);
    }
  }

  async #startPromotion(product: Product, release: string, requestedBy: string): Promise<void> {
    const name = promotionName(product.metadata.name, release);
    const res = await this.#o.kube.request(`${this.#base}/promotions`, {
      method: 'POST',
      body: {
        apiVersion: PROMOTIONS_API_VERSION,
        kind: 'Promotion',
        metadata: {
          name,
          namespace: this.#o.namespace,
          labels: { [`${PROMOTIONS_GROUP}/product`]: product.metadata.name },
        },
        spec: { product: product.metadata.name, release, requestedBy },
      },
    });
    if (res.status === 201 || res.status === 409) {
      if (res.status === 201) this.#o.log.info({ promotion: name, release }, 'promotion started by a new release');
      return;
    }
    throw new Error(`creating Promotion ${name}: HTTP ${res.status}`);
  }

  // ---------------------------------------------------------------- promotions

  async #advanceProduct(
    product: Product | undefined,
    list: Promotion[],
    ctx: { templates: Map<string, PromotionTemplate>; flows: Map<string, PromotionFlow>; policies: PromotionPolicy[] },
  ): Promise<void> {
    // A failed one asked to retry goes back to Running.
    for (const p of list) {
      if (p.status?.phase === 'Failed' && (p.spec.retry ?? 0) > (p.status.observedRetry ?? 0)) {
        const steps = (p.status.steps ?? []).map((s) =>
          s.phase === 'Failed'
            ? {
                environment: s.environment,
                phase: 'Pending' as const,
                ...(s.commit ? { commit: s.commit } : {}),
              }
            : s,
        );
        const running = list.some((o) => o !== p && o.status?.phase === 'Running');
        await this.#writeStatus(pluralOf(p), p, {
          ...p.status,
          phase: running ? 'Pending' : 'Running',
          steps,
          observedRetry: p.spec.retry ?? 0,
          message: `retry ${p.spec.retry ?? 0}`,
          finishedAt: undefined,
        });
        return;
      }
    }
    const open = list.filter((p) => !FINAL_PHASES.includes(p.status?.phase ?? 'Pending'));
    if (open.length === 0) return;
    const running = open.find((p) => p.status?.phase === 'Running');
    if (running) {
      await this.#advance(product, running, ctx);
      return;
    }
    // None runs: the newest waiting one starts, the older waiting ones are superseded by it.
    const newest = open[open.length - 1]!;
    for (const older of open.slice(0, -1))
      await this.#writeStatus(pluralOf(older), older, {
        ...older.status,
        phase: 'Superseded',
        finishedAt: this.#now().toISOString(),
        message: `superseded by ${newest.metadata.name}`,
      });
    await this.#begin(product, newest, ctx);
  }

  /** Pending → Running: the release and the steps fixed in the status. */
  async #begin(
    product: Product | undefined,
    p: Promotion,
    ctx: { templates: Map<string, PromotionTemplate>; flows: Map<string, PromotionFlow> },
  ): Promise<void> {
    const fail = (msg: string) =>
      this.#writeStatus(pluralOf(p), p, {
        ...p.status,
        phase: 'Failed',
        message: msg,
        finishedAt: this.#now().toISOString(),
        steps: p.status?.steps ?? [],
      });
    if (p.spec.abort) {
      await this.#writeStatus(pluralOf(p), p, {
        ...p.status,
        phase: 'Aborted',
        finishedAt: this.#now().toISOString(),
        message: 'aborted before it started',
      });
      return;
    }
    if (!product) return void (await fail(`Product '${p.spec.product}' does not exist`));
    const flow = ctx.flows.get(product.spec.flow);
    const template = ctx.templates.get(product.spec.template);
    if (!flow) return void (await fail(`PromotionFlow '${product.spec.flow}' does not exist`));
    if (!template) return void (await fail(`PromotionTemplate '${product.spec.template}' does not exist`));
    let steps: FlowStep[];
    try {
      steps = orderSteps(flow.spec);
      for (const s of [flow.spec.triggerEnvironment, ...steps.map((x) => x.environment)])
        if (!product.spec.environments.some((e) => e.environment === s))
          throw new Error(`the product has no environment '${s}'`);
    } catch (err) {
      return void (await fail(`the flow cannot run: ${message(err)}`));
    }
    if (p.spec.rollback) return this.#beginRollback(product, flow, template, p, p.spec.rollback.environment, fail);
    // What the trigger environment holds is what the promotion moves: a release asked for (by the
    // API) must be that one, or the steps would copy another under its name.
    const env = product.spec.environments.find((e) => e.environment === flow.spec.triggerEnvironment)!;
    const file = repoPath(env.path, template.spec.version.file);
    const read = await this.#o.git.read(product.spec.repository, product.spec.branch, [file]);
    const held = releaseText(getField(read.files.get(file), template.spec.version.jsonPath));
    if (held === undefined)
      return void (await fail(`the trigger environment holds no release at ${file} ${template.spec.version.jsonPath}`));
    if (p.spec.release !== undefined && p.spec.release !== held)
      return void (await fail(
        `${env.environment} holds ${held}, not ${p.spec.release}: a promotion moves the release its trigger environment holds (commit ${p.spec.release} there first)`,
      ));
    const release = held;
    const sourceRevision = read.head;
    const hooks = isPreview(p) ? undefined : await this.#hook(flow, 'onStart', p, release, '', p.status?.hooks);
    await this.#writeStatus(pluralOf(p), p, {
      phase: 'Running',
      release,
      ...(sourceRevision ? { sourceRevision } : {}),
      startedAt: this.#now().toISOString(),
      steps: steps.map((s) => ({ environment: s.environment, phase: 'Pending' })),
      observedRetry: p.spec.retry ?? 0,
      ...(hooks ? { hooks } : {}),
    });
  }

  /** Histories read for a rollback: the environment's last changes of its version file. */
  static readonly ROLLBACK_HISTORY = 100;

  /**
   * Pending → Running for a rollback: the release the environment held before its current one, and
   * the commit that last held it (what its step restores), fixed in the status.
   */
  async #beginRollback(
    product: Product,
    flow: PromotionFlow,
    template: PromotionTemplate,
    p: Promotion,
    environment: string,
    fail: (msg: string) => Promise<void>,
  ): Promise<void> {
    const env = product.spec.environments.find((e) => e.environment === environment);
    if (!env) return fail(`the product has no environment '${environment}'`);
    if (environment === flow.spec.triggerEnvironment)
      return fail(
        `${environment} is the flow's trigger environment: a change there is a new release to promote; commit the release wanted there instead`,
      );
    const file = repoPath(env.path, template.spec.version.file);
    const history = await this.#o.git.history(
      product.spec.repository,
      product.spec.branch,
      file,
      PromotionEngine.ROLLBACK_HISTORY,
    );
    const releases = history.map((h) => ({
      commit: h.commit,
      release: releaseText(getField(h.content, template.spec.version.jsonPath)),
    }));
    const current = releases[0]?.release;
    const before = releases.find((r) => r.release !== undefined && r.release !== current);
    if (current === undefined || before?.release === undefined)
      return fail(
        `${environment} holds no release before ${current ?? 'its current one'} in the last ${PromotionEngine.ROLLBACK_HISTORY} changes of ${file}`,
      );
    const hooks = await this.#hook(flow, 'onStart', p, before.release, environment, p.status?.hooks);
    await this.#writeStatus(pluralOf(p), p, {
      phase: 'Running',
      release: before.release,
      sourceRevision: before.commit,
      rollbackFrom: current,
      startedAt: this.#now().toISOString(),
      steps: [{ environment, phase: 'Pending' }],
      observedRetry: p.spec.retry ?? 0,
      ...(hooks ? { hooks } : {}),
    });
  }

  async #advance(
    product: Product | undefined,
    p: Promotion,
    ctx: { templates: Map<string, PromotionTemplate>; flows: Map<string, PromotionFlow>; policies: PromotionPolicy[] },
  ): Promise<void> {
    const status = structuredClone(p.status ?? {});
    const steps = status.steps ?? [];
    const now = this.#now().toISOString();
    const write = () => this.#writeStatus(pluralOf(p), p, status);
    const index = steps.findIndex((s) => !['Succeeded', 'Failed', 'Aborted', 'Skipped'].includes(s.phase));
    const flow = product ? ctx.flows.get(product.spec.flow) : undefined;
    const template = product ? ctx.templates.get(product.spec.template) : undefined;
    if (!product || !flow || !template) {
      Object.assign(status, {
        phase: 'Failed',
        finishedAt: now,
        message: `the product, its flow or its template is gone`,
      });
      return void (await write());
    }
    if (isPreview(p)) return this.#advanceDryRun(product, flow, template, p, status, index);
    if (p.spec.abort) return this.#abort(product, p, status, index, ctx.policies);
    if (index < 0) {
      const failed = steps.find((s) => s.phase === 'Failed');
      const hooks = await this.#hook(
        flow,
        failed ? 'onFail' : 'onSuccess',
        p,
        status.release ?? '',
        failed?.environment ?? '',
        status.hooks,
      );
      if (hooks) status.hooks = hooks;
      Object.assign(
        status,
        failed
          ? { phase: 'Failed', finishedAt: now, message: `${failed.environment}: ${failed.message ?? 'failed'}` }
          : {
              phase: 'Succeeded',
              finishedAt: now,
              message: p.spec.rollback
                ? `${p.spec.rollback.environment} rolled back from ${status.rollbackFrom ?? '?'} to ${status.release ?? '?'}`
                : `${status.release} reached ${steps.map((s) => s.environment).join(', ')}`,
            },
      );
      return void (await write());
    }
    const step = steps[index]!;
    const env = step.environment;
    const flowStep = flow.spec.steps.find((s) => s.environment === env)!;
    const target = product.spec.environments.find((e) => e.environment === env)!;
    const policies = policiesFor(ctx.policies, product.metadata.name, env);
    const action = policies.find((x) => x.spec.action)?.spec.action ?? 'commit';
    const pre = policies.find((x) => x.spec.preAction)?.spec.preAction;
    const post = policies.find((x) => x.spec.postAction)?.spec.postAction;
    const timeout =
      policies.find((x) => x.spec.syncTimeoutSeconds)?.spec.syncTimeoutSeconds ?? this.#o.syncTimeoutSeconds ?? 900;
    const dryRunPolicy = policies.find((x) => x.spec.dryRun)?.spec.dryRun;
    const pullRequest = policies.find((x) => x.spec.pullRequest)?.spec.pullRequest;
    const attempt = status.observedRetry ?? 0;
    const failStep = async (msg: string) => {
      Object.assign(step, { phase: 'Failed', finishedAt: now, message: msg });
      for (const s of steps.slice(index + 1)) if (s.phase === 'Pending') s.phase = 'Skipped';
      Object.assign(status, { phase: 'Failed', finishedAt: now, message: `${env}: ${msg}` });
      const hooks = await this.#hook(flow, 'onFail', p, status.release ?? '', env, status.hooks);
      if (hooks) status.hooks = hooks;
      return write();
    };

    switch (step.phase) {
      case 'Pending': {
        step.startedAt = now;
        if (pre) {
          step.phase = 'PreAction';
          step.preAction = { workflow: workflowName(p, env, 'pre', attempt) };
        } else step.phase = 'Committing';
        return void (await write());
      }
      case 'PreAction':
      case 'PostAction': {
        const which = step.phase === 'PreAction' ? 'preAction' : 'postAction';
        const wfAction = step.phase === 'PreAction' ? pre : post;
        const a = step[which] ?? { workflow: workflowName(p, env, which === 'preAction' ? 'pre' : 'post', attempt) };
        if (!wfAction) {
          step.phase = step.phase === 'PreAction' ? 'Committing' : 'Succeeded';
          return void (await write());
        }
        const phase = await this.#workflow(a.workflow, wfAction.workflowTemplate, p, env, status.release ?? '');
        step[which] = {
          ...a,
          ...(phase.phase ? { phase: phase.phase } : {}),
          ...(phase.message ? { message: phase.message } : {}),
        };
        if (phase.phase === 'Succeeded') {
          if (step.phase === 'PreAction') step.phase = 'Committing';
          else Object.assign(step, { phase: 'Succeeded', finishedAt: now });
          return void (await write());
        }
        if (phase.phase === 'Failed' || phase.phase === 'Error')
          return void (await failStep(
            `${which === 'preAction' ? 'pre-action' : 'post-action'} Workflow ${a.workflow} ${phase.phase.toLowerCase()}${phase.message ? `: ${phase.message}` : ''}`,
          ));
        if (JSON.stringify(step[which]) !== JSON.stringify(a)) await write();
        return;
      }
      case 'Committing': {
        if (action === 'no-commit') {
          step.phase = 'PostAction';
          step.message = 'no-commit: the policy asks for no Git change';
          return void (await write());
        }
        const trailers = { [TRAILER_PROMOTION]: p.metadata.uid ?? p.metadata.name, [TRAILER_ENVIRONMENT]: env };
        let commit = await this.#o.git.findCommit(product.spec.repository, product.spec.branch, trailers);
        if (!commit) {
          // A promotion copies from the environment before; a rollback from this environment as it
          // was at the commit that last held the release before.
          const rollback = p.spec.rollback !== undefined;
          const from = rollback
            ? target
            : product.spec.environments.find((e) => e.environment === sourceEnvironment(flow.spec, flowStep))!;
          const at = rollback ? status.sourceRevision : undefined;
          const versionFile = repoPath(from.path, template.spec.version.file);
          const sources = [versionFile, ...template.spec.files.map((f) => repoPath(from.path, f.path))];
          const dests = template.spec.files.map((f) => repoPath(target.path, f.path));
          const read = await this.#o.git.read(
            product.spec.repository,
            product.spec.branch,
            rollback ? dests : [...sources, ...dests],
          );
          const copied = rollback
            ? await this.#o.git.read(product.spec.repository, product.spec.branch, sources, at)
            : read;
          const source = (path: string) => copied.files.get(path);
          // The environment before must still hold this promotion's release (a newer release
          // committed there meanwhile is a promotion of its own, never copied under this one's name).
          const held = releaseText(getField(source(versionFile), template.spec.version.jsonPath));
          if (held !== status.release)
            return void (await failStep(
              `${from.environment} now holds ${held ?? 'no release'}, not ${status.release ?? ''}: nothing of another release is copied under this promotion`,
            ));
          let changes: FileChange[];
          try {
            changes = templateChanges(template, from.path, target.path, source, (path) => read.files.get(path));
          } catch (err) {
            return void (await failStep(`the template cannot be applied: ${message(err)}`));
          }
          // A policy may ask for a dry run before the change (once per attempt: a retry runs it again).
          if (!rollback && (dryRunPolicy?.required || dryRunPolicy?.onlyTemplateChanges) && !step.dryRun) {
            let result: StepDryRun;
            try {
              result = await this.#dryRun(product, p, env, target, changes, read.head);
            } catch (err) {
              if (err instanceof PreviewError && err.transient) throw err; // asked again next round
              return void (await failStep(`the dry run its policy requires failed: ${message(err)}`));
            }
            step.dryRun = result;
            const failed = result.applications.filter((a) => a.error);
            if (failed.length > 0)
              return void (await failStep(
                `the dry run its policy requires could not preview ${failed.map((a) => `${a.application} (${a.error ?? ''})`).join(', ')}`,
              ));
            const outside = dryRunPolicy.onlyTemplateChanges ? changesOutsideTemplate(result) : [];
            if (outside.length > 0)
              return void (await failStep(
                `the policy allows only the template's changes, and what runs in ${env} would also change outside them (drift or unsynced commits): ${outside.slice(0, 10).join('; ')}${outside.length > 10 ? `; and ${outside.length - 10} more` : ''}`,
              ));
            return void (await write()); // the commit in the next round
          }
          if (changes.length > 0) {
            const msg = [
              rollback
                ? `Roll ${product.metadata.name} back to ${status.release ?? ''} in ${env}`
                : `Promote ${product.metadata.name} ${status.release ?? ''} to ${env}`,
              '',
              `Promotion ${p.metadata.name}${p.spec.requestedBy ? `, asked by ${p.spec.requestedBy}` : ''}.`,
              '',
              `${TRAILER_PROMOTION}: ${trailers[TRAILER_PROMOTION]}`,
              `${TRAILER_ENVIRONMENT}: ${env}`,
              '',
            ].join('\n');
            if (action === 'pr') {
              // Proposed on a branch of its own (found again after a restart by its trailers), merged
              // by the customer's provider: the step waits for the merge.
              const branch = proposalBranch(p, env);
              const proposed =
                (await this.#o.git.findCommit(product.spec.repository, branch, trailers, true)) ??
                (await this.#o.git.commit(
                  product.spec.repository,
                  product.spec.branch,
                  changes,
                  msg,
                  this.#o.author,
                  branch,
                ));
              if (!proposed) return; // the files hold it meanwhile: the next round finds nothing to change
              Object.assign(step, {
                phase: 'AwaitingMerge',
                proposal: { branch, commit: proposed },
                message: pullRequest
                  ? `proposed on branch ${branch}: opening its pull request into ${product.spec.branch}`
                  : `proposed on branch ${branch}: waiting for it to be merged into ${product.spec.branch} (no pullRequest provider in the policy: open the pull request in your Git provider)`,
              });
              return void (await write());
            }
            try {
              commit = await this.#o.git.commit(
                product.spec.repository,
                product.spec.branch,
                changes,
                msg,
                this.#o.author,
              );
            } catch (err) {
              if (err instanceof PromotionGitError && err.failure === 'conflict') return; // the next round recomputes
              throw err;
            }
          }
        }
        step.phase = 'Syncing';
        if (commit) step.commit = commit;
        else step.message = `${env} already holds ${status.release}`;
        // Argo CD is asked to look at Git now rather than at its next poll.
        for (const app of target.applications) await this.#refresh(app);
        return void (await write());
      }
      case 'AwaitingMerge': {
        // Merged (a merge commit, a rebase or a squash that kept the message): the trailers are on
        // the branch. Until then nothing changes; abort withdraws the proposal.
        const trailers = { [TRAILER_PROMOTION]: p.metadata.uid ?? p.metadata.name, [TRAILER_ENVIRONMENT]: env };
        const merged = await this.#o.git.findCommit(product.spec.repository, product.spec.branch, trailers);
        if (!merged) {
          if (!pullRequest || !step.proposal || step.proposal.pullRequest) return;
          // The pull request: the open one from the step's branch, found again (a restart between
          // the push and this, or between this and the status write, opens no second one), else a new one.
          let opened: { number: number; url: string; created: boolean };
          try {
            const { client, repo } = await this.#pullRequests(product, pullRequest);
            opened = await client.open(repo, {
              head: step.proposal.branch,
              base: product.spec.branch,
              title: `Promote ${product.metadata.name} ${status.release ?? ''} to ${env}`,
              body: this.#pullRequestBody(product, p, env, status.release ?? '', step.proposal.branch),
            });
          } catch (err) {
            if (!(err instanceof ProviderError)) throw err;
            const msg = `the pull request could not be opened: ${err.message}`;
            if (!err.transient) return void (await failStep(msg));
            if (step.message !== `${msg}; trying again`) {
              step.message = `${msg}; trying again`;
              await write();
            }
            return;
          }
          step.proposal.pullRequest = {
            provider: pullRequest.provider,
            number: opened.number,
            url: opened.url,
            state: 'open',
          };
          step.message = `pull request #${opened.number} (${opened.url}) waits to be merged into ${product.spec.branch}`;
          this.#o.log.info(
            { promotion: p.metadata.name, environment: env, number: opened.number, created: opened.created },
            opened.created ? 'pull request opened' : 'pull request found again',
          );
          return void (await write());
        }
        if (step.proposal?.pullRequest) step.proposal.pullRequest.state = 'merged';
        Object.assign(step, {
          phase: 'Syncing',
          commit: merged,
          mergedAt: now,
          message: `merged into ${product.spec.branch} from ${step.proposal?.pullRequest ? `pull request #${step.proposal.pullRequest.number}, ` : ''}${step.proposal?.branch ?? 'its proposal'}`,
        });
        for (const app of target.applications) await this.#refresh(app);
        return void (await write());
      }
      case 'Syncing': {
        // The sync's timeout counts from the commit (a proposal may wait long for its merge).
        const started = Date.parse(step.mergedAt ?? step.startedAt ?? now);
        const waiting: string[] = [];
        for (const name of target.applications) {
          const app = await this.#application(name);
          if (!app) {
            waiting.push(`${name} (no such Application)`);
            continue;
          }
          const st = app.status ?? {};
          const at = st.sync?.revision ?? '';
          const reached = step.commit ? at === step.commit || (await this.#contains(product, at, step.commit)) : true;
          const op = st.operationState;
          const opRevision = op?.syncResult?.revision ?? '';
          const opReached = step.commit
            ? opRevision === step.commit || (await this.#contains(product, opRevision, step.commit))
            : false;
          if (opReached && (op?.phase === 'Failed' || op?.phase === 'Error'))
            return void (await failStep(
              `${name}: Argo CD's sync ${op.phase.toLowerCase()}: ${op.message ?? ''}`.trim(),
            ));
          if (degradedAt(app, reached)) return void (await failStep(degradedReason(name, app)));
          if (!(reached && st.sync?.status === 'Synced' && st.health?.status === 'Healthy'))
            waiting.push(
              `${name} (${st.sync?.status ?? 'Unknown'}/${st.health?.status ?? 'Unknown'} at ${at.slice(0, 12) || 'no revision'})`,
            );
        }
        if (waiting.length === 0) {
          step.phase = post ? 'PostAction' : 'Succeeded';
          if (post) step.postAction = { workflow: workflowName(p, env, 'post', attempt) };
          else step.finishedAt = now;
          delete step.message;
          return void (await write());
        }
        if (Date.now() - started > timeout * 1000)
          return void (await failStep(`not synced and healthy within ${timeout} s: ${waiting.join(', ')}`));
        const msg = `waiting for ${waiting.join(', ')}`;
        if (step.message !== msg) {
          step.message = msg;
          await write();
        }
        return;
      }
      default:
        return;
    }
  }

  /**
   * One round of a dry run: the next environment's change previewed (steps go Pending → Succeeded
   * with their `dryRun`, or Failed when it cannot be computed); at the end, and on abort, every
   * scratch branch is deleted again (one a crash left behind included).
   */
  async #advanceDryRun(
    product: Product,
    flow: PromotionFlow,
    template: PromotionTemplate,
    p: Promotion,
    status: NonNullable<Promotion['status']>,
    index: number,
  ): Promise<void> {
    const steps = status.steps ?? [];
    const now = this.#now().toISOString();
    if (p.spec.abort || index < 0) {
      for (const s of steps) await this.#o.git.deleteBranch(product.spec.repository, scratchBranch(p, s.environment));
      if (p.spec.abort) for (const s of steps) if (!['Succeeded', 'Failed'].includes(s.phase)) s.phase = 'Skipped';
      const failed = steps.filter((s) => s.phase === 'Failed');
      const outside = steps.filter((s) => s.dryRun && changesOutsideTemplate(s.dryRun).length > 0);
      Object.assign(status, {
        phase: p.spec.abort ? 'Aborted' : failed.length > 0 ? 'Failed' : 'Succeeded',
        finishedAt: now,
        message: p.spec.abort
          ? 'dry run aborted; nothing was changed'
          : failed.length > 0
            ? `dry run: ${failed.map((s) => `${s.environment}: ${s.message ?? 'failed'}`).join('; ')}`
            : `dry run of ${status.release ?? ''}: ${steps.map((s) => `${s.environment} ${dryRunCount(s.dryRun)}`).join(', ')}${outside.length > 0 ? `; changes outside the template in ${outside.map((s) => s.environment).join(', ')}` : ''}; nothing was changed`,
      });
      return void (await this.#writeStatus(pluralOf(p), p, status));
    }
    const step = steps[index]!;
    const env = step.environment;
    const target = product.spec.environments.find((e) => e.environment === env)!;
    // Every step copies the trigger environment's fields: what each environment before would hold
    // after its own step (the release).
    const from = product.spec.environments.find((e) => e.environment === flow.spec.triggerEnvironment)!;
    const versionFile = repoPath(from.path, template.spec.version.file);
    const sources = [versionFile, ...template.spec.files.map((f) => repoPath(from.path, f.path))];
    const dests = template.spec.files.map((f) => repoPath(target.path, f.path));
    const read = await this.#o.git.read(product.spec.repository, product.spec.branch, [...sources, ...dests]);
    const fail = (msg: string) => {
      Object.assign(step, { phase: 'Failed', startedAt: step.startedAt ?? now, finishedAt: now, message: msg });
      return this.#writeStatus(pluralOf(p), p, status);
    };
    const held = releaseText(getField(read.files.get(versionFile), template.spec.version.jsonPath));
    if (held !== status.release)
      return void (await fail(`${from.environment} now holds ${held ?? 'no release'}, not ${status.release ?? ''}`));
    let changes: FileChange[];
    try {
      changes = templateChanges(
        template,
        from.path,
        target.path,
        (x) => read.files.get(x),
        (x) => read.files.get(x),
      );
    } catch (err) {
      return void (await fail(`the template cannot be applied: ${message(err)}`));
    }
    let result: StepDryRun;
    try {
      result = await this.#dryRun(product, p, env, target, changes, read.head);
    } catch (err) {
      if (err instanceof PreviewError && err.transient) throw err;
      return void (await fail(`the dry run failed: ${message(err)}`));
    }
    const outside = changesOutsideTemplate(result);
    Object.assign(step, {
      phase: 'Succeeded',
      startedAt: step.startedAt ?? now,
      finishedAt: now,
      dryRun: result,
      message:
        (changes.length === 0 ? `${env} already holds ${status.release ?? ''} in Git; ` : '') +
        (outside.length > 0
          ? `would also change outside the template's fields (drift or unsynced commits): ${outside.slice(0, 5).join('; ')}${outside.length > 5 ? `; and ${outside.length - 5} more` : ''}`
          : `would change ${dryRunCount(result)}`),
    });
    await this.#writeStatus(pluralOf(p), p, status);
  }

  /**
   * The step's change committed on its scratch branch (never the product's), each application
   * previewed there by the Source Server, the branch deleted again (also when the preview fails).
   * Without a change, the applications are previewed at the branch's head.
   */
  async #dryRun(
    product: Product,
    p: Promotion,
    env: string,
    target: ProductEnvironment,
    changes: FileChange[],
    head: string,
  ): Promise<StepDryRun> {
    const preview = this.#o.preview;
    if (!preview) throw new Error('the runtime has no Source Server to preview with (SOURCE_SERVER_URL)');
    const branch = scratchBranch(p, env);
    let commit: string | undefined;
    try {
      if (changes.length > 0)
        commit = await this.#o.git.commit(
          product.spec.repository,
          product.spec.branch,
          changes,
          [
            `Dry run: ${product.metadata.name} ${p.status?.release ?? ''} in ${env}`,
            '',
            `${isPreview(p) ? 'Preview' : 'Promotion'} ${p.metadata.name}. A scratch commit, previewed and deleted; never merged.`,
            '',
          ].join('\n'),
          this.#o.author,
          branch,
        );
      const applications = [];
      for (const app of target.applications) {
        try {
          applications.push(boundPreview(app, await preview(app, commit ?? head)));
        } catch (err) {
          if (err instanceof PreviewError && err.transient) throw err;
          applications.push({ application: app, resources: [], error: message(err).slice(0, 500) });
        }
      }
      return {
        at: this.#now().toISOString(),
        ...(commit ? { commit } : {}),
        files: changes.map((c) => c.path),
        applications,
      };
    } finally {
      if (commit) await this.#o.git.deleteBranch(product.spec.repository, branch);
    }
  }

  /** Aborted: the running step's pushed change reverted (exactly once), the rest skipped. */
  async #abort(
    product: Product,
    p: Promotion,
    status: NonNullable<Promotion['status']>,
    index: number,
    allPolicies: PromotionPolicy[],
  ): Promise<void> {
    const steps = status.steps ?? [];
    const now = this.#now().toISOString();
    const step: StepStatus | undefined = index >= 0 ? steps[index] : undefined;
    if (step) {
      const trailers = { [TRAILER_REVERT]: `${p.metadata.uid ?? p.metadata.name}/${step.environment}` };
      const commit =
        step.commit ??
        (await this.#o.git.findCommit(product.spec.repository, product.spec.branch, {
          [TRAILER_PROMOTION]: p.metadata.uid ?? p.metadata.name,
          [TRAILER_ENVIRONMENT]: step.environment,
        }));
      if (commit) {
        let revert = await this.#o.git.findCommit(product.spec.repository, product.spec.branch, trailers);
        if (!revert) {
          try {
            revert = await this.#o.git.revert(
              product.spec.repository,
              product.spec.branch,
              commit,
              [
                `Revert the promotion of ${product.metadata.name} ${status.release ?? ''} to ${step.environment}`,
                '',
                `Promotion ${p.metadata.name} was aborted.`,
                '',
                `${TRAILER_REVERT}: ${trailers[TRAILER_REVERT]}`,
                '',
              ].join('\n'),
              this.#o.author,
            );
          } catch (err) {
            if (err instanceof PromotionGitError && err.failure === 'conflict') return;
            throw err;
          }
        }
        if (revert) step.revert = revert;
        step.commit = commit;
      } else if (step.proposal) {
        const provider = policiesFor(allPolicies, product.metadata.name, step.environment).find(
          (x) => x.spec.pullRequest,
        )?.spec.pullRequest;
        if (provider) {
          // Its pull request closed (the one recorded, or one opened before a restart and found by its branch).
          try {
            const { client, repo } = await this.#pullRequests(product, provider);
            const number =
              step.proposal.pullRequest?.number ??
              (await client.find(repo, step.proposal.branch, product.spec.branch))?.number;
            if (number !== undefined) {
              const closed = await client.close(repo, number);
              step.proposal.pullRequest = { provider: provider.provider, number, url: closed.url, state: closed.state };
            }
          } catch (err) {
            if (!(err instanceof ProviderError)) throw err;
            if (err.transient) {
              const msg = `aborting: its pull request could not be closed yet: ${err.message}; trying again`;
              if (step.message !== msg) {
                step.message = msg;
                await this.#writeStatus('promotions', p, status);
              }
              return;
            }
            step.message = `its pull request could not be closed: ${err.message}`;
          }
        }
        await this.#o.git.deleteBranch(product.spec.repository, step.proposal.branch);
      }
      Object.assign(step, {
        phase: 'Aborted',
        finishedAt: now,
        message: commit
          ? `aborted; its commit reverted`
          : step.proposal
            ? `aborted; its proposal withdrawn (${step.proposal.pullRequest?.state === 'closed' ? `pull request #${step.proposal.pullRequest.number} closed, ` : ''}branch ${step.proposal.branch} deleted)${step.message?.startsWith('its pull request could not be closed') ? `; ${step.message}` : ''}`
            : 'aborted',
      });
    }
    for (const s of steps) if (s.phase === 'Pending') s.phase = 'Skipped';
    Object.assign(status, {
      phase: 'Aborted',
      finishedAt: now,
      message: `aborted${step ? ` during ${step.environment}` : ''}`,
    });
    await this.#writeStatus(pluralOf(p), p, status);
  }

  /** The provider's client for the product's repository, its token the repository credentials' password. */
  async #pullRequests(
    product: Product,
    provider: NonNullable<PromotionPolicy['spec']['pullRequest']>,
  ): Promise<{ client: PullRequestClient; repo: RepoRef }> {
    const repo = provider.repository
      ? { owner: provider.repository.split('/').slice(0, -1).join('/'), name: provider.repository.split('/').at(-1)! }
      : repoRef(product.spec.repository);
    const creds = await this.#o.credentials?.(product.spec.repository);
    if (!creds?.password)
      throw new ProviderError(
        `no repository credentials Secret for ${product.spec.repository} gives a token (its password) for ${provider.provider}`,
        undefined,
        false,
      );
    const client = new PullRequestClient({
      kind: provider.provider,
      apiUrl: provider.apiUrl,
      token: creds.password,
      ...this.#o.pullRequestClient,
    });
    return { client, repo };
  }

  #pullRequestBody(product: Product, p: Promotion, env: string, release: string, branch: string): string {
    const link = this.#o.productLinkBase
      ? `${this.#o.productLinkBase.replace(/\/+$/, '')}/${product.metadata.name}`
      : undefined;
    return [
      `Promotion \`${p.metadata.name}\` of product \`${product.metadata.name}\`: release \`${release}\` to environment \`${env}\`${p.spec.requestedBy ? `, asked by ${p.spec.requestedBy}` : ''}.`,
      '',
      `Merging this pull request into \`${product.spec.branch}\` continues the promotion; aborting the promotion closes it and deletes the branch \`${branch}\`.`,
      '',
      link ? `The promotion: ${link}` : `The promotion: \`promotions get <tenant> ${p.metadata.name}\``,
      '',
      'Opened by the GitOps Operator.',
    ].join('\n');
  }

  // ---------------------------------------------------------------- Kubernetes

  /** The objects of a kind in the namespace; `optional`: a kind whose CRD is not installed lists as none. */
  async #list<T>(plural: string, optional = false): Promise<T[]> {
    const res = await this.#o.kube.request(`${this.#base}/${plural}`);
    if (optional && res.status === 404) return [];
    if (res.status !== 200) throw new Error(`listing ${plural}: HTTP ${res.status}`);
    return (res.body as { items?: T[] }).items ?? [];
  }

  async #writeStatus(
    plural: string,
    obj: { metadata: { name: string; resourceVersion?: string } },
    status: unknown,
  ): Promise<void> {
    const body = { ...(obj as Obj), status };
    const res = await this.#o.kube.request(`${this.#base}/${plural}/${obj.metadata.name}/status`, {
      method: 'PUT',
      body,
    });
    if (res.status === 409) return; // changed meanwhile: read again next round
    if (res.status !== 200) throw new Error(`writing the status of ${plural}/${obj.metadata.name}: HTTP ${res.status}`);
    obj.metadata.resourceVersion = (res.body as { metadata?: { resourceVersion?: string } }).metadata?.resourceVersion;
  }

  async #application(name: string): Promise<Application | undefined> {
    const res = await this.#o.kube.request(
      `/apis/argoproj.io/v1alpha1/namespaces/${this.#o.namespace}/applications/${name}`,
    );
    if (res.status === 404) return undefined;
    if (res.status !== 200) throw new Error(`reading Application ${name}: HTTP ${res.status}`);
    return res.body as Application;
  }

  async #refresh(name: string): Promise<void> {
    await this.#o.kube.request(`/apis/argoproj.io/v1alpha1/namespaces/${this.#o.namespace}/applications/${name}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { metadata: { annotations: { 'argocd.argoproj.io/refresh': 'normal' } } },
    });
  }

  async #contains(product: Product, revision: string, commit: string): Promise<boolean> {
    if (!revision) return false;
    return this.#o.git.contains(product.spec.repository, product.spec.branch, revision, commit);
  }

  /** The Workflow of an action: created from its template once, then its phase. */
  async #workflow(
    name: string,
    template: string,
    p: Promotion,
    environment: string,
    release: string,
    hook?: HookName,
  ): Promise<{ phase?: string; message?: string }> {
    const path = `/apis/argoproj.io/v1alpha1/namespaces/${this.#o.namespace}/workflows`;
    let res = await this.#o.kube.request(`${path}/${name}`);
    if (res.status === 404) {
      const created = await this.#o.kube.request(path, {
        method: 'POST',
        body: {
          apiVersion: ARGO,
          kind: 'Workflow',
          metadata: {
            name,
            namespace: this.#o.namespace,
            labels: {
              [`${PROMOTIONS_GROUP}/promotion`]: p.metadata.name,
              [`${PROMOTIONS_GROUP}/environment`]: environment,
              ...(hook ? { [`${PROMOTIONS_GROUP}/hook`]: hook } : {}),
            },
          },
          spec: {
            workflowTemplateRef: { name: template },
            arguments: {
              parameters: [
                { name: 'product', value: p.spec.product },
                { name: 'environment', value: environment },
                { name: 'release', value: release },
                { name: 'promotion', value: p.metadata.name },
              ],
            },
          },
        },
      });
      if (created.status !== 201 && created.status !== 409)
        throw new Error(`creating Workflow ${name}: HTTP ${created.status}`);
      res = await this.#o.kube.request(`${path}/${name}`);
    }
    if (res.status !== 200) throw new Error(`reading Workflow ${name}: HTTP ${res.status}`);
    const st = (res.body as { status?: { phase?: string; message?: string } }).status ?? {};
    return { ...(st.phase ? { phase: st.phase } : {}), ...(st.message ? { message: st.message } : {}) };
  }

  /**
   * Starts the flow's `hook` Workflow for this attempt of the promotion, once (its name is derived
   * from both: found again after a restart), without waiting for it. Answers the promotion's hooks
   * with it added, or undefined when the flow has no such hook or it was started already.
   */
  async #hook(
    flow: PromotionFlow,
    hook: HookName,
    p: Promotion,
    release: string,
    environment: string,
    started: PromotionStatus['hooks'],
  ): Promise<PromotionStatus['hooks'] | undefined> {
    const action = flow.spec.hooks?.[hook];
    if (!action) return undefined;
    const attempt = p.spec.retry ?? 0;
    const name = hookWorkflowName(p, hook, attempt);
    if (started?.some((h) => h.workflow === name)) return undefined;
    try {
      await this.#workflow(name, action.workflowTemplate, p, environment, release, hook);
    } catch (err) {
      // A hook never holds a promotion up: its failure to start is logged, and recorded as such.
      this.#o.log.warn({ promotion: p.metadata.name, hook, err: message(err) }, 'hook Workflow not started');
    }
    return [...(started ?? []), { hook, workflow: name }];
  }

  /** Holds or takes the operator's Lease; false while another live operator holds it. */
  async #lease(): Promise<boolean> {
    const path = `/apis/coordination.k8s.io/v1/namespaces/${this.#o.namespace}/leases`;
    const seconds = this.#o.leaseSeconds ?? 15;
    const now = this.#now();
    const spec = {
      holderIdentity: this.#o.identity,
      leaseDurationSeconds: seconds,
      renewTime: now.toISOString().replace(/Z$/, '000Z'),
    };
    const res = await this.#o.kube.request(`${path}/${LEASE_NAME}`);
    if (res.status === 404) {
      const created = await this.#o.kube.request(path, {
        method: 'POST',
        body: {
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { name: LEASE_NAME },
          spec: { ...spec, acquireTime: spec.renewTime },
        },
      });
      return created.status === 201;
    }
    if (res.status !== 200) throw new Error(`reading Lease ${LEASE_NAME}: HTTP ${res.status}`);
    const lease = res.body as {
      metadata: Obj;
      spec?: { holderIdentity?: string; renewTime?: string; leaseDurationSeconds?: number };
    };
    const holder = lease.spec?.holderIdentity;
    const renewed = Date.parse(lease.spec?.renewTime ?? '') || 0;
    const expired = now.getTime() - renewed > (lease.spec?.leaseDurationSeconds ?? seconds) * 1000;
    if (holder !== this.#o.identity && !expired) return false;
    const put = await this.#o.kube.request(`${path}/${LEASE_NAME}`, {
      method: 'PUT',
      body: {
        ...lease,
        spec: { ...lease.spec, ...spec, ...(holder !== this.#o.identity ? { acquireTime: spec.renewTime } : {}) },
      },
    });
    return put.status === 200;
  }
}

/**
 * The files of the environment at `targetPath` with the template's fields copied from those at
 * `fromPath` (only the files that change); an error names a missing file or field.
 */
export function templateChanges(
  template: PromotionTemplate,
  fromPath: string,
  targetPath: string,
  source: (path: string) => string | undefined,
  dest: (path: string) => string | undefined,
): FileChange[] {
  const changes: FileChange[] = [];
  for (const f of template.spec.files) {
    const srcPath = repoPath(fromPath, f.path);
    const src = source(srcPath);
    const dstPath = repoPath(targetPath, f.path);
    let dst = dest(dstPath);
    if (src === undefined) throw new Error(`${srcPath} does not exist`);
    if (dst === undefined) throw new Error(`${dstPath} does not exist`);
    for (const jp of f.jsonPaths) {
      const v = getField(src, jp);
      if (v === undefined) throw new Error(`${srcPath} has no ${jp}`);
      if (JSON.stringify(getField(dst, jp)) !== JSON.stringify(v)) dst = setField(dst, jp, v);
    }
    if (dst !== dest(dstPath)) changes.push({ path: dstPath, content: dst });
  }
  return changes;
}

/** A Promotion's name for a product's release (a DNS label of at most 63 characters). */
export function promotionName(product: string, release: string): string {
  const slug = release
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 20);
  const hash = createHash('sha256').update(`${product}\0${release}`).digest('hex').slice(0, 8);
  return `${product.slice(0, 30)}-${slug ? `${slug}-` : ''}${hash}`;
}

/** The branch a `pr` step proposes its change on: the operator's own, one per promotion and environment. */
export function proposalBranch(p: Promotion, environment: string): string {
  return `promotions/${p.metadata.name}/${environment}`;
}

/** The Workflow of a flow's hook for one attempt of a promotion. */
function hookWorkflowName(p: Promotion, hook: HookName, attempt: number): string {
  const hash = createHash('sha256')
    .update(`${p.metadata.uid ?? p.metadata.name}\0${hook}\0${attempt}`)
    .digest('hex')
    .slice(0, 10);
  return `promotion-hook-${hook.toLowerCase()}-${hash}`;
}

/** The Workflow of a step's action in one attempt (a retry makes new ones). */
function workflowName(p: Promotion, environment: string, which: 'pre' | 'post', attempt: number): string {
  const hash = createHash('sha256')
    .update(`${p.metadata.uid ?? p.metadata.name}\0${environment}\0${which}\0${attempt}`)
    .digest('hex')
    .slice(0, 10);
  return `promotion-${which}-${environment.slice(0, 20)}-${hash}`;
}

/** `3 resources` (a dry run's count over its applications). */
function dryRunCount(d: StepDryRun | undefined): string {
  if (!d) return 'not previewed';
  const n = d.applications.reduce((k, a) => k + a.resources.length + (a.moreResources ?? 0), 0);
  return `${n} resource${n === 1 ? '' : 's'}`;
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Step phases that end a step. */
const FINAL_STEP_PHASES: readonly StepStatus['phase'][] = ['Succeeded', 'Failed', 'Aborted', 'Skipped'];

/** A PromotionPreview (a promotion's dry run), as the engine lists it beside the Promotions. */
function isPreview(p: Promotion): boolean {
  return p.kind === 'PromotionPreview';
}

/** The plural of a promotion's or a preview's kind (where its status is written). */
function pluralOf(p: Promotion): 'promotions' | 'promotionpreviews' {
  return isPreview(p) ? 'promotionpreviews' : 'promotions';
}
