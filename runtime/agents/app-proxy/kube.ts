/**
 * The app-proxy's access to the vcluster API server for its actions (@kubernetes/client-node):
 * read one Argo object or promotion resource, merge-patch it or its status subresource, create a
 * Promotion. Failures are classified once
 * here so that the actions answer with the right status: a missing object, a conflicting write,
 * a refusal by RBAC, or an API server that cannot be reached (503, retried by the caller).
 */
import { ApiException, CustomObjectsApi, KubeConfig, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { PROMOTION_KINDS, PROMOTIONS_GROUP, PROMOTIONS_VERSION } from '../../protocol/promotions.ts';

export const ARGO_GROUP = 'argoproj.io';
export const ARGO_VERSION = 'v1alpha1';

const PROMOTION_PLURALS = new Set<string>(Object.values(PROMOTION_KINDS));

/** The API group and version of a plural the actions use: the promotion resources' or Argo's. */
export function groupOf(plural: string): { group: string; version: string } {
  return PROMOTION_PLURALS.has(plural)
    ? { group: PROMOTIONS_GROUP, version: PROMOTIONS_VERSION }
    : { group: ARGO_GROUP, version: ARGO_VERSION };
}
/** Recorded in managedFields of what the actions write. */
export const FIELD_MANAGER = 'hosted-runtimes-app-proxy';

/** A Kubernetes object as JSON. */
export type KubeObject = Record<string, unknown> & {
  metadata?: { name?: string; namespace?: string; resourceVersion?: string; deletionTimestamp?: string };
};

export type KubeFailure =
  | { kind: 'not-found' }
  | { kind: 'conflict' }
  | { kind: 'invalid'; message: string }
  | { kind: 'forbidden'; message: string }
  | { kind: 'unavailable'; message: string };

export class KubeError extends Error {
  readonly failure: KubeFailure;
  constructor(failure: KubeFailure, message: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'KubeError';
    this.failure = failure;
  }
}

/** What the actions need of the API server (an interface so that unit tests can drive the actions' decisions). */
export interface ArgoObjects {
  get(plural: string, namespace: string, name: string): Promise<KubeObject>;
  /** JSON merge patch of the object, or of its status subresource. */
  mergePatch(
    plural: string,
    namespace: string,
    name: string,
    patch: unknown,
    subresource?: 'status',
  ): Promise<KubeObject>;
  /** Creates an object (metadata.generateName is honoured); answers it as created. */
  create(plural: string, namespace: string, body: KubeObject): Promise<KubeObject>;
}

function statusMessage(body: unknown): string | undefined {
  if (typeof body === 'string') {
    try {
      return statusMessage(JSON.parse(body));
    } catch {
      return body.slice(0, 300);
    }
  }
  if (typeof body === 'object' && body !== null && typeof (body as { message?: unknown }).message === 'string')
    return (body as { message: string }).message;
  return undefined;
}

/** Maps a client-node failure to what the action answers. */
export function classify(err: unknown, what: string): KubeError {
  if (err instanceof KubeError) return err;
  if (err instanceof ApiException) {
    const code = err.code;
    const detail = statusMessage(err.body) ?? `HTTP ${code}`;
    if (code === 404) return new KubeError({ kind: 'not-found' }, `${what}: not found`, err);
    if (code === 409) return new KubeError({ kind: 'conflict' }, `${what}: ${detail}`, err);
    if (code === 400 || code === 422)
      return new KubeError({ kind: 'invalid', message: detail }, `${what}: ${detail}`, err);
    if (code === 401 || code === 403)
      return new KubeError({ kind: 'forbidden', message: detail }, `${what}: ${detail}`, err);
    return new KubeError({ kind: 'unavailable', message: `HTTP ${code}` }, `${what}: HTTP ${code}: ${detail}`, err);
  }
  // No answer at all: connection refused or reset, DNS, TLS, timeout.
  const cause = err instanceof Error && err.cause instanceof Error ? `: ${err.cause.message}` : '';
  const message = `${err instanceof Error ? err.message : String(err)}${cause}`;
  return new KubeError({ kind: 'unavailable', message }, `${what}: ${message}`, err);
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(
      () => reject(new KubeError({ kind: 'unavailable', message: `no answer within ${ms} ms` }, what)),
      ms,
    );
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/**
 * The kubeconfig the app-proxy acts with: the file KUBECONFIG names (tests, development), else
 * its pod's service account (in-cluster), whose RBAC runtime/component/agents.ts grants.
 */
export function loadKubeConfig(kubeconfigFile: string | undefined): KubeConfig {
  const kc = new KubeConfig();
  if (kubeconfigFile !== undefined && kubeconfigFile !== '') kc.loadFromFile(kubeconfigFile);
  else kc.loadFromCluster();
  return kc;
}

export function argoObjects(kc: KubeConfig, opts: { timeoutMs?: number } = {}): ArgoObjects {
  const api = kc.makeApiClient(CustomObjectsApi);
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const merge = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
  return {
    async get(plural, namespace, name) {
      const what = `get ${plural} ${namespace}/${name}`;
      try {
        return (await withTimeout(
          api.getNamespacedCustomObject({ ...groupOf(plural), namespace, plural, name }),
          timeoutMs,
          what,
        )) as KubeObject;
      } catch (err) {
        throw classify(err, what);
      }
    },
    async mergePatch(plural, namespace, name, patch, subresource) {
      const what = `patch ${plural}${subresource ? `/${subresource}` : ''} ${namespace}/${name}`;
      const req = {
        ...groupOf(plural),
        namespace,
        plural,
        name,
        body: patch,
        fieldManager: FIELD_MANAGER,
      };
      try {
        return (await withTimeout(
          subresource === 'status'
            ? api.patchNamespacedCustomObjectStatus(req, merge)
            : api.patchNamespacedCustomObject(req, merge),
          timeoutMs,
          what,
        )) as KubeObject;
      } catch (err) {
        throw classify(err, what);
      }
    },
    async create(plural, namespace, body) {
      const what = `create ${plural} in ${namespace}`;
      try {
        return (await withTimeout(
          api.createNamespacedCustomObject({
            ...groupOf(plural),
            namespace,
            plural,
            body,
            fieldManager: FIELD_MANAGER,
          }),
          timeoutMs,
          what,
        )) as KubeObject;
      } catch (err) {
        throw classify(err, what);
      }
    },
  };
}
