import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ErrorCode } from '../errors.ts';
import { SECURITY_HEADERS } from './security-headers.ts';

/**
 * Long-lived answers (Server-Sent Events) by the API key that opened them: a revoked key's
 * streams end at once (the key-revoked notice reaches every replica), and a key may hold only so
 * many at a time.
 */
export class KeyStreams {
  readonly #byKey = new Map<string, Set<() => void>>();

  /** Streams open with this key now. */
  count(keyId: string): number {
    return this.#byKey.get(keyId)?.size ?? 0;
  }

  /** Registers a stream's closer; returns the function that unregisters it. */
  add(keyId: string, close: () => void): () => void {
    let set = this.#byKey.get(keyId);
    if (!set) this.#byKey.set(keyId, (set = new Set()));
    set.add(close);
    return () => {
      set.delete(close);
      if (set.size === 0 && this.#byKey.get(keyId) === set) this.#byKey.delete(keyId);
    };
  }

  /** Ends every stream opened with the key (it was revoked). */
  closeKey(keyId: string): void {
    const set = this.#byKey.get(keyId);
    if (!set) return;
    this.#byKey.delete(keyId);
    for (const close of set) close();
  }
}

/** What a stream's body writes with (see serveEventStream). */
export interface EventStream {
  /** Aborted when the client goes away or the key is revoked. */
  signal: AbortSignal;
  /** Writes one event; false when the socket's buffer is full (then await drained()). */
  send(event: string, data: unknown, id?: string | number): boolean;
  /** Writes a comment line (not an event). */
  comment(text: string): void;
  /** Resolves when the socket takes more data, or the stream is aborted. */
  drained(): Promise<void>;
}

/**
 * Answers a request with a Server-Sent Events stream written by `body`: the headers, a keep-alive
 * comment every 15 s, registration under the caller's key (a revoked key ends the stream with an
 * `error` event INVALID_API_KEY), an `error` event INTERNAL if `body` throws, and the end.
 */
export async function serveEventStream(
  streams: KeyStreams,
  request: FastifyRequest,
  reply: FastifyReply,
  keyId: string | undefined,
  failure: { log: string; message: string },
  body: (stream: EventStream) => Promise<void>,
): Promise<void> {
  const abort = new AbortController();
  request.raw.on('close', () => abort.abort());
  let revoked = false;
  const unregister =
    keyId !== undefined
      ? streams.add(keyId, () => {
          revoked = true;
          abort.abort();
        })
      : () => {};
  reply.hijack();
  const res = reply.raw;
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    'x-accel-buffering': 'no',
    connection: 'keep-alive',
    ...SECURITY_HEADERS,
  });
  const stream: EventStream = {
    signal: abort.signal,
    send: (event, data, id) =>
      res.write(`${id !== undefined ? `id: ${id}\n` : ''}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`),
    comment: (text) => void res.write(`: ${text}\n\n`),
    drained: () =>
      new Promise<void>((r) => {
        res.once('drain', r);
        abort.signal.addEventListener('abort', () => r(), { once: true });
      }),
  };
  const keepAlive = setInterval(() => stream.comment('keep-alive'), 15_000);
  try {
    await body(stream);
    if (revoked)
      stream.send('error', { code: 'INVALID_API_KEY', message: 'the API key of this stream was revoked' } satisfies {
        code: ErrorCode;
        message: string;
      });
  } catch (err) {
    request.log.error({ err }, failure.log);
    stream.send('error', { code: 'INTERNAL', message: failure.message } satisfies { code: ErrorCode; message: string });
  } finally {
    unregister();
    clearInterval(keepAlive);
    res.end();
  }
}
