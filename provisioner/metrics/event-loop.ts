/**
 * The event-loop delay sampler (`provisioner_event_loop_delay_seconds`).
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import client from 'prom-client';

/** How often the event-loop delay histogram gets an observation: the worst delay of each period. */
export const EVENT_LOOP_SAMPLE_MS = 1000;

/**
 * `provisioner_event_loop_delay_seconds`: once a second, the longest the event loop was held in
 * that second (perf_hooks.monitorEventLoopDelay at 10 ms resolution, its max, then reset). A
 * request that holds the loop holds every tenant's requests, tunnel heartbeats and lease renewals:
 * the share of seconds above 0.1 s is what to alert on (docs/operations.md). prom-client's default
 * `provisioner_nodejs_eventloop_lag_*` gauges are the same monitor's figures since start.
 */
export function sampleEventLoopDelay(registry: client.Registry): () => void {
  const histogram = new client.Histogram({
    name: 'provisioner_event_loop_delay_seconds',
    help: 'The longest the event loop was held within each second (one observation per second; monitorEventLoopDelay, 10 ms resolution)',
    buckets: [0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry],
  });
  const monitor = monitorEventLoopDelay({ resolution: 10 });
  monitor.enable();
  const timer = setInterval(() => {
    histogram.observe(monitor.max / 1e9);
    monitor.reset();
  }, EVENT_LOOP_SAMPLE_MS);
  timer.unref();
  return () => {
    clearInterval(timer);
    monitor.disable();
  };
}
