/** Entry point of the app-proxy agent: `node runtime/agents/app-proxy/main.ts`. */
import { runService } from '../common/service.ts';
import { buildAppProxy } from './app.ts';
import { loadAppProxyConfig } from './config.ts';

await runService(
  'app-proxy',
  () => loadAppProxyConfig(),
  async (config, log) => {
    const app = await buildAppProxy({
      tenantId: config.tenantId,
      publicKey: config.publicKey,
      runtimeInfo: config.runtimeInfo,
      logger: log,
    });
    await app.listen({ port: config.port, host: config.host });
    log.info({ port: config.port, tenantId: config.tenantId }, 'app-proxy started');
    return { close: () => app.close() };
  },
);
