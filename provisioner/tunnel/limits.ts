import { headMessageBytes } from '../../runtime/protocol/frames.ts';

/**
 * Limits of the control plane's side of the runtime tunnel and of the forwarding route, with
 * their defaults. Every one can be set through PROVISIONER_TUNNEL_* (provisioner/config.ts).
 */
export interface TunnelLimits {
  /** Largest WebSocket message accepted, bytes (default 1 MiB). */
  maxPayload: number;
  /** Concurrent requests per tunnel (default 512); more are refused with RUNTIME_BUSY. */
  maxStreams: number;
  /**
   * Concurrent requests through all of one tenant's tunnels on this process, its hosted runtime's
   * and its hybrid runtimes' together (default 1024); more are refused with RUNTIME_BUSY. What a
   * tenant's tunnels hold in memory is bounded by this × streamWindow, however many runtimes it
   * registers (maxStreams alone bounds it per tunnel only).
   */
  maxStreamsPerTenant: number;
  /** Per-stream flow-control window, bytes (default 256 KiB). Memory per tunnel ≤ maxStreams × streamWindow. */
  streamWindow: number;
  /** Largest body chunk per frame, bytes (default 64 KiB; at least CHUNK_FRAME_ROOM below maxPayload). */
  maxChunkBytes: number;
  /** Largest request/response head (method, path, headers), bytes (default 16 KiB; maxPayload must hold headMessageBytes of it). */
  maxHeaderBytes: number;
  /**
   * Largest request body the forwarding route accepts, bytes (default 64 MiB; 0: no limit). A
   * larger declared Content-Length is answered 413 before anything is forwarded; a chunked body
   * that grows past it is cut off and answered 413 (unless the runtime already answered).
   */
  maxRequestBodyBytes: number;
  /** Time from forwarding a request to the runtime's response head (default 30 s). */
  requestTimeoutMs: number;
  /** A stream with no traffic for this long is reset (default 120 s). */
  idleTimeoutMs: number;
  /** Ping interval; a runtime silent for a whole interval is disconnected (default 15 s). */
  heartbeatIntervalMs: number;
  /** Time for `authenticate` and for the runtime's hello (default 10 s). */
  handshakeTimeoutMs: number;
  /**
   * Upgrades being authenticated at once (default 512). More are shed at once with 503
   * AUTH_UNAVAILABLE and Retry-After: 1 (the client retries with its jittered backoff): after a
   * restart, thousands of runtimes redial within seconds, and a handshake the server cannot take
   * yet costs nothing when refused but memory and database reads when queued.
   */
  maxPendingHandshakes: number;
  /**
   * Authenticated connections of one tenant still waiting for their hello (default 4). A runtime
   * dials one tunnel (two while a replica replaces another); more upgrades with the same tenant's
   * token are refused with 429 TOO_MANY_TUNNEL_HANDSHAKES, so one key cannot hold hundreds of
   * sockets until the handshake timeout.
   */
  maxPendingHandshakesPerTenant: number;
  /** Re-run `authenticate` on open tunnels this often, closing revoked ones; 0 disables (default 60 s). */
  revalidateIntervalMs: number;
  /**
   * On shutdown, how long requests in flight may take to finish while their runtimes reconnect
   * elsewhere (default 10 s; 0: close at once). See TunnelServer.close().
   */
  drainTimeoutMs: number;
}

export const DEFAULT_TUNNEL_LIMITS: Readonly<TunnelLimits> = Object.freeze({
  maxPayload: 1024 * 1024,
  maxStreams: 512,
  maxStreamsPerTenant: 1024,
  streamWindow: 256 * 1024,
  maxChunkBytes: 64 * 1024,
  maxHeaderBytes: 16 * 1024,
  maxRequestBodyBytes: 64 * 1024 * 1024,
  requestTimeoutMs: 30_000,
  idleTimeoutMs: 120_000,
  heartbeatIntervalMs: 15_000,
  handshakeTimeoutMs: 10_000,
  maxPendingHandshakes: 512,
  maxPendingHandshakesPerTenant: 4,
  revalidateIntervalMs: 60_000,
  drainTimeoutMs: 10_000,
});

/** Room kept in a message for the frame around a body chunk (the header is 6 bytes; documented as 1 KiB). */
export const CHUNK_FRAME_ROOM = 1024;
/** Smallest per-stream window: a stream must be able to carry at least one small chunk. */
export const MIN_STREAM_WINDOW = 1024;

export interface TunnelLimitProblem {
  /** The limit to change. */
  limit: keyof TunnelLimits;
  /** What is wrong, naming the limits through `name` and without the offending limit's own name in front. */
  message: string;
}

/**
 * Why a set of limits cannot work together, or [] when it can: the one rule the provisioner's
 * configuration (which names the PROVISIONER_TUNNEL_* variables) and the tunnel server (which
 * refuses to start) both apply. `name` spells a limit in the messages.
 */
export function tunnelLimitProblems(
  limits: TunnelLimits,
  name: (limit: keyof TunnelLimits) => string = (limit) => limit,
): TunnelLimitProblem[] {
  const problems: TunnelLimitProblem[] = [];
  for (const [limit, value] of Object.entries(limits) as Array<[keyof TunnelLimits, number]>) {
    if (!Number.isInteger(value) || value < 0)
      problems.push({ limit, message: `must be a non-negative integer, got ${String(value)}` });
  }
  if (problems.length > 0) return problems;
  const { maxPayload, maxChunkBytes, maxHeaderBytes, streamWindow } = limits;
  if (maxChunkBytes + CHUNK_FRAME_ROOM > maxPayload) {
    problems.push({
      limit: 'maxChunkBytes',
      message: `${maxChunkBytes} leaves no room for the frame header in ${name('maxPayload')} (${maxPayload}); keep it at least ${CHUNK_FRAME_ROOM} bytes smaller`,
    });
  }
  const headRoom = headMessageBytes(maxHeaderBytes);
  if (headRoom > maxPayload) {
    problems.push({
      limit: 'maxHeaderBytes',
      message: `${maxHeaderBytes} does not fit ${name('maxPayload')} (${maxPayload}) with the frame header: a head travels as JSON, which escaping can double, so ${name('maxPayload')} must be at least ${headRoom} (2 × ${name('maxHeaderBytes')} + 256); lower ${name('maxHeaderBytes')} to at most ${Math.floor((maxPayload - 256) / 2)} or raise ${name('maxPayload')}`,
    });
  }
  if (streamWindow < MIN_STREAM_WINDOW)
    problems.push({ limit: 'streamWindow', message: `${streamWindow} is below ${MIN_STREAM_WINDOW} bytes` });
  return problems;
}
