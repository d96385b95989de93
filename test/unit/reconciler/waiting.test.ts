import t from 'tap';
import { waitingRetryMs } from '../../../provisioner/reconciler/outcome.ts';
import { condition } from '../../../provisioner/store/tenants.ts';

t.test(
  'a waiting tenant retries after the first delay, then after as long as it has waited, up to the cap',
  async (t) => {
    const wait = { firstMs: 30_000, capMs: 3_600_000 };
    const now = Date.parse('2026-01-01T12:00:00Z');
    const since = (ms: number, reason: string) => [condition('Ready', 'False', reason, 'x', new Date(now - ms))];
    t.equal(
      waitingRetryMs(since(1000, 'Pending'), 'NoCapacity', wait, now),
      30_000,
      'starting to wait: the first delay',
    );
    t.equal(waitingRetryMs(since(1000, 'NoCapacity'), 'NoCapacity', wait, now), 30_000, 'never below the first delay');
    t.equal(
      waitingRetryMs(since(120_000, 'NoCapacity'), 'NoCapacity', wait, now),
      120_000,
      'as long as it waited: the delays double',
    );
    t.equal(waitingRetryMs(since(86_400_000, 'NoCapacity'), 'NoCapacity', wait, now), 3_600_000, 'capped');
    t.equal(
      waitingRetryMs(since(86_400_000, 'NoCapacity'), 'EngineUnavailable', wait, now),
      30_000,
      'another reason starts over',
    );
  },
);
