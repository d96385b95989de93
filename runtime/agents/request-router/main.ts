/** Entry point of the request-router agent: `node runtime/agents/request-router/main.ts`. */
import http from 'node:http';
import { closeServer, listen, runService } from '../common/service.ts';
import { loadRouterConfig } from './config.ts';
import { createRouter } from './router.ts';

await runService(
  'request-router',
  () => loadRouterConfig(),
  async (config, log) => {
    const router = createRouter({
      appProxyUrl: config.appProxyUrl,
      eventSourceUrl: config.eventSourceUrl,
      ...(config.argoCdServerUrl ? { argoCdServerUrl: config.argoCdServerUrl } : {}),
      logger: log,
      upstreamTimeoutMs: config.upstreamTimeoutMs,
      connectRetryMs: config.connectRetryMs,
      ...(config.requestTokens ? { requestTokens: config.requestTokens } : {}),
    });
    const server = http.createServer({ maxHeaderSize: 16 * 1024 }, router.handler);
    server.keepAliveTimeout = 65_000;
    const port = await listen(server, config.port, config.host);
    log.info(
      {
        port,
        appProxyUrl: config.appProxyUrl,
        eventSourceUrl: config.eventSourceUrl,
        argoCdServerUrl: config.argoCdServerUrl ?? null,
        accessMode: config.requestTokens ? 'ingress' : 'tunnel',
      },
      'request router started',
    );
    return {
      async close() {
        await closeServer(server);
        router.close();
      },
    };
  },
);
