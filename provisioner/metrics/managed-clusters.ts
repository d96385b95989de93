/**
 * Managed clusters: renewals of their short-lived tokens.
 */
import client from 'prom-client';
import type { Metrics } from './registry.ts';

/**
 * Renewals of managed clusters' short-lived tokens by this replica, by outcome (`rotated`,
 * `failed`, `dropped`: the registration changed meanwhile): a rise of failures means tokens near their expiry (the operation log and the audit
 * name each rotation; tokens themselves are never recorded).
 */
export function registerManagedClusterTokenMetrics(
  metrics: Metrics,
): (outcome: 'rotated' | 'failed' | 'dropped') => void {
  const rotations = new client.Counter({
    name: 'provisioner_managed_cluster_token_rotations_total',
    help: "Managed clusters' ServiceAccount token renewals by this replica, by outcome",
    labelNames: ['outcome'] as const,
    registers: [metrics.registry],
  });
  return (outcome) => rotations.inc({ outcome });
}
