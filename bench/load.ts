/**
 * The load generator of bench/api.bench.ts, run as a child process (as fastify's own benchmarks
 * do) so that autocannon and the server under test do not share one event loop. The parent sends
 * one `LoadRequest` over IPC; this process runs autocannon and answers with a `LoadResult`, then
 * exits. Not a benchmark of its own (scripts/bench.sh only runs bench/*.bench.ts).
 */
import autocannon from 'autocannon';

export interface LoadRequest {
  url: string;
  connections: number;
  duration: number;
  method?: 'GET' | 'POST';
  headers?: Record<string, string>;
  /** Requests take these paths and authorization headers in turn (one tenant after another), instead of `url`'s path. */
  rotate?: { path: string; authorization: string }[];
  /** POST bodies `{"organization":"<prefix>-<n>","email":"x@y.io"}`, n counting up: one new signup per request. */
  signupPrefix?: string;
}

export interface LoadResult {
  rps: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  total: number;
  failed: number;
}

process.once('message', (req: LoadRequest) => {
  let n = 0;
  const signupPrefix = req.signupPrefix;
  const rotate = req.rotate;
  const opts: autocannon.Options = {
    url: req.url,
    connections: req.connections,
    duration: req.duration,
    method: req.method ?? 'GET',
    headers: req.headers ?? {},
    ...(signupPrefix === undefined
      ? {}
      : {
          requests: [
            {
              setupRequest: (r) => ({
                ...r,
                body: JSON.stringify({ organization: `${signupPrefix}-${++n}`, email: 'x@y.io' }),
              }),
            },
          ],
        }),
    ...(rotate === undefined
      ? {}
      : {
          requests: [
            {
              setupRequest: (r) => {
                const next = rotate[n++ % rotate.length]!;
                return { ...r, path: next.path, headers: { ...r.headers, authorization: next.authorization } };
              },
            },
          ],
        }),
  };
  autocannon(opts).then(
    (r) => {
      const result: LoadResult = {
        rps: r.requests.average,
        p50: r.latency.p50,
        p90: r.latency.p90,
        p99: r.latency.p99,
        max: r.latency.max,
        total: r.requests.total,
        failed: r.non2xx + r.errors + r.timeouts,
      };
      process.send!(result, () => process.exit(0));
    },
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
});
