/**
 * One process of bench/startup.bench.ts: the CPU (user + system, this process) of loading the
 * provisioner's modules (test/helpers/api.ts imports the services and the app, as the tests and
 * `provisioner serve` do), then of starting two replicas (services and app, ready: startReplica) on
 * one migrated database, then of the first answer of three routes. Prints one JSON line.
 * Argument: the checkout to load (another one measures its code against the same database).
 */
const root = process.argv[2]!;
const cpu = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};
let mark = cpu();
const lap = () => {
  const now = cpu();
  const ms = now - mark;
  mark = now;
  return Math.round(ms);
};
const { startReplica } = await import(`${root}/test/helpers/api.ts`);
const { createTestDatabase } = await import(`${root}/test/helpers/postgres.ts`);
const { loadConfig } = await import(`${root}/provisioner/config.ts`);
const loadMs = lap();
const db = await createTestDatabase();
const config = loadConfig({
  DATABASE_URL: db.url,
  PROVISIONER_ENGINE: 'none',
  PROVISIONER_ENCRYPTION_KEY: '00'.repeat(32),
});
lap();
const first = await startReplica(config, db);
const firstAppMs = lap();
const second = await startReplica(config, db);
const secondAppMs = lap();
for (const url of ['/v1/plans', '/v1/runtime-versions', '/healthz']) await first.app.inject({ method: 'GET', url });
const firstAnswersMs = lap();
await second.close();
await first.close();
await db.drop();
console.log(JSON.stringify({ loadMs, firstAppMs, secondAppMs, firstAnswersMs }));
