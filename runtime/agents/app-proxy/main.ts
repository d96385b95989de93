/** Entry point of the app-proxy agent: `node runtime/agents/app-proxy/main.ts`. */
import { runService } from '../common/service.ts';
import { buildAppProxy } from './app.ts';
import { agentKubeTransport } from '../common/kube.ts';
import { loadAppProxyConfig } from './config.ts';
import { argoObjects } from './kube.ts';

await runService(
  'app-proxy',
  () => {
    const config = loadAppProxyConfig();
    return { ...config, kube: agentKubeTransport(config.kubeconfigFile) };
  },
  async (config, log) => {
    const app = await buildAppProxy({
      objects: argoObjects(config.kube, { timeoutMs: config.kubeTimeoutMs }),
      tenantId: config.tenantId,
      runtimeId: config.runtimeId,
      publicKey: config.publicKey,
      runtimeInfo: config.runtimeInfo,
      sourceServerUrl: config.sourceServerUrl,
      logger: log,
    });
    await app.listen({ port: config.port, host: config.host });
    log.info(
      { port: config.port, tenantId: config.tenantId, ...(config.runtimeId ? { runtimeId: config.runtimeId } : {}) },
      'app-proxy started',
    );
    return { close: () => app.close() };
  },
);
