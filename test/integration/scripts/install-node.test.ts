/**
 * scripts/install-node.sh, which scripts/node-env.sh runs when the system Node.js is older than the
 * project needs: a real install of the `node` package from the registry (through npm's cache) with
 * the system's npm, into a temporary directory.
 */
import t from 'tap';
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const run = promisify(execFile);
// The install unpacks a 100 MB binary: slow on a loaded machine.
t.setTimeout(300_000);

/** PATH without the project's own directories (.tools/node, node_modules/.bin) the test runner added. */
const systemPath = (process.env.PATH ?? '')
  .split(delimiter)
  .filter((dir) => dir && !dir.startsWith(ROOT) && !dir.includes('/.tools/'))
  .join(delimiter);

t.test("installing the project's Node.js (older system Node) approves the node package's install script", async (t) => {
  const npm = await run('sh', ['-c', 'command -v npm'], { env: { PATH: systemPath } }).then(
    (r) => r.stdout.trim(),
    () => '',
  );
  if (!npm) throw new Error('precondition: npm on the system PATH (scripts/node-env.sh installs Node.js with it)');
  const npmVersion = (await run(npm, ['--version'], { env: { PATH: systemPath } })).stdout.trim();
  const dir = await mkdtemp(join(tmpdir(), 'hrt-node-install-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const { stderr } = await run('bash', [`${ROOT}scripts/install-node.sh`, dir, 'node@24'], {
    env: { ...process.env, PATH: systemPath }, // the rest as given: npm may need the machine's CA bundle
    cwd: dir,
    maxBuffer: 16 * 1024 * 1024,
  });
  t.notMatch(stderr, /npm warn/i, `npm ${npmVersion} prints no warning (stderr: ${stderr.trim()})`);
  const installed = (await run(join(dir, 'node_modules/.bin/node'), ['--version'])).stdout.trim();
  t.match(installed, /^v24\./, 'the installed Node.js runs (its install script ran and fetched the binary)');
});
