/**
 * The one client of the API, typed from the route map (api-routes.ts): the console, the CLI and
 * the tests call a route by its key and get its answer's type, with no cast and no copy of a
 * shape:
 *
 *     const accepted = await client.call('POST /v1/tenants/:id/sleep', { params: { id } });
 *
 * Every answer that is not a success becomes one error type, `ApiError` (status, code, message,
 * field, details, Retry-After, request id), in every caller. It runs in the browser and in Node.js
 * alike: fetch only, and it imports the server's modules as types only (the console bundles this
 * module and nothing else of the provisioner but store/states.ts).
 */
import type { Static, TSchema } from 'typebox';
import type { ApiRoutes, RouteKey } from './api-routes.ts';
import type {
  ApplicationHistoryEvents,
  ErrorBody,
  FleetUpgradeEvents,
  OperationLogEvents,
  RuntimeObjectChangeEvents,
  StreamEventOf,
  TenantStreamEvents,
  WireRefs,
} from '../api/types.ts';
import type { ActionAnswers, ActionResource } from '../../runtime/protocol/actions.ts';

export type { RouteKey };

type Wire<T> = T extends TSchema ? Static<T, WireRefs> : never;
type Entry<K extends RouteKey> = ApiRoutes[K];
type SuccessStatus = 200 | 201 | 202 | 204;

/** The answer of a route: its success answers' types (a union when it has more than one). */
export type AnswerOf<K extends RouteKey> =
  Entry<K> extends { response: infer R } ? Wire<R[keyof R & SuccessStatus]> : unknown;
export type ParamsOf<K extends RouteKey> = Entry<K> extends { params: infer P } ? Wire<P> : never;
export type QueryOf<K extends RouteKey> = Entry<K> extends { querystring: infer Q } ? Wire<Q> : never;
/** The body of a route: its schema's, or the one a handler checks itself when a body is optional. */
export type BodyOf<K extends RouteKey> =
  Entry<K> extends { body: infer B }
    ? Wire<B>
    : Entry<K> extends { optionalBody: infer B }
      ? Wire<B> | undefined
      : never;

type Field<Name extends string, T> = [T] extends [never]
  ? { [P in Name]?: never }
  : undefined extends T
    ? { [P in Name]?: T }
    : // eslint-disable-next-line @typescript-eslint/no-empty-object-type
      {} extends T
      ? { [P in Name]?: T }
      : { [P in Name]: T };

/** What a call gives besides the route: path parameters, query and body as the route's schemas say. */
export type CallOptions<K extends RouteKey> = Field<'params', ParamsOf<K>> &
  Field<'query', QueryOf<K>> &
  Field<'body', BodyOf<K>> & {
    headers?: Record<string, string>;
    signal?: AbortSignal;
    /** This call's key instead of the client's (the console's sign-in checks a key before keeping it). */
    token?: string;
  };
type CallArgs<K extends RouteKey> =
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type
  {} extends CallOptions<K> ? [opts?: CallOptions<K>] : [opts: CallOptions<K>];

/** The Server-Sent Events routes and their events by name (api/types.ts). */
export interface StreamRoutes {
  'GET /v1/tenants/events': TenantStreamEvents;
  'GET /v1/operations/:id/log': OperationLogEvents;
  'GET /v1/fleet-upgrades/:id/events': FleetUpgradeEvents;
  'GET /v1/tenants/:id/changes': RuntimeObjectChangeEvents;
  'GET /v1/tenants/:id/runtimes/:name/objects/changes': RuntimeObjectChangeEvents;
  'GET /v1/tenants/:id/applications/:namespace/:name/history/stream': ApplicationHistoryEvents;
  'GET /v1/tenants/:id/runtimes/:name/objects/applications/:namespace/:objectName/history/stream': ApplicationHistoryEvents;
}
export type StreamKey = keyof StreamRoutes & RouteKey;

/** An answer of the API that is not a success (status 0: the API could not be reached). */
export class ApiError extends Error {
  readonly status: number;
  /** The API's stable error code (docs/api.md), `HTTP_<status>` for an answer without one. */
  readonly code: string;
  readonly field: string | undefined;
  readonly details: Record<string, unknown> | undefined;
  /** The answer's Retry-After (seconds), when it had one: a 503 or 429 says when to try again. */
  readonly retryAfterSeconds: number | undefined;
  readonly requestId: string | undefined;
  constructor(e: {
    status: number;
    code: string;
    message: string;
    field?: string | undefined;
    details?: Record<string, unknown> | undefined;
    retryAfterSeconds?: number | undefined;
    requestId?: string | undefined;
  }) {
    super(e.message);
    this.name = 'ApiError';
    this.status = e.status;
    this.code = e.code;
    this.field = e.field;
    this.details = e.details;
    this.retryAfterSeconds = e.retryAfterSeconds;
    this.requestId = e.requestId;
  }

  /** The error a non-success answer carries (its body read here). */
  static async of(res: Response): Promise<ApiError> {
    const body = errorBodyOf(res.status, res.statusText, await res.text().catch(() => ''));
    const retryAfter = Number(res.headers.get('retry-after') ?? NaN);
    return new ApiError({
      status: res.status,
      ...body.error,
      retryAfterSeconds: Number.isFinite(retryAfter) ? retryAfter : undefined,
    });
  }
}

/** An answer's error body, or one made of its status when it has none (not JSON, or no `error`). */
function errorBodyOf(status: number, statusText: string, text: string): ErrorBody {
  try {
    const body = JSON.parse(text) as Partial<ErrorBody> | null;
    const e = body?.error;
    if (e && typeof e === 'object')
      return { error: { ...e, code: e.code ?? `HTTP_${status}`, message: e.message ?? statusText } };
  } catch {
    // not JSON: the status says it all
  }
  return { error: { code: `HTTP_${status}` as ErrorBody['error']['code'], message: statusText } };
}

/** An answer as `request` gives it: the route's answer, or the API's error body, never thrown. */
export type ApiResult<K extends RouteKey> =
  | { ok: true; status: number; headers: Headers; body: AnswerOf<K> }
  | { ok: false; status: number; headers: Headers; body: ErrorBody };

export interface ApiClientOptions {
  /** The API's origin (`http://host:port`); '' in the browser: the page's own. */
  baseUrl?: string;
  /** The bearer key, or a function that reads it at each call (the console's session). */
  token?: string | undefined | (() => string | null | undefined);
  /** Called on a 401 to a call made with the client's own key (the key stopped working). */
  onUnauthorized?: (err: ApiError) => void;
  /**
   * The fetch the client sends with; the platform's when not given (the console, the CLI). The
   * tests give one over fastify's inject (test/helpers/inject-fetch.ts): the API in process, no socket.
   */
  fetch?: typeof fetch;
}

/** The path of a route with its parameters filled in (each one URL-encoded). */
export function pathOf(key: string, params: Record<string, string | number> = {}): string {
  const template = key.slice(key.indexOf(' ') + 1);
  return template.replace(/:(\w+)/g, (_, name: string) => {
    const value = params[name];
    if (value === undefined) throw new Error(`${key}: no value for :${name}`);
    return encodeURIComponent(String(value));
  });
}

/** A query string of the set values (`?a=1&b=x`, or '' when none is set). */
export function queryString(query: Record<string, string | number | boolean | null | undefined> = {}): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

/** The options of a call, whatever its route (inside the client). */
interface Loose {
  params?: Record<string, string | number>;
  query?: Record<string, string | number | boolean | null | undefined>;
  body?: unknown;
  headers?: Record<string, string>;
  signal?: AbortSignal;
  token?: string;
}

export class ApiClient {
  readonly baseUrl: string;
  readonly #options: ApiClientOptions;

  constructor(options: ApiClientOptions = {}) {
    this.#options = options;
    this.baseUrl = (options.baseUrl ?? '').replace(/\/+$/, '');
  }

  /** The same client with another key. */
  withToken(token: string | undefined): ApiClient {
    return new ApiClient({ ...this.#options, token });
  }

  /** The route's answer; an ApiError for any other. */
  async call<K extends RouteKey>(key: K, ...[opts]: CallArgs<K>): Promise<AnswerOf<K>> {
    const res = await this.#checked(key, opts, 'application/json');
    if (res.status === 204) return null as AnswerOf<K>;
    return (await res.json()) as AnswerOf<K>;
  }

  /** The route's answer or its error, with the status and headers, never thrown (tests assert on both). */
  async request<K extends RouteKey>(key: K, ...[opts]: CallArgs<K>): Promise<ApiResult<K>> {
    const res = await this.#send(key, opts, 'application/json');
    const text = await res.text();
    if (res.ok)
      return {
        ok: true,
        status: res.status,
        headers: res.headers,
        body: (text ? JSON.parse(text) : null) as AnswerOf<K>,
      };
    return { ok: false, status: res.status, headers: res.headers, body: errorBodyOf(res.status, res.statusText, text) };
  }

  /** The route's answer as a Response, for answers that are not JSON (text, YAML); an ApiError unless a success. */
  async fetch<K extends RouteKey>(key: K, opts?: CallOptions<K> & { accept?: string }): Promise<Response> {
    const res = await this.#send(key, opts, opts?.accept ?? 'application/json');
    if (!res.ok) throw await this.#error(res, opts?.token);
    return res;
  }

  /**
   * A route outside the route map (the runtime's API through the tunnel): the method and path as
   * given; an ApiError unless a success.
   */
  async raw(
    method: string,
    path: string,
    opts: { body?: unknown; headers?: Record<string, string>; signal?: AbortSignal; accept?: string } = {},
  ): Promise<Response> {
    const res = await this.#do(method, path, opts.body, opts.accept ?? 'application/json', opts.headers, opts.signal);
    if (!res.ok) throw await this.#error(res);
    return res;
  }

  /**
   * An action on an object in the tenant's runtime, through its tunnel (runtime/protocol/actions.ts:
   * `POST /v1/tenants/:id/runtime/api/<resource>/<namespace>/<name>/<action>`, each segment
   * URL-encoded): the runtime's answer, typed by its protocol (`ActionAnswers`, not checked at run
   * time); an ApiError unless a success.
   */
  async runtimeAction<R extends ActionResource>(
    tenant: string,
    target: { resource: R; namespace: string; name: string; action: string },
    opts: { body?: unknown; signal?: AbortSignal } = {},
  ): Promise<ActionAnswers[R]> {
    const path = [target.resource, target.namespace, target.name, target.action].map(encodeURIComponent).join('/');
    const res = await this.raw('POST', `/v1/tenants/${encodeURIComponent(tenant)}/runtime/api/${path}`, opts);
    return (res.status === 204 ? undefined : await res.json()) as ActionAnswers[R];
  }

  /**
   * The Server-Sent Events of a stream route: each event's name, data (typed by the route's
   * payload schema, not checked at run time) and id, until the stream ends or `signal` aborts.
   * `lastEventId` resumes a stream.
   */
  async *events<K extends StreamKey>(
    key: K,
    opts: CallOptions<K> & { lastEventId?: string | undefined },
  ): AsyncGenerator<StreamEventOf<StreamRoutes[K]>> {
    const headers = {
      ...opts.headers,
      ...(opts.lastEventId !== undefined ? { 'last-event-id': opts.lastEventId } : {}),
    };
    yield* this.#stream<StreamRoutes[K]>(
      () => this.#checked(key, { ...(opts as Loose), headers }, 'text/event-stream'),
      opts.signal,
    );
  }

  async *#stream<M>(open: () => Promise<Response>, signal: AbortSignal | undefined): AsyncGenerator<StreamEventOf<M>> {
    const res = await open();
    if (!res.body) return;
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    // A consumer that stops early (break, return) cancels the answer: the connection closes.
    try {
      for (;;) {
        let chunk: Awaited<ReturnType<typeof reader.read>>;
        try {
          chunk = await reader.read();
        } catch (err) {
          if (signal?.aborted) return; // the caller ended the stream
          throw err;
        }
        if (chunk.done) return;
        buf += chunk.value;
        let idx: number;
        while ((idx = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, idx);
          buf = buf.slice(idx + 2);
          let event = 'message';
          let id: string | undefined;
          const data: string[] = [];
          for (const line of block.split('\n')) {
            if (line.startsWith('event:')) event = line.slice(6).trim();
            else if (line.startsWith('data:')) data.push(line.slice(5).trimStart());
            else if (line.startsWith('id:')) id = line.slice(3).trim();
          }
          if (data.length > 0)
            yield {
              event,
              data: JSON.parse(data.join('\n')) as unknown,
              ...(id !== undefined ? { id } : {}),
            } as StreamEventOf<M>;
        }
      }
    } finally {
      await reader.cancel().catch(() => {});
    }
  }

  async #checked(key: string, opts: Loose | undefined, accept: string): Promise<Response> {
    const res = await this.#send(key, opts, accept);
    if (!res.ok) throw await this.#error(res, opts?.token);
    return res;
  }

  #send(key: string, opts: Loose | undefined, accept: string): Promise<Response> {
    const o = opts ?? {};
    const method = key.slice(0, key.indexOf(' '));
    return this.#do(method, pathOf(key, o.params) + queryString(o.query), o.body, accept, o.headers, o.signal, o.token);
  }

  async #do(
    method: string,
    path: string,
    body: unknown,
    accept: string,
    extra: Record<string, string> = {},
    signal?: AbortSignal,
    token?: string,
  ): Promise<Response> {
    const key = token ?? (typeof this.#options.token === 'function' ? this.#options.token() : this.#options.token);
    const headers: Record<string, string> = { accept, ...extra };
    if (key) headers.authorization = `Bearer ${key}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    try {
      return await (this.#options.fetch ?? fetch)(this.baseUrl + path, {
        method,
        headers,
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        ...(signal ? { signal } : {}),
      });
    } catch (err) {
      if (signal?.aborted) throw err;
      const cause = (err as Error & { cause?: Error }).cause?.message ?? (err as Error).message;
      throw new ApiError({
        status: 0,
        code: 'CONNECTION_FAILED',
        message: `cannot reach the provisioner${this.baseUrl ? ` at ${this.baseUrl}` : ''}: ${cause}`,
      });
    }
  }

  async #error(res: Response, token?: string): Promise<ApiError> {
    const err = await ApiError.of(res);
    if (res.status === 401 && token === undefined) this.#options.onUnauthorized?.(err);
    return err;
  }
}
