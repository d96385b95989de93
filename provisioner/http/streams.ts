/**
 * Server-Sent Events answers (serveEventStream), each in a place its API key holds (keys/streams.ts).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { StreamSlot } from '../keys/streams.ts';
import type { StreamError } from '../api/types.ts';
import { SECURITY_HEADERS } from './security-headers.ts';

/**
 * What a stream's body writes with (see serveEventStream). `M` maps each event's name to its
 * payload's type (api/types.ts: `TenantStreamEvents`, `OperationLogEvents`, …), the types the
 * clients read: a payload that does not match its schema is a compile error here.
 */
export interface EventStream<M> {
  /** Aborted when the client goes away or the key is revoked. */
  signal: AbortSignal;
  /** Writes one event; false when the socket's buffer is full (then await drained()). */
  send<K extends keyof M & string>(event: K, data: M[K], id?: string | number): boolean;
  /** Writes a comment line (not an event). */
  comment(text: string): void;
  /** Resolves when the socket takes more data, or the stream is aborted. */
  drained(): Promise<void>;
}

/**
 * Answers a request with a Server-Sent Events stream written by `body`, in the place `slot` holds
 * under the caller's key: the headers, a keep-alive comment every 15 s, the end of the stream when
 * the key is revoked (an `error` event INVALID_API_KEY), an `error` event INTERNAL if `body`
 * throws, and the end. The slot is released when the stream ends.
 */
export async function serveEventStream<M extends { error: StreamError }>(
  slot: StreamSlot,
  request: FastifyRequest,
  reply: FastifyReply,
  failure: { log: string; message: string },
  body: (stream: EventStream<M>) => Promise<void>,
): Promise<void> {
  const abort = new AbortController();
  const stop = (): void => abort.abort();
  request.raw.on('close', stop);
  // The client may have gone while the route was still reading what the stream starts with.
  if (request.raw.socket.destroyed) stop();
  if (slot.signal.aborted) stop();
  else slot.signal.addEventListener('abort', stop, { once: true });
  reply.hijack();
  const res = reply.raw;
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    'x-accel-buffering': 'no',
    connection: 'keep-alive',
    ...SECURITY_HEADERS,
  });
  const write = (event: string, data: unknown, id?: string | number): boolean =>
    res.write(`${id !== undefined ? `id: ${id}\n` : ''}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  const fail = (error: StreamError): boolean => write('error', error);
  const stream: EventStream<M> = {
    signal: abort.signal,
    send: write,
    comment: (text) => void res.write(`: ${text}\n\n`),
    drained: () =>
      new Promise<void>((r) => {
        // A write to a socket the client closed returns false and never drains: the stream was aborted.
        if (abort.signal.aborted || res.destroyed) return r();
        res.once('drain', r);
        abort.signal.addEventListener('abort', () => r(), { once: true });
      }),
  };
  const keepAlive = setInterval(() => stream.comment('keep-alive'), 15_000);
  try {
    await body(stream);
    if (slot.revoked) fail({ code: 'INVALID_API_KEY', message: 'the API key of this stream was revoked' });
  } catch (err) {
    request.log.error({ err }, failure.log);
    fail({ code: 'INTERNAL', message: failure.message });
  } finally {
    slot.release();
    slot.signal.removeEventListener('abort', stop);
    clearInterval(keepAlive);
    res.end();
  }
}
