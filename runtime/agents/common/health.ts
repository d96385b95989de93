/**
 * The agents' health endpoints, one way for every agent: `GET /healthz` (the process runs and
 * answers: 200 `{"status":"ok"}`, what the liveness probe asks) and `GET /readyz` (what the
 * readiness probe asks): 200 while each of the agent's loops (runtime/loops/periodic.ts) ran a
 * round lately and its last round did not fail, and each of the agent's own checks (the tunnel is
 * connected, the watches listed, …) says ready; otherwise 503 naming the loop that is stale or
 * failing, or the check, in `notReady`. The answer is JSON: `ready`, `notReady`, each loop's
 * rounds and times (no error text: the agent logs its failures), and the fields the checks add.
 * HEAD is answered as GET without a body.
 *
 * An agent with a server of its own (the event reporter's /metrics, the request router) calls
 * `handle(req, res)` first in its handler, one on a framework (the Source Server's fastify) routes
 * to `answer(path)`; the others serve `healthServer(health)` on their port.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { LoopStatus } from '../../loops/health.ts';

/** A loop whose rounds /readyz watches. */
export interface WatchedLoop {
  /** The loop (a PeriodicLoop or any Runnable): its status is read on each /readyz. */
  loop: { readonly name: string; status(): LoopStatus };
  /**
   * No round ended for longer than this (ms, read each time: its interval, the longest a round
   * may take, a margin) and the loop is stale: its round hangs or it no longer runs rounds.
   */
  staleAfterMs: () => number;
  /** Failed rounds in a row before the loop counts as failing (default 1: the last round must have succeeded). */
  failingAfter?: number;
  /**
   * Ready before its first round: a loop whose first round comes late on purpose (the event
   * reporter's digests); stale only once a round ended and the next did not. Default: not ready
   * until the first round succeeded.
   */
  readyBeforeFirstRound?: boolean;
}

/** What one of the agent's own checks says now. */
export interface CheckAnswer {
  ready: boolean;
  /** Why not ready (shown in `notReady` after the check's name). */
  reason?: string;
  /** Fields added to the /readyz answer (the agent's own: a tunnel's state, the kinds listed, …). */
  fields?: Record<string, unknown>;
}

export interface AgentCheck {
  name: string;
  read: () => CheckAnswer;
}

export interface AgentHealthOptions {
  loops?: readonly WatchedLoop[];
  checks?: readonly AgentCheck[];
  /** The clock (default Date.now). */
  now?: () => number;
}

/** A loop as /readyz shows it. */
export interface LoopReadiness {
  name: string;
  ready: boolean;
  reason?: string;
  state: LoopStatus['state'];
  rounds: number;
  failures: number;
  consecutiveFailures: number;
  lastRoundAt: string | null;
  lastSuccessAt: string | null;
}

/** The /readyz answer: the checks' fields, then these. */
export interface Readiness {
  ready: boolean;
  /** What is not ready, each naming its loop or check (`loop upgrader: stale, …`). */
  notReady: string[];
  loops: LoopReadiness[];
  [field: string]: unknown;
}

const seconds = (ms: number): string => `${ms < 10_000 ? (ms / 1000).toFixed(1) : Math.round(ms / 1000)} s`;

/** Why a loop is not ready (undefined: it is). */
function loopProblem(w: WatchedLoop, now: number): { s: LoopStatus; reason: string | undefined } {
  const s = w.loop.status();
  if (s.state === 'disabled') return { s, reason: undefined };
  if (s.state !== 'running') return { s, reason: `not running (${s.state})` };
  if (s.consecutiveFailures >= (w.failingAfter ?? 1))
    return {
      s,
      reason: `failing: ${s.consecutiveFailures} round${s.consecutiveFailures === 1 ? '' : 's'} in a row failed`,
    };
  const limit = w.staleAfterMs();
  if (s.lastRoundAt === undefined) return { s, reason: w.readyBeforeFirstRound ? undefined : 'no round ended yet' };
  const age = now - s.lastRoundAt.getTime();
  if (age > limit)
    return { s, reason: `stale: no round ended for ${seconds(age)} (expected within ${seconds(limit)})` };
  return { s, reason: undefined };
}

export class AgentHealth {
  readonly #loops: WatchedLoop[];
  readonly #checks: AgentCheck[];
  readonly #now: () => number;

  constructor(o: AgentHealthOptions = {}) {
    this.#loops = [...(o.loops ?? [])];
    this.#checks = [...(o.checks ?? [])];
    this.#now = o.now ?? Date.now;
  }

  /** What /readyz answers (its status: 200 when `ready`, else 503). */
  readiness(): Readiness {
    const now = this.#now();
    const notReady: string[] = [];
    const fields: Record<string, unknown> = {};
    const loops = this.#loops.map((w): LoopReadiness => {
      const { s, reason } = loopProblem(w, now);
      if (reason !== undefined) notReady.push(`loop ${s.name}: ${reason}`);
      return {
        name: s.name,
        ready: reason === undefined,
        ...(reason !== undefined ? { reason } : {}),
        state: s.state,
        rounds: s.rounds,
        failures: s.failures,
        consecutiveFailures: s.consecutiveFailures,
        lastRoundAt: s.lastRoundAt?.toISOString() ?? null,
        lastSuccessAt: s.lastSuccessAt?.toISOString() ?? null,
      };
    });
    for (const c of this.#checks) {
      let answer: CheckAnswer;
      try {
        answer = c.read();
      } catch (err) {
        answer = { ready: false, reason: `the check failed: ${err instanceof Error ? err.message : String(err)}` };
      }
      Object.assign(fields, answer.fields);
      if (!answer.ready) notReady.push(`${c.name}: ${answer.reason ?? 'not ready'}`);
    }
    return { ...fields, ready: notReady.length === 0, notReady, loops };
  }

  /** The answer to GET `/healthz` or `/readyz`: its status and JSON body (for an agent on a framework of its own). */
  answer(path: '/healthz' | '/readyz'): { status: 200 | 503; body: Readiness | { status: 'ok' } } {
    if (path === '/healthz') return { status: 200, body: { status: 'ok' } };
    const ready = this.readiness();
    return { status: ready.ready ? 200 : 503, body: ready };
  }

  /** Answers GET/HEAD /healthz and /readyz (the query ignored); false for any other request. */
  handle(req: IncomingMessage, res: ServerResponse): boolean {
    const path = (req.url ?? '/').split('?', 1)[0];
    if ((path !== '/healthz' && path !== '/readyz') || (req.method !== 'GET' && req.method !== 'HEAD')) return false;
    const { status, body } = this.answer(path);
    const text = JSON.stringify(body) + '\n';
    res.writeHead(status, {
      'content-type': 'application/json',
      'cache-control': 'no-store',
      'content-length': Buffer.byteLength(text),
    });
    res.end(req.method === 'HEAD' ? undefined : text);
    return true;
  }
}

/** A server of the health endpoints alone (404 for anything else). */
export function healthServer(health: AgentHealth): Server {
  return createServer((req, res) => {
    if (health.handle(req, res)) return;
    req.resume();
    res
      .writeHead(404, { 'content-type': 'application/json' })
      .end(
        JSON.stringify({ error: { code: 'ROUTE_NOT_FOUND', message: 'this port serves GET /healthz and /readyz' } }) +
          '\n',
      );
  });
}
