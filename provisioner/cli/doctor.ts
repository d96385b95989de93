/**
 * `provisioner doctor`: what stands between a signup and a provisioned tenant, each check as ok or
 * problem with the commands that fix it. The API and its database through the public /healthz
 * and /readyz (no key needed), then the engine and the root clusters through GET /v1/doctor
 * (an operator or admin key). Exits 1 when a problem keeps tenants from being provisioned (or
 * could not be checked), 0 otherwise. Loads nothing but the HTTP client (no server, database or
 * engine modules).
 */
import type { Command } from 'commander';
import { ApiClient, ApiError } from './client.ts';
import type { Io } from './api-commands.ts';

import type { DoctorCheck } from '../api/types.ts';

/** Ends the command with an exit code, after the command printed what it had to say. */
export class ExitCode extends Error {
  readonly code: number;
  constructor(code: number) {
    super(`exit ${code}`);
    this.name = 'ExitCode';
    this.code = code;
  }
}

const TIMEOUT_MS = 10_000;

async function get(url: string): Promise<{ status: number; body: unknown }> {
  const res = await fetch(url, { signal: AbortSignal.timeout(TIMEOUT_MS), headers: { accept: 'application/json' } });
  let body: unknown;
  try {
    body = await res.json();
  } catch {
    body = undefined;
  }
  return { status: res.status, body };
}

function reasonOf(err: unknown): string {
  const e = err as Error & { cause?: Error };
  return e.cause?.message ?? e.message;
}

/** Runs every check it can; later checks are skipped (and say why) when an earlier one fails. */
export async function runDoctor(base: string, token: string | undefined): Promise<DoctorCheck[]> {
  const url = base.replace(/\/+$/, '');
  const checks: DoctorCheck[] = [];
  const skipped = (name: string, why: string): DoctorCheck => ({
    name,
    status: 'skipped',
    message: why,
    fix: [],
    detail: {},
  });
  try {
    await get(`${url}/healthz`);
  } catch (err) {
    checks.push({
      name: 'api',
      status: 'problem',
      message: `cannot reach the provisioner at ${url}: ${reasonOf(err)}`,
      fix: [
        'npm start   # the provisioner on http://127.0.0.1:8080 (embedded PostgreSQL in ./.data)',
        'or point the CLI at it: --url <url> or PROVISIONER_URL',
      ],
      detail: { url },
    });
    return [
      ...checks,
      skipped('database', 'checked once the API answers'),
      skipped('engine', 'checked once the API answers'),
      skipped('clusters', 'checked once the API answers'),
    ];
  }
  const api: DoctorCheck = { name: 'api', status: 'ok', message: `${url} answers`, fix: [], detail: { url } };
  checks.push(api);

  const ready = await get(`${url}/readyz`).catch((err: unknown) => ({ status: 0, body: { reason: reasonOf(err) } }));
  const readyBody = (ready.body ?? {}) as { checks?: Record<string, string>; reason?: string };
  if (ready.status === 200) {
    checks.push({
      name: 'database',
      status: 'ok',
      message: 'PostgreSQL answers and its migrations are applied',
      fix: [],
      detail: {},
    });
  } else {
    const pending = readyBody.checks?.migrations === 'pending';
    checks.push({
      name: 'database',
      status: 'problem',
      message: readyBody.reason ?? `/readyz answered HTTP ${ready.status}`,
      fix: pending
        ? ["provisioner migrate   # with the provisioner's DATABASE_URL, or restart a replica"]
        : [
            "check that the provisioner's PostgreSQL runs: DATABASE_URL, or the embedded one under PROVISIONER_DATA_DIR (./.data)",
            'the provisioner reconnects by itself once it answers: no restart needed',
          ],
      detail: readyBody.checks ?? {},
    });
    return [
      ...checks,
      skipped('engine', 'checked once the database answers'),
      skipped('clusters', 'checked once the database answers'),
    ];
  }

  if (!token) {
    checks.push({
      name: 'access',
      status: 'problem',
      message: 'no API key: the engine and the root clusters are checked with an operator or admin key',
      fix: [
        'export PROVISIONER_TOKEN=<admin key>   # printed once at the first start (or PROVISIONER_ADMIN_TOKEN)',
        'or, with an admin key: provisioner keys create --role operator --name doctor',
      ],
      detail: {},
    });
    return [
      ...checks,
      skipped('engine', 'checked with an operator or admin key'),
      skipped('clusters', 'checked with an operator or admin key'),
    ];
  }
  let report: { version: string; checks: DoctorCheck[] };
  try {
    report = await new ApiClient({ baseUrl: url, token }).call('GET /v1/doctor');
  } catch (err) {
    const e = err as ApiError;
    checks.push({
      name: 'access',
      status: 'problem',
      message: `GET /v1/doctor was refused: ${e instanceof ApiError ? `${e.code}: ${e.message}` : reasonOf(err)}`,
      fix: ['use an operator or admin key (--token or PROVISIONER_TOKEN)'],
      detail: {},
    });
    return [
      ...checks,
      skipped('engine', 'checked with an operator or admin key'),
      skipped('clusters', 'checked with an operator or admin key'),
    ];
  }
  api.message = `${url} answers (provisioner ${report.version})`;
  api.detail.version = report.version;
  return [...checks, ...report.checks];
}

const MARK: Record<DoctorCheck['status'], string> = {
  ok: 'ok',
  problem: 'PROBLEM',
  warning: 'warning',
  skipped: 'skipped',
};

/** The checks as lines: status, name, message, then each fix indented. */
export function formatChecks(checks: DoctorCheck[]): string {
  const width = Math.max(...checks.map((c) => c.name.length));
  const lines: string[] = [];
  for (const c of checks) {
    lines.push(`${MARK[c.status].padEnd(8)} ${c.name.padEnd(width)}  ${c.message}`);
    for (const f of c.fix) lines.push(`${' '.repeat(9 + width + 2)}fix: ${f}`);
  }
  const problems = checks.filter((c) => c.status === 'problem').length;
  const warnings = checks.filter((c) => c.status === 'warning').length;
  // A warning (a tenant whose runtime is not connected, a failing loop) is not "no problem": it is counted.
  const warned = warnings === 0 ? '' : `; ${warnings} warning${warnings === 1 ? '' : 's'} above to look at`;
  lines.push(
    '',
    (problems === 0
      ? warnings === 0
        ? 'no problem found: a signed-up tenant is provisioned'
        : 'no problem keeps a signed-up tenant from being provisioned'
      : `${problems} problem${problems === 1 ? '' : 's'}: tenants are not provisioned until ${problems === 1 ? 'it is' : 'they are'} fixed`) +
      warned,
  );
  return lines.join('\n');
}

export function addDoctorCommand(program: Command, io: Io): void {
  program
    .command('doctor')
    .description('check what a tenant needs to be provisioned (API, database, engine, root clusters) and how to fix it')
    .action(async () => {
      const o = program.opts<{ url?: string; token?: string; json?: boolean }>();
      const checks = await runDoctor(
        o.url ?? io.env.PROVISIONER_URL ?? 'http://127.0.0.1:8080',
        o.token ?? io.env.PROVISIONER_TOKEN,
      );
      const problems = checks.filter((c) => c.status === 'problem').length;
      io.out(o.json ? JSON.stringify({ problems, checks }, null, 2) : formatChecks(checks));
      if (problems > 0) throw new ExitCode(1);
    });
}
