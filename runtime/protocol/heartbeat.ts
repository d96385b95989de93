/**
 * Heartbeats, run by both ends: ping every `intervalMs`; a peer that sent nothing (no pong, no
 * message) during a whole interval is dead and its socket is terminated, which fires 'close'.
 */
import type WebSocket from 'ws';

export function startHeartbeat(ws: WebSocket, intervalMs: number, onDead: () => void): () => void {
  let alive = true;
  const mark = (): void => {
    alive = true;
  };
  ws.on('pong', mark);
  ws.on('ping', mark);
  ws.on('message', mark);
  const timer = setInterval(() => {
    if (ws.readyState !== ws.OPEN) return;
    if (!alive) {
      onDead();
      ws.terminate();
      return;
    }
    alive = false;
    ws.ping();
  }, intervalMs);
  timer.unref();
  const stop = (): void => {
    clearInterval(timer);
    ws.off('pong', mark);
    ws.off('ping', mark);
    ws.off('message', mark);
  };
  ws.once('close', stop);
  return stop;
}
