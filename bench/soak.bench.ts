/**
 * Memory of the provisioner: its RSS at 10,000 tenants (idle; after every tenant was listed
 * through the API, page by page), with 1,000 runtime tunnels open, and over a soak of steady mixed
 * load, sampled every few seconds, to see whether anything grows.
 *
 *   npm run bench -- soak     (BENCH_SOAK_SECONDS=600, BENCH_TENANTS=10000, BENCH_TUNNELS=1000,
 *                              BENCH_SAMPLE_SECONDS=5)
 *
 * The provisioner runs in a child process as `provisioner serve` builds it (bench/provisioner-child.ts),
 * with the engine TEST DOUBLE taking 500 ms per call and printing a few lines (so that operations
 * run for a while and their logs can be followed). The runtimes are real tunnel clients in this
 * process, dialling the provisioner on loopback, forwarding to a small HTTP server here (as the
 * reconnect benchmark does). Load during the soak, each at a fixed rate with a bound on requests
 * in flight: signups (2/s), tenant reads with the tenant's own key (20/s), requests through the
 * tunnel to a runtime (20/s), and log follows (an SSE follow of a new signup's create operation
 * until it ends, 1/s). Every sample reads the child's RSS and its heap after a full GC.
 * Reported: the mean of the first and of the last quarter of the samples, and the change.
 * No target: the heap after GC should stay flat.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { SecretBox } from '../provisioner/crypto.ts';
import { createPool } from '../provisioner/db/database.ts';
import { startEmbeddedPostgres } from '../provisioner/db/embedded.ts';
import { migrate } from '../provisioner/db/migrate.ts';
import { createKey } from '../provisioner/store/keys.ts';
import { startTunnelClient, type TunnelClient } from '../runtime/agents/tunnel-client/client.ts';
import {
  ADMIN_TOKEN,
  addClusters,
  childStats,
  seedTenants,
  sleep,
  startProvisioner,
  stopProvisioner,
} from './fleet.ts';
import type { ChildStats } from './provisioner-child.ts';
import { scatterLastReconciled } from '../test/helpers/bulk.ts';
import { refreshStatistics } from '../test/helpers/postgres.ts';
import { randomTenantIds } from '../test/helpers/tenants.ts';

const TENANTS = Number(process.env.BENCH_TENANTS ?? 10_000);
const TUNNELS = Number(process.env.BENCH_TUNNELS ?? 1_000);
const SOAK_S = Number(process.env.BENCH_SOAK_SECONDS ?? 600);
const SAMPLE_S = Number(process.env.BENCH_SAMPLE_SECONDS ?? 5);
const TIMEOUT_MS = Number(process.env.BENCH_TIMEOUT_SECONDS ?? 600) * 1000;
const READERS = 200;
const MiB = 2 ** 20;
const ROOT = dirname(dirname(fileURLToPath(import.meta.url)));

const mib = (b: number) => `${(b / MiB).toFixed(0)} MiB`;

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'hrt-bench-soak-'));
  await chmod(dir, 0o755); // PostgreSQL may run as another user (when the benchmark runs as root)
  const server = await startEmbeddedPostgres(join(dir, 'pg'));
  const pool = createPool(server.url, 10);
  const key = randomBytes(32);
  const box = new SecretBox(key);
  const clients: TunnelClient[] = [];
  const upstream = http.createServer((req, res) => {
    req.resume();
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ runtimeVersion: '1.0.0', path: req.url }));
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  const upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  let provisioner: Awaited<ReturnType<typeof startProvisioner>> | undefined;
  const logFile = join(dir, 'provisioner.log');
  try {
    await migrate(pool);
    await addClusters(pool, box, 10, Math.ceil((TENANTS * 1.5) / 10) + SOAK_S * 3);
    const seeded = await seedTenants(pool, box, { tenants: TENANTS, until: 'ready', timeoutMs: TIMEOUT_MS });
    // Steady state: last resyncs spread over the default interval (1 h).
    await scatterLastReconciled(pool, 3600);
    await refreshStatistics(pool, { vacuum: true });
    const ids = await randomTenantIds(pool, Math.max(READERS, TUNNELS));
    const readers: { id: string; key: string }[] = [];
    for (const id of ids.slice(0, READERS))
      readers.push({
        id,
        key: (await createKey(pool, { role: 'tenant', tenantId: id, name: 'bench', createdBy: 'bench' })).key,
      });
    const runtimes: { id: string; token: string }[] = [];
    for (const id of ids.slice(0, TUNNELS))
      runtimes.push({
        id,
        token: (await createKey(pool, { role: 'runtime', tenantId: id, name: 'bench', createdBy: 'bench' })).key,
      });
    console.log(
      `memory and soak: ${TENANTS} tenants (seeded in ${seeded.toFixed(0)} s), ${TUNNELS} tunnels, soak ${SOAK_S} s; ` +
        `${cpus().length} CPUs; load average ${loadavg()
          .map((l) => l.toFixed(1))
          .join(' ')}`,
    );

    provisioner = await startProvisioner({
      BENCH_DATABASE_URL: server.url,
      BENCH_KEY: key.toString('hex'),
      BENCH_ENGINE_DELAY_MS: '500',
      BENCH_LOG_FILE: logFile,
    });
    const { child, url } = provisioner;
    const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
    const rows: Array<[string, ChildStats]> = [];
    await sleep(10_000);
    rows.push([`${TENANTS} tenants, idle 10 s after start`, await childStats(child, true)]);

    // Every tenant through the API, page by page (the largest page the API gives).
    const listed = await listAll(url);
    rows.push([`after listing all ${listed} tenants (200 a page)`, await childStats(child, false)]);
    rows.push([`the same, after a full GC`, await childStats(child, true)]);

    // The runtimes' tunnels.
    const base = url.replace('http', 'ws') + '/v1/tunnel';
    let connected = 0;
    for (const [i, r] of runtimes.entries()) {
      const c = startTunnelClient({ url: base, token: r.token, upstream: upstreamUrl });
      c.events.on('connected', () => connected++);
      c.events.on('disconnected', () => connected--);
      clients.push(c);
      if (i % 100 === 99) await sleep(50);
    }
    const tunnelsBegan = Date.now();
    while (connected < TUNNELS) {
      if (Date.now() - tunnelsBegan > TIMEOUT_MS) throw new Error(`only ${connected} of ${TUNNELS} tunnels connected`);
      await sleep(200);
    }
    await sleep(5000);
    rows.push([`${TUNNELS} tunnels open`, await childStats(child, true)]);

    console.log('| provisioner | RSS | heap used | tunnels |');
    console.log('| --- | --- | --- | --- |');
    for (const [what, s] of rows) console.log(`| ${what} | ${mib(s.rss)} | ${mib(s.heapUsed)} | ${s.tunnels} |`);

    // The soak.
    const counts = { signups: 0, reads: 0, tunnel: 0, follows: 0, followLines: 0, failed: 0 };
    const failures = new Map<string, number>();
    const fail = (what: string) => {
      counts.failed++;
      failures.set(what, (failures.get(what) ?? 0) + 1);
    };
    const newOps: string[] = [];
    const ends = Date.now() + SOAK_S * 1000;
    /** Runs `fn` `perSecond` times a second until the end, with at most `maxInFlight` at once (the rest skipped and counted). */
    const steady = async (perSecond: number, maxInFlight: number, what: string, fn: (n: number) => Promise<void>) => {
      let inFlight = 0;
      let n = 0;
      const pending = new Set<Promise<void>>();
      const began = Date.now();
      while (Date.now() < ends) {
        const due = Math.floor(((Date.now() - began) / 1000) * perSecond);
        while (n < due) {
          n++;
          if (inFlight >= maxInFlight) {
            fail(`${what}: skipped, ${maxInFlight} in flight`);
            continue;
          }
          inFlight++;
          const p: Promise<void> = fn(n)
            .catch(() => fail(what))
            .finally(() => {
              inFlight--;
              pending.delete(p);
            });
          pending.add(p);
        }
        await sleep(20);
      }
      await Promise.all(pending);
    };
    const samples: ChildStats[] = [];
    const sampler = (async () => {
      while (Date.now() < ends) {
        samples.push(await childStats(child, true));
        await sleep(SAMPLE_S * 1000);
      }
      samples.push(await childStats(child, true));
    })();
    const prefix = randomBytes(3).toString('hex');
    await Promise.all([
      sampler,
      steady(2, 20, 'signup', async (n) => {
        const res = await fetch(`${url}/v1/signup`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ organization: `soak-${prefix}-${n}`, email: 'soak@example.com' }),
        });
        if (res.status !== 202) throw new Error(String(res.status));
        const body = (await res.json()) as { operationId: string; apiKey: string };
        newOps.push(`${body.operationId} ${body.apiKey}`);
        counts.signups++;
      }),
      steady(20, 50, 'read', async (n) => {
        const r = readers[n % readers.length]!;
        const res = await fetch(`${url}/v1/tenants/${r.id}`, { headers: { authorization: `Bearer ${r.key}` } });
        await res.arrayBuffer();
        if (res.status !== 200) throw new Error(String(res.status));
        counts.reads++;
      }),
      steady(20, 50, 'tunnel request', async (n) => {
        const r = runtimes[n % runtimes.length]!;
        const res = await fetch(`${url}/v1/tenants/${r.id}/runtime/api/runtime?n=${n}`, { headers: admin });
        await res.arrayBuffer();
        if (res.status !== 200) throw new Error(String(res.status));
        counts.tunnel++;
      }),
      steady(1, 40, 'log follow', async () => {
        const next = newOps.shift();
        if (!next) return;
        const [op, apiKey] = next.split(' ') as [string, string];
        const ac = new AbortController();
        const timer = setTimeout(() => ac.abort(), 30_000);
        try {
          const res = await fetch(`${url}/v1/operations/${op}/log?follow=1`, {
            headers: { authorization: `Bearer ${apiKey}` },
            signal: ac.signal,
          });
          if (res.status !== 200) throw new Error(String(res.status));
          const text = await res.text();
          if (!text.includes('event: end')) throw new Error('the stream ended without an end event');
          counts.follows++;
          counts.followLines += (text.match(/event: line/g) ?? []).length;
        } finally {
          clearTimeout(timer);
        }
      }),
    ]);

    const q = Math.max(1, Math.floor(samples.length / 4));
    const mean = (xs: ChildStats[], k: keyof ChildStats) => xs.reduce((a, s) => a + s[k], 0) / xs.length;
    const first = samples.slice(0, q);
    const last = samples.slice(-q);
    const line = (k: keyof ChildStats, title: string) => {
      const a = mean(first, k);
      const b = mean(last, k);
      const all = samples.map((s) => s[k]);
      console.log(
        `| ${title} | ${mib(a)} | ${mib(b)} | ${(((b - a) / a) * 100).toFixed(1)} % | ${mib(Math.min(...all))} – ${mib(Math.max(...all))} |`,
      );
    };
    console.log('');
    console.log(
      `soak ${SOAK_S} s: ${counts.signups} signups, ${counts.reads} reads, ${counts.tunnel} tunnel requests, ` +
        `${counts.follows} log follows (${counts.followLines} lines), ${counts.failed} failed or skipped` +
        (failures.size ? ` (${[...failures].map(([k, v]) => `${k}: ${v}`).join(', ')})` : '') +
        `; ${samples.length} samples every ${SAMPLE_S} s; reconciler: ${samples.at(-1)!.succeeded} operations succeeded`,
    );
    console.log('| provisioner, soak | first quarter (mean) | last quarter (mean) | change | min – max |');
    console.log('| --- | --- | --- | --- | --- |');
    line('rss', 'RSS');
    line('heapUsed', 'heap used after a full GC');
    line('external', 'external (buffers) after GC');
    await stopProvisioner(child);
    provisioner = undefined;
    await Promise.all(clients.map((c) => c.close()));
    clients.length = 0;
    console.log('');
    console.log('| provisioner | RSS |');
    console.log('| --- | --- |');
    for (const [what, rss] of await realServe(server.url, key.toString('hex'), join(dir, 'serve')))
      console.log(`| ${what} | ${mib(rss)} |`);
    console.log(
      `load average at the end: ${loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}`,
    );
  } catch (err) {
    // The server's errors say why (the log is removed with the temporary directory).
    const lines = (await readFile(logFile, 'utf8').catch(() => '')).split('\n');
    for (const l of lines.filter((x) => /"level":(50|60)/.test(x)).slice(-5)) console.error(l.slice(0, 2000));
    throw err;
  } finally {
    await Promise.all(clients.map((c) => c.close()));
    if (provisioner) await stopProvisioner(provisioner.child);
    upstream.close();
    await pool.end();
    await server.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

/** Lists every tenant through the API, 200 a page (the largest page); returns how many. */
async function listAll(url: string): Promise<number> {
  let cursor: string | null = null;
  let listed = 0;
  const began = Date.now();
  do {
    const res = await fetch(`${url}/v1/tenants?limit=200${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    if (res.status !== 200) throw new Error(`GET /v1/tenants answered ${res.status}: ${await res.text()}`);
    const page = (await res.json()) as { items: unknown[]; nextCursor: string | null };
    listed += page.items.length;
    cursor = page.nextCursor;
    if (Date.now() - began > TIMEOUT_MS) throw new Error('listing the tenants took too long');
  } while (cursor);
  return listed;
}

async function vmRss(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
}

/**
 * The real `provisioner serve` (bin/provisioner.ts) on the same database, with the Pulumi engine
 * and the tenant program loaded as in production but no Pulumi CLI (so the engine is unavailable
 * and runs nothing): its RSS idle and after listing every tenant.
 */
async function realServe(databaseUrl: string, keyHex: string, dataDir: string): Promise<[string, number][]> {
  const child = spawn(process.execPath, [join(ROOT, 'bin/provisioner.ts'), 'serve'], {
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl,
      PORT: '0',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
      PROVISIONER_DATA_DIR: dataDir,
      PROVISIONER_ENCRYPTION_KEY: keyHex,
      PROVISIONER_ADMIN_TOKEN: ADMIN_TOKEN,
      PROVISIONER_PULUMI_CLI_DIR: join(dataDir, 'no-pulumi-cli-here'),
      PULUMI_CONFIG_PASSPHRASE: 'bench-passphrase',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('provisioner serve did not listen within 60 s')), 60_000);
      createInterface({ input: child.stdout }).on('line', (l) => {
        const m = /"url":"([^"]+)".*provisioner listening|provisioner listening.*"url":"([^"]+)"/.exec(l);
        if (m) {
          clearTimeout(timer);
          resolve(m[1] ?? m[2]!);
        }
      });
      child.once('exit', (code) => reject(new Error(`provisioner serve exited with ${String(code)}`)));
    });
    await sleep(10_000);
    const idle = await vmRss(child.pid!);
    const n = await listAll(url);
    const listed = await vmRss(child.pid!);
    return [
      [`\`provisioner serve\` (Pulumi engine loaded, no CLI), idle 10 s after start`, idle],
      [`the same, after listing all ${n} tenants`, listed],
    ];
  } finally {
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }
}

await main();
