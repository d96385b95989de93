/**
 * `provisioner fleet status` (describeFleet): besides the waves, the selected tenants' hybrid
 * runtimes that need their customer, one line each with what is left, and no such lines when
 * there are none.
 */
import t from 'tap';
import { describeFleet } from '../../../provisioner/cli/fleet-commands.ts';
import type { FleetUpgrade } from '../../../provisioner/api/types.ts';

const counts = {
  excluded: 0,
  pending: 0,
  upgrading: 0,
  succeeded: 1,
  rolling_back: 0,
  quarantined: 0,
  interrupted: 0,
  cancelled: 0,
  reverting: 0,
  reverted: 0,
  left: 0,
  skipped: 0,
};
const fleet = (over: Partial<FleetUpgrade> = {}): FleetUpgrade => ({
  id: '0b7d3c1e-2f4a-4b5c-8d9e-1f2a3b4c5d6e',
  targetVersion: '1.5.0',
  state: 'running',
  stateReason: null,
  selector: {},
  options: {},
  currentWave: 0,
  abortRollback: false,
  createdBy: 'op',
  createdByKey: null,
  createdAt: '2026-11-27T10:00:00.000Z',
  updatedAt: '2026-11-27T10:00:00.000Z',
  finishedAt: null,
  windowsOverride: null,
  counts,
  etaSeconds: null,
  waves: [],
  ...over,
});
const TENANT = '3f6c1a52-6a0e-4c1b-9a57-2d8e0f4b7c11';

t.test('no hybrid runtimes: no lines about them', async (t) => {
  t.notMatch(describeFleet(fleet()).join('\n'), /hybrid/, 'nothing said');
  t.notMatch(describeFleet(fleet({ customerActionNeeded: [] })).join('\n'), /hybrid/, 'nothing said for an empty list');
});

t.test('each hybrid runtime gets a line with what is left', async (t) => {
  const lines = describeFleet(
    fleet({
      customerActionNeeded: [
        {
          tenantId: TENANT,
          runtime: 'plant-a',
          version: '1.4.1',
          reportedVersion: '1.4.1',
          action: 'upgrade',
          message: 'ask for 1.5.0',
        },
        {
          tenantId: TENANT,
          runtime: 'plant-b',
          version: '1.5.0',
          reportedVersion: null,
          action: 'apply',
          message: 'apply the bundle',
        },
      ],
    }),
  );
  t.ok(
    lines.includes(
      '  customer action needed: 2 hybrid runtimes of these tenants (the fleet upgrade moves hosted runtimes, and hybrid ones only through the in-cluster upgrader they opted in to)',
    ),
    'a count first',
  );
  t.ok(
    lines.includes(`    ${TENANT} plant-a (1.4.1, runs 1.4.1): ask for 1.5.0`),
    'plant-a: its versions and what is left',
  );
  t.ok(
    lines.includes(`    ${TENANT} plant-b (1.5.0): apply the bundle`),
    'plant-b: no reported version shown when none',
  );
});

t.test('a long list is cut at 20 lines, saying how many more', async (t) => {
  const many = Array.from({ length: 23 }, (_, i) => ({
    tenantId: TENANT,
    runtime: `r${i}`,
    version: '1.4.1',
    reportedVersion: null,
    action: 'upgrade' as const,
    message: 'ask',
  }));
  const lines = describeFleet(fleet({ customerActionNeeded: many }));
  t.equal(lines.filter((l) => l.startsWith(`    ${TENANT} r`)).length, 20, '20 runtimes listed');
  t.ok(lines.includes('    … and 3 more (--json lists them all)'), 'and how many more');
});

t.test('hybrid runtimes moved by their upgraders: a count by phase, and a line for each not done', async (t) => {
  const agent = (runtime: string, phase: 'waiting' | 'pending' | 'applying' | 'succeeded') => ({
    tenantId: TENANT,
    runtime,
    version: '1.4.1',
    reportedVersion: null,
    phase,
    message: phase,
  });
  const lines = describeFleet(
    fleet({ upgradedByAgent: [agent('u1', 'succeeded'), agent('u2', 'applying'), agent('u3', 'waiting')] }),
  );
  t.ok(
    lines.includes(
      "  hybrid runtimes moved by their in-cluster upgraders: 3 (1 succeeded, 1 under way, 1 waiting for their tenant's wave)",
    ),
    'counted by phase',
  );
  t.ok(lines.includes(`    ${TENANT} u2 (1.4.1): applying`), 'the one under way listed');
  t.ok(lines.includes(`    ${TENANT} u3 (1.4.1): waiting`), 'the waiting one listed');
  t.notOk(
    lines.some((l) => l.includes(' u1 ')),
    'the succeeded one not listed',
  );
});
