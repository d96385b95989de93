/**
 * README.md's configuration table lists every environment variable the provisioner reads: the
 * names config.ts reads (seen by running loadConfig over an environment that records each name
 * asked for, with the settings that make it read the conditional ones, and every variable name
 * written in its source), each with a row in the table under "## Configuration". A setting added
 * without a row fails here, as error-codes.test.ts does for docs/api.md's codes.
 */
import { readFile } from 'node:fs/promises';
import t from 'tap';
import { loadConfig } from '../../provisioner/config.ts';

const root = new URL('../../', import.meta.url);

/** The backticked first cells of the table under `## Configuration` in README.md. */
async function readmeVariables(): Promise<Set<string>> {
  const readme = await readFile(new URL('README.md', root), 'utf8');
  const start = readme.indexOf('\n## Configuration\n');
  if (start === -1) throw new Error('README.md has no "## Configuration" section');
  const next = readme.indexOf('\n## ', start + 1);
  const names = new Set<string>();
  for (const line of readme.slice(start, next === -1 ? undefined : next).split('\n')) {
    const m = /^\| `([A-Z][A-Z0-9_]*)` \|/.exec(line);
    if (m) names.add(m[1]!);
  }
  return names;
}

/** Names loadConfig asks `env` for (an error from a deliberately odd value still counts what was read). */
function namesRead(env: Record<string, string>): Set<string> {
  const read = new Set<string>();
  const recording = new Proxy(env, {
    get(target, key) {
      if (typeof key === 'string') read.add(key);
      return target[key as string];
    },
  });
  try {
    loadConfig(recording, '/nonexistent');
  } catch {
    // what was read before the error is still what the provisioner reads
  }
  return read;
}

/** Variable names written in config.ts as string literals or `env.NAME`. */
async function namesInSource(): Promise<Set<string>> {
  const source = await readFile(new URL('provisioner/config.ts', root), 'utf8');
  const names = new Set<string>();
  for (const m of source.matchAll(/'([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|PORT|HOST)'|env\.([A-Z][A-Z0-9_]+)/g))
    names.add((m[1] ?? m[2])!);
  return names;
}

t.test('every variable the provisioner configuration reads has a row in README.md "Configuration"', async (t) => {
  const table = await readmeVariables();
  const read = new Set<string>([
    ...namesRead({}),
    // Read only when the public URL is plain http on a host other than loopback.
    ...namesRead({ PROVISIONER_PUBLIC_URL: 'http://cp.example.test' }),
    // Read only when the engine is Pulumi and a passphrase or release timeout is in play.
    ...namesRead({ PROVISIONER_ENGINE: 'pulumi', PROVISIONER_RUNTIME_RELEASE_TIMEOUT_SECONDS: '600' }),
    ...(await namesInSource()),
  ]);
  t.ok(read.size >= 80, `at least 80 variable names were found in the configuration (found ${read.size})`);
  t.ok(
    read.has('PROVISIONER_PUBLIC_URL_ALLOW_HTTP'),
    'the conditional read of PROVISIONER_PUBLIC_URL_ALLOW_HTTP is seen',
  );
  const missing = [...read].filter((name) => !table.has(name)).sort();
  t.same(missing, [], "no variable the provisioner reads is missing from README.md's configuration table");
});

t.test('the table has no row for a variable the provisioner does not read', async (t) => {
  const read = new Set<string>([
    ...namesRead({}),
    ...namesRead({ PROVISIONER_PUBLIC_URL: 'http://cp.example.test' }),
    ...(await namesInSource()),
  ]);
  const stale = [...(await readmeVariables())].filter((name) => !read.has(name)).sort();
  t.same(stale, [], "every row of README.md's configuration table names a variable config.ts reads");
});
