/**
 * The root infrastructure's external-database mode, end to end on the provisioner's side: the
 * root-infra program (infra/) is run under Pulumi's mocks with `database.mode: external` and a
 * `databaseUrl` naming a real, empty Postgres database (a fresh database on an embedded server,
 * playing the external one); the provisioner Deployment's environment is resolved exactly as the
 * kubelet would from what the program declares (values with $(VAR) references, the Secrets the
 * program creates — the DSN Secret among them —, the downward API); and the real provisioner
 * process started with that environment migrates the database and serves. The objects themselves
 * are accepted by a real API server in test/e2e/infra.test.ts (operator-managed mode); this test
 * shows the external mode's configuration contract holds.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import t from 'tap';
import { StopWaiting, until } from '../../../sandbox/until.ts';
import type { IDeployment } from 'kubernetes-models/apps/v1';
import type { ISecret } from 'kubernetes-models/v1';
import { infraProgram } from '../../../infra/program.ts';
import { freePort } from '../../helpers/ports.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';
import { appliedMigrations, createTestDatabase } from '../../helpers/postgres.ts';
import { storedKeys } from '../../helpers/keys.ts';
import { inputsOf, runProgram, type RunResult } from '../../unit/pulumi/harness.ts';

t.setTimeout(240_000);
const P = 'hosted-runtimes-infra';
const bin = fileURLToPath(new URL('../../../bin/provisioner.ts', import.meta.url));
const migrationsDir = fileURLToPath(new URL('../../../provisioner/db/migrations/', import.meta.url));

// The "external" database: empty, not migrated (the provisioner must do it).
const db = await createTestDatabase({ migrate: false });
const dir = await mkdtemp(join(tmpdir(), 'hrt-infra-external-db-'));
t.teardown(async () => {
  await db.drop();
  await rm(dir, { recursive: true, force: true });
});

const rendered = await runProgram(
  () => infraProgram({ waitForToken: () => Promise.resolve() }),
  {
    [`${P}:clusters`]: {
      value: JSON.stringify([
        {
          name: 'eu-1',
          region: 'eu-west',
          capacity: 10,
          apiServer: 'https://eu-1.k8s.example.test:6443',
          ingressHost: 'gitops.example.test',
        },
      ]),
      secret: false,
    },
    [`${P}:kubeconfigs`]: { value: JSON.stringify({ 'eu-1': 'apiVersion: v1\nkind: Config\n' }), secret: true },
    [`${P}:provisionerImage`]: { value: 'hosted-runtimes/provisioner:test', secret: false },
    [`${P}:database`]: { value: JSON.stringify({ mode: 'external' }), secret: false },
    [`${P}:databaseUrl`]: { value: db.url, secret: true },
    [`${P}:encryptionKey`]: { value: randomBytes(32).toString('base64'), secret: true },
    [`${P}:requestSigningKey`]: {
      value: generateKeyPairSync('ed25519').privateKey.export({ format: 'pem', type: 'pkcs8' }).toString(),
      secret: true,
    },
    [`${P}:pulumiPassphrase`]: { value: randomBytes(24).toString('hex'), secret: true },
  },
  { project: P, stack: 'external-db' },
);

/** The container's environment as the kubelet would give it, from the Secrets the program declares. */
function resolveEnv(r: RunResult, namespace: string): Record<string, string> {
  const deployment = inputsOf<IDeployment>(r.byName('eu-1-provisioner-deployment'));
  const secrets = r.ofType('kubernetes:core/v1:Secret').map((s) => inputsOf<ISecret>(s));
  const out: Record<string, string> = {};
  for (const v of deployment.spec!.template.spec!.containers[0]!.env ?? []) {
    if (v.value !== undefined) {
      out[v.name] = v.value.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, name: string) => out[name] ?? m);
    } else if (v.valueFrom?.secretKeyRef) {
      const ref = v.valueFrom.secretKeyRef;
      const secret = secrets.find((s) => s.metadata?.name === ref.name && s.metadata?.namespace === namespace);
      const value = secret?.stringData?.[ref.key];
      if (value === undefined)
        throw new Error(`${v.name}: the program declares no Secret ${ref.name} with key ${ref.key}`);
      out[v.name] = value;
    } else if (v.valueFrom?.fieldRef?.fieldPath === 'status.podIP') {
      out[v.name] = '127.0.0.1'; // the pod's address: loopback here
    } else {
      throw new Error(`${v.name}: a source the test does not resolve: ${JSON.stringify(v.valueFrom)}`);
    }
  }
  return out;
}

t.test(
  'the provisioner started with the environment infra/ renders for an external database migrates it and serves',
  async (t) => {
    t.equal(
      rendered.resources.filter((x) => x.inputs.chart === 'cloudnative-pg').length,
      0,
      'external mode installs no database operator',
    );
    const env = resolveEnv(rendered, 'hosted-platform');
    t.equal(env.DATABASE_URL, db.url, "DATABASE_URL is the configured DSN, from the program's Secret");
    const before = new pg.Client({ connectionString: db.url });
    await before.connect();
    const beforeStart = await appliedMigrations(before);
    await before.end();
    t.equal(beforeStart, undefined, 'precondition: the database is empty (no migration table)');

    const port = await freePort();
    const volume = join(dir, 'volume');
    const processEnv: Record<string, string> = {
      ...env,
      // Loopback only here (the pod listens on every address of its network namespace).
      HOST: '127.0.0.1',
      PORT: String(port),
      PROVISIONER_DATA_DIR: volume,
      PATH: `${dirname(process.execPath)}:/usr/bin:/bin`,
      HOME: volume,
    };
    t.comment(
      `environment: ${Object.keys(env).sort().join(', ')}; changed for the test: HOST, PORT, PROVISIONER_DATA_DIR`,
    );
    const child: ChildProcess = spawn(process.execPath, [bin, 'serve'], {
      env: processEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    t.teardown(async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      await exited;
    });
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const url = `http://127.0.0.1:${port}`;
    const readyz = await until('the provisioner ready (/readyz 200)', 120_000, async () => {
      if (child.exitCode !== null)
        throw new StopWaiting(`provisioner exited with ${child.exitCode}: ${stderr}${stdout}`);
      const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(3000) });
      return res.status === 200 && ((await res.json()) as { status?: string });
    });
    t.equal(readyz.status, 'ready', '/readyz answers 200 with status ready');
    t.notMatch(stdout, /using embedded PostgreSQL/, 'it uses the external database, not an embedded one');

    const files = (await readdir(migrationsDir)).filter((f) => /^\d{3}_.*\.sql$/.test(f));
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    t.same(
      await appliedMigrations(client),
      files.map((f) => Number(f.slice(0, 3))).sort((a, b) => a - b),
      `every migration (${files.length}) was applied to the external database`,
    );
    const admins = await storedKeys(client, { role: 'admin' });
    await client.end();
    t.equal(admins.length, 1, 'the bootstrap admin key is stored there (as a hash)');

    const key = /A bootstrap admin API key was generated[^\n]*\n\s*(\S+)/.exec(stdout)?.[1];
    t.ok(key, 'the first start prints the bootstrap admin key once');
    const api = new ApiClient({ baseUrl: url });
    t.equal((await api.request('GET /v1/runtime-versions')).status, 200, 'it serves the public API');
    const clusters = await api.request('GET /v1/clusters', { token: key ?? '' });
    t.equal(clusters.status, 200, 'and the admin key is accepted (read from the external database)');
    const development = stdout.split('\n').filter((l) => /"level":40/.test(l) && /is not set/.test(l));
    t.same(development, [], 'no secret is left to a development default (encryption key, passphrase, signing key)');
  },
);
