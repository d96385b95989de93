/**
 * API benchmark: with 10,000 tenants in the database, an authorized GET /v1/tenants/:id against a
 * bare fastify route returning a constant JSON object (the baseline, same process, same load
 * generator), and signups at 50 connections. Targets: GET >= 35% of the baseline's throughput with
 * p99 < 25 ms; signup >= 300/s.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import Fastify from 'fastify';
import { loadConfig } from '../provisioner/config.ts';
import { SecretBox } from '../provisioner/crypto.ts';
import { createPool } from '../provisioner/db/database.ts';
import { startEmbeddedPostgres } from '../provisioner/db/embedded.ts';
import { migrate } from '../provisioner/db/migrate.ts';
import { buildApp } from '../provisioner/http/app.ts';
import { createKey } from '../provisioner/store/keys.ts';
import { catalog } from '../runtime/catalog.ts';

const TENANTS = 10_000;
const DURATION = Number(process.env.BENCH_SECONDS ?? 10);

const dir = await mkdtemp(join(tmpdir(), 'hrt-bench-'));
const pg = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres(dir);
const url = process.env.DATABASE_URL ?? pg!.url;
const pool = createPool(url, 20);
await pool.query('DROP SCHEMA public CASCADE; CREATE SCHEMA public');
await migrate(pool);
await pool.query(
  `INSERT INTO tenants (organization, email, plan, runtime_version)
   SELECT 'bench-' || g, 'b@bench.io', 'free', $1 FROM generate_series(1, $2) g`,
  [catalog.defaultVersion('stable'), TENANTS],
);
const { rows } = await pool.query<{ id: string }>(`SELECT id FROM tenants ORDER BY random() LIMIT 1`);
const tenantId = rows[0]!.id;
const operatorKey = (await createKey(pool, { role: 'operator', name: 'bench', createdBy: 'bench' })).key;

const config = loadConfig({ DATABASE_URL: url, PROVISIONER_SIGNUP_RATE_LIMIT: '1000000000', LOG_LEVEL: 'silent' });
const { app } = await buildApp({ config, pool, box: new SecretBox(randomBytes(32)), catalog });
const apiUrl = await app.listen({ port: 0, host: '127.0.0.1' });

const bare = Fastify({ logger: false });
bare.get('/constant', async () => ({ id: tenantId, organization: 'bench', phase: 'Ready' }));
const bareUrl = await bare.listen({ port: 0, host: '127.0.0.1' });

async function load(title: string, opts: autocannon.Options): Promise<autocannon.Result> {
  const r = await autocannon({ duration: DURATION, connections: 50, ...opts });
  const non2xx = r.non2xx + r.errors + r.timeouts;
  console.log(`${title}: ${Math.round(r.requests.average)} req/s, p50 ${r.latency.p50} ms, p99 ${r.latency.p99} ms` +
    (non2xx ? `, ${non2xx} failed` : ''));
  return r;
}

await load('warm-up', { url: `${apiUrl}/v1/tenants/${tenantId}`, duration: 2, headers: { authorization: `Bearer ${operatorKey}` } });
const base = await load('baseline: bare fastify constant JSON', { url: `${bareUrl}/constant` });
const get = await load('authorized GET /v1/tenants/:id', { url: `${apiUrl}/v1/tenants/${tenantId}`, headers: { authorization: `Bearer ${operatorKey}` } });
let n = 0;
const signup = await load('POST /v1/signup', {
  url: `${apiUrl}/v1/signup`,
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  requests: [{ setupRequest: (req) => ({ ...req, body: JSON.stringify({ organization: `s-${process.pid}-${++n}`, email: 'x@y.io' }) }) }],
});

const ratio = get.requests.average / base.requests.average;
console.log('');
console.log(`| measure | result | target |`);
console.log(`|---|---|---|`);
console.log(`| baseline (bare fastify) | ${Math.round(base.requests.average)} req/s, p99 ${base.latency.p99} ms | — |`);
console.log(`| authorized GET | ${Math.round(get.requests.average)} req/s (${(ratio * 100).toFixed(0)}% of baseline), p50 ${get.latency.p50} ms, p99 ${get.latency.p99} ms | ≥ 35%, p99 < 25 ms |`);
console.log(`| signup, 50 connections | ${Math.round(signup.requests.average)} /s, p50 ${signup.latency.p50} ms, p99 ${signup.latency.p99} ms | ≥ 300/s |`);
const failed = get.non2xx + signup.non2xx;
if (failed > 0) console.log(`WARNING: ${failed} non-2xx answers`);

await app.close();
await bare.close();
await pool.end();
await pg?.stop();
await rm(dir, { recursive: true, force: true });
