/**
 * Promotions (docs/promotions.md): the GitOps Operator's custom resources, group
 * `promotions.hosted-runtimes.io`, version v1alpha1, kept in the customer's Git configuration
 * repository and applied by Argo CD like everything else. Plain types and pure checks, shared by
 * the operator (runtime/agents/gitops-operator) and the CRDs (runtime/component/promotion-crds.ts).
 *
 *  - Environment: a stage a release goes through (`kind: PROD | NON_PROD`).
 *  - Product: a group of Argo CD Applications released together; per environment, the directory
 *    of the configuration repository that holds its version there and the Applications that deploy
 *    it; the flow and template its promotions follow.
 *  - PromotionTemplate: what a product's release is (one field of one file: `version`) and what a
 *    promotion copies from the environment before (fields of files, by a JSON path).
 *  - PromotionFlow: the trigger environment and the steps after it, each with `dependsOn`.
 *  - PromotionPolicy: for the products and environments it selects, the action (`commit` the
 *    change to the branch, `pr`: propose it on a branch of its own for the provider to merge, or
 *    `no-commit`: a gate only) and the pre- and post-action (an Argo
 *    Workflow from a WorkflowTemplate; its result decides).
 *  - Promotion: one release of a product moved through the flow; its status is the operator's
 *    whole state (crash-safe: every step idempotent, docs/promotions.md "Crashes").
 *  - PromotionPreview: a dry run of a promotion (each environment's change previewed, nothing
 *    changed). A kind of its own, not a Promotion flag, so that an operator that predates previews
 *    (and does not watch the kind) can never run one as a real promotion.
 */

export const PROMOTIONS_GROUP = 'promotions.hosted-runtimes.io';
export const PROMOTIONS_VERSION = 'v1alpha1';
export const PROMOTIONS_API_VERSION = `${PROMOTIONS_GROUP}/${PROMOTIONS_VERSION}`;

export const PROMOTION_KINDS = {
  Environment: 'environments',
  Product: 'products',
  PromotionTemplate: 'promotiontemplates',
  PromotionFlow: 'promotionflows',
  PromotionPolicy: 'promotionpolicies',
  Promotion: 'promotions',
  PromotionPreview: 'promotionpreviews',
} as const;
export type PromotionKind = keyof typeof PROMOTION_KINDS;

/** Commit trailers that make every Git change of a promotion findable (exactly once in Git). */
export const TRAILER_PROMOTION = 'Promotion-Id';
export const TRAILER_ENVIRONMENT = 'Promotion-Environment';
export const TRAILER_REVERT = 'Promotion-Revert';

export interface Metadata {
  name: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

export interface EnvironmentSpec {
  kind: 'PROD' | 'NON_PROD';
}

export interface ProductEnvironment {
  environment: string;
  /** The directory of the repository that holds the product's files in this environment. */
  path: string;
  /** Argo CD Applications (in Argo CD's namespace) deploying the product there. */
  applications: string[];
}

export interface ProductSpec {
  /** The configuration repository (http or https; its credentials are Argo CD's repository Secret). */
  repository: string;
  branch: string;
  template: string;
  flow: string;
  environments: ProductEnvironment[];
}

export interface ReleaseInEnvironment {
  environment: string;
  /** The version the template's `version` field holds there at the branch's head. */
  release?: string;
  /** The head the release was read at. */
  revision?: string;
}

export interface ProductStatus {
  environments?: ReleaseInEnvironment[];
  /** The last trigger-environment release a promotion was started for. */
  lastTriggeredRelease?: string;
  observedAt?: string;
}

export interface FieldRef {
  /** A file under the environment's path. */
  file: string;
  /** `$.a.b[0].c`: keys and list indexes. */
  jsonPath: string;
}

export interface PromotionTemplateSpec {
  version: FieldRef;
  files: Array<{ path: string; jsonPaths: string[] }>;
}

export interface FlowStep {
  environment: string;
  /** Default: the trigger environment. */
  dependsOn?: string[];
}

export type HookName = 'onStart' | 'onSuccess' | 'onFail';

export interface PromotionFlowSpec {
  triggerEnvironment: string;
  steps: FlowStep[];
  /**
   * Workflows run when a promotion starts, succeeds or fails (notifications, tickets): started once
   * each, never waited for and never a gate.
   */
  hooks?: Partial<Record<HookName, WorkflowAction>>;
}

export interface WorkflowAction {
  /** A WorkflowTemplate in Argo CD's namespace (the operator's): the Workflow is made from it. */
  workflowTemplate: string;
}

export interface PromotionPolicySpec {
  selector?: { products?: string[]; environments?: string[] };
  /**
   * `commit` the change to the branch; `pr`: push it to a branch of its own
   * (`promotions/<promotion>/<environment>`) for the customer's provider to merge, and go on once
   * it is merged; `no-commit`: a gate only.
   */
  action: 'commit' | 'pr' | 'no-commit';
  /**
   * `action: pr`: the Git provider whose API the operator opens (and on abort closes) the pull
   * request in. The token is the password of the repository's credentials Secret (the Argo CD
   * repository Secret the operator pushes with). Absent: the branch is pushed and the customer
   * opens the pull request.
   */
  pullRequest?: PullRequestProvider;
  preAction?: WorkflowAction;
  postAction?: WorkflowAction;
  /** Longest wait for the applications to be synced and healthy (default 900). */
  syncTimeoutSeconds?: number;
  /**
   * A dry run before the step's commit (after its pre-action): `required` previews the step's
   * change in each of the environment's applications (recorded in the step's `dryRun`);
   * `onlyTemplateChanges` (implies `required`) fails the step when what runs there would change
   * in ways the promotion's Git change does not cause (drift, commits not synced yet).
   */
  dryRun?: { required?: boolean; onlyTemplateChanges?: boolean };
}

export interface PullRequestProvider {
  /** `github` (REST v3), `gitea` (Gitea and Forgejo, API v1), `gitlab` (merge requests, API v4). */
  provider: 'github' | 'gitea' | 'gitlab';
  /** The API's base URL: `https://api.github.com`, `https://HOST/api/v3`, `https://HOST/api/v1`, `https://HOST/api/v4`. */
  apiUrl: string;
  /** The repository there as `owner/name` (GitLab: `group/subgroup/name`); default: the path of the product's repository URL. */
  repository?: string;
}

/** A pull request the operator opened for a step (its provider's number and page). */
export interface StepPullRequest {
  provider: 'github' | 'gitea' | 'gitlab';
  number: number;
  url: string;
  /** `closed`: the promotion was aborted and its pull request closed. */
  state?: 'open' | 'closed' | 'merged';
}

export interface PromotionSpec {
  product: string;
  /** The release to promote; default: what the trigger environment holds at the branch's head. */
  release?: string;
  /** Who asked (a user, `api`, `trigger`). */
  requestedBy?: string;
  /** Set true to stop at the next safe point; a change already pushed for the running step is reverted. */
  abort?: boolean;
  /** Raised by one to run a failed promotion again from its failed step. */
  retry?: number;
  /**
   * Roll this environment back to the release it held before its current one (the newest earlier
   * release in the environment's Git history), as a promotion of one step; not the trigger
   * environment (a change there is a new release to promote).
   */
  rollback?: { environment: string };
  /**
   * Refused: the former way to ask for a dry run, which an operator that predates dry runs would
   * ignore (running a real promotion). The CRD rejects `true`, and the operator fails a Promotion
   * that has it without running it; a dry run is a PromotionPreview.
   */
  dryRun?: boolean;
}

/**
 * A dry run of a promotion (docs/promotions.md "Previews"): every step of the flow computes its Git
 * change, commits it on a scratch branch (`promotions/<preview>/dry-run/<environment>`, deleted
 * again) and records what it would change in each application (`status.steps[].dryRun`); nothing is
 * pushed to the product's branch, nothing syncs, no action or hook runs.
 */
export interface PromotionPreviewSpec {
  product: string;
  /** The release to preview; default: what the trigger environment holds at the branch's head. */
  release?: string;
  /** Who asked (a user's key id, `api`). */
  requestedBy?: string;
  /** Set true to stop it at the next round (its scratch branches are deleted). */
  abort?: boolean;
}

/** The previews kept per product once finished: the operator deletes the oldest beyond this. */
export const MAX_FINISHED_PREVIEWS = 10;

/** The message the operator fails a Promotion with `spec.dryRun` with (it never runs it). */
export const DRY_RUN_PROMOTION_REFUSED =
  'spec.dryRun is not supported on a Promotion: a dry run is a PromotionPreview (promotions.hosted-runtimes.io/v1alpha1); this Promotion was not run and changed nothing';

export type PromotionPhase = 'Pending' | 'Running' | 'Succeeded' | 'Failed' | 'Aborted' | 'Superseded';
export type StepPhase =
  | 'Pending'
  | 'PreAction'
  | 'Committing'
  | 'AwaitingMerge'
  | 'Syncing'
  | 'PostAction'
  | 'Succeeded'
  | 'Failed'
  | 'Aborted'
  | 'Skipped';

export interface ActionStatus {
  workflow: string;
  phase?: string;
  message?: string;
}

export interface StepStatus {
  environment: string;
  phase: StepPhase;
  /** The commit that changed the environment (absent: no change was needed, or no-commit). */
  commit?: string;
  /** Its revert, when the promotion was aborted during this step. */
  revert?: string;
  /** `action: pr`: the branch the change was proposed on and its commit, until it is merged. */
  proposal?: { branch: string; commit: string; pullRequest?: StepPullRequest };
  /** When the proposal was found merged (the sync's timeout counts from then). */
  mergedAt?: string;
  startedAt?: string;
  finishedAt?: string;
  message?: string;
  preAction?: ActionStatus;
  postAction?: ActionStatus;
  /** A dry run's result for this environment (a dry-run promotion, or a policy that requires one). */
  dryRun?: StepDryRun;
}

/** Resources kept per application, and fields per resource, in a dry run's result (the rest counted). */
export const MAX_DRY_RUN_RESOURCES = 20;
export const MAX_DRY_RUN_FIELDS = 10;

/** One resource of a dry run: how it would change from what runs now (the Source Server's preview). */
export interface DryRunResource {
  group?: string;
  kind: string;
  namespace: string;
  name: string;
  action: 'added' | 'removed' | 'modified';
  fields: string[];
  /** How many more fields changed than `fields` names. */
  moreFields?: number;
  /** Fields the promotion's Git change does not cause (`['.']`: the whole resource); see sources.ts PreviewResource. */
  notFromChange?: string[];
}

export interface DryRunApplication {
  application: string;
  /** The revision Argo CD synced it to when it was previewed. */
  current?: string;
  resources: DryRunResource[];
  /** How many more resources would change than `resources` lists. */
  moreResources?: number;
  /** Why it could not be previewed. */
  error?: string;
}

export interface StepDryRun {
  at: string;
  /** The scratch commit previewed (its branch deleted afterwards); absent: the files already hold the release. */
  commit?: string;
  /** The files the step's commit would change. */
  files: string[];
  applications: DryRunApplication[];
}

/**
 * The changes of a dry run its Git change does not cause, one line each
 * (`shop-prod-api: ConfigMap shop-prod/shop-api data.color`); empty when there are none.
 */
export function changesOutsideTemplate(d: StepDryRun): string[] {
  const out: string[] = [];
  for (const app of d.applications)
    for (const r of app.resources) {
      if (!r.notFromChange?.length) continue;
      const what = `${r.kind} ${r.namespace ? `${r.namespace}/` : ''}${r.name}`;
      out.push(
        r.notFromChange.includes('.')
          ? `${app.application}: ${what} ${r.action === 'added' ? 'missing from' : r.action === 'removed' ? 'only in' : 'differs in'} the cluster`
          : `${app.application}: ${what} ${r.notFromChange.join(', ')}`,
      );
    }
  return out;
}

export interface PromotionStatus {
  phase?: PromotionPhase;
  release?: string;
  /** The trigger environment's head the release was read at (a rollback: the commit it restores). */
  sourceRevision?: string;
  /** A rollback: the release the environment held when it started. */
  rollbackFrom?: string;
  startedAt?: string;
  finishedAt?: string;
  message?: string;
  steps?: StepStatus[];
  /** The spec.retry value handled last. */
  observedRetry?: number;
  /** The flow's hooks started for this promotion (one per hook and attempt). */
  hooks?: Array<{ hook: HookName; workflow: string }>;
}

export interface Resource<S, T = unknown> {
  apiVersion: string;
  kind: string;
  metadata: Metadata;
  spec: S;
  status?: T;
}

export type Product = Resource<ProductSpec, ProductStatus>;
export type PromotionTemplate = Resource<PromotionTemplateSpec>;
export type PromotionFlow = Resource<PromotionFlowSpec>;
export type PromotionPolicy = Resource<PromotionPolicySpec>;
export type Promotion = Resource<PromotionSpec, PromotionStatus>;
/** A preview's status has the shape of a promotion's: its steps carry their `dryRun`. */
export type PromotionPreview = Resource<PromotionPreviewSpec, PromotionStatus>;
export type Environment = Resource<EnvironmentSpec>;

export const FINAL_PHASES: readonly PromotionPhase[] = ['Succeeded', 'Failed', 'Aborted', 'Superseded'];

/** A JSON path of the subset templates use, as keys and indexes; an error names what is wrong. */
export function parseJsonPath(path: string): Array<string | number> {
  if (!path.startsWith('$')) throw new Error(`JSON path '${path}' does not start with $`);
  const out: Array<string | number> = [];
  const re = /\.([A-Za-z0-9_-]+)|\[(\d+)\]|\['([^'\]]+)'\]/y;
  let i = 1;
  while (i < path.length) {
    re.lastIndex = i;
    const m = re.exec(path);
    if (!m) throw new Error(`JSON path '${path}' has an unsupported part at '${path.slice(i)}'`);
    out.push(m[1] ?? m[3] ?? Number(m[2]));
    i = re.lastIndex;
  }
  if (out.length === 0) throw new Error(`JSON path '${path}' names no field`);
  return out;
}

/**
 * The steps of a flow in the order the operator runs them (each after every one it depends on),
 * or an error naming the cycle or the unknown environment.
 */
export function orderSteps(flow: PromotionFlowSpec): FlowStep[] {
  const names = new Set(flow.steps.map((s) => s.environment));
  if (names.has(flow.triggerEnvironment))
    throw new Error(`the trigger environment '${flow.triggerEnvironment}' cannot also be a step`);
  if (names.size !== flow.steps.length) throw new Error('an environment is a step twice');
  const deps = (s: FlowStep) => s.dependsOn ?? [flow.triggerEnvironment];
  for (const s of flow.steps)
    for (const d of deps(s))
      if (d !== flow.triggerEnvironment && !names.has(d))
        throw new Error(`step '${s.environment}' depends on '${d}', which is neither a step nor the trigger`);
  const done = new Set([flow.triggerEnvironment]);
  const out: FlowStep[] = [];
  while (out.length < flow.steps.length) {
    const next = flow.steps.find((s) => !done.has(s.environment) && deps(s).every((d) => done.has(d)));
    if (!next) throw new Error('the steps depend on each other in a cycle');
    out.push(next);
    done.add(next.environment);
  }
  return out;
}

/** The environment a step copies the release from: the first it depends on. */
export function sourceEnvironment(flow: PromotionFlowSpec, step: FlowStep): string {
  return step.dependsOn?.[0] ?? flow.triggerEnvironment;
}

/** The policies that apply to a product's step (all of them, in name order; the first with an action decides it). */
export function policiesFor(policies: PromotionPolicy[], product: string, environment: string): PromotionPolicy[] {
  return policies
    .filter((p) => {
      const s = p.spec.selector ?? {};
      return (
        (s.products === undefined || s.products.length === 0 || s.products.includes(product)) &&
        (s.environments === undefined || s.environments.length === 0 || s.environments.includes(environment))
      );
    })
    .sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
}

// ---- what the event reporter reports of them (runtime/protocol/events.ts) ----

/** Product (promotions): the release each environment holds, as the GitOps Operator found it in Git. */
export interface ProductSummary {
  flow?: string; // spec.flow
  environments?: { environment: string; release?: string; revision?: string }[]; // status.environments
}

/** Promotion: one release of a product moved through its flow, step by step. */
export interface PromotionSummary {
  product?: string; // spec.product
  release?: string; // status.release (else spec.release)
  phase?: string; // status.phase: Pending | Running | Succeeded | Failed | Aborted | Superseded
  message?: string; // status.message
  requestedBy?: string; // spec.requestedBy
  rollback?: string; // spec.rollback.environment: a rollback of that environment
  rollbackFrom?: string; // status.rollbackFrom: the release it held when the rollback started
  startedAt?: string;
  finishedAt?: string;
  steps?: {
    environment: string;
    phase: string;
    commit?: string;
    revert?: string;
    startedAt?: string;
    finishedAt?: string;
    message?: string;
    /** The gate before the change and the action after it: the Argo Workflow and how it ended. */
    preAction?: { workflow: string; phase?: string; message?: string };
    postAction?: { workflow: string; phase?: string; message?: string };
    /** `action: pr`: the branch the change is proposed on, until it is merged. */
    proposal?: { branch: string; commit?: string; pullRequest?: StepPullRequest };
    /** The dry run's result (status.steps[].dryRun), within the report's budget. */
    dryRun?: StepDryRun;
  }[];
  /** spec.dryRun: a Promotion of the refused former dry-run form (failed by the operator, never run). */
  dryRun?: boolean;
}

/** PromotionPreview: a promotion's dry run, reported like a promotion (its steps with their `dryRun`). */
export type PromotionPreviewSummary = Omit<PromotionSummary, 'rollback' | 'rollbackFrom' | 'dryRun'>;
