/**
 * Stream multiplexing over one WebSocket, shared by both ends of the tunnel.
 *
 * Flow control is per stream and credit based: each end announces in its `hello` how many bytes
 * it will accept on a new stream before granting more (`window`). A sender never sends more data
 * than its credit; a receiver grants credit back (a `window` frame) only once the bytes it
 * received were handed on to the stream's consumer. So at most `window` bytes of one stream are
 * buffered anywhere (plus the body Readable's own buffer, at most 64 KiB and one chunk), a
 * consumer that stops reading stalls only its own stream, and the memory one tunnel can hold is
 * bounded by maxStreams × (window + 128 KiB).
 */
import { EventEmitter } from 'node:events';
import { type Duplex, Readable } from 'node:stream';
import type WebSocket from 'ws';
import {
  CloseCode,
  decodeFrame,
  encodeDataFrameInto,
  FEATURES,
  encodeFrame,
  type Frame,
  HEADER_BYTES,
  headMessageBytes,
  headBytes,
  type Hello,
  PROTOCOL_VERSION,
  ProtocolError,
  type RequestHead,
  ResetCode,
  type ResponseHead,
} from './frames.ts';

/** Free data-frame buffers kept per connection (each maxChunkBytes + 6 bytes). */
const FRAME_POOL_SIZE = 16;

export interface MuxOptions {
  /** The server opens streams (odd ids); the client answers them. */
  role: 'server' | 'client';
  /** Credit granted to the peer on each stream, in bytes. */
  window: number;
  /** This end's WebSocket maxPayload; announced so the peer sizes its frames. */
  maxMessageBytes: number;
  /** Concurrent streams this end accepts. */
  maxStreams: number;
  /** Largest request or response head (method, path, header names and values) accepted or sent. */
  maxHeaderBytes: number;
  /** A stream with no frame in either direction for this long is reset with IDLE_TIMEOUT. */
  idleTimeoutMs: number;
  /** Largest body chunk this end sends in one frame (further capped by the peer's maxMessageBytes). */
  maxChunkBytes?: number;
}

export class TunnelStreamError extends Error {
  readonly code: ResetCode;
  /** True when the peer reset the stream, false when this end did. */
  readonly remote: boolean;
  constructor(code: ResetCode, message: string, remote: boolean) {
    super(message);
    this.name = 'TunnelStreamError';
    this.code = code;
    this.remote = remote;
  }
}

/** The receiving half of a stream: a Readable that grants credit as its consumer reads. */
class IncomingBody extends Readable {
  readonly #stream: TunnelStream;
  readonly #queue: Buffer[] = [];
  #queued = 0;
  #wanting = false;
  #ended = false;

  constructor(stream: TunnelStream, highWaterMark: number) {
    super({ highWaterMark });
    this.#stream = stream;
    // A reset with nobody reading yet must not become an unhandled 'error' (a crash); consumers
    // that pipe or iterate still get the error through their own listeners.
    this.on('error', () => {});
  }

  /** Bytes received and not yet handed to the consumer, plus what the Readable holds. */
  get bufferedBytes(): number {
    return this.#queued + this.readableLength;
  }

  receive(chunk: Buffer): void {
    this.#queue.push(chunk);
    this.#queued += chunk.length;
    if (this.#wanting) this.#flush();
  }

  finish(): void {
    this.#ended = true;
    if (this.#wanting || this.#queue.length === 0) this.#flush();
  }

  override _read(): void {
    this.#wanting = true;
    this.#flush();
  }

  #flush(): void {
    let handed = 0;
    while (this.#wanting && this.#queue.length > 0) {
      const chunk = this.#queue.shift()!;
      this.#queued -= chunk.length;
      handed += chunk.length;
      this.#wanting = this.push(chunk);
    }
    if (handed > 0) this.#stream.consumed(handed);
    if (this.#ended && this.#queue.length === 0 && !this.readableEnded) {
      this.#wanting = false;
      this.push(null);
    }
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.#queue.length = 0;
    this.#queued = 0;
    cb(err);
  }
}

interface StreamEvents {
  response: [ResponseHead];
  reset: [TunnelStreamError];
  close: [];
}

/** One HTTP exchange on the tunnel. */
export class TunnelStream extends EventEmitter<StreamEvents> {
  readonly id: number;
  /** The body the peer sends: the response body on the server, the request body on the client. */
  readonly body: IncomingBody;
  readonly #mux: Mux;
  #sendCredit: number;
  #recvRemaining: number;
  #unacked = 0;
  #source: Readable | null = null;
  readonly #pending: Buffer[] = [];
  #pendingBytes = 0;
  #flushQueued = false;
  #sourceEnded = false;
  #localDone = false;
  #remoteDone = false;
  #closed = false;
  #responded = false;
  #idle: NodeJS.Timeout;
  #error: TunnelStreamError | null = null;

  constructor(mux: Mux, id: number, sendCredit: number) {
    super();
    this.id = id;
    this.#mux = mux;
    this.#sendCredit = sendCredit;
    this.#recvRemaining = mux.options.window;
    this.body = new IncomingBody(this, Math.min(64 * 1024, mux.options.window));
    this.#idle = setTimeout(
      () => this.reset(ResetCode.idle, `no traffic on the stream for ${mux.options.idleTimeoutMs} ms`),
      mux.options.idleTimeoutMs,
    );
    this.#idle.unref();
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** The error that ended the stream, if it did not end cleanly. */
  get error(): TunnelStreamError | null {
    return this.#error;
  }

  /** Bytes of this stream held in memory at this end (received, not yet read). */
  get bufferedBytes(): number {
    return this.body.bufferedBytes;
  }

  /** Client side: send the response head. */
  respond(head: ResponseHead): void {
    if (this.#closed || this.#responded) return;
    const err = this.#mux.checkHead(head);
    if (err) {
      this.reset(ResetCode.headersTooLarge, err);
      return;
    }
    this.#responded = true;
    this.#touch();
    this.#mux.send({ type: 'response', streamId: this.id, head });
  }

  /** Sends `source` as this end's body (null: no body), honouring the peer's credit, then `end`. */
  sendBody(source: Readable | null): void {
    if (this.#closed || this.#source !== null || this.#sourceEnded) return;
    if (source === null) {
      this.#sourceEnded = true;
      this.#pump(true);
      return;
    }
    this.#source = source;
    source.on('data', this.#onData);
    source.once('end', this.#onEnd);
    source.once('error', this.#onError);
    source.once('close', this.#onSourceClose);
  }

  /** Aborts the stream at both ends. Safe to call more than once. */
  reset(code: ResetCode, message: string): void {
    if (this.#closed) return;
    if (!this.#localDone) this.#mux.send({ type: 'reset', streamId: this.id, code, message });
    this.#fail(new TunnelStreamError(code, message, false));
  }

  readonly #onData = (chunk: Buffer | string): void => {
    const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    if (buf.length === 0) return;
    this.#pending.push(buf);
    this.#pendingBytes += buf.length;
    // A full frame goes at once; a smaller rest waits for the end of this event-loop turn, so
    // the chunks one socket read burst delivers travel as one frame (fewer messages, writes and
    // window updates) without holding anything back longer than that turn.
    if (this.#pendingBytes >= this.#mux.maxChunkBytes) this.#pump(false);
    else this.#queueFlush();
  };

  readonly #onEnd = (): void => {
    this.#sourceEnded = true;
    this.#pump(true);
  };

  readonly #onError = (err: Error): void => {
    this.reset(ResetCode.upstream, `body could not be read: ${err.message}`);
  };

  readonly #onSourceClose = (): void => {
    // A source that closes without 'end' (aborted request or upstream response) ends the stream.
    if (!this.#sourceEnded && !this.#closed) this.reset(ResetCode.upstream, 'body ended before it was complete');
  };

  #detachSource(): void {
    const s = this.#source;
    if (!s) return;
    s.off('data', this.#onData);
    s.off('end', this.#onEnd);
    s.off('error', this.#onError);
    s.off('close', this.#onSourceClose);
    s.on('error', () => {});
  }

  #queueFlush(): void {
    if (this.#flushQueued) return;
    this.#flushQueued = true;
    setImmediate(this.#flush);
  }

  readonly #flush = (): void => {
    this.#flushQueued = false;
    this.#pump(true);
  };

  /**
   * Sends pending body bytes as far as the peer's credit allows, in frames of up to maxChunkBytes
   * gathered from as many source chunks as fit. With `all` false a last frame smaller than
   * maxChunkBytes is kept for the flush at the end of the event-loop turn.
   */
  #pump(all: boolean): void {
    if (this.#closed || this.#localDone) return;
    const max = this.#mux.maxChunkBytes;
    let sent = false;
    while (this.#pendingBytes > 0 && this.#sendCredit > 0) {
      const n = Math.min(this.#pendingBytes, this.#sendCredit, max);
      if (!all && n === this.#pendingBytes && n < max) break;
      const pieces: Buffer[] = [];
      let need = n;
      while (need > 0) {
        const chunk = this.#pending[0]!;
        if (chunk.length <= need) {
          pieces.push(chunk);
          this.#pending.shift();
          need -= chunk.length;
        } else {
          pieces.push(chunk.subarray(0, need));
          this.#pending[0] = chunk.subarray(need);
          need = 0;
        }
      }
      this.#pendingBytes -= n;
      this.#sendCredit -= n;
      this.#mux.sendData(this.id, pieces, n);
      sent = true;
    }
    if (sent) this.#touch();
    if (this.#pendingBytes > 0) {
      // Out of credit, or a full frame's worth waiting: stop the source until credit comes.
      if (this.#sendCredit === 0 || this.#pendingBytes >= max) this.#source?.pause();
      else this.#queueFlush();
      return;
    }
    if (this.#sourceEnded) {
      this.#localDone = true;
      this.#detachSource();
      this.#mux.send({ type: 'end', streamId: this.id });
      this.#maybeClose();
    } else {
      this.#source?.resume();
    }
  }

  /** Called by the body as its consumer takes bytes: grants credit back in batches. */
  consumed(bytes: number): void {
    if (this.#closed || this.#remoteDone) return;
    this.#unacked += bytes;
    const window = this.#mux.options.window;
    // Batch grants (fewer frames), but never hold back so much that the peer could stall.
    if (this.#unacked >= window / 4 || this.#recvRemaining < window / 2) {
      const increment = this.#unacked;
      this.#unacked = 0;
      this.#recvRemaining += increment;
      this.#touch();
      this.#mux.send({ type: 'window', streamId: this.id, increment });
    }
  }

  /** Frames for this stream from the peer. */
  handle(frame: Frame): void {
    this.#touch();
    switch (frame.type) {
      case 'response':
        if (this.#mux.options.role !== 'server' || this.#responded) {
          this.reset(ResetCode.protocol, 'unexpected response head');
          return;
        }
        this.#responded = true;
        if (headBytes(frame.head) > this.#mux.options.maxHeaderBytes) {
          this.reset(
            ResetCode.headersTooLarge,
            `response head of ${headBytes(frame.head)} bytes is larger than the limit of ${this.#mux.options.maxHeaderBytes} bytes`,
          );
          return;
        }
        this.emit('response', frame.head);
        return;
      case 'data':
        if (this.#remoteDone) {
          this.reset(ResetCode.protocol, 'data after end');
          return;
        }
        if (frame.chunk.length > this.#recvRemaining) {
          this.reset(
            ResetCode.flowControl,
            `peer sent ${frame.chunk.length} bytes with ${this.#recvRemaining} bytes of credit`,
          );
          return;
        }
        this.#recvRemaining -= frame.chunk.length;
        this.body.receive(frame.chunk);
        return;
      case 'end':
        this.#remoteDone = true;
        this.body.finish();
        this.#maybeClose();
        return;
      case 'window':
        this.#sendCredit += frame.increment;
        if (this.#sendCredit > 0x7fffffff) {
          this.reset(ResetCode.flowControl, 'credit overflow');
          return;
        }
        this.#pump(true);
        return;
      case 'reset':
        this.#fail(new TunnelStreamError(frame.code, frame.message || 'the peer reset the stream', true));
        return;
      case 'open':
      case 'hello':
        this.reset(ResetCode.protocol, `unexpected ${frame.type} frame`);
        return;
    }
  }

  /** The connection is gone. */
  lost(message: string): void {
    this.#fail(new TunnelStreamError(ResetCode.connectionLost, message, true));
  }

  #touch(): void {
    this.#idle.refresh();
  }

  #fail(err: TunnelStreamError): void {
    if (this.#closed) return;
    this.#error = err;
    this.#localDone = true;
    this.#remoteDone = true;
    this.#pending.length = 0;
    this.#pendingBytes = 0;
    this.#detachSource();
    if (!this.body.readableEnded) this.body.destroy(err);
    this.emit('reset', err);
    this.#close();
  }

  #maybeClose(): void {
    if (this.#localDone && this.#remoteDone) this.#close();
  }

  #close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#idle);
    this.#mux.forget(this.id);
    this.emit('close');
  }
}

interface MuxEvents {
  /** The peer's hello arrived: streams may be opened. */
  ready: [Hello];
  /** Client side: the server opened a stream. */
  stream: [TunnelStream, RequestHead];
  /**
   * No new streams on this connection; the open ones finish here. Client side: `reconnect` says
   * whether to dial a new connection (the server replica is going away) or not (another
   * connection of this runtime took over). Server side: the runtime is shutting down.
   */
  goaway: [string, boolean];
  /** The WebSocket closed; every stream has been reset. */
  close: [number, string];
}

export class Mux extends EventEmitter<MuxEvents> {
  readonly options: Required<MuxOptions>;
  readonly #ws: WebSocket;
  readonly #streams = new Map<number, TunnelStream>();
  #peer: Hello | null = null;
  #nextId = 1;
  #closed = false;
  /** No new streams: a goaway was sent (server) or received (client). */
  #draining = false;
  /** Callers of idle() waiting for the last stream to end. */
  readonly #idleWaiters: Array<() => void> = [];
  /** Close code and reason once drained. */
  #drainedClose: [number, string] = [CloseCode.goingAway, 'drained'];
  #maxChunk: number;
  /** Data-frame buffers whose write has completed, reused for later frames (no allocation per chunk). */
  readonly #framePool: Buffer[] = [];
  /** The socket while it is corked for this event-loop turn. */
  #corked: Duplex | null = null;

  constructor(ws: WebSocket, options: MuxOptions) {
    super();
    this.options = { maxChunkBytes: 64 * 1024, ...options };
    this.#maxChunk = this.options.maxChunkBytes;
    this.#ws = ws;
    ws.binaryType = 'nodebuffer';
    ws.on('message', this.#onMessage);
    ws.once('close', (code, reason) => this.#onClose(code, reason.toString('utf8')));
    this.send({
      type: 'hello',
      streamId: 0,
      hello: {
        version: PROTOCOL_VERSION,
        window: this.options.window,
        maxMessageBytes: this.options.maxMessageBytes,
        maxStreams: this.options.maxStreams,
        features: [...FEATURES],
      },
    });
  }

  /** A goaway was sent or received: the open streams finish, no new one starts. */
  get draining(): boolean {
    return this.#draining;
  }

  /**
   * Server side: tells a peer that understands it to dial a new connection (or not:
   * `reconnect: false`) and lets the open streams finish here; the connection closes
   * (`closeCode`, default 1001) when the last one ends.
   * Client side: asks the server to open no more streams here (the runtime is shutting down);
   * the client closes the connection itself once its open streams are done.
   * Returns false, and does nothing, when the peer did not announce `goaway`.
   */
  goAway(message: string, opts: { reconnect?: boolean; closeCode?: number; closeReason?: string } = {}): boolean {
    if (this.#closed || !this.#peer?.features?.includes('goaway')) return false;
    if (this.#draining) return true;
    this.#draining = true;
    this.#drainedClose = [opts.closeCode ?? CloseCode.goingAway, opts.closeReason ?? 'drained'];
    this.send({ type: 'goaway', streamId: 0, message, reconnect: opts.reconnect ?? true });
    this.#closeIfDrained();
    return true;
  }

  #closeIfDrained(): void {
    if (this.#draining && this.#streams.size === 0 && this.options.role === 'server') this.close(...this.#drainedClose);
  }

  /** Resolves once no stream is open (at once when none is), or after `ms`. */
  idle(ms: number): Promise<void> {
    if (this.#streams.size === 0 || this.#closed) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const wake = (): void => {
        clearTimeout(timer);
        resolve();
      };
      // On time-out the waiter goes too: a long-lived busy connection keeps no stale ones.
      const timer = setTimeout(() => {
        this.#idleWaiters.splice(this.#idleWaiters.indexOf(wake), 1);
        resolve();
      }, ms);
      this.#idleWaiters.push(wake);
    });
  }

  #notifyIdle(): void {
    if (this.#streams.size === 0) for (const wake of this.#idleWaiters.splice(0)) wake();
  }

  get ready(): boolean {
    return this.#peer !== null && !this.#closed;
  }

  get peer(): Hello | null {
    return this.#peer;
  }

  get streamCount(): number {
    return this.#streams.size;
  }

  /** Most concurrent streams both ends accept. */
  get maxStreams(): number {
    return Math.min(this.options.maxStreams, this.#peer?.maxStreams ?? this.options.maxStreams);
  }

  get maxChunkBytes(): number {
    return this.#maxChunk;
  }

  /** Bytes held by this end for all streams (received, not yet read by their consumers). */
  get bufferedBytes(): number {
    let n = 0;
    for (const s of this.#streams.values()) n += s.bufferedBytes;
    return n;
  }

  /** Server side: opens a stream carrying `head`. Throws when no stream can be opened. */
  open(head: RequestHead): TunnelStream {
    if (this.options.role !== 'server') throw new Error('only the server opens streams');
    const peer = this.#peer;
    if (!peer || this.#closed)
      throw new TunnelStreamError(ResetCode.connectionLost, 'the tunnel is not connected', false);
    if (this.#draining)
      throw new TunnelStreamError(
        ResetCode.connectionLost,
        'the tunnel is draining; the runtime is reconnecting',
        false,
      );
    if (this.#streams.size >= this.maxStreams) {
      throw new TunnelStreamError(
        ResetCode.refused,
        `the tunnel already carries its maximum of ${this.maxStreams} concurrent requests`,
        false,
      );
    }
    const err = this.checkHead(head);
    if (err) throw new TunnelStreamError(ResetCode.headersTooLarge, err, false);
    const id = this.#nextId;
    this.#nextId += 2;
    if (this.#nextId > 0xffffffff) this.close(CloseCode.goingAway, 'stream ids exhausted; reconnect');
    const stream = new TunnelStream(this, id, peer.window);
    this.#streams.set(id, stream);
    this.send({ type: 'open', streamId: id, head });
    return stream;
  }

  /** Returns why `head` may not be sent, or null. */
  checkHead(head: RequestHead | ResponseHead): string | null {
    const bytes = headBytes(head);
    if (bytes > this.options.maxHeaderBytes)
      return `head of ${bytes} bytes is larger than the limit of ${this.options.maxHeaderBytes} bytes`;
    const peerMax = this.#peer?.maxMessageBytes ?? this.options.maxMessageBytes;
    if (headMessageBytes(bytes) > peerMax)
      return `head of ${bytes} bytes does not fit the peer's message limit of ${peerMax} bytes`;
    return null;
  }

  send(frame: Frame): void {
    if (this.#closed || this.#ws.readyState !== this.#ws.OPEN) return;
    this.#cork();
    this.#ws.send(encodeFrame(frame), { binary: true });
  }

  /**
   * Holds this event-loop turn's frames (of every stream: heads, data, end, window updates) in
   * the socket until the turn's end, so they leave in one write system call instead of one
   * each. ws has no public cork; its socket is reached through `_socket`, and without it frames
   * simply go out one by one.
   */
  #cork(): void {
    if (this.#corked) return;
    const socket = (this.#ws as unknown as { _socket?: Duplex })._socket;
    if (!socket || typeof socket.cork !== 'function' || socket.destroyed) return;
    socket.cork();
    this.#corked = socket;
    setImmediate(this.#uncork);
  }

  readonly #uncork = (): void => {
    const socket = this.#corked;
    this.#corked = null;
    if (socket && !socket.destroyed) socket.uncork();
  };

  /**
   * Sends one data frame. The frame is built in a pooled buffer that goes back to the pool once
   * the socket has written it, so a body costs one copy per chunk and no allocation (fewer
   * garbage collections at high throughput).
   */
  sendData(streamId: number, pieces: readonly Buffer[], bytes: number): void {
    if (this.#closed || this.#ws.readyState !== this.#ws.OPEN) return;
    const size = HEADER_BYTES + Math.max(this.#maxChunk, this.options.maxChunkBytes, bytes);
    let buf = this.#framePool.pop();
    if (buf === undefined || buf.length < size) buf = Buffer.allocUnsafeSlow(size);
    const frame = encodeDataFrameInto(buf, streamId, pieces, bytes);
    const pooled = buf;
    this.#cork();
    this.#ws.send(frame, { binary: true }, () => {
      if (this.#framePool.length < FRAME_POOL_SIZE) this.#framePool.push(pooled);
    });
  }

  forget(id: number): void {
    this.#streams.delete(id);
    this.#notifyIdle();
    this.#closeIfDrained();
  }

  close(code: number, reason: string): void {
    if (this.#ws.readyState === this.#ws.OPEN || this.#ws.readyState === this.#ws.CONNECTING)
      this.#ws.close(code, reason);
    this.#shutdown(`the tunnel closed (${code} ${reason})`);
  }

  /** Drops the connection without a closing handshake (dead peer). */
  terminate(reason: string): void {
    this.#ws.terminate();
    this.#shutdown(reason);
  }

  #shutdown(message: string): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const s of [...this.#streams.values()]) s.lost(message);
    this.#streams.clear();
    this.#notifyIdle();
  }

  #protocolError(message: string): void {
    this.close(CloseCode.protocolError, message.slice(0, 120));
  }

  readonly #onMessage = (data: WebSocket.RawData, isBinary: boolean): void => {
    if (this.#closed) return;
    if (!isBinary || !Buffer.isBuffer(data)) {
      this.#protocolError('text messages are not part of the protocol');
      return;
    }
    let frame: Frame;
    try {
      frame = decodeFrame(data);
    } catch (err) {
      if (err instanceof ProtocolError) {
        // A bad head is the stream's problem, not the connection's: reset just that stream.
        const streamId = data.length >= HEADER_BYTES ? data.readUInt32BE(2) : 0;
        if (streamId !== 0 && data[0] === PROTOCOL_VERSION && (data[1] === 2 || data[1] === 3)) {
          this.#resetUnknown(streamId, ResetCode.protocol, err.message);
          return;
        }
        this.#protocolError(err.message);
        return;
      }
      throw err;
    }
    if (frame.type === 'hello') {
      if (this.#peer) {
        this.#protocolError('hello sent twice');
        return;
      }
      if (frame.hello.version !== PROTOCOL_VERSION) {
        this.close(CloseCode.unsupportedVersion, `protocol version ${frame.hello.version} is not supported`);
        return;
      }
      this.#peer = frame.hello;
      this.#maxChunk = Math.max(1024, Math.min(this.options.maxChunkBytes, frame.hello.maxMessageBytes - HEADER_BYTES));
      this.emit('ready', frame.hello);
      return;
    }
    if (!this.#peer) {
      this.#protocolError('stream frame before hello');
      return;
    }
    if (frame.type === 'goaway') {
      if (!this.#draining) {
        this.#draining = true;
        this.emit('goaway', frame.message, frame.reconnect);
      }
      return;
    }
    if (frame.type === 'open') {
      this.#onOpen(frame.streamId, frame.head);
      return;
    }
    const stream = this.#streams.get(frame.streamId);
    // Frames for a stream that already ended (a reset crossing a data frame) are dropped.
    if (stream) stream.handle(frame);
  };

  #resetUnknown(streamId: number, code: ResetCode, message: string): void {
    const stream = this.#streams.get(streamId);
    if (stream) stream.reset(code, message);
    else this.send({ type: 'reset', streamId, code, message });
  }

  #onOpen(id: number, head: RequestHead): void {
    const peer = this.#peer!;
    if (this.options.role !== 'client' || id % 2 === 0) {
      this.#protocolError('only the server opens streams, with odd ids');
      return;
    }
    if (this.#streams.has(id)) {
      this.#protocolError(`stream ${id} is already open`);
      return;
    }
    if (this.#streams.size >= this.options.maxStreams) {
      this.send({
        type: 'reset',
        streamId: id,
        code: ResetCode.refused,
        message: `the runtime already serves its maximum of ${this.options.maxStreams} concurrent requests`,
      });
      return;
    }
    const bytes = headBytes(head);
    if (bytes > this.options.maxHeaderBytes) {
      this.send({
        type: 'reset',
        streamId: id,
        code: ResetCode.headersTooLarge,
        message: `request head of ${bytes} bytes is larger than the runtime's limit of ${this.options.maxHeaderBytes} bytes`,
      });
      return;
    }
    const stream = new TunnelStream(this, id, peer.window);
    this.#streams.set(id, stream);
    this.emit('stream', stream, head);
  }

  #onClose(code: number, reason: string): void {
    this.#shutdown(`the tunnel closed (${code}${reason ? ` ${reason}` : ''})`);
    this.emit('close', code, reason);
  }
}
