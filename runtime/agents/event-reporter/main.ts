/** Entry point of the event reporter agent: `node runtime/agents/event-reporter/main.ts`. */
import { KubeconfigError, loadLightTransport } from '../../kube/light-client.ts';
import type { KubeTransport } from '../../kube/transport.ts';
import { ConfigError } from '../common/config.ts';
import { runService } from '../common/service.ts';
import { loadEventReporterConfig } from './config.ts';
import { EventReporter } from './reporter.ts';

let kube: KubeTransport | undefined;

await runService(
  'event-reporter',
  () => {
    const config = loadEventReporterConfig();
    // Node's own https, not @kubernetes/client-node: importing that costs about 60 MiB of memory.
    // A kubeconfig that cannot be used stops the agent like any other bad variable (exit 2).
    try {
      kube = loadLightTransport(config.kubeconfig);
    } catch (err) {
      if (err instanceof KubeconfigError)
        throw new ConfigError(config.kubeconfig ? 'KUBECONFIG' : 'KUBERNETES_SERVICE_HOST', err.message);
      throw err;
    }
    return config;
  },
  async (config, log) => {
    const reporter = new EventReporter({ config, kube: kube!, log });
    const port = await reporter.start();
    log.info(
      { port, replica: config.replica, namespace: config.namespace, controlPlane: config.controlPlaneUrl },
      'event-reporter started',
    );
    return { close: () => reporter.close() };
  },
  // The reporter bounds its own shutdown by SHUTDOWN_GRACE_SECONDS (at most 600); this is the backstop.
  605_000,
);
