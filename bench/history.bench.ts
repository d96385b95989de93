/**
 * Application history benchmark: what the change revisions cost the control plane, and how its
 * history reads hold at a full tenant (10,000 entries, PROVISIONER_APP_HISTORY_MAX_PER_TENANT's
 * default). Real Postgres (embedded), the real app on loopback.
 *
 *   npm run bench -- history     (BENCH_APPS=20 applications, BENCH_CHANGES=500 changes each)
 *
 * 1. Reports with and without `change`: BENCH_CHANGES batches of one Application state each per
 *    application, first each carrying what changed it (UpsertItem.change, as the reporter sends it
 *    with a Source Server: one history entry per item), then the same number of states without it
 *    (a runtime before 1.7.0). Measured: bytes per item, and CPU per item of the control plane and
 *    of Postgres (/proc), the batches sent by one client in order (as one reporter replica does).
 * 2. History reads at BENCH_APPS × BENCH_CHANGES entries: autocannon in a child process
 *    (bench/load.ts), 10 connections, 10 s each, the tenant's own key. Baseline in the same run:
 *    the application's own detail (`GET …/applications/:ns/:name`, one row by primary key). The
 *    newest page (limit 50), a page 400 entries deep (by cursor), and limit 200.
 */
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../provisioner/config.ts';
import { buildApp } from '../provisioner/http/app.ts';
import { buildServices } from '../provisioner/services.ts';
import { createKey } from '../provisioner/store/keys.ts';
import { insertTenant } from '../provisioner/store/tenants.ts';
import { createPool } from '../provisioner/db/database.ts';
import { startEmbeddedPostgres } from '../provisioner/db/embedded.ts';
import { migrate } from '../provisioner/db/migrate.ts';
import { catalog } from '../runtime/catalog.ts';
import { EVENTS_PATH, type EventBatch } from '../runtime/protocol/events.ts';
import { application } from '../test/helpers/events.ts';
import { changedApplication, sha } from '../test/helpers/app-history.ts';
import type { LoadRequest, LoadResult } from './load.ts';
import { postgresCpuUs } from './proc-tree.ts';
import { historyEntryCount } from '../test/helpers/runtime-objects.ts';

const APPS = Number(process.env.BENCH_APPS ?? 20);
const CHANGES = Number(process.env.BENCH_CHANGES ?? 500);
const DURATION = Number(process.env.BENCH_DURATION_SECONDS ?? 10);

function load(req: LoadRequest): Promise<LoadResult> {
  return new Promise((resolve, reject) => {
    const child = fork(fileURLToPath(new URL('./load.ts', import.meta.url)), [], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    child.once('message', (m: LoadResult) => resolve(m));
    child.once('exit', (code) => code && reject(new Error(`load generator exited with ${code}`)));
    child.send(req);
  });
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'hrt-bench-history-'));
  const server = await startEmbeddedPostgres(dir);
  const pool = createPool(server.url, 20);
  await migrate(pool);
  const db = { pool, url: server.url };
  const config = loadConfig({
    DATABASE_URL: db.url,
    PROVISIONER_ENGINE: 'none',
    LOG_LEVEL: 'info',
    PROVISIONER_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
    PROVISIONER_RUNTIME_EVENT_BATCHES_PER_SECOND: '10000',
    PROVISIONER_APP_HISTORY_MAX_PER_TENANT: String(Math.max(10_000, APPS * CHANGES)),
  });
  const services = await buildServices(config, db);
  const app = await buildApp(services);
  await services.start();
  const base = await app.listen({ port: 0, host: '127.0.0.1' });
  try {
    const tenantId = await insertTenant(db.pool, {
      organization: `bench-${randomBytes(4).toString('hex')}`,
      email: 'b@bench.io',
      plan: 'team',
      runtimeVersion: catalog.defaultVersion('stable'),
    });
    const runtimeKey = (await createKey(db.pool, { role: 'runtime', tenantId, name: 'bench', createdBy: 'bench' })).key;
    const tenantKey = (await createKey(db.pool, { role: 'tenant', tenantId, name: 'bench', createdBy: 'bench' })).key;
    console.log(
      `machine: ${cpus().length} × ${cpus()[0]?.model ?? '?'}, load average ${loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')}; ${APPS} applications × ${CHANGES} changes`,
    );

    const post = async (batch: EventBatch): Promise<number> => {
      const body = JSON.stringify(batch);
      const res = await fetch(base + EVENTS_PATH, {
        method: 'POST',
        headers: { authorization: `Bearer ${runtimeKey}`, 'content-type': 'application/json' },
        body,
      });
      if (res.status !== 200) throw new Error(`POST ${EVENTS_PATH}: ${res.status} ${await res.text()}`);
      await res.arrayBuffer();
      return body.length;
    };
    const phase = async (name: string, make: (round: number, a: number) => EventBatch['items'][number]) => {
      const batches: EventBatch[] = [];
      for (let r = 0; r < CHANGES; r++)
        batches.push({ replica: 'reporter-0', items: Array.from({ length: APPS }, (_, a) => make(r, a)) });
      const bytesPerItem = batches.reduce((n, b) => n + JSON.stringify(b.items).length, 0) / (CHANGES * APPS);
      const cpu0 = process.cpuUsage();
      const pg0 = await postgresCpuUs(server.pid);
      const t0 = performance.now();
      for (const b of batches) await post(b);
      const seconds = (performance.now() - t0) / 1000;
      const cpu = process.cpuUsage(cpu0);
      const pg = (await postgresCpuUs(server.pid)) - pg0;
      const items = CHANGES * APPS;
      const row = {
        name,
        bytesPerItem: Math.round(bytesPerItem),
        itemsPerSecond: Math.round(items / seconds),
        controlPlaneUs: Math.round((cpu.user + cpu.system) / items),
        postgresUs: Math.round(pg / items),
      };
      console.log(
        `${name.padEnd(36)} ${String(row.bytesPerItem).padStart(6)} B/item  ${String(row.itemsPerSecond).padStart(6)} items/s  ` +
          `CPU per item: control plane ${row.controlPlaneUs} µs, Postgres ${row.postgresUs} µs`,
      );
      return row;
    };

    const rvBase = 1000;
    const withChange = await phase('reports carrying a change', (r, a) =>
      changedApplication(`app-${a}`, rvBase + r * APPS + a, {
        commit: sha(`a${a}-c${r}`),
        ...(r > 0 ? { previous: sha(`a${a}-c${r - 1}`) } : {}),
        author: 'Ada Lovelace',
        message: `app-${a}: change ${r}\n\nA longer body, as commit messages have.`,
        image: {
          before: `registry.example.test/app-${a}:1.${r}.0`,
          after: `registry.example.test/app-${a}:1.${r + 1}.0`,
        },
        sync: 'Succeeded',
      }),
    );
    const without = await phase('reports without (before 1.7.0)', (r, a) =>
      application(`app-${a}`, rvBase + (CHANGES + r) * APPS + a, { namespace: 'argocd', sync: 'Synced' }),
    );
    console.log(
      `change: ${(withChange.bytesPerItem / without.bytesPerItem).toFixed(2)}× the bytes per item, ` +
        `${((withChange.controlPlaneUs + withChange.postgresUs) / (without.controlPlaneUs + without.postgresUs)).toFixed(2)}× the CPU per item (control plane + Postgres)`,
    );

    console.log(`history entries of the tenant: ${await historyEntryCount(pool, tenantId)}`);

    // A cursor 400 entries deep into app-0's history.
    let cursor: string | null = null;
    for (let i = 0; i < 2; i++) {
      const q: string = cursor ? `&cursor=${encodeURIComponent(cursor)}` : '';
      const res = await fetch(`${base}/v1/tenants/${tenantId}/applications/argocd/app-0/history?limit=200${q}`, {
        headers: { authorization: `Bearer ${tenantKey}` },
      });
      const page = (await res.json()) as { nextCursor: string | null };
      cursor = page.nextCursor;
    }
    const reads: [string, string][] = [
      ['baseline: the application (one row)', `/v1/tenants/${tenantId}/applications/argocd/app-0`],
      ['history, newest 50', `/v1/tenants/${tenantId}/applications/argocd/app-0/history`],
      [
        'history, 50 at 400 deep (cursor)',
        `/v1/tenants/${tenantId}/applications/argocd/app-0/history?cursor=${encodeURIComponent(cursor ?? '')}`,
      ],
      ['history, newest 200', `/v1/tenants/${tenantId}/applications/argocd/app-0/history?limit=200`],
    ];
    let baseline = 0;
    for (const [name, path] of reads) {
      const r = await load({
        url: base + path,
        connections: 10,
        duration: DURATION,
        headers: { authorization: `Bearer ${tenantKey}` },
      });
      if (baseline === 0) baseline = r.rps;
      console.log(
        `${name.padEnd(36)} ${String(Math.round(r.rps)).padStart(6)} req/s  ${((100 * r.rps) / baseline).toFixed(0).padStart(3)}% of baseline  ` +
          `p50 ${r.p50} ms p99 ${r.p99} ms  failed ${r.failed}`,
      );
    }
  } finally {
    await app.close();
    await services.stop();
    await pool.end();
    await server.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
