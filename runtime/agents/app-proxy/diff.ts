/**
 * `GET /api/applications/:namespace/:name/diff[?revision=R]`: an Application's diff, asked of the
 * runtime's Source Server (runtime/protocol/sources.ts `ApplicationDiff`) and answered as it gave
 * it, under the app-proxy's request-token check like every other route. With `revision`: what that
 * commit changed in the manifests Argo CD generates; without: Git against the cluster.
 *
 * The Source Server's status and JSON pass through (its 404 for an unknown Application, its 4xx
 * for a bad revision, its 503 when Argo CD cannot be reached). Answers of the app-proxy itself:
 *  - 400 VALIDATION_FAILED for a namespace, name or revision that cannot be one;
 *  - 404 SOURCE_SERVER_NOT_INSTALLED when the runtime has no Source Server (SOURCE_SERVER_URL
 *    unset: hosted runtimes have one from version 1.7.0, hybrid runtimes not yet);
 *  - 503 SOURCE_SERVER_UNAVAILABLE with Retry-After when it cannot be reached or does not answer
 *    in time;
 *  - 502 SOURCE_SERVER_BAD_ANSWER when its answer is not JSON or larger than MAX_DIFF_BYTES allows.
 */
import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import { MAX_DIFF_BYTES, SOURCE_SERVER_PATH_PREFIX } from '../../protocol/sources.ts';
import { checkTarget, InvalidInput } from './actions.ts';

/** The first hosted runtime version with a Source Server (runtime/component/agents.ts SOURCE_SERVER_AGENT). */
export const SOURCE_SERVER_SINCE = '1.7.0';
/** Seconds a caller waits before asking again when the Source Server cannot be reached. */
export const SOURCE_SERVER_RETRY_AFTER_SECONDS = 5;
/** A git revision, tag or branch: printable ASCII without spaces (as actions.ts takes for a sync). */
const REVISION = /^[\x21-\x7e]{1,256}$/;
/** Room above MAX_DIFF_BYTES for the answer's envelope and JSON's escaping. */
const ANSWER_LIMIT = MAX_DIFF_BYTES + 64 * 1024;

export interface DiffRoutesOptions {
  /** SOURCE_SERVER_URL; undefined when the runtime has no Source Server. */
  sourceServerUrl: string | undefined;
  /** Longest wait for the Source Server's answer (default 60 s: a diff asks Argo CD for two sets of manifests). */
  timeoutMs?: number;
}

type Params = { namespace: string; name: string };
type Query = { revision?: string };

function send(
  reply: FastifyReply,
  status: number,
  error: { code: string; message: string; field?: string },
): FastifyReply {
  return reply.code(status).send({ error });
}

/** The body as text, or undefined once it passed `limit` bytes (the rest is not read). */
async function readLimited(res: Response, limit: number): Promise<string | undefined> {
  if (!res.body) return '';
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    bytes += value.byteLength;
    if (bytes > limit) {
      await reader.cancel().catch(() => undefined);
      return undefined;
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

export const diffRoutes: FastifyPluginAsync<DiffRoutesOptions> = async (app, opts) => {
  const base = opts.sourceServerUrl?.replace(/\/+$/, '');
  const timeoutMs = opts.timeoutMs ?? 60_000;
  app.get<{ Params: Params; Querystring: Query }>('/api/applications/:namespace/:name/diff', async (request, reply) => {
    const { namespace, name } = request.params;
    const query = request.query as Record<string, unknown>;
    try {
      checkTarget(namespace, name);
      for (const key of Object.keys(query))
        if (key !== 'revision')
          throw new InvalidInput(key, `'${key}' is not a parameter of the diff; it takes 'revision' only`);
      const revision = query.revision;
      if (revision !== undefined && (typeof revision !== 'string' || !REVISION.test(revision)))
        throw new InvalidInput(
          'revision',
          "'revision' must be a git revision, tag or branch (1 to 256 characters, no spaces)",
        );
    } catch (err) {
      if (err instanceof InvalidInput)
        return send(reply, 400, { code: 'VALIDATION_FAILED', message: err.message, field: err.field });
      throw err;
    }
    if (base === undefined)
      return send(reply, 404, {
        code: 'SOURCE_SERVER_NOT_INSTALLED',
        message: `this runtime has no Source Server, which answers diffs: hosted runtimes have it from runtime version ${SOURCE_SERVER_SINCE}; upgrade the runtime to ${SOURCE_SERVER_SINCE} or later`,
      });
    const revision = typeof query.revision === 'string' ? query.revision : undefined;
    const url =
      `${base}${SOURCE_SERVER_PATH_PREFIX}/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/diff` +
      (revision !== undefined ? `?${new URLSearchParams({ revision }).toString()}` : '');
    let res: Response;
    let text: string | undefined;
    try {
      res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs), headers: { accept: 'application/json' } });
      text = await readLimited(res, ANSWER_LIMIT);
    } catch (err) {
      request.log.warn({ err: (err as Error).message, namespace, name }, 'the Source Server cannot be reached');
      reply.header('retry-after', String(SOURCE_SERVER_RETRY_AFTER_SECONDS));
      return send(reply, 503, {
        code: 'SOURCE_SERVER_UNAVAILABLE',
        message: `the runtime's Source Server cannot be reached right now; retry in ${SOURCE_SERVER_RETRY_AFTER_SECONDS} s`,
      });
    }
    let body: unknown;
    try {
      if (text === undefined) throw new Error(`larger than ${ANSWER_LIMIT} bytes`);
      body = JSON.parse(text);
    } catch (err) {
      request.log.error(
        { status: res.status, reason: (err as Error).message, namespace, name },
        'the Source Server gave an answer that cannot be passed on',
      );
      return send(reply, 502, {
        code: 'SOURCE_SERVER_BAD_ANSWER',
        message: "the runtime's Source Server answered the diff with something that is not a diff",
      });
    }
    const retryAfter = res.headers.get('retry-after');
    if (retryAfter !== null) reply.header('retry-after', retryAfter);
    return reply.code(res.status).type('application/json').send(body);
  });
};
