/**
 * The Source Server's client of Argo CD's API server (REST, the grpc-gateway of
 * server/application/application.proto), as the local account `source-server` (read-only on
 * applications: the runtime's Argo CD values grant it nothing else). Logs in with
 * `POST /api/v1/session`, sends `Authorization: Bearer`, logs in again once on a 401 (the token
 * expired or Argo CD restarted with a new signing key).
 *
 * Failures are classified once, here:
 *  - `unavailable`: no answer, a timeout, 502/503/504, a 5xx without Argo CD's error body, or a
 *    refused login (the account is being set up): the route answers 503 with Retry-After.
 *  - `not-found`: 404, or 403 (Argo CD answers "permission denied" for applications that do not
 *    exist, so that their existence does not leak).
 *  - `failed`: Argo CD answered with its error and a message: for manifests, the generation
 *    failed (a template error, a missing file); the message is Argo CD's.
 * Answers larger than MAX_RESPONSE_BYTES are refused (`failed`), not read into memory.
 */
import { fetch as undiciFetch, type Dispatcher } from 'undici';
import type { CommitInfo } from '../../protocol/sources.ts';

/** Largest Argo CD answer read (manifests of a large application, managed resources with live state). */
export const MAX_RESPONSE_BYTES = 32 * 1024 * 1024;

export type ArgoCdFailure = 'unavailable' | 'not-found' | 'failed';

export class ArgoCdError extends Error {
  readonly failure: ArgoCdFailure;
  constructor(failure: ArgoCdFailure, message: string) {
    super(message);
    this.name = 'ArgoCdError';
    this.failure = failure;
  }
}

export interface ArgoApplication {
  metadata?: { name?: string; namespace?: string; uid?: string; annotations?: Record<string, string> };
  spec?: {
    source?: ArgoSource;
    sources?: ArgoSource[];
    destination?: { server?: string; name?: string; namespace?: string };
    project?: string;
  };
  status?: {
    sync?: { status?: string; revision?: string; revisions?: string[] };
    operationState?: { phase?: string; syncResult?: { revision?: string } };
  };
}

export interface ArgoSource {
  repoURL?: string;
  path?: string;
  targetRevision?: string;
  chart?: string;
  [key: string]: unknown;
}

export interface ManifestResponse {
  manifests: string[];
  revision?: string;
}

/** One item of `managed-resources`: the states are JSON texts ("null" or empty when absent). */
export interface ManagedResource {
  group?: string;
  kind?: string;
  namespace?: string;
  name?: string;
  targetState?: string;
  liveState?: string;
  normalizedLiveState?: string;
  predictedLiveState?: string;
  modified?: boolean;
  hook?: boolean;
}

export interface ArgoCdClientOptions {
  /** Argo CD's API server, without a trailing slash. */
  serverUrl: string;
  username: string;
  password: () => string;
  timeoutMs: number;
  /**
   * An API token used instead of a login (config.ts ARGOCD_TOKEN_FILE); undefined from the
   * function: not there yet, answered `unavailable` naming `tokenSource`.
   */
  token?: (() => string | undefined) | undefined;
  tokenSource?: string | undefined;
  /**
   * Called once when Argo CD refuses the login (ARGOCD_ACCOUNT_SETUP, argocd-setup.ts): true when it
   * wrote the password, and the login is tried once more. At most once a minute.
   */
  setupAccount?: (() => Promise<boolean>) | undefined;
  /** The connection to an https Argo CD (argocd-setup.ts argoCdTls); undefined: Node's default. */
  dispatcher?: (() => Promise<Dispatcher | undefined>) | undefined;
}

/** How often a refused login may set the account up again. */
const SETUP_INTERVAL_MS = 60_000;

/** Argo CD's grpc-gateway error body. */
function errorMessage(body: unknown): string | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const b = body as { message?: unknown; error?: unknown };
  if (typeof b.message === 'string' && b.message !== '') return b.message;
  if (typeof b.error === 'string' && b.error !== '') return b.error;
  return undefined;
}

/** A grpc status Argo CD wrapped in its message that means "try again later", not "this failed". */
const TRANSIENT = /code = (Unavailable|DeadlineExceeded|ResourceExhausted|Canceled)/;

export class ArgoCdClient {
  readonly #opts: ArgoCdClientOptions;
  #token: string | undefined;
  #login: Promise<string> | undefined;
  #setupAt = 0;

  constructor(opts: ArgoCdClientOptions) {
    this.#opts = opts;
  }

  async application(namespace: string, name: string): Promise<ArgoApplication> {
    return (await this.#get(
      `/api/v1/applications/${enc(name)}`,
      { appNamespace: namespace },
      app(namespace, name),
    )) as ArgoApplication;
  }

  /** The manifests Argo CD generates for the application at `revision` (JSON texts). */
  async manifests(namespace: string, name: string, revision: string): Promise<ManifestResponse> {
    const body = (await this.#get(
      `/api/v1/applications/${enc(name)}/manifests`,
      { appNamespace: namespace, revision },
      `the manifests of ${app(namespace, name)} at ${revision}`,
    )) as { manifests?: unknown; revision?: unknown };
    const manifests = Array.isArray(body.manifests) ? body.manifests.filter((m) => typeof m === 'string') : [];
    return { manifests, ...(typeof body.revision === 'string' ? { revision: body.revision } : {}) };
  }

  /**
   * The manifests of a multi-source Application with some of its sources at the revisions given
   * (`position`: 1-based index in spec.sources, as Argo CD's API takes it); the others at their
   * targetRevision.
   */
  async multiSourceManifests(
    namespace: string,
    name: string,
    pins: ReadonlyArray<{ position: number; revision: string }>,
  ): Promise<ManifestResponse> {
    const query: Array<[string, string]> = [['appNamespace', namespace]];
    for (const p of pins) query.push(['sourcePositions', String(p.position)]);
    for (const p of pins) query.push(['revisions', p.revision]);
    const body = (await this.#get(
      `/api/v1/applications/${enc(name)}/manifests`,
      query,
      `the manifests of ${app(namespace, name)} at ${pins.map((p) => `${p.position}:${p.revision}`).join(', ')}`,
    )) as { manifests?: unknown };
    const manifests = Array.isArray(body.manifests) ? body.manifests.filter((m) => typeof m === 'string') : [];
    return { manifests };
  }

  /**
   * Argo CD's RevisionMetadata of a commit, or undefined when it has none for it. `sourceIndex`:
   * the source (0-based) of a multi-source Application the commit is of.
   */
  async revisionMetadata(
    namespace: string,
    name: string,
    revision: string,
    sourceIndex?: number,
  ): Promise<CommitInfo | undefined> {
    let body: Record<string, unknown>;
    try {
      body = (await this.#get(
        `/api/v1/applications/${enc(name)}/revisions/${enc(revision)}/metadata`,
        sourceIndex === undefined
          ? { appNamespace: namespace }
          : { appNamespace: namespace, sourceIndex: String(sourceIndex) },
        `the metadata of ${revision}`,
      )) as Record<string, unknown>;
    } catch (err) {
      if (err instanceof ArgoCdError && err.failure !== 'unavailable') return undefined;
      throw err;
    }
    const s = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);
    const author = s(body.author);
    const date = s(body.date);
    const message = s(body.message);
    const signatureInfo = s(body.signatureInfo);
    return {
      revision,
      ...(author ? { author } : {}),
      ...(date ? { date } : {}),
      ...(message ? { message } : {}),
      tags: Array.isArray(body.tags) ? body.tags.filter((t): t is string => typeof t === 'string') : [],
      ...(signatureInfo ? { signatureInfo } : {}),
    };
  }

  async managedResources(namespace: string, name: string): Promise<ManagedResource[]> {
    const body = (await this.#get(
      `/api/v1/applications/${enc(name)}/managed-resources`,
      { appNamespace: namespace },
      `the managed resources of ${app(namespace, name)}`,
    )) as { items?: unknown };
    return Array.isArray(body.items) ? (body.items as ManagedResource[]) : [];
  }

  async #get(path: string, query: Record<string, string> | Array<[string, string]>, what: string): Promise<unknown> {
    const qs = new URLSearchParams(query).toString();
    const target = `${this.#opts.serverUrl}${path}${qs ? `?${qs}` : ''}`;
    for (let attempt = 0; ; attempt++) {
      const token = await this.#session(attempt > 0);
      const res = await this.#fetch(
        target,
        { headers: { authorization: `Bearer ${token}`, accept: 'application/json' } },
        what,
      );
      if (res.status === 401 && this.#opts.token)
        throw new ArgoCdError(
          'unavailable',
          `Argo CD refused the Source Server's API token (HTTP 401): it is revoked or expired, or its account lost apiKey; put a new one in ${this.#opts.tokenSource ?? 'ARGOCD_TOKEN'}`,
        );
      if (res.status === 401 && attempt === 0) {
        this.#token = undefined;
        continue;
      }
      if (res.status >= 200 && res.status < 300) return res.body;
      throw classify(res.status, res.body, what);
    }
  }

  /** A session token: the one held, or a new login (one at a time, shared by concurrent callers). */
  async #session(renew: boolean): Promise<string> {
    if (this.#opts.token) {
      const token = this.#opts.token();
      if (token === undefined)
        throw new ArgoCdError(
          'unavailable',
          `the Source Server has no Argo CD API token yet (${this.#opts.tokenSource ?? 'ARGOCD_TOKEN'}): create it as docs/hybrid.md "Source Server" says`,
        );
      return token;
    }
    if (renew) this.#token = undefined;
    if (this.#token !== undefined) return this.#token;
    this.#login ??= (async () => {
      try {
        const login = () =>
          this.#fetch(
            `${this.#opts.serverUrl}/api/v1/session`,
            {
              method: 'POST',
              headers: { 'content-type': 'application/json', accept: 'application/json' },
              body: JSON.stringify({ username: this.#opts.username, password: this.#opts.password() }),
            },
            'the login',
          );
        let res = await login();
        if (
          (res.status === 401 || res.status === 403) &&
          this.#opts.setupAccount &&
          Date.now() - this.#setupAt >= SETUP_INTERVAL_MS
        ) {
          this.#setupAt = Date.now();
          if (await this.#opts.setupAccount()) res = await login();
        }
        const token = (res.body as { token?: unknown } | undefined)?.token;
        if (res.status === 200 && typeof token === 'string' && token !== '') {
          this.#token = token;
          return token;
        }
        if (res.status === 401 || res.status === 403)
          throw new ArgoCdError(
            'unavailable',
            `Argo CD refused the login of its account '${this.#opts.username}' (HTTP ${res.status}): the account or its password is not set up yet`,
          );
        throw classify(res.status, res.body, 'the login');
      } finally {
        this.#login = undefined;
      }
    })();
    return this.#login;
  }

  async #fetch(url: string, init: RequestInit, what: string): Promise<{ status: number; body: unknown }> {
    let res: Response;
    try {
      const dispatcher = await this.#opts.dispatcher?.();
      const signal = AbortSignal.timeout(this.#opts.timeoutMs);
      res = dispatcher
        ? await undiciFetch(url, {
            ...(init as Parameters<typeof undiciFetch>[1]),
            signal,
            redirect: 'error',
            dispatcher,
          })
        : await fetch(url, { ...init, signal, redirect: 'error' });
    } catch (err) {
      const cause = err instanceof Error && err.cause instanceof Error ? `: ${err.cause.message}` : '';
      const message =
        err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError')
          ? `no answer within ${this.#opts.timeoutMs} ms`
          : `${err instanceof Error ? err.message : String(err)}${cause}`;
      throw new ArgoCdError('unavailable', `Argo CD cannot be reached for ${what}: ${message}`);
    }
    const length = Number(res.headers.get('content-length') ?? '0');
    if (length > MAX_RESPONSE_BYTES) {
      await res.body?.cancel();
      throw new ArgoCdError('failed', `Argo CD's answer for ${what} is larger than ${MAX_RESPONSE_BYTES} bytes`);
    }
    let text: string;
    try {
      text = await readBounded(res, MAX_RESPONSE_BYTES, what);
    } catch (err) {
      if (err instanceof ArgoCdError) throw err;
      throw new ArgoCdError('unavailable', `Argo CD's answer for ${what} was cut off: ${(err as Error).message}`);
    }
    let body: unknown;
    try {
      body = text === '' ? undefined : JSON.parse(text);
    } catch {
      body = undefined;
    }
    return { status: res.status, body };
  }
}

async function readBounded(res: Response, max: number, what: string): Promise<string> {
  if (!res.body) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
    size += chunk.byteLength;
    // Leaving the loop by a throw cancels the stream (the rest is never read).
    if (size > max) {
      throw new ArgoCdError('failed', `Argo CD's answer for ${what} is larger than ${max} bytes`);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function classify(status: number, body: unknown, what: string): ArgoCdError {
  const message = errorMessage(body);
  if (status === 404 || status === 403) return new ArgoCdError('not-found', `${what}: not found`);
  if (status === 502 || status === 503 || status === 504 || status === 429)
    return new ArgoCdError('unavailable', `Argo CD cannot answer ${what} right now (HTTP ${status})`);
  if (message === undefined)
    return new ArgoCdError(
      status >= 500 ? 'unavailable' : 'failed',
      `Argo CD answered HTTP ${status} for ${what} without a message`,
    );
  if (TRANSIENT.test(message))
    return new ArgoCdError('unavailable', `Argo CD cannot answer ${what} right now: ${message}`);
  return new ArgoCdError('failed', message);
}

function enc(segment: string): string {
  return encodeURIComponent(segment);
}

function app(namespace: string, name: string): string {
  return `Application '${namespace}/${name}'`;
}
