/**
 * Prometheus metrics: the process's one registry (`/metrics` serves it) and what every process
 * reports; each subsystem's metrics are in a module of their own here, registered on it by
 * services.ts.
 */
import client from 'prom-client';
import type pg from 'pg';
import { sampleEventLoopDelay } from './event-loop.ts';
import { registerTenantMetrics } from './tenants.ts';

export interface Metrics {
  registry: client.Registry;
  httpDuration: client.Histogram<'method' | 'route' | 'status'>;
  /** Stops sampling the event-loop delay. */
  close(): void;
}

/**
 * The process's one registry, with the process defaults, the event-loop delay, HTTP request
 * durations by route and status, and the tenants' and runtimes' gauges; each subsystem's metrics
 * are registered on it by their own module (metrics/*.ts, called by services.ts).
 */
export function createMetrics(pool: pg.Pool): Metrics {
  const registry = new client.Registry();
  client.collectDefaultMetrics({ register: registry, prefix: 'provisioner_' });
  const close = sampleEventLoopDelay(registry);
  const httpDuration = new client.Histogram({
    name: 'provisioner_http_request_duration_seconds',
    help: 'HTTP request duration by route and status',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
  });
  registerTenantMetrics(registry, pool);
  return { registry, httpDuration, close };
}
