/**
 * Limits of the control plane's side of the runtime tunnel and of the forwarding route, with
 * their defaults. Every one can be set through PROVISIONER_TUNNEL_* (provisioner/config.ts).
 */
export interface TunnelLimits {
  /** Largest WebSocket message accepted, bytes (default 1 MiB). */
  maxPayload: number;
  /** Concurrent requests per tunnel (default 512); more are refused with RUNTIME_BUSY. */
  maxStreams: number;
  /** Per-stream flow-control window, bytes (default 256 KiB). Memory per tunnel ≤ maxStreams × streamWindow. */
  streamWindow: number;
  /** Largest body chunk per frame, bytes (default 64 KiB). */
  maxChunkBytes: number;
  /** Largest request/response head (method, path, headers), bytes (default 16 KiB). */
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
  streamWindow: 256 * 1024,
  maxChunkBytes: 64 * 1024,
  maxHeaderBytes: 16 * 1024,
  maxRequestBodyBytes: 64 * 1024 * 1024,
  requestTimeoutMs: 30_000,
  idleTimeoutMs: 120_000,
  heartbeatIntervalMs: 15_000,
  handshakeTimeoutMs: 10_000,
  revalidateIntervalMs: 60_000,
  drainTimeoutMs: 10_000,
});
