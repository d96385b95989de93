/**
 * `provisioner runtimes list|get|register|remove` against the real app on loopback: register writes
 * the install manifest to a file only its owner reads and prints the command, never the token;
 * remove asks to type the runtime's name (on a real pseudo-terminal too), or takes --yes.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, stat, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { parseAllDocuments } from 'yaml';
import { createTestApi } from '../../helpers/api.ts';
import { main } from '../../../provisioner/cli/main.ts';

const api = await createTestApi({ env: { PROVISIONER_PUBLIC_URL: 'https://cp.example.test' } });
const url = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());
const root = join(import.meta.dirname, '..', '..', '..');
const dir = await mkdtemp(join(tmpdir(), 'cli-runtimes-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));

/**
 * The CLI in this process. `answer` is what the user types at a confirmation on the terminal;
 * without it there is no terminal (undefined), as for a script or CI.
 */
async function cli(
  args: string[],
  token: string,
  answer?: string,
): Promise<{ code: number; out: string; err: string; asked: string[] }> {
  const out: string[] = [];
  const err: string[] = [];
  const asked: string[] = [];
  const code = await main(['--url', url, '--token', token, ...args], {
    out: (s) => out.push(s),
    err: (s) => err.push(s),
    env: {},
    ask: (question) => {
      asked.push(question);
      return Promise.resolve(answer);
    },
  });
  return { code, out: out.join('\n'), err: err.join('\n'), asked };
}

const { tenantId, apiKey } = await api.signup();

/** The bootstrap token in a manifest file (the runtime-bootstrap Secret's). */
async function tokenIn(file: string): Promise<string> {
  const docs = parseAllDocuments(await readFile(file, 'utf8')).map((d) => d.toJS() as Record<string, unknown> | null);
  const secret = docs.find(
    (o) => o?.kind === 'Secret' && (o.metadata as { name: string }).name === 'runtime-bootstrap',
  ) as { stringData: Record<string, string> } | undefined;
  const token = secret?.stringData['bootstrap-token'];
  if (!token) throw new Error(`precondition: ${file} holds the runtime-bootstrap Secret with a token`);
  return token;
}

t.test('register writes the manifest 0600 and prints the command, never the token', async (t) => {
  const file = join(dir, 'edge.yaml');
  // A file that was readable by others before: register makes it private before writing the token.
  await writeFile(file, 'old\n', { mode: 0o644 });
  const res = await cli(
    [
      'runtimes',
      'register',
      tenantId,
      'edge',
      '--access',
      'tunnel',
      '--argo',
      'existing',
      '--argo-namespace',
      'argocd',
      '--out',
      file,
    ],
    apiKey,
  );
  t.equal(res.code, 0, res.err);
  t.equal((await stat(file)).mode & 0o777, 0o600, 'the manifest file is readable by its owner only (0600)');
  const token = await tokenIn(file);
  t.match(res.out, `kubectl apply -f ${file}`, 'the printed command applies the file written');
  // The one command's URL holds it (the output says to keep it); nowhere else.
  t.notOk(
    res.out.split(`/v1/install/${token}.yaml`).join('').includes(token) || res.err.includes(token),
    'the token is printed only inside the install URL',
  );

  const asJson = await cli(
    [
      '--json',
      'runtimes',
      'register',
      tenantId,
      'edge2',
      '--access',
      'tunnel',
      '--argo',
      'new',
      '--out',
      join(dir, 'edge2.yaml'),
    ],
    apiKey,
  );
  t.equal(asJson.code, 0, asJson.err);
  const shown = JSON.parse(asJson.out) as { manifestFile: string; command: string; runtime: { name: string } };
  t.equal(shown.runtime.name, 'edge2', '--json shows the runtime');
  t.notOk(asJson.out.includes(await tokenIn(join(dir, 'edge2.yaml'))), '--json does not show the token either');
  t.match(shown.command, /helm upgrade --install[\s\S]*kubectl apply -f /, 'argo=new: helm installs, then the apply');
});

t.test('list, get and remove', async (t) => {
  const list = await cli(['runtimes', 'list', '--tenant', tenantId], apiKey);
  t.equal(list.code, 0, list.err);
  const names = list.out
    .split('\n')
    .slice(1)
    .map((l) => l.split(/\s+/)[0]);
  t.same(names, ['hosted', 'edge', 'edge2'], 'the hosted runtime, then the hybrid ones');
  const own = await cli(['runtimes', 'list'], apiKey);
  t.equal(own.code, 0, own.err);
  // The AGE column ("1s ago") may tick between the two commands: compare the rest of each line.
  const withoutAge = (out: string) => out.split('\n').map((l) => l.replace(/\s*\S+ ago\s*$|\s*AGE\s*$/, ''));
  t.same(withoutAge(own.out), withoutAge(list.out), "without --tenant a tenant key lists its own tenant's runtimes");
  const all = await cli(['--json', 'runtimes', 'list'], api.operatorKey);
  t.equal(all.code, 0, all.err);
  const items = (JSON.parse(all.out) as { items: Array<{ tenantId: string; name: string }> }).items;
  t.same(
    items.filter((r) => r.tenantId === tenantId).map((r) => r.name),
    ['hosted', 'edge', 'edge2'],
    "every tenant's list holds this tenant's runtimes",
  );
  const get = await cli(['runtimes', 'get', tenantId, 'edge'], apiKey);
  t.equal(get.code, 0, get.err);
  t.match(get.out, /awaiting install: bootstrap token valid until/, 'get says the runtime awaits its install');
  const removed = await cli(['runtimes', 'remove', tenantId, 'edge', '--yes'], apiKey);
  t.equal(removed.code, 0, removed.err);
  t.match(removed.out, /kubectl delete .* -l '.*hosted-runtimes\.io\/runtime=edge/, 'remove prints the delete command');
  const gone = await cli(['runtimes', 'get', tenantId, 'edge'], apiKey);
  t.not(gone.code, 0, 'a removed runtime is not found');
  t.match(gone.err, /RUNTIME_NOT_FOUND/, 'the error names RUNTIME_NOT_FOUND');
});

t.test('remove asks to type the name; without a terminal it refuses unless --yes', async (t) => {
  const file = join(dir, 'spare.yaml');
  const reg = await cli(
    ['runtimes', 'register', tenantId, 'spare', '--access', 'tunnel', '--argo', 'new', '--out', file],
    apiKey,
  );
  t.equal(reg.code, 0, `precondition: runtime spare is registered (${reg.err})`);
  const state = async () => {
    const got = await cli(['--json', 'runtimes', 'get', tenantId, 'spare'], apiKey);
    return got.code === 0 ? (JSON.parse(got.out) as { state: string }).state : `gone (${got.err})`;
  };

  const scripted = await cli(['runtimes', 'remove', tenantId, 'spare'], apiKey);
  t.equal(scripted.code, 1, 'without a terminal and without --yes, remove exits with code 1');
  t.match(scripted.err, /no terminal to confirm on; pass --yes to remove runtime 'spare'/, 'the refusal names --yes');
  t.equal(await state(), 'awaiting-install', 'the refused remove left the runtime as it was');

  const typo = await cli(['runtimes', 'remove', tenantId, 'spare'], apiKey, 'spar');
  t.match(
    typo.asked.join(''),
    /Type the runtime's name to remove it/,
    "on a terminal, remove asks for the runtime's name",
  );
  t.equal(typo.code, 1, 'a name typed wrong exits with code 1');
  t.match(
    typo.err,
    /'spar' is not the runtime's name 'spare'; nothing was removed/,
    'it says that nothing was removed',
  );
  t.equal(await state(), 'awaiting-install', 'a wrong name removes nothing');

  const typed = await cli(['runtimes', 'remove', tenantId, 'spare'], apiKey, 'spare\n');
  t.equal(typed.code, 0, `typing the name removes the runtime (${typed.err})`);
  t.match(typed.out, /removed hybrid runtime spare/, 'remove says the runtime is removed');
  t.match(await state(), /gone.*RUNTIME_NOT_FOUND/, 'the runtime removed after the confirmation is not found');
  t.same(
    [scripted, typed].map((r) => r.asked.length),
    [1, 1],
    'each remove without --yes asked exactly once',
  );
});

t.test('on a real terminal, bin/provisioner runtimes remove asks and removes once the name is typed', async (t) => {
  // util-linux `script` runs the CLI on a pseudo-terminal, as a user's shell would.
  const script = ['/usr/bin/script', '/bin/script'].find((p) => existsSync(p));
  if (!script) {
    t.plan(0, 'skipped: no util-linux `script` to give the CLI a terminal');
    return;
  }
  const file = join(dir, 'tty.yaml');
  const reg = await cli(
    ['runtimes', 'register', tenantId, 'tty', '--access', 'tunnel', '--argo', 'new', '--out', file],
    apiKey,
  );
  t.equal(reg.code, 0, `precondition: runtime tty is registered (${reg.err})`);
  const command = [
    process.execPath,
    join(root, 'bin', 'provisioner.ts'),
    '--url',
    url,
    'runtimes',
    'remove',
    tenantId,
    'tty',
  ];
  const child = spawn(script, ['-qec', command.map((w) => `'${w}'`).join(' '), '/dev/null'], {
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: process.env.HOME ?? '/tmp',
      PROVISIONER_TOKEN: apiKey,
      TERM: 'dumb',
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let output = '';
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (output += d));
  // The answer is typed once the question is on the screen (or not at all if the CLI ends first).
  const asked = await Promise.race([
    new Promise<boolean>((resolve) =>
      child.stdout.setEncoding('utf8').on('data', (d: string) => {
        output += d;
        if (output.includes("Type the runtime's name to remove it")) resolve(true);
      }),
    ),
    exited.then(() => false),
  ]);
  t.ok(asked, "the CLI asks on the terminal to type the runtime's name");
  child.stdin.end('tty\n');
  t.equal(await exited, 0, `the CLI exits 0 after the name is typed (${output.slice(-500)})`);
  t.match(output, /removed hybrid runtime tty/, 'it says the runtime is removed');
  const got = await cli(['runtimes', 'get', tenantId, 'tty'], apiKey);
  t.match(got.err, /RUNTIME_NOT_FOUND/, 'the runtime is removed');
});

t.test('with --upgrader, an upgrade is left to the in-cluster upgrader, and get shows how it goes', async (t) => {
  const installFile = join(dir, 'forge.yaml');
  const reg = await cli(
    [
      'runtimes',
      'register',
      tenantId,
      'forge',
      '--access',
      'tunnel',
      '--argo',
      'existing',
      '--argo-namespace',
      'argocd',
      '--upgrader',
      '--runtime-version',
      '1.4.1',
      '--out',
      installFile,
    ],
    apiKey,
  );
  t.equal(reg.code, 0, `register: ${reg.err}`);
  t.match(await readFile(installFile, 'utf8'), /name: runtime-upgrader/, 'the bundle has the upgrader');
  await api.as(await tokenIn(installFile)).call('POST /v1/runtimes/bootstrap', { body: {} });
  const up = await cli(
    ['runtimes', 'upgrade', tenantId, 'forge', '--runtime-version', '1.5.0', '--out', join(dir, 'forge-next.yaml')],
    apiKey,
  );
  t.equal(up.code, 0, `upgrade exits 0: ${up.err}`);
  t.match(up.out, /is to run version 1\.5\.0 \(was 1\.4\.1\); its in-cluster upgrader applies it/, 'who applies it');
  const get = await cli(['runtimes', 'get', tenantId, 'forge'], apiKey);
  t.match(get.out, /upgrade 1\.4\.1 -> 1\.5\.0 by the in-cluster upgrader: pending/, 'get shows the upgrade pending');
  t.match(get.out, /Upgraded=False \(Pending\)/, 'and the Upgraded condition');
});

t.test('upgrade and bundle write the upgrade bundle and print what changes and the command', async (t) => {
  const installFile = join(dir, 'mill.yaml');
  const reg = await cli(
    [
      'runtimes',
      'register',
      tenantId,
      'mill',
      '--access',
      'tunnel',
      '--argo',
      'new',
      '--runtime-version',
      '1.4.1',
      '--out',
      installFile,
    ],
    apiKey,
  );
  t.equal(reg.code, 0, `register at 1.4.1: ${reg.err}`);
  const redeemed = await api.as(await tokenIn(installFile)).request('POST /v1/runtimes/bootstrap', { body: {} });
  t.equal(redeemed.status, 200, "the bundle's Job would redeem the token: installed");

  const file = join(dir, 'mill-next.yaml');
  const up = await cli(
    ['runtimes', 'upgrade', tenantId, 'mill', '--runtime-version', '1.5.0', '--out', file, '--diff'],
    apiKey,
  );
  t.equal(up.code, 0, `upgrade exits 0: ${up.err}`);
  t.match(up.out, /hybrid runtime mill is to run version 1\.5\.0 \(was 1\.4\.1\)/, 'it says what was recorded');
  t.match(up.out, /changed +Deployment hosted-runtime-mill\/app-proxy/, 'it lists the changed objects');
  t.match(up.out, /changed +helm release argocd\/argocd: 7\.9\.1 -> 8\.0\.17/, 'and the charts that move');
  t.match(up.out, /^\+\s+image: .*app-proxy:1\.5\.0$/m, 'with --diff, the unified diff');
  t.match(
    up.out,
    new RegExp(`kubectl apply -f ${file.replace(/[.]/g, '\\.')}$`, 'm'),
    'the command applies the file written',
  );
  const written = await readFile(file, 'utf8');
  t.match(written, /app-proxy:1\.5\.0/, 'the file holds the 1.5.0 bundle');
  t.notMatch(written, /hrth_|kind: Job/, 'with no bootstrap token or Job');

  const again = await cli(
    ['runtimes', 'upgrade', tenantId, 'mill', '--runtime-version', '1.5.0', '--out', file],
    apiKey,
  );
  t.match(again.out, /already to run version 1\.5\.0: nothing recorded/, 'asking again records nothing');

  const bundle = await cli(['runtimes', 'bundle', tenantId, 'mill', '--out', join(dir, 'mill-b.yaml')], apiKey);
  t.equal(bundle.code, 0, `bundle exits 0: ${bundle.err}`);
  t.match(bundle.out, /^1\.4\.1 -> 1\.5\.0: \d+ changes/m, 'bundle shows the last change by default');
  t.notMatch(bundle.out, /^@@/m, 'no diff without --diff');

  const json = await cli(
    [
      '--json',
      'runtimes',
      'bundle',
      tenantId,
      'mill',
      '--runtime-version',
      '1.5.0',
      '--from',
      '1.5.0',
      '--out',
      join(dir, 'mill-c.yaml'),
    ],
    apiKey,
  );
  t.same(JSON.parse(json.out).changes, { objects: [], charts: [] }, '--json: a version against itself changes nothing');

  const jump = await cli(
    ['runtimes', 'upgrade', tenantId, 'mill', '--runtime-version', '1.3.0', '--out', file],
    apiKey,
  );
  t.not(jump.code, 0, 'a refused rollback exits non-zero');
  t.match(jump.err, /only return to the version the runtime ran before \(1\.4\.1\)/, 'naming why');
});
