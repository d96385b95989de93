/**
 * The app-proxy's actions on Argo objects (`POST /api/<resource>/<namespace>/<name>/<action>`,
 * runtime/protocol/actions.ts), executed with the app-proxy's own RBAC against the vcluster API
 * server and answered with the object after the change. Each writes what the Argo tool that owns
 * the action writes, so that the controller acts on it as usual:
 *
 *  - Application refresh: the `argocd.argoproj.io/refresh` annotation (`hard` unless asked for
 *    `normal`), as `argocd app get --hard-refresh` does. The controller removes it when done.
 *  - Application sync: `operation` as Argo CD's API server writes it (`SetAppOperation`): a `sync`
 *    with the revision (the request's, else the source's targetRevision), `prune` only when asked,
 *    the Application's sync options and retry strategy, `initiatedBy.username` = the caller's key
 *    id; `status.operationState` cleared; refused while an operation is set. Written with the read
 *    resourceVersion as precondition, re-read on conflict, so that two syncs cannot both start.
 *  - Rollout promote / abort / retry: the patches of the kubectl-argo-rollouts plugin, through the
 *    status subresource where the plugin uses it (falling back to the object when the CRD has none).
 *  - Workflow terminate / stop: `spec.shutdown` = `Terminate` / `Stop`, as Argo Workflows' server
 *    does. Retry (which resets failed nodes and deletes their pods) is not implemented: 501 for a
 *    Failed or Error Workflow, 409 for any other.
 *  - Product promote (runtime 1.8.0+, docs/promotions.md): a Promotion of the product, created
 *    for the GitOps Operator with `requestedBy` = the caller's key id and the release asked for (by
 *    default the operator takes what the trigger environment holds). The operator serializes a
 *    product's promotions: a newer one supersedes one still waiting.
 *  - Product rollback (`{"environment"}`): a Promotion of one step that restores the release the
 *    environment held before its current one (the operator finds it in the environment's history).
 *  - Product dry-run (`{"release"?}`): a PromotionPreview of the product (a kind of its own, which
 *    an operator that predates it never runs): the operator previews each environment's change
 *    through the Source Server and changes nothing (docs/promotions.md "Previews").
 *  - PromotionPreview abort: `spec.abort` set (one not finished), guarded like a promotion's.
 *  - Promotion retry / abort: `spec.retry` raised by one (a Failed promotion, from its failed step)
 *    or `spec.abort` set (one not finished; the operator reverts a change already pushed for the
 *    running step). Written with the read resourceVersion as precondition, as sync is.
 *
 * 404 for an object that does not exist, 409 for a state that refuses the action, 400 for a bad
 * body or name, 503 with Retry-After when the API server cannot be reached.
 */
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { ACTION_RESOURCES, type ActionResource } from '../../protocol/actions.ts';
import {
  FINAL_PHASES,
  PROMOTIONS_API_VERSION,
  PROMOTIONS_GROUP,
  type PromotionPhase,
} from '../../protocol/promotions.ts';
import { type ArgoObjects, KubeError, type KubeObject } from './kube.ts';

/** Seconds a caller waits before retrying when the API server cannot be reached. */
export const KUBE_RETRY_AFTER_SECONDS = 5;
/** Attempts of a write guarded by resourceVersion before answering 409 CONFLICT. */
const CONFLICT_ATTEMPTS = 5;

export const REFRESH_ANNOTATION = 'argocd.argoproj.io/refresh';

/** A state of the object that refuses the action: 409 ACTION_REFUSED with `reason`. */
export class ActionRefused extends Error {
  readonly reason: string;
  constructor(reason: string, message: string) {
    super(message);
    this.name = 'ActionRefused';
    this.reason = reason;
  }
}

/** 400 VALIDATION_FAILED naming the field. */
export class InvalidInput extends Error {
  readonly field: string;
  constructor(field: string, message: string) {
    super(message);
    this.name = 'InvalidInput';
    this.field = field;
  }
}

/** 501 NOT_IMPLEMENTED: an action the app-proxy does not perform (the message says what to use). */
export class NotImplemented extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NotImplemented';
  }
}

type Json = Record<string, unknown>;

function obj(v: unknown): Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Json) : {};
}

// ---- request bodies ----

type FieldType = 'boolean' | 'revision' | 'refreshType' | 'release' | 'environment';
/** A git revision, tag, branch or chart version: printable ASCII without spaces. */
const REVISION = /^[\x21-\x7e]{1,256}$/;
/** A product's release as a template's `version` field holds it (e.g. `1.4.2`): printable ASCII without spaces. */
const RELEASE = /^[\x21-\x7e]{1,128}$/;

/** Checks a body against the fields an action takes; none is required. */
function parseBody(raw: unknown, fields: Readonly<Record<string, FieldType>>): Json {
  if (raw === undefined || raw === null) return {};
  if (typeof raw !== 'object' || Array.isArray(raw)) throw new InvalidInput('body', 'the body must be a JSON object');
  const out: Json = {};
  for (const [key, value] of Object.entries(raw as Json)) {
    const type = fields[key];
    if (type === undefined) {
      const known = Object.keys(fields);
      throw new InvalidInput(
        key,
        known.length === 0
          ? `'${key}' is not a field of this action, which takes no body`
          : `'${key}' is not a field of this action; it takes ${known.map((k) => `'${k}'`).join(', ')}`,
      );
    }
    if (type === 'boolean' && typeof value !== 'boolean') throw new InvalidInput(key, `'${key}' must be true or false`);
    if (type === 'revision' && (typeof value !== 'string' || !REVISION.test(value)))
      throw new InvalidInput(
        key,
        `'${key}' must be a git revision, tag, branch or chart version (1 to 256 characters, no spaces)`,
      );
    if (type === 'release' && (typeof value !== 'string' || !RELEASE.test(value)))
      throw new InvalidInput(
        key,
        `'${key}' must be a release as the product's files hold it (1 to 128 characters, no spaces)`,
      );
    if (type === 'environment' && (typeof value !== 'string' || value.length > 63 || !DNS_LABEL.test(value)))
      throw new InvalidInput(key, `'${key}' must be an environment's name (a DNS label: a-z, 0-9, '-', at most 63)`);
    if (type === 'refreshType' && value !== 'hard' && value !== 'normal')
      throw new InvalidInput(key, `'${key}' must be 'hard' or 'normal'`);
    out[key] = value;
  }
  return out;
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

export function checkTarget(namespace: string, name: string): void {
  if (namespace.length > 63 || !DNS_LABEL.test(namespace))
    throw new InvalidInput(
      'namespace',
      `'${namespace}' is not a namespace name (a DNS label: a-z, 0-9, '-', at most 63)`,
    );
  if (name.length > 253 || !DNS_SUBDOMAIN.test(name))
    throw new InvalidInput(
      'name',
      `'${name}' is not an object name (a DNS subdomain: a-z, 0-9, '-', '.', at most 253)`,
    );
}

// ---- decisions (pure: what to write, or why not) ----

/** `operation` for a sync of `app`, as Argo CD's API server builds it. */
export function syncOperation(app: KubeObject, body: Json, username: string): Json {
  const spec = obj(app.spec);
  const policy = obj(spec.syncPolicy);
  const sources = Array.isArray(spec.sources) && spec.sources.length > 0 ? (spec.sources as unknown[]) : undefined;
  const sync: Json = {};
  if (sources) {
    if (body.revision !== undefined)
      throw new InvalidInput(
        'revision',
        "the Application has several sources: 'revision' cannot choose among them; sync to the sources' targetRevisions",
      );
    sync.sources = sources;
    sync.revisions = sources.map((s) => {
      const r = obj(s).targetRevision;
      return typeof r === 'string' ? r : '';
    });
  } else {
    const source = obj(spec.source);
    sync.source = source;
    const target = typeof source.targetRevision === 'string' ? source.targetRevision : '';
    sync.revision = typeof body.revision === 'string' ? body.revision : target;
  }
  // Argo CD omits false flags (omitempty): prune and dryRun appear only when true.
  if (body.prune === true) sync.prune = true;
  if (body.dryRun === true) sync.dryRun = true;
  if (Array.isArray(policy.syncOptions) && policy.syncOptions.length > 0) sync.syncOptions = policy.syncOptions;
  const op: Json = { sync, initiatedBy: { username } };
  if (policy.retry !== undefined && policy.retry !== null) op.retry = policy.retry;
  return op;
}

export function refuseSync(app: KubeObject): void {
  const name = `Application '${app.metadata?.namespace ?? ''}/${app.metadata?.name ?? ''}'`;
  if (app.metadata?.deletionTimestamp)
    throw new ActionRefused('Deleting', `${name} is being deleted; it cannot be synced`);
  if (app.operation !== undefined && app.operation !== null) {
    const phase = obj(obj(app.status).operationState).phase;
    throw new ActionRefused(
      'OperationInProgress',
      `${name} already has an operation${typeof phase === 'string' ? ` (${phase})` : ''}; wait for it to finish or terminate it`,
    );
  }
}

export interface RolloutPatches {
  spec?: Json;
  status?: Json;
  /** Written to the object itself when the CRD has no status subresource. */
  unified?: Json;
}

/** The canary step index the plugin reads (0 when unset), or undefined without canary steps. */
function canaryStepIndex(ro: KubeObject): { index: number; steps: number } | undefined {
  const steps = obj(obj(obj(ro.spec).strategy).canary).steps;
  if (!Array.isArray(steps) || steps.length === 0) return undefined;
  const raw = obj(ro.status).currentStepIndex;
  return { index: typeof raw === 'number' ? raw : 0, steps: steps.length };
}

/** What `kubectl argo rollouts promote [--full]` writes, or 409 when there is nothing to promote. */
export function promotePatches(ro: KubeObject, full: boolean): RolloutPatches {
  const spec = obj(ro.spec);
  const status = obj(ro.status);
  const name = `Rollout '${ro.metadata?.namespace ?? ''}/${ro.metadata?.name ?? ''}'`;
  if (full) {
    if (typeof status.currentPodHash === 'string' && status.currentPodHash === status.stableRS)
      throw new ActionRefused(
        'AlreadyPromoted',
        `${name} already runs its desired version as stable: nothing to promote`,
      );
    const patch = { status: { promoteFull: true } };
    return { status: patch, unified: patch };
  }
  const out: RolloutPatches = { unified: { spec: { paused: false }, status: { pauseConditions: null } } };
  if (spec.paused === true) out.spec = { spec: { paused: false } };
  if (Array.isArray(status.pauseConditions) && status.pauseConditions.length > 0) {
    out.status = { status: { pauseConditions: null } };
  } else {
    // Not paused by a condition: the plugin moves a canary on to its next step (promoting through
    // a running analysis or experiment). At or past the last step there is nothing to promote.
    const step = canaryStepIndex(ro);
    if (step && step.index < step.steps) {
      out.status = { status: { pauseConditions: null, currentStepIndex: step.index + 1 } };
      out.unified = { spec: { paused: false }, status: { pauseConditions: null, currentStepIndex: step.index + 1 } };
    }
  }
  if (!out.spec && !out.status)
    throw new ActionRefused(
      'NotPaused',
      `${name} is not paused and has no canary step left to skip: nothing to promote (use full promotion to skip analysis and steps)`,
    );
  return out;
}

export function abortPatch(ro: KubeObject): Json {
  const status = obj(ro.status);
  const name = `Rollout '${ro.metadata?.namespace ?? ''}/${ro.metadata?.name ?? ''}'`;
  if (status.abort === true) throw new ActionRefused('AlreadyAborted', `${name} is already aborted`);
  if (typeof status.currentPodHash === 'string' && status.currentPodHash === status.stableRS)
    throw new ActionRefused('NothingInProgress', `${name} runs its stable version: no update in progress to abort`);
  return { status: { abort: true } };
}

export function retryRolloutPatch(ro: KubeObject): Json {
  const name = `Rollout '${ro.metadata?.namespace ?? ''}/${ro.metadata?.name ?? ''}'`;
  if (obj(ro.status).abort !== true) throw new ActionRefused('NotAborted', `${name} is not aborted: nothing to retry`);
  return { status: { abort: false } };
}

const FINISHED = new Set(['Succeeded', 'Failed', 'Error']);

/** `spec.shutdown` for terminate (`Terminate`) or stop (`Stop`), refused for a finished Workflow. */
export function shutdownPatch(wf: KubeObject, strategy: 'Terminate' | 'Stop'): Json {
  const status = obj(wf.status);
  const name = `Workflow '${wf.metadata?.namespace ?? ''}/${wf.metadata?.name ?? ''}'`;
  if ((typeof status.phase === 'string' && FINISHED.has(status.phase)) || typeof status.finishedAt === 'string')
    throw new ActionRefused(
      'Finished',
      `${name} has finished${typeof status.phase === 'string' ? ` (${status.phase})` : ''}: nothing to ${strategy === 'Terminate' ? 'terminate' : 'stop'}`,
    );
  return { spec: { shutdown: strategy } };
}

export function refuseWorkflowRetry(wf: KubeObject): never {
  const phase = obj(wf.status).phase;
  const name = `Workflow '${wf.metadata?.namespace ?? ''}/${wf.metadata?.name ?? ''}'`;
  if (phase !== 'Failed' && phase !== 'Error')
    throw new ActionRefused(
      'NotFailed',
      `${name} is ${typeof phase === 'string' && phase !== '' ? phase : 'not started'}: only a Failed or Error Workflow can be retried`,
    );
  throw new NotImplemented(
    `retrying a Workflow (resetting its failed nodes and deleting their pods) is not performed by the runtime's API; use 'argo retry ${wf.metadata?.name ?? ''} -n ${wf.metadata?.namespace ?? ''}' or resubmit it`,
  );
}

/** The Promotion a promote action creates for the GitOps Operator (a PromotionPreview for a dry run). */
export function promotionRequest(
  product: KubeObject,
  release: string | undefined,
  requestedBy: string,
  rollback?: string,
  preview = false,
): KubeObject {
  const name = product.metadata?.name ?? '';
  const namespace = product.metadata?.namespace ?? '';
  if (product.metadata?.deletionTimestamp)
    throw new ActionRefused('Deleting', `Product '${namespace}/${name}' is being deleted; it cannot be promoted`);
  return {
    apiVersion: PROMOTIONS_API_VERSION,
    kind: preview ? 'PromotionPreview' : 'Promotion',
    metadata: {
      // generateName: every request is a promotion of its own (the operator names the ones a new
      // release starts after the release, so those are never started twice).
      generateName: `${name.slice(0, 40)}-`,
      namespace,
      labels: { [`${PROMOTIONS_GROUP}/product`]: name },
    },
    spec: {
      product: name,
      ...(release !== undefined ? { release } : {}),
      ...(rollback !== undefined ? { rollback: { environment: rollback } } : {}),
      requestedBy,
    },
  } as KubeObject;
}

function promotionState(p: KubeObject): { name: string; phase: PromotionPhase | undefined; spec: Json; status: Json } {
  const status = obj(p.status);
  return {
    name: `${p.kind === 'PromotionPreview' ? 'PromotionPreview' : 'Promotion'} '${p.metadata?.namespace ?? ''}/${p.metadata?.name ?? ''}'`,
    phase: typeof status.phase === 'string' ? (status.phase as PromotionPhase) : undefined,
    spec: obj(p.spec),
    status,
  };
}

/** `spec.retry` raised by one, for a Failed promotion whose last retry the operator has taken. */
export function promotionRetryPatch(p: KubeObject): Json {
  const { name, phase, spec, status } = promotionState(p);
  const asked = typeof spec.retry === 'number' ? spec.retry : 0;
  const observed = typeof status.observedRetry === 'number' ? status.observedRetry : 0;
  if (asked > observed)
    throw new ActionRefused(
      'RetryPending',
      `${name} was already asked to retry; the GitOps Operator has not taken it yet`,
    );
  if (phase !== 'Failed')
    throw new ActionRefused(
      'NotFailed',
      `${name} is ${phase ?? 'Pending'}: only a Failed promotion can be retried (from its failed step)`,
    );
  return { spec: { retry: asked + 1 } };
}

/** `spec.abort`, for a promotion that has not finished. */
export function promotionAbortPatch(p: KubeObject): Json {
  const { name, phase, spec } = promotionState(p);
  if (phase !== undefined && FINAL_PHASES.includes(phase))
    throw new ActionRefused('Finished', `${name} has finished (${phase}): nothing to abort`);
  if (spec.abort === true) throw new ActionRefused('AlreadyAborting', `${name} is already being aborted`);
  return { spec: { abort: true } };
}

// ---- execution ----

export interface ActionInput {
  resource: ActionResource;
  namespace: string;
  name: string;
  action: string;
  body: unknown;
  /** Who asked (the control plane's request token subject: the caller's API key id). */
  subject: string | undefined;
}

/** Patches the status subresource; undefined when the CRD has none (the plugin's fallback). */
async function patchStatus(
  objects: ArgoObjects,
  plural: string,
  namespace: string,
  name: string,
  patch: Json,
): Promise<KubeObject | undefined> {
  try {
    return await objects.mergePatch(plural, namespace, name, patch, 'status');
  } catch (err) {
    if (err instanceof KubeError && err.failure.kind === 'not-found') return undefined;
    throw err;
  }
}

async function rolloutStatusAction(
  objects: ArgoObjects,
  namespace: string,
  name: string,
  decide: (ro: KubeObject) => RolloutPatches,
): Promise<KubeObject> {
  let ro = await objects.get('rollouts', namespace, name);
  const patches = decide(ro);
  let specPatch = patches.spec;
  if (patches.status) {
    const patched = await patchStatus(objects, 'rollouts', namespace, name, patches.status);
    if (patched) ro = patched;
    else specPatch = patches.unified;
  }
  if (specPatch) ro = await objects.mergePatch('rollouts', namespace, name, specPatch);
  return ro;
}

/**
 * A patch decided from the object as read, written with its resourceVersion as precondition and
 * decided again on a conflict: two callers cannot both act on the same state.
 */
async function guardedPatch(
  objects: ArgoObjects,
  plural: string,
  namespace: string,
  name: string,
  decide: (o: KubeObject) => Json,
): Promise<KubeObject> {
  for (let attempt = 1; ; attempt++) {
    const o = await objects.get(plural, namespace, name);
    const patch = decide(o);
    try {
      return await objects.mergePatch(plural, namespace, name, {
        ...patch,
        metadata: { ...obj(patch.metadata), resourceVersion: o.metadata?.resourceVersion },
      });
    } catch (err) {
      if (!(err instanceof KubeError && err.failure.kind === 'conflict') || attempt >= CONFLICT_ATTEMPTS) throw err;
    }
  }
}

function sync(objects: ArgoObjects, namespace: string, name: string, body: Json, username: string) {
  return guardedPatch(objects, 'applications', namespace, name, (app) => {
    refuseSync(app);
    return { operation: syncOperation(app, body, username), status: { operationState: null } };
  });
}

export async function runAction(objects: ArgoObjects, input: ActionInput): Promise<KubeObject> {
  const { namespace, name } = input;
  checkTarget(namespace, name);
  const key = `${input.resource}/${input.action}`;
  switch (key) {
    case 'applications/refresh': {
      const body = parseBody(input.body, { type: 'refreshType' });
      const type = typeof body.type === 'string' ? body.type : 'hard';
      return objects.mergePatch('applications', namespace, name, {
        metadata: { annotations: { [REFRESH_ANNOTATION]: type } },
      });
    }
    case 'applications/sync': {
      const body = parseBody(input.body, { revision: 'revision', prune: 'boolean', dryRun: 'boolean' });
      return sync(objects, namespace, name, body, input.subject ?? 'hosted-runtimes');
    }
    case 'rollouts/promote': {
      const body = parseBody(input.body, { full: 'boolean' });
      return rolloutStatusAction(objects, namespace, name, (ro) => promotePatches(ro, body.full === true));
    }
    case 'rollouts/abort':
      parseBody(input.body, {});
      return rolloutStatusAction(objects, namespace, name, (ro) => {
        const patch = abortPatch(ro);
        return { status: patch, unified: patch };
      });
    case 'rollouts/retry':
      parseBody(input.body, {});
      return rolloutStatusAction(objects, namespace, name, (ro) => {
        const patch = retryRolloutPatch(ro);
        return { status: patch, unified: patch };
      });
    case 'workflows/terminate':
    case 'workflows/stop': {
      parseBody(input.body, {});
      const wf = await objects.get('workflows', namespace, name);
      const patch = shutdownPatch(wf, input.action === 'terminate' ? 'Terminate' : 'Stop');
      return objects.mergePatch('workflows', namespace, name, patch);
    }
    case 'workflows/retry': {
      parseBody(input.body, {});
      return refuseWorkflowRetry(await objects.get('workflows', namespace, name));
    }
    case 'products/promote': {
      const body = parseBody(input.body, { release: 'release' });
      const product = await objects.get('products', namespace, name);
      const release = typeof body.release === 'string' ? body.release : undefined;
      return objects.create('promotions', namespace, promotionRequest(product, release, input.subject ?? 'api'));
    }
    case 'products/dry-run': {
      const body = parseBody(input.body, { release: 'release' });
      const product = await objects.get('products', namespace, name);
      const release = typeof body.release === 'string' ? body.release : undefined;
      return objects.create(
        'promotionpreviews',
        namespace,
        promotionRequest(product, release, input.subject ?? 'api', undefined, true),
      );
    }
    case 'products/rollback': {
      const body = parseBody(input.body, { environment: 'environment' });
      if (typeof body.environment !== 'string')
        throw new InvalidInput('environment', "'environment' is required: the environment to roll back");
      const product = await objects.get('products', namespace, name);
      return objects.create(
        'promotions',
        namespace,
        promotionRequest(product, undefined, input.subject ?? 'api', body.environment),
      );
    }
    case 'promotions/retry':
      parseBody(input.body, {});
      return guardedPatch(objects, 'promotions', namespace, name, promotionRetryPatch);
    case 'promotions/abort':
      parseBody(input.body, {});
      return guardedPatch(objects, 'promotions', namespace, name, promotionAbortPatch);
    case 'promotionpreviews/abort':
      parseBody(input.body, {});
      return guardedPatch(objects, 'promotionpreviews', namespace, name, promotionAbortPatch);
    default:
      throw new Error(`no action ${key}`);
  }
}

// ---- HTTP ----

interface ErrorBody {
  error: { code: string; message: string; field?: string; reason?: string };
}

function send(reply: FastifyReply, status: number, error: ErrorBody['error']): FastifyReply {
  return reply.code(status).send({ error });
}

export interface ActionRoutesOptions {
  objects: ArgoObjects;
  /** The caller recorded in the request token (its API key id). */
  subjectOf: (request: FastifyRequest) => string | undefined;
}

type Params = { resource: string; namespace: string; name: string; action: string };

export const actionRoutes: FastifyPluginAsync<ActionRoutesOptions> = async (app, opts) => {
  // A body fastify cannot parse (not JSON, empty JSON, wrong type) in the same error shape.
  app.setErrorHandler((err: Error & { statusCode?: number }, request, reply) => {
    const status = err.statusCode ?? 500;
    if (status >= 400 && status < 500)
      return send(reply, status, {
        code: status === 415 ? 'UNSUPPORTED_MEDIA_TYPE' : 'INVALID_BODY',
        message: err.message,
      });
    request.log.error({ err }, 'action failed');
    return send(reply, 500, { code: 'INTERNAL', message: 'internal error' });
  });
  app.post<{ Params: Params }>('/api/:resource/:namespace/:name/:action', async (request, reply) => {
    const { resource, namespace, name, action } = request.params;
    const def = Object.hasOwn(ACTION_RESOURCES, resource) ? ACTION_RESOURCES[resource as ActionResource] : undefined;
    if (!def || !(def.actions as readonly string[]).includes(action)) {
      return send(reply, 404, {
        code: 'ROUTE_NOT_FOUND',
        message: `no action POST /api/${resource}/…/${action}: the actions are ${Object.entries(ACTION_RESOURCES)
          .map(([r, d]) => `${r}: ${d.actions.join(', ')}`)
          .join('; ')}`,
      });
    }
    const target = `${def.kind} '${namespace}/${name}'`;
    try {
      const object = await runAction(opts.objects, {
        resource: resource as ActionResource,
        namespace,
        name,
        action,
        body: request.body,
        subject: opts.subjectOf(request),
      });
      request.log.info({ kind: def.kind, namespace, name, action, caller: opts.subjectOf(request) }, 'action done');
      // A promote answers the Promotion it created.
      if (resource === 'products') reply.code(201);
      return object;
    } catch (err) {
      if (err instanceof InvalidInput)
        return send(reply, 400, { code: 'VALIDATION_FAILED', message: err.message, field: err.field });
      if (err instanceof ActionRefused)
        return send(reply, 409, { code: 'ACTION_REFUSED', reason: err.reason, message: err.message });
      if (err instanceof NotImplemented) return send(reply, 501, { code: 'NOT_IMPLEMENTED', message: err.message });
      if (err instanceof KubeError) {
        const f = err.failure;
        switch (f.kind) {
          case 'not-found':
            return send(reply, 404, { code: 'OBJECT_NOT_FOUND', message: `${target} was not found` });
          case 'conflict':
            return send(reply, 409, {
              code: 'CONFLICT',
              message: `${target} kept changing while the ${action} was written; retry`,
            });
          case 'invalid':
            return send(reply, 422, {
              code: 'REJECTED_BY_API_SERVER',
              message: `the API server refused the ${action} of ${target}: ${f.message}`,
            });
          case 'forbidden':
            request.log.error({ err: err.message }, 'the app-proxy is not allowed to act: its RBAC is out of date');
            return send(reply, 502, {
              code: 'RUNTIME_NOT_PERMITTED',
              message: `the runtime's app-proxy is not permitted to ${action} ${target}; its RBAC needs an upgrade of the runtime`,
            });
          case 'unavailable':
            request.log.warn({ err: err.message }, 'the API server cannot be reached');
            reply.header('retry-after', String(KUBE_RETRY_AFTER_SECONDS));
            return send(reply, 503, {
              code: 'KUBE_API_UNAVAILABLE',
              message: `the runtime's Kubernetes API server cannot be reached right now; retry in ${KUBE_RETRY_AFTER_SECONDS} s`,
            });
        }
      }
      throw err;
    }
  });
};
