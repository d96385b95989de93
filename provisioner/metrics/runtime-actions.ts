/**
 * Actions on runtime objects forwarded by this replica.
 */
import client from 'prom-client';
import type { Metrics } from './registry.ts';

/**
 * Actions on runtime objects this replica forwarded (docs/api.md, "Runtime actions"), by action
 * and by the status the caller got: a rise of 409s is callers racing the controllers, of 503s an
 * unreachable runtime or vcluster API server.
 */
export function registerRuntimeActionMetrics(metrics: Metrics): (action: string, status: number) => void {
  const actions = new client.Counter({
    name: 'provisioner_runtime_actions_total',
    help: 'Actions on runtime objects forwarded by this replica, by action and answered status',
    labelNames: ['action', 'status'] as const,
    registers: [metrics.registry],
  });
  return (action, status) => actions.inc({ action, status: String(status) });
}
