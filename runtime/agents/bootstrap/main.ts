/**
 * Entry point of the bootstrap Job of a hybrid runtime's install bundle:
 * `node runtime/agents/bootstrap/main.ts`. Runs once (bootstrap.ts) and exits: 0 done (or
 * already done), 1 failed (the Job may try again), 2 configuration error, 3 the control plane
 * refused the bootstrap token (the Job fails without another try).
 */
import { loadLightTransport } from '../../kube/light-client.ts';
import { ConfigError } from '../common/config.ts';
import { createLogger } from '../common/service.ts';
import { EXIT, runBootstrap } from './bootstrap.ts';
import { loadBootstrapConfig, type BootstrapConfig } from './config.ts';

let config: BootstrapConfig;
try {
  config = loadBootstrapConfig();
} catch (err) {
  const log = createLogger('bootstrap', 'info');
  if (err instanceof ConfigError) log.fatal({ variable: err.variable }, `invalid configuration: ${err.message}`);
  else log.fatal({ err: (err as Error).message }, 'could not load configuration');
  process.exit(EXIT.config);
}
const log = createLogger('bootstrap', config.logLevel);
let code: number;
try {
  code = await runBootstrap(config, loadLightTransport(config.kubeconfig), log);
} catch (err) {
  log.fatal({ err: (err as Error).message }, 'bootstrap failed');
  code = EXIT.failed;
}
// The kept-alive connections to the API server would hold the process open.
process.exit(code);
