import t from 'tap';
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../../../provisioner/config.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';
import { startServer } from '../../../provisioner/server.ts';

const run = promisify(execFile);
// Starts embedded PostgreSQL twice and the CLI six times: more than tap's default file timeout on a loaded machine.
t.setTimeout(300_000);
const bin = fileURLToPath(new URL('../../../bin/provisioner.ts', import.meta.url));

t.test('the embedded database keeps data across restarts, and the admin key is generated once', async (t) => {
  const dataDir = await mkdtemp(join(tmpdir(), 'hrt-restart-'));
  await chmod(dataDir, 0o755); // as root, PostgreSQL runs as the postgres user and must traverse it
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  const env = { PORT: '0', PROVISIONER_DATA_DIR: dataDir, LOG_LEVEL: 'silent' };
  const printed: string[] = [];

  const first = await startServer(loadConfig(env), { out: (l) => printed.push(l) });
  const adminKey = printed.map((l) => l.trim()).find((l) => l.startsWith('hrt_admin_'));
  t.ok(adminKey, 'a generated admin key is printed');
  const signup = await new ApiClient({ baseUrl: first.url }).request('POST /v1/signup', {
    body: { organization: 'persisted', email: 'p@p.io' },
  });
  t.equal(signup.status, 202);
  if (!signup.ok) return;
  const { tenant } = signup.body;
  const keyFile = await readFile(join(dataDir, 'encryption.key'), 'utf8');
  const passphrase = await readFile(join(dataDir, 'pulumi-passphrase'), 'utf8');
  await first.close();

  printed.length = 0;
  const second = await startServer(loadConfig(env), { out: (l) => printed.push(l) });
  t.teardown(() => second.close());
  t.notOk(
    printed.some((l) => l.includes('hrt_admin_')),
    'no second admin key',
  );
  t.equal(await readFile(join(dataDir, 'encryption.key'), 'utf8'), keyFile, 'the development encryption key is kept');
  t.equal(
    await readFile(join(dataDir, 'pulumi-passphrase'), 'utf8'),
    passphrase,
    'the development Pulumi passphrase is kept',
  );
  const res = await new ApiClient({ baseUrl: second.url, token: adminKey }).request('GET /v1/tenants/:id', {
    params: { id: tenant.id },
  });
  t.equal(res.status, 200, 'the first admin key still works');
  t.equal(res.ok && res.body.organization, 'persisted');
});

t.test('a bad configuration value stops start-up with a message naming it', async (t) => {
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ PORT: 'eighty' }, /PORT: 'eighty' is not a whole number/],
    [{ PORT: '70000' }, /PORT: 70000 is outside/],
    [{ DATABASE_URL: 'mysql://x' }, /DATABASE_URL: scheme 'mysql:' is not supported/],
    [{ PROVISIONER_ENCRYPTION_KEY: 'short' }, /PROVISIONER_ENCRYPTION_KEY: must be 32 bytes/],
    [{ PROVISIONER_ADMIN_TOKEN: 'tiny' }, /PROVISIONER_ADMIN_TOKEN: must be at least 24/],
    [{ LOG_LEVEL: 'loud' }, /LOG_LEVEL: 'loud' is not one of/],
  ];
  // The six processes run side by side: each loads the whole CLI, which takes seconds on a loaded machine.
  const results = await Promise.all(
    cases.map(([env]) =>
      run(process.execPath, [bin, 'serve'], { env: { ...process.env, ...env } }).then(
        () => null,
        (e: { code: number; stderr: string }) => e,
      ),
    ),
  );
  cases.forEach(([env, message], i) => {
    const err = results[i];
    t.ok(err, `${JSON.stringify(env)} fails`);
    t.equal(err?.code, 2, 'exit code 2');
    t.match(err?.stderr, message);
  });
});
