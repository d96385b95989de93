/** Entry point of a hybrid runtime's in-cluster upgrader: `node runtime/agents/upgrader/main.ts` (upgrader.ts). */
import type { KubeTransport } from '../../kube/transport.ts';
import { agentKubeTransport } from '../common/kube.ts';
import { runService } from '../common/service.ts';
import { loadUpgraderConfig } from './config.ts';
import { Upgrader } from './upgrader.ts';

let kube: KubeTransport | undefined;

await runService(
  'upgrader',
  () => {
    const config = loadUpgraderConfig();
    kube = agentKubeTransport(config.kubeconfig);
    return config;
  },
  async (config, log) => {
    const upgrader = new Upgrader({ config, kube: kube!, log });
    const port = await upgrader.start();
    log.info({ port, namespace: config.namespace, controlPlane: config.controlPlaneUrl }, 'upgrader started');
    return { close: () => upgrader.close() };
  },
  // A rollout in progress is left as it is: the next upgrader picks the upgrade up again.
  15_000,
);
