/**
 * The tunnel protocol, version 1: the one module both ends (the tunnel server in the provisioner
 * and the tunnel client in the runtime) use to speak over a WebSocket.
 *
 * Every WebSocket message is one binary frame:
 *
 *   byte 0     protocol version (1)
 *   byte 1     frame type (FrameType)
 *   bytes 2-5  stream id, unsigned 32-bit big-endian (0 for connection-level frames)
 *   bytes 6-   payload: raw bytes for `data`, a 32-bit credit for `window`, empty for `end`,
 *              UTF-8 JSON for the rest (small, validated on decode)
 *
 * Bodies travel as raw `data` frames, never as JSON or base64. A stream is one HTTP exchange:
 * the server opens it with `open` (request head), both sides send `data` then `end` for their body,
 * the client answers with `response` (response head); either side may `reset` it. Each side grants
 * the other per-stream credit with `window` frames (see mux.ts).
 *
 * Connection-level frames use stream id 0: `hello` (first frame of each side) and `goaway` (the
 * server is going away: open no new streams, dial a new connection, let the open streams finish
 * on this one). An end announces in its hello's `features` which optional frames it understands;
 * `goaway` is sent only to a peer that announced it, so an older runtime is closed as before.
 */

export const PROTOCOL_VERSION = 1;
/** WebSocket subprotocol offered by the client and selected by the server at the upgrade. */
export const SUBPROTOCOL = `hrt-tunnel.v${PROTOCOL_VERSION}`;
/** Path of the tunnel endpoint on the control plane. */
export const TUNNEL_PATH = '/v1/tunnel';
export const HEADER_BYTES = 6;

/**
 * The WebSocket message a request or response head of `headBytes` may need: heads travel as JSON,
 * whose escaping can at most double their size, plus the frame and the structure around it.
 */
export function headMessageBytes(headBytes: number): number {
  return headBytes * 2 + 256;
}
/** Optional frames an end understands, announced in its hello. */
export const FEATURES = ['goaway'] as const;
export type Feature = (typeof FEATURES)[number];

export const FrameType = {
  hello: 1,
  open: 2,
  response: 3,
  data: 4,
  end: 5,
  window: 6,
  reset: 7,
  goaway: 8,
} as const;
export type FrameTypeName = keyof typeof FrameType;

/** Header pairs in order, names lower-case; repeated names stay repeated (set-cookie). */
export type HeaderList = Array<[string, string]>;

export interface Hello {
  version: number;
  /** Credit the sender grants the peer on every new stream, in bytes. */
  window: number;
  /** Largest WebSocket message the sender accepts (its maxPayload). */
  maxMessageBytes: number;
  /** Most concurrent streams the sender accepts. */
  maxStreams: number;
  /** Optional frames the sender understands (unknown names are ignored). */
  features?: string[];
}

export interface RequestHead {
  method: string;
  /** Path and query as the runtime should see it, starting with '/'. */
  path: string;
  headers: HeaderList;
}

export interface ResponseHead {
  status: number;
  headers: HeaderList;
}

/** Why a stream was reset; each maps to a clear HTTP error at the control plane. */
export const ResetCode = {
  /** The receiver already has its maximum of concurrent streams. */
  refused: 'REFUSED_STREAM',
  /** No response head within the request timeout. */
  timeout: 'TIMEOUT',
  /** No frame on the stream within the idle timeout. */
  idle: 'IDLE_TIMEOUT',
  /** A request or response head is larger than the configured header limit. */
  headersTooLarge: 'HEADERS_TOO_LARGE',
  /** The peer sent more data than it had credit for. */
  flowControl: 'FLOW_CONTROL_ERROR',
  /** The upstream service (router, app-proxy) could not be reached or failed mid-body. */
  upstream: 'UPSTREAM_ERROR',
  /** The requester went away. */
  cancelled: 'CANCELLED',
  /** A frame that does not fit the stream's state. */
  protocol: 'PROTOCOL_ERROR',
  /** The connection carrying the stream closed. */
  connectionLost: 'CONNECTION_LOST',
  internal: 'INTERNAL_ERROR',
} as const;
export type ResetCode = (typeof ResetCode)[keyof typeof ResetCode];
const RESET_CODES = new Set<string>(Object.values(ResetCode));

/** WebSocket close codes used by the tunnel (4000–4999 are for applications). */
export const CloseCode = {
  normal: 1000,
  goingAway: 1001,
  /** ws closes with 1009 itself when a message exceeds maxPayload. */
  messageTooBig: 1009,
  protocolError: 4000,
  /** A newer connection of the same runtime replaced this one. */
  replaced: 4001,
  /** The runtime token was revoked (or no longer authenticates). */
  revoked: 4003,
  /** The peer missed its heartbeat. */
  heartbeatTimeout: 4008,
  /** The peer speaks a protocol version this end does not. */
  unsupportedVersion: 4010,
} as const;

export type Frame =
  | { type: 'hello'; streamId: 0; hello: Hello }
  | { type: 'open'; streamId: number; head: RequestHead }
  | { type: 'response'; streamId: number; head: ResponseHead }
  | { type: 'data'; streamId: number; chunk: Buffer }
  | { type: 'end'; streamId: number }
  | { type: 'window'; streamId: number; increment: number }
  | { type: 'reset'; streamId: number; code: ResetCode; message: string }
  | { type: 'goaway'; streamId: 0; message: string; reconnect: boolean };

export class ProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ProtocolError';
  }
}

const MAX_STREAM_ID = 0xffffffff;

function header(type: number, streamId: number, payloadBytes: number): Buffer {
  const buf = Buffer.allocUnsafe(HEADER_BYTES + payloadBytes);
  buf[0] = PROTOCOL_VERSION;
  buf[1] = type;
  buf.writeUInt32BE(streamId, 2);
  return buf;
}

function json(type: number, streamId: number, value: unknown): Buffer {
  const body = Buffer.from(JSON.stringify(value), 'utf8');
  const buf = header(type, streamId, body.length);
  body.copy(buf, HEADER_BYTES);
  return buf;
}

export function encodeFrame(frame: Frame): Buffer {
  if (!Number.isInteger(frame.streamId) || frame.streamId < 0 || frame.streamId > MAX_STREAM_ID) {
    throw new RangeError(`stream id ${frame.streamId} is out of range`);
  }
  switch (frame.type) {
    case 'hello':
      return json(FrameType.hello, 0, frame.hello);
    case 'open':
      return json(FrameType.open, frame.streamId, frame.head);
    case 'response':
      return json(FrameType.response, frame.streamId, frame.head);
    case 'data': {
      const buf = header(FrameType.data, frame.streamId, frame.chunk.length);
      frame.chunk.copy(buf, HEADER_BYTES);
      return buf;
    }
    case 'end':
      return header(FrameType.end, frame.streamId, 0);
    case 'window': {
      const buf = header(FrameType.window, frame.streamId, 4);
      buf.writeUInt32BE(frame.increment, HEADER_BYTES);
      return buf;
    }
    case 'reset':
      return json(FrameType.reset, frame.streamId, { code: frame.code, message: frame.message });
    case 'goaway':
      return json(FrameType.goaway, 0, { message: frame.message, reconnect: frame.reconnect });
  }
}

/**
 * Writes a data frame carrying `pieces` (together `bytes` long) into `target`, which must hold at
 * least HEADER_BYTES + bytes, and returns the frame, a view of `target`: the sender gathers
 * several body chunks into one frame and reuses frame buffers instead of allocating per chunk.
 */
export function encodeDataFrameInto(
  target: Buffer,
  streamId: number,
  pieces: readonly Buffer[],
  bytes: number,
): Buffer {
  if (!Number.isInteger(streamId) || streamId <= 0 || streamId > MAX_STREAM_ID)
    throw new RangeError(`stream id ${streamId} is out of range`);
  const n = HEADER_BYTES + bytes;
  if (target.length < n)
    throw new RangeError(`frame buffer of ${target.length} bytes is too small for ${bytes} bytes of data`);
  target[0] = PROTOCOL_VERSION;
  target[1] = FrameType.data;
  target.writeUInt32BE(streamId, 2);
  let offset = HEADER_BYTES;
  for (const p of pieces) offset += p.copy(target, offset);
  if (offset !== n) throw new RangeError(`data pieces hold ${offset - HEADER_BYTES} bytes, not ${bytes}`);
  return target.subarray(0, n);
}

function parseJson(payload: Buffer, what: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(payload.toString('utf8'));
  } catch {
    throw new ProtocolError(`${what} payload is not valid JSON`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new ProtocolError(`${what} payload is not an object`);
  return value as Record<string, unknown>;
}

const TOKEN_RE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
// Header values: visible characters, spaces and tabs; never CR, LF or NUL (no response splitting).
const VALUE_RE = /^[\t\x20-\x7e\x80-\uffff]*$/;

function headerList(value: unknown, what: string): HeaderList {
  if (!Array.isArray(value)) throw new ProtocolError(`${what}.headers is not a list`);
  const out: HeaderList = [];
  for (const pair of value as unknown[]) {
    if (!Array.isArray(pair) || pair.length !== 2)
      throw new ProtocolError(`${what}.headers holds an entry that is not a [name, value] pair`);
    const [name, v] = pair as [unknown, unknown];
    if (typeof name !== 'string' || !TOKEN_RE.test(name))
      throw new ProtocolError(`${what}.headers holds an invalid header name`);
    if (typeof v !== 'string' || !VALUE_RE.test(v))
      throw new ProtocolError(`${what}.headers holds an invalid value for '${name}'`);
    out.push([name.toLowerCase(), v]);
  }
  return out;
}

function positiveInt(obj: Record<string, unknown>, key: string, what: string): number {
  const v = obj[key];
  if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0 || v > MAX_STREAM_ID)
    throw new ProtocolError(`${what}.${key} is not a positive integer`);
  return v;
}

/** Decodes one WebSocket message; throws ProtocolError for anything malformed. `data` chunks share memory with `buf`. */
export function decodeFrame(buf: Buffer): Frame {
  if (buf.length < HEADER_BYTES)
    throw new ProtocolError(`frame of ${buf.length} bytes is shorter than the ${HEADER_BYTES}-byte header`);
  if (buf[0] !== PROTOCOL_VERSION)
    throw new ProtocolError(`frame has protocol version ${buf[0]}; this end speaks ${PROTOCOL_VERSION}`);
  const type = buf[1];
  const streamId = buf.readUInt32BE(2);
  const payload = buf.subarray(HEADER_BYTES);
  const connectionLevel = type === FrameType.hello || type === FrameType.goaway;
  if (!connectionLevel && streamId === 0) throw new ProtocolError('stream frames must not use stream id 0');
  switch (type) {
    case FrameType.hello: {
      if (streamId !== 0) throw new ProtocolError('hello must use stream id 0');
      const o = parseJson(payload, 'hello');
      return {
        type: 'hello',
        streamId: 0,
        hello: {
          version: positiveInt(o, 'version', 'hello'),
          window: positiveInt(o, 'window', 'hello'),
          maxMessageBytes: positiveInt(o, 'maxMessageBytes', 'hello'),
          maxStreams: positiveInt(o, 'maxStreams', 'hello'),
          ...(Array.isArray(o.features)
            ? {
                features: (o.features as unknown[])
                  .filter((f): f is string => typeof f === 'string' && f.length <= 64)
                  .slice(0, 32),
              }
            : {}),
        },
      };
    }
    case FrameType.goaway: {
      if (streamId !== 0) throw new ProtocolError('goaway must use stream id 0');
      const o = parseJson(payload, 'goaway');
      return {
        type: 'goaway',
        streamId: 0,
        message: typeof o.message === 'string' ? o.message.slice(0, 1024) : '',
        reconnect: o.reconnect !== false,
      };
    }
    case FrameType.open: {
      const o = parseJson(payload, 'open');
      const { method, path } = o;
      if (typeof method !== 'string' || !TOKEN_RE.test(method))
        throw new ProtocolError('open.method is not an HTTP method');
      if (typeof path !== 'string' || !path.startsWith('/') || !VALUE_RE.test(path) || /\s/.test(path)) {
        throw new ProtocolError('open.path must start with / and hold no whitespace');
      }
      return { type: 'open', streamId, head: { method, path, headers: headerList(o.headers, 'open') } };
    }
    case FrameType.response: {
      const o = parseJson(payload, 'response');
      const { status } = o;
      if (typeof status !== 'number' || !Number.isInteger(status) || status < 200 || status > 599) {
        throw new ProtocolError('response.status must be a final HTTP status (200-599)');
      }
      return { type: 'response', streamId, head: { status, headers: headerList(o.headers, 'response') } };
    }
    case FrameType.data:
      return { type: 'data', streamId, chunk: payload };
    case FrameType.end:
      if (payload.length !== 0) throw new ProtocolError('end carries no payload');
      return { type: 'end', streamId };
    case FrameType.window: {
      if (payload.length !== 4) throw new ProtocolError('window carries a 4-byte increment');
      const increment = payload.readUInt32BE(0);
      if (increment === 0) throw new ProtocolError('window increment must be positive');
      return { type: 'window', streamId, increment };
    }
    case FrameType.reset: {
      const o = parseJson(payload, 'reset');
      const code = typeof o.code === 'string' && RESET_CODES.has(o.code) ? (o.code as ResetCode) : ResetCode.internal;
      const message = typeof o.message === 'string' ? o.message.slice(0, 1024) : '';
      return { type: 'reset', streamId, code, message };
    }
    default:
      throw new ProtocolError(`unknown frame type ${type}`);
  }
}

/** Bytes a head takes on the wire: what the header limit is measured against. */
export function headBytes(head: RequestHead | ResponseHead): number {
  let n = 'path' in head ? head.method.length + head.path.length : 3;
  for (const [k, v] of head.headers) n += k.length + v.length + 4;
  return n;
}
