/**
 * Server-Sent Events over fetch (EventSource cannot send the Authorization header, and the key
 * must never go into a URL). A stream resumes after a disconnect with Last-Event-ID = the id of
 * the last event it delivered, so the server sends each event once; while it reconnects the
 * status is `reconnecting` (the page shows a banner). An `end` event finishes it; an `error`
 * event or a 4xx answer stops it with the API's error.
 */
import { ApiError, authHeaders, errorOf, type StreamError, type StreamEventOf } from './api.ts';
import {
  pathOf,
  queryString,
  type ParamsOf,
  type QueryOf,
  type StreamKey,
  type StreamRoutes,
} from '../../provisioner/http/api-client.ts';

/**
 * One event of a stream whose events are `M` (the API's types: `TenantStreamEvents`,
 * `OperationLogEvents`, …): testing `event` types `data` as the route's payload schema says (the
 * data is not checked at run time).
 */
export type StreamEvent<M> = StreamEventOf<M>;

export type StreamStatus = 'connecting' | 'open' | 'reconnecting' | 'ended' | 'failed' | 'closed';

export interface StreamOptions<M> {
  /** Resume after this event id. */
  lastEventId?: string;
  /** Called with the events of one network read together (fewer renders on a fast stream). */
  onEvents(events: StreamEvent<M>[]): void;
  onStatus?(status: StreamStatus, error?: ApiError): void;
}

export interface Stream {
  close(): void;
  /** The id of the last event delivered. */
  lastEventId(): string | undefined;
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
  });

/** A stream route's options: its path parameters and query typed by the route map, its events by StreamRoutes. */
export type StreamRouteOptions<K extends StreamKey> = StreamOptions<StreamRoutes[K]> &
  ([ParamsOf<K>] extends [never] ? { params?: never } : { params: ParamsOf<K> }) & { query?: QueryOf<K> };

/** A stream route of the API (`GET /v1/tenants/events`, …) by its key, its events typed by the route. */
export function openStream<K extends StreamKey>(key: K, opts: StreamRouteOptions<K>): Stream {
  const { params, query } = opts as { params?: Record<string, string>; query?: Record<string, string | undefined> };
  return openPath<StreamRoutes[K]>(pathOf(key, params) + queryString(query), opts);
}

function openPath<M extends { error: StreamError }>(path: string, opts: StreamOptions<M>): Stream {
  const abort = new AbortController();
  let lastId = opts.lastEventId;
  let status: StreamStatus = 'connecting';
  const setStatus = (s: StreamStatus, err?: ApiError) => {
    if (status === s && !err) return;
    status = s;
    opts.onStatus?.(s, err);
  };

  const run = async () => {
    let backoff = 250;
    let finished = false;
    while (!abort.signal.aborted && !finished) {
      try {
        const res = await fetch(path, {
          headers: {
            ...authHeaders(),
            accept: 'text/event-stream',
            ...(lastId !== undefined ? { 'last-event-id': lastId } : {}),
          },
          signal: abort.signal,
          cache: 'no-store',
        });
        if (!res.ok) {
          const err = await errorOf(res);
          // A 4xx will not change by retrying (a 429 will, after a while).
          if (res.status >= 400 && res.status < 500 && res.status !== 429) {
            setStatus('failed', err);
            return;
          }
          throw err;
        }
        setStatus('open');
        backoff = 250;
        const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = '';
        let event = 'message';
        let data: string[] = [];
        let id: string | undefined;
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          const batch: StreamEvent<M>[] = [];
          let stop: StreamError | undefined;
          let nl: number;
          while ((nl = buffer.indexOf('\n')) >= 0) {
            const line = buffer.slice(0, nl).replace(/\r$/, '');
            buffer = buffer.slice(nl + 1);
            if (line === '') {
              if (data.length > 0) {
                const parsed = JSON.parse(data.join('\n')) as unknown;
                if (event === 'error') stop = parsed as StreamError;
                batch.push({ event, data: parsed, id } as StreamEvent<M>);
                if (id !== undefined) lastId = id;
              }
              event = 'message';
              data = [];
              id = undefined;
            } else if (line.startsWith(':')) {
              // a comment (keep-alive)
            } else {
              const colon = line.indexOf(':');
              const field = colon < 0 ? line : line.slice(0, colon);
              const v = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
              if (field === 'event') event = v;
              else if (field === 'data') data.push(v);
              else if (field === 'id') id = v;
            }
          }
          if (batch.length > 0) {
            opts.onEvents(batch);
            if (batch.some((e) => e.event === 'end')) finished = true;
            if (stop) {
              setStatus('failed', new ApiError({ status: 0, code: stop.code, message: stop.message }));
              return;
            }
          }
        }
      } catch (err) {
        if (abort.signal.aborted) break;
        if (err instanceof SyntaxError) {
          setStatus(
            'failed',
            new ApiError({ status: 0, code: 'BAD_STREAM', message: 'the stream sent an event that is not JSON' }),
          );
          return;
        }
      }
      if (abort.signal.aborted || finished) break;
      setStatus('reconnecting');
      await sleep(backoff, abort.signal);
      backoff = Math.min(backoff * 2, 2000);
    }
    setStatus(abort.signal.aborted ? 'closed' : 'ended');
  };
  void run();
  return {
    close() {
      abort.abort();
    },
    lastEventId: () => lastId,
  };
}
