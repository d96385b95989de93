/**
 * How a fleet upgrade lists the hybrid runtimes of its tenants (provisioner/fleet/service.ts
 * hybridRuntimesOf): moved by their in-cluster upgraders (waiting for their tenant's wave, then the
 * upgrader's phase) or needing their customer, with why.
 */
import t from 'tap';
import { hybridRuntimesOf } from '../../../provisioner/fleet/service.ts';
import type { HybridRuntimeBehind } from '../../../provisioner/store/runtimes.ts';

const row = (name: string, over: Partial<HybridRuntimeBehind>): HybridRuntimeBehind => ({
  tenant_id: '3f6c1a52-6a0e-4c1b-9a57-2d8e0f4b7c11',
  name,
  version: '1.4.1',
  reported_version: '1.4.1',
  upgrades: 'agent',
  upgrade_phase: null,
  upgrade_to: null,
  upgrade_message: null,
  tenant_state: 'pending',
  ...over,
});

t.test('opted-in runtimes wait for their tenant, then show the upgrader’s phase', async (t) => {
  const { upgradedByAgent, customerActionNeeded } = hybridRuntimesOf(
    [
      row('waits', { tenant_state: 'upgrading' }),
      row('asked', { version: '1.5.0', upgrade_phase: 'pending', upgrade_to: '1.5.0', tenant_state: 'succeeded' }),
      row('applying', { version: '1.5.0', upgrade_phase: 'applying', upgrade_to: '1.5.0', tenant_state: 'succeeded' }),
      row('done', {
        version: '1.5.0',
        upgrade_phase: 'succeeded',
        upgrade_to: '1.5.0',
        upgrade_message: 'runs 1.5.0',
        tenant_state: 'succeeded',
      }),
    ],
    '1.5.0',
  );
  t.same(customerActionNeeded, [], 'none needs its customer');
  t.same(
    upgradedByAgent.map((a) => [a.runtime, a.phase]),
    [
      ['waits', 'waiting'],
      ['asked', 'pending'],
      ['applying', 'applying'],
      ['done', 'succeeded'],
    ],
  );
  t.match(upgradedByAgent[0]?.message, /once its tenant's hosted runtime reaches it in its wave/);
  t.match(upgradedByAgent[3]?.message, /applied 1\.5\.0: runs 1\.5\.0/);
});

t.test('the others need their customer, and the message says why the upgrader does not move them', async (t) => {
  const { upgradedByAgent, customerActionNeeded } = hybridRuntimesOf(
    [
      row('customer', { upgrades: 'customer' }),
      row('not-asked', { tenant_state: 'succeeded' }),
      row('quarantined', { tenant_state: 'quarantined' }),
      row('rolled-back', { upgrade_phase: 'rolled-back', upgrade_to: '1.5.0', upgrade_message: 'FailedCreate' }),
      row('failed', { version: '1.5.0', upgrade_phase: 'failed', upgrade_to: '1.5.0', upgrade_message: 'both failed' }),
      row('older-ask', { upgrade_phase: 'succeeded', upgrade_to: '1.4.1', tenant_state: 'succeeded' }),
    ],
    '1.5.0',
  );
  t.same(upgradedByAgent, [], 'none is the upgrader’s');
  const by = Object.fromEntries(customerActionNeeded.map((c) => [c.runtime, c]));
  t.notMatch(by.customer?.message, /upgrader/, 'upgrades: customer: no word of an upgrader');
  t.match(by['not-asked']?.message, /was not asked: its tenant is succeeded/);
  t.match(by.quarantined?.message, /was not asked: its tenant is quarantined/);
  t.match(by['rolled-back']?.message, /rolled it back: FailedCreate/);
  t.equal(by.failed?.action, 'apply', 'asked, so what is left is applying the bundle');
  t.match(by.failed?.message, /its in-cluster upgrader failed: both failed/);
  t.match(by['older-ask']?.message, /was not asked/, 'an upgrade to another version does not count');
});
