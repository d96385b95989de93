import type { StreamEventOf } from '../http/api-types.ts';

/**
 * The CLI's HTTP client. Every non-2xx answer becomes an ApiError carrying the API's stable code
 * and message, which the CLI prints and turns into a non-zero exit.
 */
export class ApiError extends Error {
  readonly code: string;
  readonly status: number;
  readonly field: string | undefined;
  /** The answer's Retry-After (seconds), when it had one: a 503 or 429 says when to try again. */
  readonly retryAfterSeconds: number | undefined;
  constructor(status: number, code: string, message: string, field?: string, retryAfterSeconds?: number) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.field = field;
    this.retryAfterSeconds = retryAfterSeconds;
  }
}

export interface ClientOptions {
  url: string;
  token: string | undefined;
}

export class ApiClient {
  readonly #base: string;
  readonly #token: string | undefined;

  constructor(opts: ClientOptions) {
    this.#base = opts.url.replace(/\/+$/, '');
    this.#token = opts.token;
  }

  async #fetch(
    method: string,
    path: string,
    body?: unknown,
    accept = 'application/json',
    signal?: AbortSignal,
    extra: Record<string, string> = {},
  ): Promise<Response> {
    const headers: Record<string, string> = { accept, ...extra };
    if (this.#token) headers.authorization = `Bearer ${this.#token}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    let res: Response;
    try {
      res = await fetch(this.#base + path, {
        method,
        headers,
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        ...(signal ? { signal } : {}),
      });
    } catch (err) {
      throw new ApiError(
        0,
        'CONNECTION_FAILED',
        `cannot reach the provisioner at ${this.#base}: ${(err as Error & { cause?: Error }).cause?.message ?? (err as Error).message}`,
      );
    }
    if (!res.ok) {
      let code = `HTTP_${res.status}`;
      let message = res.statusText;
      let field: string | undefined;
      try {
        const e = ((await res.json()) as { error?: { code?: string; message?: string; field?: string } }).error;
        code = e?.code ?? code;
        message = e?.message ?? message;
        field = e?.field;
      } catch {
        // not a JSON error body: keep the HTTP status
      }
      const retryAfter = Number(res.headers.get('retry-after') ?? NaN);
      throw new ApiError(res.status, code, message, field, Number.isFinite(retryAfter) ? retryAfter : undefined);
    }
    return res;
  }

  /** The answer's JSON; undefined for an answer without a body (204). */
  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const res = await this.#fetch(method, path, body);
    if (res.status === 204) return undefined as T;
    return (await res.json()) as T;
  }

  /**
   * Server-Sent Events from `path`: yields each event's name, parsed data and id (when it has one)
   * until the stream ends (or `signal` aborts). `lastEventId` resumes a stream (the Last-Event-ID header).
   * `M` is the stream's events by name (http/api-types.ts, e.g. `OperationLogEvents`): the data
   * is typed by the route's payload schema, not checked at run time.
   */
  async *events<M>(path: string, signal?: AbortSignal, lastEventId?: string): AsyncGenerator<StreamEventOf<M>> {
    const res = await this.#fetch(
      'GET',
      path,
      undefined,
      'text/event-stream',
      signal,
      lastEventId !== undefined ? { 'last-event-id': lastEventId } : {},
    );
    if (!res.body) return;
    const decoder = new TextDecoder();
    let buf = '';
    const chunks = async function* (body: ReadableStream<Uint8Array>) {
      try {
        for await (const chunk of body) yield chunk;
      } catch (err) {
        if (signal?.aborted) return; // the caller ended the stream
        throw err;
      }
    };
    for await (const chunk of chunks(res.body)) {
      buf += decoder.decode(chunk, { stream: true });
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
  }
}
