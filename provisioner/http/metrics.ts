/**
 * Prometheus metrics: process defaults, HTTP request durations by route and status, and the
 * number of tenants per phase (read from the database at scrape time).
 */
import client from 'prom-client';
import type pg from 'pg';

export interface Metrics {
  registry: client.Registry;
  httpDuration: client.Histogram<'method' | 'route' | 'status'>;
}

export function createMetrics(pool: pg.Pool): Metrics {
  const registry = new client.Registry();
  client.collectDefaultMetrics({ register: registry, prefix: 'provisioner_' });
  const httpDuration = new client.Histogram({
    name: 'provisioner_http_request_duration_seconds',
    help: 'HTTP request duration by route and status',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
  });
  new client.Gauge({
    name: 'provisioner_tenants',
    help: 'Tenants by phase',
    labelNames: ['phase'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      const { rows } = await pool.query<{ phase: string; n: number }>('SELECT phase, count(*)::int AS n FROM tenants GROUP BY phase');
      for (const r of rows) this.set({ phase: r.phase }, r.n);
    },
  });
  return { registry, httpDuration };
}
