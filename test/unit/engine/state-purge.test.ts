import t from 'tap';
import { leftoverPatterns, postgresBackend } from '../../../provisioner/engine/state-purge.ts';

t.test('leftover patterns cover backups, history and the .bak copies of one stack only', async (t) => {
  const patterns = leftoverPatterns('tenants', 'tenant-1f2e');
  const like = (key: string) =>
    patterns.some((p) =>
      new RegExp(
        '^' +
          p
            .split('%')
            .map((s) => s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&'))
            .join('.*') +
          '$',
      ).test(key),
    );
  for (const key of [
    'db/.pulumi/backups/tenants/tenant-1f2e/tenant-1f2e.1795311246123579112.json',
    'db/.pulumi/history/tenants/tenant-1f2e/tenant-1f2e-1795311246.history.json',
    'db/.pulumi/stacks/tenants/tenant-1f2e.json.bak',
  ])
    t.ok(like(key), key);
  for (const key of [
    'db/.pulumi/stacks/tenants/tenant-1f2e.json', // the stack itself is `stack rm`'s business
    'db/.pulumi/backups/tenants/tenant-1f2e0/x.json', // another stack with the same prefix
    'db/.pulumi/locks/tenants/tenant-1f2e/lock.json',
    'db/.pulumi/backups/other/tenant-1f2e/x.json',
  ])
    t.notOk(like(key), `not ${key}`);
  t.throws(() => leftoverPatterns('tenants', 'tenant_%'), /cannot be matched safely/);
});

t.test('postgresBackend: connection string without the table parameter, or undefined', async (t) => {
  t.same(postgresBackend('postgres://u:p@h:5432/db?sslmode=disable&table=pulumi_state'), {
    connectionString: 'postgres://u:p@h:5432/db?sslmode=disable',
    table: 'pulumi_state',
  });
  t.same(postgresBackend('postgresql://h/db'), { connectionString: 'postgresql://h/db', table: 'pulumi_state' });
  t.equal(postgresBackend('file:///var/state'), undefined);
  t.equal(postgresBackend('s3://bucket'), undefined);
  t.equal(postgresBackend('postgres://h/db?table=x;drop'), undefined, 'an unsafe table name is refused');
  t.equal(postgresBackend('not a url'), undefined);
});
