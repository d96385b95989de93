/**
 * Idle sleep and wake (sleep/).
 */
import client from 'prom-client';
import type pg from 'pg';
import { sleepCounts } from '../store/sleep.ts';
import type { Metrics } from './registry.ts';

/** What the sleep metrics read from this process's sleep service (sleep/service.ts). */
export interface SleepView {
  stats: { slept: number; woken: number; wokenByRequest: number; wakingAnswers: number };
}

/**
 * Idle sleep (docs/operations.md "Sleep"): tenants per plan awake, asleep and waking (read at
 * scrape time), and this process's sleeps and wakes. The wake's engine run is
 * provisioner_engine_run_duration_seconds{kind="wake"}.
 */
export function registerSleepMetrics(metrics: Metrics, pool: pg.Pool, sleep: SleepView): void {
  const registers = [metrics.registry];
  new client.Gauge({
    name: 'provisioner_tenants_sleep',
    help: 'Tenants (not deleted) by plan and sleep state: awake, asleep (phase Sleeping), waking (phase Waking)',
    labelNames: ['plan', 'state'] as const,
    registers,
    async collect() {
      this.reset();
      for (const r of await sleepCounts(pool)) {
        this.set({ plan: r.plan, state: 'awake' }, r.awake);
        this.set({ plan: r.plan, state: 'asleep' }, r.asleep);
        this.set({ plan: r.plan, state: 'waking' }, r.waking);
      }
    },
  });
  new client.Counter({
    name: 'provisioner_sleep_events_total',
    help: 'Sleeps and wakes this replica queued: slept (idle loop), woken (any wake), woken_by_request (a request to the runtime), waking_answers (503 TENANT_WAKING given)',
    labelNames: ['event'] as const,
    registers,
    collect() {
      this.reset();
      this.inc({ event: 'slept' }, sleep.stats.slept);
      this.inc({ event: 'woken' }, sleep.stats.woken);
      this.inc({ event: 'woken_by_request' }, sleep.stats.wokenByRequest);
      this.inc({ event: 'waking_answers' }, sleep.stats.wakingAnswers);
    },
  });
}
