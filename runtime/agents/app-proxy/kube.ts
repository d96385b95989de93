/**
 * The app-proxy's access to the vcluster API server for its actions, over Node's own https
 * (runtime/kube/light-client.ts; not @kubernetes/client-node, whose import alone cost each start of
 * the agent about 0.8 CPU-s and 60 MiB): read one Argo object or promotion resource, merge-patch it
 * or its status subresource, create a Promotion. Failures are classified once here so that the
 * actions answer with the right status: a missing object, a conflicting write, a refusal by RBAC,
 * or an API server that cannot be reached (503, retried by the caller).
 */
import { PROMOTION_KINDS, PROMOTIONS_GROUP, PROMOTIONS_VERSION } from '../../protocol/promotions.ts';
import type { KubeResponse, KubeTransport } from '../../kube/transport.ts';

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

/** Maps the API server's non-2xx answer to what the action answers. */
function classifyAnswer(status: number, body: unknown, what: string): KubeError {
  const detail = statusMessage(body) ?? `HTTP ${status}`;
  if (status === 404) return new KubeError({ kind: 'not-found' }, `${what}: not found`);
  if (status === 409) return new KubeError({ kind: 'conflict' }, `${what}: ${detail}`);
  if (status === 400 || status === 422)
    return new KubeError({ kind: 'invalid', message: detail }, `${what}: ${detail}`);
  if (status === 401 || status === 403)
    return new KubeError({ kind: 'forbidden', message: detail }, `${what}: ${detail}`);
  return new KubeError({ kind: 'unavailable', message: `HTTP ${status}` }, `${what}: HTTP ${status}: ${detail}`);
}

/** No answer at all: connection refused or reset, DNS, TLS, the time-out. */
function unanswered(err: unknown, what: string, timeoutMs: number): KubeError {
  if (err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError'))
    return new KubeError({ kind: 'unavailable', message: `no answer within ${timeoutMs} ms` }, what, err);
  const cause = err instanceof Error && err.cause instanceof Error ? `: ${err.cause.message}` : '';
  const message = `${err instanceof Error ? err.message : String(err)}${cause}`;
  return new KubeError({ kind: 'unavailable', message }, `${what}: ${message}`, err);
}

const path = (plural: string, namespace: string, name?: string, subresource?: 'status'): string => {
  const { group, version } = groupOf(plural);
  const base = `/apis/${group}/${version}/namespaces/${encodeURIComponent(namespace)}/${plural}`;
  return name === undefined ? base : `${base}/${encodeURIComponent(name)}${subresource ? `/${subresource}` : ''}`;
};

/**
 * The actions' objects through `kube`: the transport of KUBECONFIG (tests, development) or of the
 * pod's service account (runtime/agents/common/kube.ts), whose RBAC runtime/component/agents.ts
 * grants. Each request waits at most `timeoutMs` for its answer.
 */
export function argoObjects(kube: KubeTransport, opts: { timeoutMs?: number } = {}): ArgoObjects {
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const call = async (
    what: string,
    p: string,
    o: { method: 'GET' | 'PATCH' | 'POST'; body?: unknown; contentType?: string; query?: Record<string, string> },
  ): Promise<KubeObject> => {
    let res: KubeResponse;
    try {
      res = await kube.request(p, { ...o, signal: AbortSignal.timeout(timeoutMs) });
    } catch (err) {
      throw unanswered(err, what, timeoutMs);
    }
    if (res.status < 200 || res.status > 299) throw classifyAnswer(res.status, res.body, what);
    if (typeof res.body !== 'object' || res.body === null)
      throw new KubeError({ kind: 'unavailable', message: 'an answer that is not a JSON object' }, what);
    return res.body as KubeObject;
  };
  return {
    get(plural, namespace, name) {
      return call(`get ${plural} ${namespace}/${name}`, path(plural, namespace, name), { method: 'GET' });
    },
    mergePatch(plural, namespace, name, patch, subresource) {
      return call(
        `patch ${plural}${subresource ? `/${subresource}` : ''} ${namespace}/${name}`,
        path(plural, namespace, name, subresource),
        {
          method: 'PATCH',
          body: patch,
          contentType: 'application/merge-patch+json',
          query: { fieldManager: FIELD_MANAGER },
        },
      );
    },
    create(plural, namespace, body) {
      return call(`create ${plural} in ${namespace}`, path(plural, namespace), {
        method: 'POST',
        body,
        query: { fieldManager: FIELD_MANAGER },
      });
    },
  };
}
