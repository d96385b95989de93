/**
 * A TEST DOUBLE of a Git provider's pull-request API, on loopback: GitHub's REST v3 and
 * Gitea's/Forgejo's API v1 shapes (`/repos/{owner}/{repo}/pulls`, list, create, get, PATCH
 * state) and GitLab's merge requests (`/projects/{id}/merge_requests`), kept in memory. It is not
 * a provider: it checks the token and the request shapes the operator's client sends, answers as
 * those APIs document, and can be told to fail (`failNext`). A real Gitea runs in
 * test/e2e/gitea-pull-requests.test.ts (the client) and test/e2e/gitea-promotions.test.ts (the
 * operator's whole step); GitHub and GitLab run nowhere here (docs/testing.md, "Pull requests").
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface DoublePull {
  number: number;
  head: string;
  base: string;
  title: string;
  body: string;
  state: 'open' | 'closed';
  merged: boolean;
}

export interface RecordedRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  headers: IncomingMessage['headers'];
  body: unknown;
}

export interface ProviderDouble {
  /** The API base URL (`http://127.0.0.1:PORT/api/v1` for gitea, `/api/v4` for gitlab, `/` root for github). */
  apiUrl: string;
  pulls: DoublePull[];
  requests: RecordedRequest[];
  /** The next `count` requests (matching `method`, when given) answer `status` (0: the connection is dropped; -1: never answered). */
  failNext(status: number, count?: number, method?: string): void;
  /** The next create makes its pull request but never answers (a lost answer: the client times out, or its process dies). */
  holdNextCreate(): void;
  /** Merges pull request `number` (the provider's merge button). */
  merge(number: number): void;
  close(): Promise<void>;
}

export async function startProviderDouble(o: {
  kind: 'github' | 'gitea' | 'gitlab';
  owner: string;
  repo: string;
  token: string;
  /** The branches that exist (a create from another head is refused, as the providers do). */
  branches?: string[];
}): Promise<ProviderDouble> {
  const pulls: DoublePull[] = [];
  const requests: RecordedRequest[] = [];
  const failures: { status: number; method?: string }[] = [];
  let hold = false;
  let origin = '';
  const prefix = o.kind === 'gitea' ? '/api/v1' : o.kind === 'gitlab' ? '/api/v4' : '';
  const repoPath = `${prefix}/repos/${o.owner}/${o.repo}/pulls`;
  const projectPath = `${prefix}/projects/${encodeURIComponent(`${o.owner}/${o.repo}`)}/merge_requests`;
  const view = (p: DoublePull) =>
    o.kind === 'gitlab'
      ? {
          iid: p.number,
          web_url: `${origin}/${o.owner}/${o.repo}/-/merge_requests/${p.number}`,
          state: p.merged ? 'merged' : p.state === 'open' ? 'opened' : 'closed',
          source_branch: p.head,
          target_branch: p.base,
          title: p.title,
          description: p.body,
        }
      : {
          number: p.number,
          html_url: `${origin}/${o.owner}/${o.repo}/${o.kind === 'gitea' ? 'pulls' : 'pull'}/${p.number}`,
          state: p.state,
          merged: p.merged,
          merged_at: p.merged ? new Date().toISOString() : null,
          head: { ref: p.head },
          base: { ref: p.base },
          title: p.title,
          body: p.body,
        };
  const authorized = (h: IncomingMessage['headers']) =>
    o.kind === 'github'
      ? h.authorization === `Bearer ${o.token}`
      : o.kind === 'gitea'
        ? h.authorization === `token ${o.token}`
        : h['private-token'] === o.token;

  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const u = new URL(req.url ?? '/', 'http://x');
      const raw = Buffer.concat(chunks).toString('utf8');
      let body: unknown;
      try {
        body = raw ? (JSON.parse(raw) as unknown) : undefined;
      } catch {
        body = raw;
      }
      requests.push({ method: req.method ?? '', path: u.pathname, query: u.searchParams, headers: req.headers, body });
      const send = (status: number, value: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(value));
      };
      const fi = failures.findIndex((f) => !f.method || f.method === req.method);
      if (fi >= 0) {
        const f = failures.splice(fi, 1)[0]!;
        if (f.status === 0) return void req.socket.destroy();
        if (f.status === -1) return; // never answered: the client's timeout
        return send(f.status, { message: `the double answers ${f.status}` });
      }
      if (!authorized(req.headers))
        return send(401, o.kind === 'gitlab' ? { message: '401 Unauthorized' } : { message: 'Bad credentials' });
      const base = o.kind === 'gitlab' ? projectPath : repoPath;
      if (u.pathname !== base && !u.pathname.startsWith(`${base}/`)) return send(404, { message: 'Not Found' });
      const rest = u.pathname.slice(base.length);
      const b = (body ?? {}) as Record<string, unknown>;
      if (rest === '' && req.method === 'GET') {
        let list = pulls.filter((p) =>
          o.kind === 'gitlab'
            ? (u.searchParams.get('state') !== 'opened' || (p.state === 'open' && !p.merged)) &&
              (!u.searchParams.get('source_branch') || p.head === u.searchParams.get('source_branch')) &&
              (!u.searchParams.get('target_branch') || p.base === u.searchParams.get('target_branch'))
            : u.searchParams.get('state') !== 'open' || p.state === 'open',
        );
        // GitHub filters by head (owner:branch) and base; Gitea ignores both and pages.
        if (o.kind === 'github') {
          const head = u.searchParams.get('head');
          if (head) list = list.filter((p) => `${o.owner}:${p.head}` === head);
          const baseRef = u.searchParams.get('base');
          if (baseRef) list = list.filter((p) => p.base === baseRef);
        }
        const size = Number(u.searchParams.get(o.kind === 'gitea' ? 'limit' : 'per_page') ?? 30);
        const page = Number(u.searchParams.get('page') ?? 1);
        return send(200, list.slice((page - 1) * size, page * size).map(view));
      }
      if (rest === '' && req.method === 'POST') {
        const head = o.kind === 'gitlab' ? b.source_branch : b.head;
        const baseRef = o.kind === 'gitlab' ? b.target_branch : b.base;
        const title = b.title;
        const text = o.kind === 'gitlab' ? b.description : b.body;
        if (typeof head !== 'string' || typeof baseRef !== 'string' || typeof title !== 'string' || !title)
          return send(422, {
            message: 'Validation Failed',
            errors: [{ message: 'head, base and title are required' }],
          });
        if (o.branches && !o.branches.includes(head))
          return send(o.kind === 'github' ? 422 : 404, {
            message: o.kind === 'github' ? 'Validation Failed' : "The target couldn't be found.",
            errors: [{ message: `head ${head} does not exist` }],
          });
        if (pulls.some((p) => p.head === head && p.base === baseRef && p.state === 'open' && !p.merged))
          return send(o.kind === 'github' ? 422 : 409, {
            message: o.kind === 'github' ? 'Validation Failed' : 'pull request already exists for these targets',
            ...(o.kind === 'github'
              ? { errors: [{ message: `A pull request already exists for ${o.owner}:${head}.` }] }
              : {}),
          });
        const p: DoublePull = {
          number: pulls.length + 1,
          head,
          base: baseRef,
          title,
          body: typeof text === 'string' ? text : '',
          state: 'open',
          merged: false,
        };
        pulls.push(p);
        if (hold) {
          hold = false;
          return; // made, never answered
        }
        return send(201, view(p));
      }
      const m = /^\/(\d+)$/.exec(rest);
      const p = m ? pulls.find((x) => x.number === Number(m[1])) : undefined;
      if (!p) return send(404, { message: 'Not Found' });
      if (req.method === 'GET') return send(200, view(p));
      if ((o.kind !== 'gitlab' && req.method === 'PATCH') || (o.kind === 'gitlab' && req.method === 'PUT')) {
        if (o.kind === 'gitlab' ? b.state_event === 'close' : b.state === 'closed') p.state = 'closed';
        return send(200, view(p));
      }
      return send(405, { message: 'Method Not Allowed' });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    apiUrl: `${origin}${prefix}`,
    pulls,
    requests,
    failNext(status, count = 1, method) {
      for (let i = 0; i < count; i++) failures.push({ status, ...(method ? { method } : {}) });
    },
    holdNextCreate() {
      hold = true;
    },
    merge(number) {
      const p = pulls.find((x) => x.number === number);
      if (p) Object.assign(p, { merged: true, state: 'closed' });
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
