/**
 * The public surface the tests drive: real HTTP to the provisioner child process and the
 * `provisioner` CLI (`node bin/provisioner.ts --url … --token …`).
 *
 * A route of the API's map is called by its key (`request`, `expectStatus`): its path parameters,
 * query and body typed from the map and its answer typed from the route's schema at the status,
 * as the one client (provisioner/http/api-client.ts) types them. The request is sent as the
 * harness always sent it (one `#send`: the harness's key unless a header replaces it, a JSON
 * body, a 30 s bound, the answer parsed as JSON); test/unit/e2e-api-client.test.ts checks what
 * goes on the wire. Paths outside the map (the runtime's API through the tunnel, the Argo CD
 * route) go through `raw`, whose answer is `unknown` for the test to check.
 */
import { join } from 'node:path';
import type { Static, TRef, TSchema } from 'typebox';
import { REPO_ROOT } from '../../../sandbox/provisioner-process.ts';
import { run, StopWaiting, until } from '../../../sandbox/processes.ts';
import {
  ApiError,
  pathOf,
  queryString,
  ApiClient as TypedClient,
  type AnswerOf,
  type CallOptions,
  type RouteKey,
} from '../../../provisioner/http/api-client.ts';
import type { ApiRoutes } from '../../../provisioner/http/api-routes.ts';
import type { ErrorBody, Operation, SignupResponse, Tenant, WireRefs } from '../../../provisioner/api/types.ts';
/** The API's answers, as its route schemas define them. */
export type { Operation, SignupResponse, Tenant };
export { ApiError };

/** What a test gives a route besides its key: path parameters, query, body and extra headers. */
export type RouteOptions<K extends RouteKey> = Omit<CallOptions<K>, 'signal' | 'token'>;
type RouteArgs<K extends RouteKey> =
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type
  {} extends RouteOptions<K> ? [opts?: RouteOptions<K>] : [opts: RouteOptions<K>];

type Responses<K extends RouteKey> = ApiRoutes[K] extends { response: infer R } ? R : never;
/**
 * A route's answer at `S` as its schema says: the error body at an error status (the map's
 * `Ref('Error')`), unknown at a status the map does not name.
 */
export type AnswerAt<K extends RouteKey, S extends number> = S extends keyof Responses<K>
  ? Responses<K>[S] extends TRef<'Error'>
    ? ErrorBody
    : Responses<K>[S] extends TSchema
      ? Static<Responses<K>[S], WireRefs>
      : unknown
  : unknown;

/** An answer of a route of the map, never thrown: the route's answer on a success, else its body and the ApiError it carries. */
export type RouteResult<K extends RouteKey> =
  | { ok: true; status: number; headers: Headers; body: AnswerOf<K> }
  | { ok: false; status: number; headers: Headers; body: unknown; error: ApiError };

/** An answer of a path outside the route map: its status and its JSON body, unchecked. */
export interface RawAnswer {
  status: number;
  headers: Headers;
  body: unknown;
}

/** A field of a JSON answer by its path (`fieldOf(body, 'metadata', 'name')`), undefined when absent. */
export function fieldOf(value: unknown, ...path: string[]): unknown {
  let v = value;
  for (const name of path) {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return undefined;
    v = (v as Record<string, unknown>)[name];
  }
  return v;
}

/** A string field of a JSON answer (`stringAt(body, 'Version')`), undefined when absent or not a string. */
export function stringAt(value: unknown, ...path: string[]): string | undefined {
  const v = fieldOf(value, ...path);
  return typeof v === 'string' ? v : undefined;
}

interface Sent extends RawAnswer {
  statusText: string;
  text: string;
}

export class ApiClient {
  readonly url: string;
  readonly token: string;
  /** The API's one client (provisioner/http/api-client.ts), typed from the route map. */
  readonly api: TypedClient;

  constructor(url: string, token: string) {
    this.url = url;
    this.token = token;
    this.api = new TypedClient({ baseUrl: url, token: token || undefined });
  }

  withToken(token: string): ApiClient {
    return new ApiClient(this.url, token);
  }

  /** A route of the map by its key: its answer (typed by the route) or its error, with the status; never thrown. */
  async request<K extends RouteKey>(key: K, ...[opts]: RouteArgs<K>): Promise<RouteResult<K>> {
    const { method, path, body, headers } = target(key, opts);
    const res = await this.#send(method, path, body, headers);
    if (res.status >= 200 && res.status < 300)
      // The route's answer, typed by its schema as the one client types it (not checked at run time).
      return { ok: true, status: res.status, headers: res.headers, body: res.body as AnswerOf<K> };
    const error = await ApiError.of(
      new Response(res.text === '' ? null : res.text, {
        status: res.status,
        statusText: res.statusText,
        headers: res.headers,
      }),
    );
    return { ok: false, status: res.status, headers: res.headers, body: res.body, error };
  }

  /**
   * A route of the map, its answer at `expected` (the route's answer, or its error body at an
   * error status); throws unless the status is `expected`.
   */
  async expectStatus<K extends RouteKey, S extends number>(
    key: K,
    opts: RouteOptions<K>,
    expected: S,
  ): Promise<AnswerAt<K, S>> {
    const { method, path, body, headers } = target(key, opts);
    const res = await this.#send(method, path, body, headers);
    if (res.status !== expected)
      throw new Error(`${method} ${path}: expected ${expected}, got ${res.status}: ${JSON.stringify(res.body)}`);
    // The route's schema at that status types it, as the one client types its answers.
    return res.body as AnswerAt<K, S>;
  }

  /**
   * A path outside the route map (the runtime's API through the tunnel, the Argo CD route): its
   * status and its JSON body as `unknown`, for the test to check; never thrown for a status.
   */
  async raw(
    method: string,
    path: string,
    opts: { body?: unknown; headers?: Record<string, string> } = {},
  ): Promise<RawAnswer> {
    const { status, headers, body } = await this.#send(method, path, opts.body, opts.headers ?? {});
    return { status, headers, body };
  }

  /** The one way the harness sends a request (as it always has: its key unless a header replaces it, a 30 s bound). */
  async #send(method: string, path: string, body: unknown, headers: Record<string, string>): Promise<Sent> {
    const res = await fetch(`${this.url}${path}`, {
      method,
      headers: {
        ...(this.token ? { authorization: `Bearer ${this.token}` } : {}),
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...headers,
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(30_000),
    });
    const text = await res.text();
    return {
      status: res.status,
      statusText: res.statusText,
      headers: res.headers,
      text,
      body: text ? (JSON.parse(text) as unknown) : undefined,
    };
  }

  tenant(id: string): Promise<Tenant> {
    return this.api.call('GET /v1/tenants/:id', { params: { id }, signal: AbortSignal.timeout(30_000) });
  }

  async operations(tenantId: string): Promise<Operation[]> {
    const page = await this.api.call('GET /v1/tenants/:id/operations', {
      params: { id: tenantId },
      query: { limit: 100 },
      signal: AbortSignal.timeout(30_000),
    });
    return page.items;
  }

  operation(id: string): Promise<Operation> {
    return this.api.call('GET /v1/operations/:id', { params: { id }, signal: AbortSignal.timeout(30_000) });
  }

  async logLines(operationId: string): Promise<string[]> {
    const log = await this.api.call('GET /v1/operations/:id/log', {
      params: { id: operationId },
      signal: AbortSignal.timeout(30_000),
    });
    return log.items.map((l) => l.line);
  }

  /**
   * Waits until the tenant's phase is `phase` with the spec observed; throws at once, with the
   * operation log's tail, when the tenant turns Failed/Stalled or its last operation failed.
   */
  async waitForPhase(id: string, phase: string, timeoutMs: number): Promise<Tenant> {
    return until(
      `tenant ${id} ${phase}`,
      timeoutMs,
      async () => {
        const t = await this.tenant(id);
        if (
          t.status.phase === 'Failed' ||
          t.status.conditions.some((c) => c.type === 'Stalled' && c.status === 'True')
        ) {
          throw new StopWaiting(
            `tenant ${id} is ${t.status.phase}: ${JSON.stringify(t.status.conditions)}${await this.#lastLogTail(t)}`,
          );
        }
        if (t.status.phase === phase && t.status.observedGeneration === t.generation) return t;
        // A failed attempt would be retried with backoff; in these tests it is a failure at once.
        if (t.status.lastOperationId) {
          const op = await this.operation(t.status.lastOperationId);
          if (op.state === 'failed')
            throw new StopWaiting(
              `operation ${op.kind} ${op.id} of tenant ${id} failed: ${op.error?.code ?? ''} ${(op.error?.message ?? '').slice(-1500)}${await this.#lastLogTail(t)}`,
            );
        }
        return undefined;
      },
      1000,
    ).catch(async (err: unknown) => {
      if (err instanceof StopWaiting) throw err;
      const t = await this.tenant(id).catch(() => undefined);
      throw new Error(`${err instanceof Error ? err.message : String(err)}${t ? await this.#lastLogTail(t) : ''}`);
    });
  }

  async #lastLogTail(t: Tenant): Promise<string> {
    if (!t.status.lastOperationId) return '';
    const lines = await this.logLines(t.status.lastOperationId).catch(() => []);
    return `\n--- last operation log (tail) ---\n${lines
      .slice(-25)
      .map((l) => l.slice(0, 400))
      .join('\n')}`;
  }
}

/** A route's method, path (its parameters filled in, its query) and what is sent with it. */
function target(
  key: string,
  opts: { params?: unknown; query?: unknown; body?: unknown; headers?: Record<string, string> } | undefined,
): { method: string; path: string; body: unknown; headers: Record<string, string> } {
  const o = opts ?? {};
  return {
    method: key.slice(0, key.indexOf(' ')),
    path:
      pathOf(key, o.params as Parameters<typeof pathOf>[1]) + queryString(o.query as Parameters<typeof queryString>[0]),
    body: o.body,
    headers: o.headers ?? {},
  };
}

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the `provisioner` CLI against the API (`input`: its standard input). */
export async function cli(url: string, token: string, args: string[], input?: string): Promise<CliResult> {
  try {
    const { stdout, stderr } = await run(
      process.execPath,
      [join(REPO_ROOT, 'bin', 'provisioner.ts'), '--url', url, '--token', token, ...args],
      { timeoutMs: 60_000, ...(input !== undefined ? { input } : {}) },
    );
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; exitCode?: number | null; message?: string };
    if (e.exitCode === undefined) throw err;
    return { code: e.exitCode ?? -1, stdout: e.stdout ?? '', stderr: e.stderr ?? e.message ?? '' };
  }
}
