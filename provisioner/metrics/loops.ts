/**
 * The background loops (loops/manager.ts).
 */
import client from 'prom-client';
import type { LoopStatus } from '../../runtime/loops/health.ts';
import type { Metrics } from './registry.ts';

/** What the loop metrics read: each loop's status by name (loops/manager.ts). */
export interface LoopsView {
  status(): LoopStatus[];
}

/**
 * Every background loop by name (`loop` label): rounds and failed rounds since start, the time of
 * its last successful round, and whether it runs (1) or not (0: not started, stopped, turned off).
 */
export function registerLoopMetrics(metrics: Metrics, loops: LoopsView): void {
  const registers = [metrics.registry];
  const counted = [
    ['provisioner_loop_rounds_total', 'Rounds of each background loop since start, successful or not', 'rounds'],
    ['provisioner_loop_failures_total', 'Failed rounds of each background loop since start', 'failures'],
  ] as const;
  for (const [name, help, field] of counted)
    new client.Counter({
      name,
      help,
      labelNames: ['loop'] as const,
      registers,
      collect() {
        this.reset();
        for (const s of loops.status()) this.inc({ loop: s.name }, s[field]);
      },
    });
  const gauges = [
    [
      'provisioner_loop_last_success_timestamp_seconds',
      "Unix time of each background loop's last successful round (absent before the first)",
      (s: LoopStatus) => (s.lastSuccessAt ? s.lastSuccessAt.getTime() / 1000 : undefined),
    ],
    [
      'provisioner_loop_running',
      'Whether each background loop runs (1) or not (0: not started, stopping, stopped or turned off)',
      (s: LoopStatus) => (s.state === 'running' ? 1 : 0),
    ],
  ] as const;
  for (const [name, help, value] of gauges)
    new client.Gauge({
      name,
      help,
      labelNames: ['loop'] as const,
      registers,
      collect() {
        this.reset();
        for (const s of loops.status()) {
          const v = value(s);
          if (v !== undefined) this.set({ loop: s.name }, v);
        }
      },
    });
}
