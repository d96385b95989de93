/**
 * The public surface the tests drive: real HTTP to the provisioner child process and the
 * `provisioner` CLI (`node bin/provisioner.ts --url … --token …`).
 */
import { join } from 'node:path';
import { REPO_ROOT } from '../../../sandbox/provisioner-process.ts';
import { run, StopWaiting, until } from '../../../sandbox/processes.ts';
import { ApiClient as TypedClient } from '../../../provisioner/http/api-client.ts';
import type { Operation, SignupResponse, Tenant } from '../../../provisioner/http/api-types.ts';
/** The API's answers, as its route schemas define them. */
export type { Operation, SignupResponse, Tenant };

export interface ApiResponse<T> {
  status: number;
  body: T;
}

export class ApiClient {
  readonly url: string;
  readonly token: string;
  /** The API's one client (provisioner/http/api-client.ts), typed from the route map. */
  readonly api: TypedClient;

  constructor(url: string, token: string) {
    this.url = url;
    this.token = token;
    this.api = new TypedClient({ baseUrl: url, token: token || undefined });
  }

  withToken(token: string): ApiClient {
    return new ApiClient(this.url, token);
  }

  async request<T>(
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<ApiResponse<T>> {
    const res = await fetch(`${this.url}${path}`, {
      method,
      headers: {
        ...(this.token ? { authorization: `Bearer ${this.token}` } : {}),
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...headers,
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(30_000),
    });
    const text = await res.text();
    return { status: res.status, body: (text ? JSON.parse(text) : undefined) as T };
  }

  /** Like request(), but throws unless the status is `expected`. */
  async expect<T>(expected: number, method: string, path: string, body?: unknown): Promise<T> {
    const res = await this.request<T>(method, path, body);
    if (res.status !== expected)
      throw new Error(`${method} ${path}: expected ${expected}, got ${res.status}: ${JSON.stringify(res.body)}`);
    return res.body;
  }

  tenant(id: string): Promise<Tenant> {
    return this.api.call('GET /v1/tenants/:id', { params: { id }, signal: AbortSignal.timeout(30_000) });
  }

  async operations(tenantId: string): Promise<Operation[]> {
    const page = await this.api.call('GET /v1/tenants/:id/operations', {
      params: { id: tenantId },
      query: { limit: 100 },
      signal: AbortSignal.timeout(30_000),
    });
    return page.items;
  }

  operation(id: string): Promise<Operation> {
    return this.api.call('GET /v1/operations/:id', { params: { id }, signal: AbortSignal.timeout(30_000) });
  }

  async logLines(operationId: string): Promise<string[]> {
    const log = await this.api.call('GET /v1/operations/:id/log', {
      params: { id: operationId },
      signal: AbortSignal.timeout(30_000),
    });
    return log.items.map((l) => l.line);
  }

  /**
   * Waits until the tenant's phase is `phase` with the spec observed; throws at once, with the
   * operation log's tail, when the tenant turns Failed/Stalled or its last operation failed.
   */
  async waitForPhase(id: string, phase: string, timeoutMs: number): Promise<Tenant> {
    return until(
      `tenant ${id} ${phase}`,
      timeoutMs,
      async () => {
        const t = await this.tenant(id);
        if (
          t.status.phase === 'Failed' ||
          t.status.conditions.some((c) => c.type === 'Stalled' && c.status === 'True')
        ) {
          throw new StopWaiting(
            `tenant ${id} is ${t.status.phase}: ${JSON.stringify(t.status.conditions)}${await this.#lastLogTail(t)}`,
          );
        }
        if (t.status.phase === phase && t.status.observedGeneration === t.generation) return t;
        // A failed attempt would be retried with backoff; in these tests it is a failure at once.
        if (t.status.lastOperationId) {
          const op = await this.operation(t.status.lastOperationId);
          if (op.state === 'failed')
            throw new StopWaiting(
              `operation ${op.kind} ${op.id} of tenant ${id} failed: ${op.error?.code ?? ''} ${(op.error?.message ?? '').slice(-1500)}${await this.#lastLogTail(t)}`,
            );
        }
        return undefined;
      },
      1000,
    ).catch(async (err: unknown) => {
      if (err instanceof StopWaiting) throw err;
      const t = await this.tenant(id).catch(() => undefined);
      throw new Error(`${err instanceof Error ? err.message : String(err)}${t ? await this.#lastLogTail(t) : ''}`);
    });
  }

  async #lastLogTail(t: Tenant): Promise<string> {
    if (!t.status.lastOperationId) return '';
    const lines = await this.logLines(t.status.lastOperationId).catch(() => []);
    return `\n--- last operation log (tail) ---\n${lines
      .slice(-25)
      .map((l) => l.slice(0, 400))
      .join('\n')}`;
  }
}

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the `provisioner` CLI against the API (`input`: its standard input). */
export async function cli(url: string, token: string, args: string[], input?: string): Promise<CliResult> {
  try {
    const { stdout, stderr } = await run(
      process.execPath,
      [join(REPO_ROOT, 'bin', 'provisioner.ts'), '--url', url, '--token', token, ...args],
      { timeoutMs: 60_000, ...(input !== undefined ? { input } : {}) },
    );
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; exitCode?: number | null; message?: string };
    if (e.exitCode === undefined) throw err;
    return { code: e.exitCode ?? -1, stdout: e.stdout ?? '', stderr: e.stderr ?? e.message ?? '' };
  }
}
