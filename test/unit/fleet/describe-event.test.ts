/**
 * `provisioner fleet status --follow` (describeEvent): an operator's skip of a tenant's gate checks
 * gets a line of its own, naming the checks, the key and the reason; routine tenant decisions the
 * progress bars already show get none.
 */
import t from 'tap';
import { describeEvent } from '../../../provisioner/cli/fleet-commands.ts';

const TENANT = '5a1c2d3e-4f50-4617-8293-a4b5c6d7e8f9';
const KEY = '0c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f';

t.test('a gate skip is a line with the checks, the key and the reason', async (t) => {
  const line = describeEvent({
    seq: 7,
    at: '2026-11-28T14:05:00.000Z',
    action: 'gate_skipped',
    tenantId: TENANT,
    data: {
      checks: ['tunnel', 'applications'],
      reason: 'INC-4711: DNS outage',
      by: KEY,
      step: { kind: 'upgrade', from: '1.4.0', to: '1.4.1' },
    },
  });
  t.equal(
    line,
    `  2026-11-28T14:05:00.000Z gate_skipped ${TENANT}: tunnel, applications skipped by key ${KEY}: INC-4711: DNS outage`,
    'the line names the tenant, the checks, the key and the reason',
  );
});

t.test('a routine tenant decision gets no line of its own', async (t) => {
  const line = describeEvent({
    seq: 8,
    at: '2026-11-28T14:05:01.000Z',
    action: 'tenant_succeeded',
    tenantId: TENANT,
    data: { version: '1.4.1' },
  });
  t.equal(line, null, 'tenant_succeeded is shown by the bars, not as a line');
});
