/**
 * Entry point of the tunnel-client agent: `node runtime/agents/tunnel-client/main.ts`.
 * Health: GET /healthz (process up), GET /readyz (200 only while the tunnel is connected).
 */
import http from 'node:http';
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
    });
    const health = http.createServer((req, res) => {
      const body = {
        status: client.connected ? 'connected' : 'disconnected',
        since: client.since?.toISOString() ?? null,
        activeStreams: client.activeStreams,
      };
      const ok = req.url === '/healthz' || (req.url === '/readyz' && client.connected);
      res.writeHead(req.url === '/healthz' || req.url === '/readyz' ? (ok ? 200 : 503) : 404, {
        'content-type': 'application/json',
      });
      res.end(JSON.stringify(body));
    });
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
