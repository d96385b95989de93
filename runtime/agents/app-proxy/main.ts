/** Entry point of the app-proxy agent: `node runtime/agents/app-proxy/main.ts`. */
import { runService } from '../common/service.ts';
import { buildAppProxy } from './app.ts';
import { ConfigError } from '../common/config.ts';
import { loadAppProxyConfig } from './config.ts';
import { argoObjects, loadKubeConfig } from './kube.ts';

await runService(
  'app-proxy',
  () => {
    const config = loadAppProxyConfig();
    try {
      return { ...config, kube: loadKubeConfig(config.kubeconfigFile) };
    } catch (err) {
      const detail = err instanceof Error ? err.message : String(err);
      throw config.kubeconfigFile
        ? new ConfigError('KUBECONFIG', `cannot load '${config.kubeconfigFile}': ${detail}`)
        : new ConfigError('KUBERNETES_SERVICE_HOST', `no in-cluster service account to act with: ${detail}`);
    }
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
