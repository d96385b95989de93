/**
 * The provisioner SIGKILLed while 200 signups are in flight (issue 13's fault test): the real
 * `provisioner serve` as its own process on a database of this test, 200 signups sent at once,
 * the process killed after the first answers. After a restart on the same database every
 * answered signup is there whole (tenant, operation, working tenant key), and no unanswered one
 * is half-written: each organization of the batch has at most one tenant, every tenant has its
 * operation and its key, and retrying an unanswered signup with its Idempotency-Key answers 202
 * (the stored answer when it had been committed, a new tenant when not), never a conflict.
 */
import t, { type Test } from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import http from 'node:http';
import { createTestDatabase } from '../../helpers/postgres.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';

const bin = fileURLToPath(new URL('../../../bin/provisioner.ts', import.meta.url));
t.setTimeout(180_000);

const SIGNUPS = 200;

interface Serving {
  child: ChildProcess;
  url: string;
  exited: Promise<unknown>;
}

function serve(t: Test, env: Record<string, string>): Promise<Serving> {
  const child = spawn(process.execPath, [bin, 'serve'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  const exited = new Promise((r) => child.once('exit', r));
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout }).on('line', (line) => {
      try {
        const entry = JSON.parse(line) as { msg?: string; url?: string };
        if (entry.msg === 'provisioner listening' && entry.url) resolve({ child, url: entry.url, exited });
      } catch {
        // not a JSON log line
      }
    });
    void exited.then(() => reject(new Error(`provisioner exited before listening: ${stderr}`)));
  });
}

interface Signup {
  org: string;
  idempotencyKey: string;
  answer?: { status: number; body: { tenant?: { id: string }; apiKey?: string; operationId?: string } };
  failed?: string;
}

t.test(
  `SIGKILL with ${SIGNUPS} signups in flight: every answered one exists, no unanswered one is half-written`,
  async (t) => {
    const db = await createTestDatabase({ migrate: false });
    t.teardown(() => db.drop());
    const dataDir = await mkdtemp(join(tmpdir(), 'hrt-kill-load-'));
    t.teardown(() => rm(dataDir, { recursive: true, force: true }));
    const admin = `hrt_admin_${randomBytes(24).toString('hex')}`;
    const env = {
      PATH: process.env.PATH ?? '',
      HOME: dataDir,
      PORT: '0',
      DATABASE_URL: db.url,
      PROVISIONER_DATA_DIR: dataDir,
      PROVISIONER_ADMIN_TOKEN: admin,
      PROVISIONER_ENCRYPTION_KEY: randomBytes(32).toString('hex'),
      PROVISIONER_ENGINE: 'none',
      PROVISIONER_SIGNUP_RATE_LIMIT: '100000',
      LOG_LEVEL: 'info', // the 'provisioner listening' line gives the URL
    };
    const first = await serve(t, env);
    // One connection per signup, so that all 200 are in flight at once: the signups are sent with
    // node:http and this agent (raw on purpose: the typed client's fetch has no per-request agent).
    const agent = new http.Agent({ keepAlive: false, maxSockets: SIGNUPS + 10 });
    t.teardown(() => agent.destroy());

    const batch: Signup[] = Array.from({ length: SIGNUPS }, (_, i) => ({
      org: `kill-${i}-${randomBytes(3).toString('hex')}`,
      idempotencyKey: randomUUID(),
    }));
    let answered = 0;
    let firstAnswers: () => void = () => {};
    const enough = new Promise<void>((resolve) => (firstAnswers = resolve));
    const send = (url: string, s: Signup): Promise<{ status: number; json: () => unknown }> =>
      new Promise((resolve, reject) => {
        const req = http.request(
          `${url}/v1/signup`,
          {
            method: 'POST',
            agent,
            headers: { 'content-type': 'application/json', 'idempotency-key': s.idempotencyKey },
          },
          (res) => {
            let text = '';
            res.setEncoding('utf8');
            res.on('data', (d: string) => (text += d));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, json: () => JSON.parse(text) as unknown }));
            res.on('error', reject);
          },
        );
        req.on('error', reject);
        req.end(JSON.stringify({ organization: s.org, email: 'k@example.com' }));
      });
    const inFlight = batch.map(async (s) => {
      try {
        const res = await send(first.url, s);
        const body = res.json() as NonNullable<Signup['answer']>['body'];
        s.answer = { status: res.status, body };
        if (++answered >= SIGNUPS / 4) firstAnswers();
      } catch (err) {
        s.failed = (err as Error).message;
      }
    });
    await Promise.race([enough, Promise.all(inFlight)]);
    first.child.kill('SIGKILL');
    const killedAt = answered;
    await Promise.all(inFlight);
    await first.exited;

    const ok = batch.filter((s) => s.answer?.status === 202);
    const unanswered = batch.filter((s) => !s.answer);
    const other = batch.filter((s) => s.answer && s.answer.status !== 202);
    t.comment(
      `killed after ${killedAt} answers: ${ok.length} answered 202, ${unanswered.length} unanswered, ${other.length} other answers`,
    );
    t.same(
      other.map((s) => s.answer!.status),
      [],
      'every answer before the kill was a 202',
    );
    t.ok(unanswered.length > 0, `the kill cut signups off in flight (${unanswered.length} of ${SIGNUPS} unanswered)`);
    t.ok(ok.length > 0, `some signups were answered before the kill (${ok.length})`);

    const second = await serve(t, env);
    t.teardown(async () => {
      second.child.kill('SIGTERM');
      await second.exited;
    });
    // The reads after the restart: the typed client at the second process's socket.
    const on = (key: string) => new ApiClient({ baseUrl: second.url, token: key });
    let whole = 0;
    for (const s of ok) {
      const { tenant, apiKey, operationId } = s.answer!.body;
      const [byAdmin, byTenant, op] = await Promise.all([
        on(admin).request('GET /v1/tenants/:id', { params: { id: tenant!.id } }),
        on(apiKey!).request('GET /v1/tenants/:id', { params: { id: tenant!.id } }),
        on(admin).request('GET /v1/operations/:id', { params: { id: operationId! } }),
      ]);
      if (byAdmin.status === 200 && byTenant.status === 200 && op.status === 200) whole += 1;
    }
    t.equal(
      whole,
      ok.length,
      `all ${ok.length} answered signups exist after the restart: tenant, operation, working key`,
    );

    const orgs = batch.map((s) => s.org);
    const { rows } = await db.pool.query<{ organization: string; tenants: number; operations: number; keys: number }>(
      `SELECT t.organization, count(DISTINCT t.id)::int AS tenants,
            count(DISTINCT o.id)::int AS operations, count(DISTINCT k.id)::int AS keys
       FROM tenants t
       LEFT JOIN operations o ON o.tenant_id = t.id
       LEFT JOIN api_keys k ON k.tenant_id = t.id AND k.role = 'tenant'
      WHERE t.organization = ANY($1::text[])
      GROUP BY t.organization`,
      [orgs],
    );
    const stored = new Map(rows.map((r) => [r.organization, r]));
    t.same(
      rows.filter((r) => r.tenants !== 1 || r.operations !== 1 || r.keys !== 1),
      [],
      'every stored tenant of the batch is whole: one tenant, one operation, one tenant key per organization',
    );
    const committedUnanswered = unanswered.filter((s) => stored.has(s.org)).length;
    t.comment(
      `${committedUnanswered} of the ${unanswered.length} unanswered signups had been committed before the kill`,
    );

    const retries = await Promise.all(
      unanswered.map(async (s) => {
        const res = await send(second.url, s);
        const body = res.json() as { tenant?: { id: string }; error?: { code: string } };
        return { s, status: res.status, tenantId: body.tenant?.id, code: body.error?.code };
      }),
    );
    t.same(
      retries.filter((r) => r.status !== 202).map((r) => `${r.s.org}: ${r.status} ${r.code}`),
      [],
      'every unanswered signup retried with its Idempotency-Key answers 202',
    );
    const after = await db.pool.query<{ organization: string; id: string }>(
      'SELECT organization, id FROM tenants WHERE organization = ANY($1::text[])',
      [unanswered.map((s) => s.org)],
    );
    const idOf = new Map(after.rows.map((r) => [r.organization, r.id]));
    t.same(
      retries.filter((r) => idOf.get(r.s.org) !== r.tenantId).map((r) => r.s.org),
      [],
      'each retry answers the one tenant of its organization (the committed one, or the one the retry created)',
    );
    t.equal(
      after.rows.length,
      unanswered.length,
      'one tenant per unanswered organization after the retries, none twice',
    );
  },
);
