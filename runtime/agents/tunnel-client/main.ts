/**
 * Entry point of the tunnel-client agent: `node runtime/agents/tunnel-client/main.ts`.
 * Health (runtime/agents/common/health.ts): GET /healthz (process up), GET /readyz (200 only
 * while the tunnel is connected; `status`, `since` and `activeStreams` say the tunnel's state).
 */
import { AgentHealth, healthServer } from '../common/health.ts';
import { closeServer, listen, runService } from '../common/service.ts';
import { startTunnelClient } from './client.ts';
import { loadTunnelClientConfig } from './config.ts';

await runService(
  'tunnel-client',
  () => loadTunnelClientConfig(),
  async (config, log) => {
    const client = startTunnelClient({
      url: config.tunnelUrl,
      token: config.token,
      upstream: config.routerUrl,
      logger: log,
      maxPayload: config.maxPayload,
      maxStreams: config.maxStreams,
      window: config.window,
      heartbeatIntervalMs: config.heartbeatIntervalMs,
      upstreamConnectRetryMs: config.routerConnectRetryMs,
    });
    const health = healthServer(
      new AgentHealth({
        checks: [
          {
            name: 'tunnel',
            read: () => ({
              ready: client.connected,
              ...(client.connected ? {} : { reason: 'not connected to the control plane' }),
              fields: {
                status: client.connected ? 'connected' : 'disconnected',
                since: client.since?.toISOString() ?? null,
                activeStreams: client.activeStreams,
              },
            }),
          },
        ],
      }),
    );
    const port = await listen(health, config.healthPort, config.healthHost);
    log.info({ port, tunnelUrl: config.tunnelUrl, routerUrl: config.routerUrl }, 'tunnel client started');
    return {
      async close() {
        // Requests in flight may finish (the service's own grace is 10 s).
        await client.close({ graceMs: 8000 });
        await closeServer(health);
      },
    };
  },
);
