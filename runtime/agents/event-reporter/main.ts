/** Entry point of the event reporter agent: `node runtime/agents/event-reporter/main.ts`. */
import { KubeConfig } from '@kubernetes/client-node';
import { runService } from '../common/service.ts';
import { loadEventReporterConfig } from './config.ts';
import { EventReporter } from './reporter.ts';

await runService(
  'event-reporter',
  () => loadEventReporterConfig(),
  async (config, log) => {
    const kc = new KubeConfig();
    if (config.kubeconfig) kc.loadFromFile(config.kubeconfig);
    else kc.loadFromCluster();
    const reporter = new EventReporter({ config, kc, log });
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
