/**
 * The local sandbox end to end (`npm run sandbox` = scripts/sandbox.sh): started as a user starts
 * it, in its own process group, it prints the console URL with an operator key; the demo tenant
 * becomes Ready through the API; as root, its runtime runs (RuntimeConnected, the demo Application
 * reported, the printed sync line synced by the tenant's Argo CD, the printed history line showing
 * that sync's change with its commit, the printed diff line answering through the tunnel); the
 * console answers; the hybrid
 * registration line it prints writes
 * an install manifest; SIGINT to its process group (what Ctrl-C in a terminal sends) stops every
 * process it started and closes every port they listened on.
 */
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { connect } from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import { descendants, until } from '../../sandbox/processes.ts';
import { REPO_ROOT } from '../../sandbox/provisioner-process.ts';
import { acquireRunLock, provisioningUnavailable } from './harness/environment.ts';
import { PROVISION_TIMEOUT } from './harness/suite.ts';

/** Inodes of the TCP sockets in LISTEN state, with their ports (IPv4 and IPv6). */
function listeningSockets(): Map<string, number> {
  const out = new Map<string, number>();
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length < 10 || f[3] !== '0A') continue; // 0A: LISTEN
      out.set(f[9]!, parseInt(f[1]!.split(':')[1]!, 16));
    }
  }
  return out;
}

/** Ports on which any of `pids` listens (from their open socket descriptors). */
function listeningPorts(pids: number[]): number[] {
  const listening = listeningSockets();
  const ports = new Set<number>();
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        const port = m ? listening.get(m[1]!) : undefined;
        if (port !== undefined) ports.add(port);
      } catch {
        // closed meanwhile
      }
    }
  }
  return [...ports].sort((a, b) => a - b);
}

/** Whether `pid` still runs (a zombie has exited and holds nothing: it counts as gone). */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ port, host: '127.0.0.1' });
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

// The lock may be held by another file for up to 20 minutes; the sandbox itself takes a few.
t.setTimeout(30 * 60_000);

t.test('npm run sandbox: a demo tenant Ready, the console answers, Ctrl-C leaves nothing running', async (t) => {
  const skip = provisioningUnavailable();
  if (skip) {
    t.plan(0, skip);
    return;
  }
  const release = await acquireRunLock(20 * 60_000);
  t.teardown(release);
  const started = Date.now();
  const child = spawn('bash', [join(REPO_ROOT, 'scripts', 'sandbox.sh')], {
    cwd: REPO_ROOT,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, SANDBOX_ORGANIZATION: 'sandbox-e2e' },
  });
  const pid = child.pid!;
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (output += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (output += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  let exitedYet = false;
  void exited.then(() => (exitedYet = true));
  t.teardown(async () => {
    // The sandbox still runs only when something before the SIGINT below failed: stop it the same
    // way, and kill what is left of its process tree after a minute.
    if (exitedYet) return;
    const tree = descendants(pid);
    process.kill(-pid, 'SIGINT');
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 60_000).unref())]);
    for (const p of [pid, ...tree])
      try {
        process.kill(p, 'SIGKILL');
      } catch {
        // gone
      }
  });

  const console = await until(
    'the sandbox to print the console URL and operator key',
    5 * 60_000,
    () => {
      if (exitedYet) throw new Error(`the sandbox exited before printing the console URL:\n${output.slice(-3000)}`);
      const m = /console: (http:\/\/127\.0\.0\.1:(\d+))\/console\s+operator key: (\S+)/.exec(output);
      const tenant = /tenant sandbox-e2e signed up: ([0-9a-f-]{36})/.exec(output);
      return m && tenant ? { url: m[1]!, port: Number(m[2]), key: m[3]!, tenantId: tenant[1]! } : undefined;
    },
    250,
  );
  t.comment(`console line after ${((Date.now() - started) / 1000).toFixed(1)} s`);

  const tenant = await until(
    'the demo tenant to be Ready through the API',
    PROVISION_TIMEOUT,
    async () => {
      const res = await fetch(`${console.url}/v1/tenants/${console.tenantId}`, {
        headers: { authorization: `Bearer ${console.key}` },
      });
      const body = (await res.json()) as { status: { phase: string } };
      if (body.status.phase === 'Failed') throw new Error(`tenant failed: ${JSON.stringify(body)}`);
      return body.status.phase === 'Ready' ? body : undefined;
    },
    1000,
  );
  t.equal(tenant.status.phase, 'Ready', 'GET /v1/tenants/:id with the printed operator key answers phase Ready');
  const whoami = (await (
    await fetch(`${console.url}/v1/whoami`, { headers: { authorization: `Bearer ${console.key}` } })
  ).json()) as { role?: string };
  t.equal(whoami.role, 'operator', "the key printed as the operator key is an operator key (GET /v1/whoami's role)");
  t.comment(`tenant Ready after ${((Date.now() - started) / 1000).toFixed(1)} s`);
  await until(
    'the sandbox to print that the tenant is Ready and the commands to try',
    // With the runtime running, first its connection and the demo Application's first report.
    5 * 60_000,
    () => {
      if (exitedYet) throw new Error(`the sandbox exited:\n${output.slice(-3000)}`);
      return output.includes('is Ready') && output.includes(`tenants get ${console.tenantId}`);
    },
  );
  const exported = /export PROVISIONER_URL=(\S+) PROVISIONER_TOKEN=(\S+)/.exec(output);
  /** Runs a command line the sandbox printed, as printed, with the variables it says to export. */
  const runPrinted = (bin: string, words: string[], cwd: string) =>
    new Promise<{ code: number | null; out: string }>((resolve) => {
      const cli = spawn(join(REPO_ROOT, bin), words, {
        cwd,
        env: { ...process.env, PROVISIONER_URL: exported?.[1] ?? '', PROVISIONER_TOKEN: exported?.[2] ?? '' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      cli.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
      cli.stderr.setEncoding('utf8').on('data', (d: string) => (out += d));
      cli.once('exit', (code) => resolve({ code, out }));
    });
  if (/runtime pods: the tenant's real vcluster/.test(output)) {
    // As root (CI), the sandbox runs the tenant's runtime: its pods as processes.
    t.match(
      output,
      /✓ runtime connected: tunnel up, event reporter reporting/,
      'the sandbox says the runtime connected',
    );
    t.match(output, /✓ Application demo reported by the tenant's runtime/, 'and that its demo Application is reported');
    const view = (await (
      await fetch(`${console.url}/v1/tenants/${console.tenantId}`, {
        headers: { authorization: `Bearer ${console.key}` },
      })
    ).json()) as { status: { conditions: Array<{ type: string; status: string }> } };
    t.equal(
      view.status.conditions.find((c) => c.type === 'RuntimeConnected')?.status,
      'True',
      'the API says RuntimeConnected=True for the demo tenant',
    );
    const act = /^ {2}(\S+) (apps act \S+ application argocd demo sync)/m.exec(output);
    t.ok(act, 'the sandbox prints an apps act … sync line for the demo Application');
    if (act) {
      const ran = await runPrinted(act[1]!, act[2]!.split(/\s+/), REPO_ROOT);
      t.equal(ran.code, 0, `the printed sync line exits 0${ran.code === 0 ? '' : `: ${ran.out.slice(-800)}`}`);
      const synced = await until('demo reported Synced after the printed sync', 180_000, async () => {
        const page = (await (
          await fetch(`${console.url}/v1/tenants/${console.tenantId}/applications`, {
            headers: { authorization: `Bearer ${console.key}` },
          })
        ).json()) as { items: Array<{ name: string; sync: string | null }> };
        return page.items.find((i) => i.name === 'demo' && i.sync === 'Synced');
      });
      t.ok(synced, "the tenant's Argo CD synced demo through the tunnel, and the API shows it Synced");
    }
    // The printed history line, after that sync: the demo's change revision, with its commit and
    // the sync's result, from the runtime's Source Server through the event reporter.
    const historyLine = /^ {2}(\S+) (apps history \S+ argocd\/demo)/m.exec(output);
    t.ok(historyLine, 'the sandbox prints an apps history line for the demo Application');
    if (historyLine) {
      const shown = await until('the printed history line to show the synced change', 180_000, async () => {
        const ran = await runPrinted(historyLine[1]!, historyLine[2]!.split(/\s+/), REPO_ROOT);
        return ran.code === 0 && /succeeded/.test(ran.out) ? ran : undefined;
      });
      t.match(shown.out, /demo: a ConfigMap/, "the history names the commit's message");
    }
    const diffLine = /^ {2}(\S+) (apps diff \S+ argocd\/demo)/m.exec(output);
    t.ok(diffLine, 'the sandbox prints an apps diff line for the demo Application');
    if (diffLine) {
      const ran = await runPrinted(diffLine[1]!, diffLine[2]!.split(/\s+/), REPO_ROOT);
      t.equal(
        ran.code,
        0,
        `the printed diff line exits 0 (through the tunnel)${ran.code === 0 ? '' : `: ${ran.out.slice(-800)}`}`,
      );
    }
    // The demo product: the sandbox committed 1.1.0 to dev; the runtime's GitOps Operator promotes
    // it to prod by a commit, and the printed products line shows prod holding it.
    t.match(output, /✓ product shop reported/, 'the sandbox says its demo product is reported');
    const productLine = /^ {2}(\S+) (products get \S+ shop)/m.exec(output);
    t.ok(productLine, 'the sandbox prints a products get line for the demo product');
    if (productLine) {
      const shown = await until('the printed products line to show 1.1.0 promoted to prod', 240_000, async () => {
        const ran = await runPrinted(productLine[1]!, productLine[2]!.split(/\s+/), REPO_ROOT);
        return ran.code === 0 && /prod\s+1\.1\.0/.test(ran.out) && /1\.1\.0\s+Succeeded\s/.test(ran.out)
          ? ran
          : undefined;
      }).catch(async (err: Error) => {
        const ran = await runPrinted(productLine[1]!, productLine[2]!.split(/\s+/), REPO_ROOT);
        throw new Error(`${err.message}; it prints: ${ran.out.slice(-1500)}`, { cause: err });
      });
      t.match(shown.out, /dev\s+1\.1\.0/, 'dev holds the committed release');
      t.match(
        shown.out,
        /1\.1\.0\s+Succeeded\s+prod:Succeeded\s+trigger/,
        'its promotion, started by the commit, succeeded',
      );
    }
    t.match(output, /^ {2}\S+ products promote \S+ shop/m, 'and a products promote line');
    const rollbackLine = /^ {2}(\S+) (products rollback \S+ shop prod --watch)/m.exec(output);
    t.ok(rollbackLine, 'and a products rollback line');
    if (rollbackLine && productLine) {
      const ran = await runPrinted(rollbackLine[1]!, rollbackLine[2]!.split(/\s+/), REPO_ROOT);
      t.equal(
        ran.code,
        0,
        `the printed rollback line exits 0 when the rollback ends${ran.code === 0 ? '' : `: ${ran.out.slice(-800)}`}`,
      );
      t.match(
        ran.out,
        /prod rolled back from 1\.1\.0 to 1\.0\.0/,
        'it followed the rollback to its end: prod holds 1.0.0 again',
      );
    }
  } else {
    t.match(output, /pods do not run/, 'the sandbox says that pods do not run, and why');
  }

  // The hybrid registration line it prints, run as printed (in a folder of its own, with the
  // exported URL and key), writes the install manifest: registration is configured here.
  const register = /^ {2}(\S+) (runtimes register \S+ edge .*--out edge\.yaml)/m.exec(output);
  t.ok(register && exported, 'the sandbox prints a runtimes register line and the variables to export');
  if (register && exported) {
    t.match(register[2], `runtimes register ${console.tenantId} `, "the register line names the demo tenant's id");
    const work = await mkdtemp(join(tmpdir(), 'sandbox-register-'));
    t.teardown(() => rm(work, { recursive: true, force: true }));
    const words = register[2]!.split(/\s+/);
    const run = await runPrinted(register[1]!, words, work);
    t.equal(run.code, 0, `the printed register line exits 0${run.code === 0 ? '' : `: ${run.out.slice(-800)}`}`);
    t.match(run.out, /kubectl apply/, 'it prints the command that applies the manifest');
    const manifest = await readFile(join(work, 'edge.yaml'), 'utf8').catch(() => '');
    t.match(manifest, /name: runtime-bootstrap/, 'it writes edge.yaml with the bootstrap Secret');
    t.match(manifest, console.url, "the manifest points the runtime at the sandbox's provisioner");
    const edge = await fetch(`${console.url}/v1/tenants/${console.tenantId}/runtimes/edge`, {
      headers: { authorization: `Bearer ${console.key}` },
    });
    t.equal(edge.status, 200, 'the registered runtime is found through the API');
    t.match(
      await edge.json(),
      { mode: 'hybrid', state: 'awaiting-install' },
      'it is a hybrid runtime awaiting its install',
    );
  }
  const admin = /Admin key: +(\S+)/.exec(output)?.[1];
  const adminRole = admin
    ? ((await (await fetch(`${console.url}/v1/keys`, { headers: { authorization: `Bearer ${admin}` } })).json()) as {
        items?: unknown[];
      })
    : undefined;
  t.ok(adminRole?.items, 'the key printed as the admin key lists API keys (GET /v1/keys is admin only)');

  const page = await fetch(`${console.url}/console`);
  t.equal(page.status, 200, 'GET /console answers 200');
  t.match(await page.text(), /<html/i, 'GET /console serves the console page');

  const pids = [pid, ...descendants(pid)];
  const ports = listeningPorts(pids);
  t.ok(
    ports.includes(console.port),
    `the provisioner's port ${console.port} is among the ports the sandbox's processes listen on (${ports.join(', ')})`,
  );
  t.ok(
    pids.length >= 8,
    'the sandbox and its descendants are at least 8 processes (itself, PostgreSQL, etcd, the root control plane, the provisioner)',
  );

  process.kill(-pid, 'SIGINT');
  const exit = await Promise.race([
    exited,
    new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 90_000).unref()),
  ]);
  t.same(exit, { code: 0, signal: null }, 'the sandbox exits with code 0 within 90 s of SIGINT');
  t.match(output, /stopped \(/, 'the sandbox says it stopped');
  await until('every process the sandbox started to be gone', 30_000, () => pids.every((p) => !running(p)), 250).catch(
    () => {},
  );
  t.same(
    pids.filter(running),
    [],
    `none of the ${pids.length} processes the sandbox ran is still running within 30 s of its exit`,
  );
  const open: number[] = [];
  for (const port of ports) if (await accepts(port)) open.push(port);
  t.same(open, [], `none of the ${ports.length} ports the sandbox's processes listened on accepts a connection`);
});
