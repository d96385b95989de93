/**
 * docs/architecture.md's tables of background loops and NOTIFY channels stay true, as
 * error-codes.test.ts keeps docs/api.md's codes: the loop table equals the loop manager's list of
 * a process with every loop configured (built by buildServices itself, nothing started, no
 * database reached), in start order; the channel table equals the channels the code sends and
 * listens on (channel constants, pg_notify literals in the source and the migrations, literal
 * subscriptions). A loop or a channel added without a row fails here.
 */
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import t from 'tap';
import { loadConfig } from '../../provisioner/config.ts';
import { buildServices } from '../../provisioner/services.ts';

const root = new URL('../../', import.meta.url);

/** The first cell's backticked names of the table under `## <title>` in docs/architecture.md. */
async function tableNames(title: string): Promise<string[]> {
  const doc = await readFile(new URL('docs/architecture.md', root), 'utf8');
  const start = doc.indexOf(`\n## ${title}\n`);
  if (start === -1) throw new Error(`docs/architecture.md has no "## ${title}" section`);
  const next = doc.indexOf('\n## ', start + 1);
  const names: string[] = [];
  for (const line of doc.slice(start, next === -1 ? undefined : next).split('\n')) {
    const m = /^\| `([a-z][a-z0-9_-]*)` \|/.exec(line);
    if (m) names.push(m[1]!);
  }
  return names;
}

async function filesUnder(dir: string, ending: RegExp): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(new URL(dir, root), { withFileTypes: true, recursive: true })) {
    if (e.isFile() && ending.test(e.name)) out.push(join(e.parentPath, e.name));
  }
  return out;
}

/** Channels in the code: `*_CHANNEL = '…'` constants, pg_notify('…') and subscribe('…') literals. */
async function channelsInCode(): Promise<Map<string, string>> {
  const found = new Map<string, string>();
  const files = [
    ...(await filesUnder('provisioner/', /\.ts$/)),
    ...(await filesUnder('provisioner/db/migrations/', /\.sql$/)),
  ];
  const patterns = [
    /_CHANNEL\s*=\s*'([a-z][a-z0-9_]*)'/g,
    /pg_notify\(\s*'([a-z][a-z0-9_]*)'/gi,
    /subscribe\(\s*'([a-z][a-z0-9_]*)'/g,
  ];
  for (const file of files) {
    const text = await readFile(file, 'utf8');
    for (const re of patterns)
      for (const m of text.matchAll(re))
        if (!found.has(m[1]!)) found.set(m[1]!, file.slice(new URL(root).pathname.length));
  }
  return found;
}

t.test("docs/architecture.md's loop table is the loop manager's list, in start order", async (t) => {
  const dataDir = await mkdtemp(join(tmpdir(), 'hrt-loops-'));
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  // Nothing listens here: the pool never connects (buildServices only builds; nothing is started).
  const url = 'postgres://nobody@127.0.0.1:1/none';
  const pool = new pg.Pool({ connectionString: url });
  // Every loop configured: an engine (reconciler, fleet driver) and the drift watch on (their defaults).
  const config = loadConfig({
    DATABASE_URL: url,
    PROVISIONER_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    PROVISIONER_DATA_DIR: dataDir,
    PROVISIONER_ENGINE: 'pulumi',
    PULUMI_CONFIG_PASSPHRASE: 'unused',
  });
  const services = await buildServices(config, { pool, url });
  t.teardown(async () => {
    await services.stop();
    await pool.end();
  });
  const names = services.loops.names;
  t.ok(names.includes('reconciler') && names.includes('drift-watch'), 'the process was built with every loop');
  t.same(await tableNames('Background loops'), names, 'the table lists exactly the loops of the list, in its order');
});

t.test("docs/architecture.md's channel table is the channels of the code", async (t) => {
  const inCode = await channelsInCode();
  const documented = await tableNames('NOTIFY channels');
  t.ok(
    inCode.has('tenant_due') && inCode.has('tenant_changed'),
    'the scan finds channels (tenant_due, tenant_changed)',
  );
  t.same(
    [...inCode].filter(([name]) => !documented.includes(name)).map(([name, file]) => `${name} (${file})`),
    [],
    'every channel of the code has a row',
  );
  t.same(
    documented.filter((name) => !inCode.has(name)),
    [],
    'every row is a channel of the code',
  );
  t.same(
    documented.filter((name, i) => documented.indexOf(name) !== i),
    [],
    'no channel has two rows',
  );
});
