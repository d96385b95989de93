/**
 * End-to-end: deleting a tenant through the CLI removes its namespace from the root cluster and
 * its stack from the Pulumi state backend (the provisioner's pulumi_state table), tombstones the
 * tenant and revokes its keys, and leaves another tenant on the same root cluster alone.
 */
import t from 'tap';
import { cli } from './harness/api-client.ts';
import { PROVISION_TIMEOUT, provisioningSuite } from './harness/suite.ts';
import { exists } from './harness/kube.ts';
import { until } from '../../sandbox/processes.ts';

const VERSION = '1.4.1';
await provisioningSuite(t, async (e2e, root) => {
  t.test('delete: namespace gone from the root, stack removed from the backend, tenant tombstoned', async (t) => {
    const [gone, kept] = await Promise.all([e2e.signup('leaving', VERSION), e2e.signup('staying', VERSION)]);
    await Promise.all([
      e2e.api.waitForPhase(gone.tenant.id, 'Ready', PROVISION_TIMEOUT),
      e2e.api.waitForPhase(kept.tenant.id, 'Ready', PROVISION_TIMEOUT),
    ]);
    const namespace = `tenant-${gone.tenant.id}`;
    const stack = `tenant-${gone.tenant.id}`;
    // The DIY backend keeps one row per object: the stack itself is `.pulumi/stacks/tenants/<stack>.json`.
    const stackKeys = async () =>
      (
        await e2e.db.pool.query<{ key: string }>(
          `SELECT key FROM pulumi_state WHERE key LIKE '%/' || $1 || '%' ORDER BY key`,
          [stack],
        )
      ).rows.map((r) => r.key);
    const isStackFile = (k: string) => k.endsWith(`/${stack}.json`);
    t.ok((await stackKeys()).some(isStackFile), 'the stack is in the state backend (pulumi_state) before the delete');
    t.match((await e2e.pulumi(['stack', 'ls', '--all', '--json'])).stdout, stack, 'and pulumi stack ls lists it');

    const started = Date.now();
    const d = await cli(e2e.provisioner.url, e2e.settings.adminToken, ['tenants', 'delete', gone.tenant.id]);
    t.equal(d.code, 0, 'provisioner tenants delete is accepted');
    const tombstone = await e2e.api.waitForPhase(gone.tenant.id, 'Deleted', PROVISION_TIMEOUT);
    const seconds = (Date.now() - started) / 1000;
    e2e.timing('delete', seconds);
    t.ok(
      seconds < 240,
      `delete took ${seconds.toFixed(1)} s (bound checked: < 240 s; the target is in docs/benchmarks.md)`,
    );
    t.ok(tombstone.deletedAt, 'the tenant is a tombstone with deletedAt');
    t.equal(tombstone.spec.deleted, true);

    await until(
      `namespace ${namespace} to be gone`,
      60_000,
      async () => !(await exists(() => root.core.readNamespace({ name: namespace }))),
    );
    t.notOk(
      await exists(() => root.core.readNamespace({ name: namespace })),
      'the tenant namespace is gone from the root',
    );
    const left = await stackKeys();
    t.notOk(left.some(isStackFile), 'the stack is gone from the backend (pulumi_state)');
    t.notOk(
      left.some((k) => k.includes('/locks/')),
      'no lock of the stack is left',
    );
    t.notMatch(
      (await e2e.pulumi(['stack', 'ls', '--all', '--json'])).stdout,
      stack,
      'pulumi stack ls no longer lists it',
    );
    t.same(left, [], 'no backup or history object of the stack is left in pulumi_state');
    t.ok(
      (await e2e.api.logLines(tombstone.status.lastOperationId!)).some((l) =>
        /removed \d+ backup\/history object\(s\) of the stack/.test(l),
      ),
      'the delete operation log says the leftovers were removed',
    );
    const own = await e2e.api.withToken(gone.apiKey).request('GET', `/v1/tenants/${gone.tenant.id}`);
    t.equal(own.status, 401, "the deleted tenant's key is revoked");

    const other = await e2e.api.tenant(kept.tenant.id);
    t.equal(other.status.phase, 'Ready', 'the other tenant is still Ready');
    t.ok(await exists(() => root.core.readNamespace({ name: `tenant-${kept.tenant.id}` })), 'with its namespace');
    t.equal(other.status.lastOperationId, kept.operationId, 'and no operation ran for it');
  });
});
