/**
 * The runtime tunnels of this replica and the requests relayed to other replicas.
 */
import client from 'prom-client';
import type { TunnelServer } from '../tunnel/index.ts';
import type { Metrics } from './registry.ts';

/** Outcomes of relaying a request to the replica that holds the runtime's tunnel. */
export type RelayOutcome = 'relayed' | 'unreachable';

/**
 * Tunnels held by this replica, their open streams and buffered bytes (read at scrape time),
 * tunnel connects/disconnects by close code, and requests relayed to other replicas. Returns the
 * relay counter's increment.
 */
export function registerTunnelMetrics(metrics: Metrics, tunnel: TunnelServer): (outcome: RelayOutcome) => void {
  const registers = [metrics.registry];
  const gauge = (name: string, help: string, read: () => number): void => {
    new client.Gauge({
      name,
      help,
      registers,
      collect() {
        this.set(read());
      },
    });
  };
  gauge('provisioner_tunnels', 'Runtime tunnels connected to this replica', () => tunnel.stats().tunnels);
  gauge(
    'provisioner_tunnel_streams',
    "Requests in flight through this replica's tunnels",
    () => tunnel.stats().streams,
  );
  gauge(
    'provisioner_tunnel_buffered_bytes',
    'Body bytes this replica holds for tunnel streams',
    () => tunnel.stats().bufferedBytes,
  );
  const connects = new client.Counter({
    name: 'provisioner_tunnel_connects_total',
    help: "Runtime tunnels that connected to this replica, by the runtime's mode (hosted, hybrid)",
    labelNames: ['mode'] as const,
    registers,
  });
  const disconnects = new client.Counter({
    name: 'provisioner_tunnel_disconnects_total',
    help: "Runtime tunnels closed, by the runtime's mode and the WebSocket close code",
    labelNames: ['mode', 'code'] as const,
    registers,
  });
  tunnel.events.on('connect', () => connects.inc({ mode: 'hosted' }));
  tunnel.events.on('disconnect', (_id, code) => disconnects.inc({ mode: 'hosted', code: String(code) }));
  tunnel.events.on('hybrid-connect', () => connects.inc({ mode: 'hybrid' }));
  tunnel.events.on('hybrid-disconnect', (_id, code) => disconnects.inc({ mode: 'hybrid', code: String(code) }));
  const relays = new client.Counter({
    name: 'provisioner_tunnel_relays_total',
    help: "Requests relayed to the replica holding the runtime's tunnel, by outcome",
    labelNames: ['outcome'] as const,
    registers,
  });
  return (outcome) => relays.inc({ outcome });
}
