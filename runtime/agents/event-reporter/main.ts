/** Entry point of the event reporter agent: `node runtime/agents/event-reporter/main.ts`. */
import type { KubeTransport } from '../../kube/transport.ts';
import { agentKubeTransport } from '../common/kube.ts';
import { runService } from '../common/service.ts';
import { loadEventReporterConfig } from './config.ts';
import { EventReporter } from './reporter.ts';

let kube: KubeTransport | undefined;

await runService(
  'event-reporter',
  () => {
    const config = loadEventReporterConfig();
    kube = agentKubeTransport(config.kubeconfig);
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
