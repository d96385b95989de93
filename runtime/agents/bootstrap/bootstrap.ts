/**
 * The bootstrap of a hybrid runtime, run once by the install bundle's Job in the customer's
 * cluster: exchange the single-use bootstrap token for the runtime token at the control plane
 * (`POST /v1/runtimes/bootstrap`), write the runtime token, the control plane's URLs and public
 * key into the `runtime-credentials` Secret the agents read, and delete the `runtime-bootstrap`
 * Secret. Idempotent: credentials already written → the bootstrap Secret is deleted (if still
 * there) and nothing is exchanged.
 *
 * Network failures, 429 and 5xx (of the control plane or the API server) are retried with capped
 * exponential backoff and full jitter, `maxAttempts` times at most. A refused token (401) is not
 * retried: exit code 3, which fails the Job at once (its podFailurePolicy). No token is ever
 * logged.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import {
  BOOTSTRAP_PATH,
  BOOTSTRAP_SECRET,
  CREDENTIAL_KEYS,
  CREDENTIALS_SECRET,
  type BootstrapAnswer,
} from '../../protocol/bootstrap.ts';
import type { KubeRequestOptions, KubeResponse, KubeTransport } from '../../kube/transport.ts';
import { backoffDelay } from '../common/backoff.ts';
import type { BootstrapConfig } from './config.ts';

export const EXIT = { ok: 0, failed: 1, config: 2, refused: 3 } as const;

export interface BootstrapDeps {
  fetch?: typeof fetch;
  sleep?: (ms: number) => Promise<unknown>;
}

const retriable = (status: number) => status === 429 || status >= 500;

/** Exit code of one bootstrap run. */
export async function runBootstrap(
  c: BootstrapConfig,
  kube: KubeTransport,
  log: Logger,
  deps: BootstrapDeps = {},
): Promise<number> {
  const doFetch = deps.fetch ?? fetch;
  const wait = deps.sleep ?? sleep;
  const backoff = { initialMs: 500, maxMs: c.retryMaxSeconds * 1000, factor: 2 };
  const secretPath = (name: string) =>
    `/api/v1/namespaces/${encodeURIComponent(c.namespace)}/secrets/${encodeURIComponent(name)}`;

  /** An API server call, retried on network errors, 429 and 5xx; undefined when every attempt failed. */
  const kubeCall = async (
    what: string,
    path: string,
    opts: KubeRequestOptions = {},
  ): Promise<KubeResponse | undefined> => {
    for (let attempt = 0; attempt < c.maxAttempts; attempt++) {
      if (attempt > 0) await wait(backoffDelay(attempt - 1, backoff));
      try {
        const res = await kube.request(path, { ...opts, signal: AbortSignal.timeout(c.requestTimeoutSeconds * 1000) });
        if (!retriable(res.status)) return res;
        log.warn({ status: res.status, attempt: attempt + 1 }, `${what}: the Kubernetes API answered ${res.status}`);
      } catch (err) {
        log.warn({ err: (err as Error).message, attempt: attempt + 1 }, `${what}: the Kubernetes API is unreachable`);
      }
    }
    log.error({ attempts: c.maxAttempts }, `${what}: gave up after ${c.maxAttempts} attempts`);
    return undefined;
  };

  const deleteBootstrapSecret = async (): Promise<number> => {
    const res = await kubeCall(`delete Secret ${BOOTSTRAP_SECRET}`, secretPath(BOOTSTRAP_SECRET), { method: 'DELETE' });
    if (!res) return EXIT.failed;
    if (res.status === 404) return EXIT.ok;
    if (res.status >= 200 && res.status < 300) {
      log.info(`Secret ${BOOTSTRAP_SECRET} deleted`);
      return EXIT.ok;
    }
    log.error({ status: res.status }, `could not delete Secret ${BOOTSTRAP_SECRET} (HTTP ${res.status})`);
    return EXIT.failed;
  };

  // 1. Already done?
  const current = await kubeCall(`read Secret ${CREDENTIALS_SECRET}`, secretPath(CREDENTIALS_SECRET));
  if (!current) return EXIT.failed;
  if (current.status === 404) {
    log.error(
      `Secret ${CREDENTIALS_SECRET} does not exist in namespace ${c.namespace}: the install bundle creates it; apply the whole bundle`,
    );
    return EXIT.failed;
  }
  if (current.status !== 200) {
    log.error(
      { status: current.status },
      `cannot read Secret ${CREDENTIALS_SECRET} (HTTP ${current.status}): the Job's account needs get and patch on it`,
    );
    return EXIT.failed;
  }
  const data: Record<string, string> = (current.body as { data?: Record<string, string> } | undefined)?.data ?? {};
  if (data[CREDENTIAL_KEYS.token]) {
    log.info(`Secret ${CREDENTIALS_SECRET} already holds the runtime token; nothing to exchange`);
    return deleteBootstrapSecret();
  }
  if (!c.token) {
    log.error(
      `no bootstrap token (Secret ${BOOTSTRAP_SECRET} is absent) and no runtime token written: register the runtime again and apply its new bundle`,
    );
    return EXIT.failed;
  }

  // 2. The exchange.
  const url = `${c.controlPlaneUrl}${BOOTSTRAP_PATH}`;
  let answer: BootstrapAnswer | undefined;
  for (let attempt = 0; attempt < c.maxAttempts && !answer; attempt++) {
    let res: Response;
    try {
      res = await doFetch(url, {
        method: 'POST',
        headers: { authorization: `Bearer ${c.token}`, 'content-type': 'application/json', accept: 'application/json' },
        body: '{}',
        signal: AbortSignal.timeout(c.requestTimeoutSeconds * 1000),
      });
    } catch (err) {
      log.warn({ err: (err as Error).message, attempt: attempt + 1, url }, 'the control plane is unreachable');
      if (attempt + 1 < c.maxAttempts) await wait(backoffDelay(attempt, backoff));
      continue;
    }
    const text = await res.text();
    if (res.status === 401) {
      log.error(
        { status: 401, url },
        'the control plane refused the bootstrap token (unknown, expired, already used, or the runtime was removed): ' +
          'register the runtime again and apply its new bundle',
      );
      return EXIT.refused;
    }
    if (retriable(res.status)) {
      const retryAfter = Number(res.headers.get('retry-after'));
      const delay = Math.min(
        backoff.maxMs,
        Math.max(backoffDelay(attempt, backoff), Number.isFinite(retryAfter) ? retryAfter * 1000 : 0),
      );
      log.warn({ status: res.status, attempt: attempt + 1, url }, `the control plane answered ${res.status}`);
      if (attempt + 1 < c.maxAttempts) await wait(delay);
      continue;
    }
    if (res.status !== 200) {
      log.error(
        { status: res.status, code: errorCode(text), url },
        `the control plane refused the bootstrap (HTTP ${res.status})`,
      );
      return EXIT.failed;
    }
    const parsed = parseAnswer(text);
    if (!parsed) {
      log.error({ url }, 'the control plane answered 200 without a runtime token');
      return EXIT.failed;
    }
    answer = parsed;
  }
  if (!answer) {
    log.error({ attempts: c.maxAttempts, url }, `no answer from the control plane after ${c.maxAttempts} attempts`);
    return EXIT.failed;
  }

  // 3. The credentials, then the bootstrap Secret.
  const values: Record<string, string | undefined> = {
    [CREDENTIAL_KEYS.token]: answer.runtimeToken,
    [CREDENTIAL_KEYS.tunnelUrl]: answer.tunnelUrl || c.tunnelUrl,
    [CREDENTIAL_KEYS.controlPlaneUrl]: answer.controlPlaneUrl || c.controlPlaneUrl,
    [CREDENTIAL_KEYS.publicKey]: answer.publicKey || c.publicKey,
  };
  const patch = {
    data: Object.fromEntries(
      Object.entries(values)
        .filter((e): e is [string, string] => typeof e[1] === 'string' && e[1] !== '')
        .map(([k, v]) => [k, Buffer.from(v, 'utf8').toString('base64')]),
    ),
  };
  const written = await kubeCall(`write Secret ${CREDENTIALS_SECRET}`, secretPath(CREDENTIALS_SECRET), {
    method: 'PATCH',
    body: patch,
    contentType: 'application/merge-patch+json',
  });
  if (!written || written.status !== 200) {
    log.error(
      { status: written?.status },
      `the runtime token was issued but could not be written to Secret ${CREDENTIALS_SECRET}; ` +
        'it cannot be issued again: remove the runtime, register it again and apply its new bundle',
    );
    return EXIT.failed;
  }
  log.info(
    { tenantId: answer.tenantId, runtimeId: answer.runtimeId, runtime: answer.name },
    `runtime credentials written to Secret ${CREDENTIALS_SECRET}`,
  );
  return deleteBootstrapSecret();
}

function parseAnswer(text: string): BootstrapAnswer | undefined {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return undefined;
  }
  const b = body as Partial<Record<keyof BootstrapAnswer, unknown>> | null;
  if (!b || typeof b.runtimeToken !== 'string' || b.runtimeToken === '') return undefined;
  const s = (v: unknown) => (typeof v === 'string' ? v : '');
  return {
    tenantId: s(b.tenantId),
    runtimeId: s(b.runtimeId),
    name: s(b.name),
    runtimeToken: b.runtimeToken,
    tunnelUrl: s(b.tunnelUrl),
    controlPlaneUrl: s(b.controlPlaneUrl),
    publicKey: s(b.publicKey),
  };
}

/** The stable error code of an error answer (docs/api.md's shape), if any. */
function errorCode(text: string): string | undefined {
  try {
    const b = JSON.parse(text) as { error?: { code?: unknown }; code?: unknown };
    const code = b.error?.code ?? b.code;
    return typeof code === 'string' ? code : undefined;
  } catch {
    return undefined;
  }
}
