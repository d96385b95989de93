/**
 * The installed `provisioner` command (package.json "bin" → bin/provisioner) as a newcomer runs it:
 * a real child process, with the system's PATH (whatever Node.js it has, possibly older than the
 * project needs) and not the project's, against a real API on loopback.
 */
import t from 'tap';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { createTestApi } from '../../helpers/api.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { insertTenantsBulk } from '../../helpers/bulk.ts';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const run = promisify(execFile);

// Each subtest starts the CLI as a new process (Node.js booting the CLI's TypeScript): a few seconds
// each on a quiet machine, many times that beside another tier's tests.
t.setTimeout(300_000);

const api = await createTestApi();
const url = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

/** PATH without the project's own directories (.tools/node, node_modules/.bin) the test runner added. */
const systemPath = (process.env.PATH ?? '')
  .split(delimiter)
  .filter((dir) => dir && !dir.startsWith(ROOT) && !dir.includes('/.tools/'))
  .join(delimiter);

t.test('package.json names bin/provisioner as the provisioner command', async (t) => {
  const pkg = JSON.parse(await readFile(new URL('package.json', `file://${ROOT}`), 'utf8')) as {
    bin: Record<string, string>;
  };
  t.equal(pkg.bin.provisioner, 'bin/provisioner', 'the "provisioner" bin is the shell launcher, not a .ts file');
});

t.test('bin/provisioner runs the CLI with the system PATH first (any Node.js version there)', async (t) => {
  const systemNode = await run('node', ['--version'], { env: { PATH: systemPath } }).then(
    (r) => r.stdout.trim(),
    () => 'none',
  );
  t.comment(`Node.js first on the system PATH: ${systemNode}`);
  const { tenantId, body } = await api.signup();
  const { stdout, stderr } = await run(`${ROOT}bin/provisioner`, ['--url', url, 'tenants', 'list'], {
    env: { PATH: systemPath, HOME: process.env.HOME ?? '/tmp', PROVISIONER_TOKEN: api.adminKey },
    cwd: '/',
  });
  t.match(stdout, /^ID\s+ORGANIZATION\s+PHASE/, `tenants list prints the table header (stderr: ${stderr})`);
  t.match(stdout, new RegExp(`${tenantId}\\s+${body.tenant.organization}`), 'and the signed-up tenant');
});

t.test('bin/provisioner passes the CLI exit code through', async (t) => {
  const failed = await run(
    `${ROOT}bin/provisioner`,
    ['--url', url, '--token', 'hrt_admin_' + 'x'.repeat(43), 'tenants', 'list'],
    {
      env: { PATH: systemPath, HOME: process.env.HOME ?? '/tmp' },
    },
  ).then(
    () => ({ code: 0, stderr: '' }),
    (e: { code: number; stderr: string }) => e,
  );
  t.equal(failed.code, 1, 'a rejected API key exits 1 through the launcher');
  t.match(failed.stderr, /INVALID_API_KEY/, 'and the error names the API code');
});

for (const command of [['tenants', 'list'], ['doctor']])
  t.test(
    `an API command (${command.join(' ')}) loads neither the server nor the Pulumi engine (what made a call take seconds)`,
    async (t) => {
      const dir = await mkdtemp(join(tmpdir(), 'hrt-cli-imports-'));
      const record = join(dir, 'modules.json');
      const preload = join(dir, 'record-modules.mjs');
      await writeFile(
        preload,
        `import { registerHooks } from 'node:module';
import { writeFileSync } from 'node:fs';
const urls = new Set();
registerHooks({ resolve(specifier, context, next) { const r = next(specifier, context); urls.add(r.url); return r; } });
process.on('exit', () => writeFileSync(${JSON.stringify(record)}, JSON.stringify([...urls])));
`,
      );
      // doctor exits 1 here (the test API has no engine and no cluster): its output is what counts.
      const { stdout } = await run(
        process.execPath,
        ['--import', preload, `${ROOT}bin/provisioner.ts`, '--url', url, '--token', api.adminKey, ...command],
        { env: { PATH: process.env.PATH ?? '' } },
      ).catch((e: { stdout: string }) => ({ stdout: e.stdout }));
      t.match(
        stdout,
        command[0] === 'doctor' ? /^ok\s+api\s/m : /^ID\s+ORGANIZATION\s+PHASE/,
        `${command.join(' ')} answered`,
      );
      const loaded = JSON.parse(await readFile(record, 'utf8')) as string[];
      t.ok(
        loaded.some((u) => u.endsWith('/provisioner/cli/api-commands.ts')),
        'the recorder saw the CLI modules load',
      );
      const heavy = loaded.filter((u) =>
        /\/node_modules\/(fastify|@pulumi|pg|@kubernetes)\/|\/provisioner\/(server|services|reconciler|engine)\b/.test(
          u,
        ),
      );
      t.same(heavy, [], 'no fastify, pg, @pulumi/*, @kubernetes/* or server/reconciler/engine module was loaded');
    },
  );

t.test('a --json answer over 1 MiB piped into a slow reader arrives whole, with the exit code', async (t) => {
  // Enough tenants for the list to pass 1 MiB (the pipe takes 64 KiB before its reader does).
  const inserted = await insertTenantsBulk(api.db.pool, 1200, {
    prefix: 'pipe',
    randomSuffix: true,
    email: 'ops-{n}@pipe.example',
    plan: 'team',
    runtimeVersion: catalog.versions[0]!.version,
    conditions: [
      {
        type: 'Ready',
        status: 'False',
        reason: 'NoCapacity',
        message: 'no root cluster can take a team tenant; '.repeat(12),
        lastTransitionTime: new Date().toISOString(),
      },
    ],
  });
  t.equal(inserted, 1200, 'precondition: 1200 tenants inserted');
  const dir = await mkdtemp(join(tmpdir(), 'hrt-cli-pipe-'));
  const reader = join(dir, 'slow-reader.mjs');
  // Takes one chunk, then lets 10 ms pass before the next: a reader slower than the writer.
  await writeFile(
    reader,
    `import { setTimeout as pause } from 'node:timers/promises';
let bytes = 0;
for await (const chunk of process.stdin) { process.stdout.write(chunk); bytes += chunk.length; await pause(10); }
process.stderr.write('read ' + bytes + ' bytes');
`,
  );
  const pipeline = (args: string[]) =>
    run(
      'bash',
      ['-c', 'set -o pipefail; "$@" | node "$READER"', 'pipe', `${ROOT}bin/provisioner`, '--url', url, ...args],
      {
        env: { PATH: systemPath, HOME: process.env.HOME ?? '/tmp', PROVISIONER_TOKEN: api.adminKey, READER: reader },
        maxBuffer: 64 * 1024 * 1024,
      },
    ).then(
      (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
      (e: { code: number; stdout: string; stderr: string }) => e,
    );

  const listed = await pipeline(['--json', 'tenants', 'list', '--all', '--limit', '200']);
  t.equal(listed.code, 0, `tenants list --json exits 0 through the pipe (stderr: ${listed.stderr.slice(0, 500)})`);
  t.ok(
    Buffer.byteLength(listed.stdout) >= 1024 * 1024,
    `the answer is at least 1 MiB (${Buffer.byteLength(listed.stdout)} bytes arrived)`,
  );
  let parsed: { items: Array<{ organization: string }> } | undefined;
  try {
    parsed = JSON.parse(listed.stdout) as { items: Array<{ organization: string }> };
  } catch (err) {
    t.fail(`the piped answer parses as JSON (${(err as Error).message}; ${listed.stdout.length} characters arrived)`);
  }
  t.ok(
    (parsed?.items.filter((i) => i.organization.startsWith('pipe-')).length ?? 0) >= 1200,
    'and holds every one of the 1200 inserted tenants',
  );

  const failed = await pipeline(['--json', 'tenants', 'get', '00000000-0000-4000-8000-000000000000']);
  t.equal(failed.code, 1, 'a failing command exits 1 through the same pipe');
  t.match(failed.stderr, /TENANT_NOT_FOUND/, 'with its error on stderr');
});

t.test('the documented launcher, bin/provisioner, runs on the project Node.js and prints no warning', async (t) => {
  const { stdout, stderr } = await run(`${ROOT}bin/provisioner`, ['--version'], {
    env: { PATH: systemPath, HOME: process.env.HOME ?? '/tmp' },
    cwd: '/',
  });
  t.equal(
    stdout.trim(),
    `provisioner ${(JSON.parse(await readFile(`${ROOT}package.json`, 'utf8')) as { version: string }).version} (Node.js ${process.version})`,
    `--version names the package version and the project's Node.js (${process.version}), whatever the system's`,
  );
  t.equal(stderr, '', '--version prints nothing on stderr (no engine or install warning)');
  const help = await run(`${ROOT}bin/provisioner`, ['doctor', '--help'], {
    env: { PATH: systemPath, HOME: process.env.HOME ?? '/tmp' },
    cwd: '/',
  });
  t.match(help.stdout, /^Usage: provisioner doctor/, 'doctor --help prints its usage');
  t.equal(help.stderr, '', 'and nothing on stderr');
});
