/**
 * The batched hot reads (store/batched-reads.ts).
 */
import client from 'prom-client';
import type { HotReads } from '../store/batched-reads.ts';
import type { Metrics } from './registry.ts';

/**
 * Reads answered by the batched hot reads and the statements that answered them, by kind (tenant,
 * key): their ratio is the mean batch size, and statements per second the database load they make.
 */
export function registerReadMetrics(metrics: Metrics, reads: HotReads): void {
  const counter = (name: string, help: string, field: 'reads' | 'batches'): void => {
    new client.Counter({
      name,
      help,
      labelNames: ['kind'] as const,
      registers: [metrics.registry],
      collect() {
        const s = reads.stats();
        this.reset();
        this.inc({ kind: 'tenant' }, s.tenants[field]);
        this.inc({ kind: 'key' }, s.keys[field]);
      },
    });
  };
  counter('provisioner_hot_reads_total', 'Tenant reads and key lookups answered through batched statements', 'reads');
  counter(
    'provisioner_hot_read_statements_total',
    'Batched statements sent for tenant reads and key lookups',
    'batches',
  );
}
