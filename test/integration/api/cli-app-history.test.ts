/**
 * `provisioner apps history` and `apps diff` against the real app on Postgres: the history the
 * runtime's reports made (POST /v1/runtime/events with `change`), and a diff fetched through a real
 * tunnel from a TEST DOUBLE of the runtime's app-proxy and Source Server (the e2e asks the real
 * ones); a tenant whose runtime has no tunnel gets "runtime unreachable" with the time to retry.
 */
import t from 'tap';
import http from 'node:http';
import { once } from 'node:events';
import { createTestApi } from '../../helpers/api.ts';
import { connectRuntime } from '../../helpers/runtime.ts';
import { changedApplication, imageDiff, sha } from '../../helpers/app-history.ts';
import { batch } from '../../helpers/events.ts';
import { main } from '../../../provisioner/cli/main.ts';
import { EVENTS_PATH, type EventBatch } from '../../../runtime/protocol/events.ts';
import type { ApplicationDiff } from '../../../runtime/protocol/sources.ts';

const api = await createTestApi();
const url = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

async function cli(
  args: string[],
  token: string,
): Promise<{ code: number; out: string; err: string; lines: string[] }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['--url', url, '--token', token, ...args], {
    out: (s) => out.push(s),
    err: (s) => err.push(s),
    env: {},
  });
  return { code, out: out.join('\n'), err: err.join('\n'), lines: out.join('\n').split('\n') };
}

const web = { namespace: 'argocd', name: 'web' };
const [c1, c2, c3] = [sha('c1'), sha('c2'), sha('c3')];

/** TEST DOUBLE of the runtime's app-proxy and Source Server: answers the diff route, records what it was asked. */
const asked: string[] = [];
const sourceServer = http.createServer((req, res) => {
  const u = new URL(req.url ?? '/', 'http://runtime');
  asked.push(`${u.pathname}${u.search}`);
  if (u.pathname !== '/api/applications/argocd/web/diff') {
    res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":{"code":"NOT_FOUND","message":"no"}}');
    return;
  }
  const revision = u.searchParams.get('revision');
  const body: ApplicationDiff = revision
    ? imageDiff(web, revision, c1, 'nginx:1.25', 'nginx:1.26')
    : imageDiff(web, c3, 'live', 'nginx:1.26', 'nginx:1.27');
  res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
});
sourceServer.listen(0, '127.0.0.1');
await once(sourceServer, 'listening');

const reachable = await api.signup();
const { client, runtimeKey } = await connectRuntime(api, url, reachable.tenantId, sourceServer, 'runtime');
const unreachable = await api.signup();
t.teardown(async () => {
  await client.close();
  sourceServer.close();
});

async function report(key: string, items: EventBatch['items']): Promise<void> {
  const res = await api.request('POST', EVENTS_PATH, { key, body: batch('reporter-0', items) });
  if (res.statusCode !== 200) throw new Error(`report: ${res.statusCode} ${res.body}`);
}

// Three changes of argocd/web, one report each: a replica change synced in 42 s, an image change
// synced, then a commit Argo CD cannot render.
await report(runtimeKey.key, [
  changedApplication('web', 10, {
    commit: c1,
    author: 'Ada <ada@example.com>',
    message: 'scale web to 2\n\nbody',
    sync: 'Succeeded',
  }),
]);
await report(runtimeKey.key, [
  changedApplication('web', 11, {
    commit: c2,
    previous: c1,
    author: 'Grace <grace@example.com>',
    message: 'web: nginx 1.26',
    image: { before: 'nginx:1.25', after: 'nginx:1.26' },
    sync: 'Succeeded',
  }),
]);
await report(runtimeKey.key, [
  changedApplication('web', 12, {
    commit: c3,
    previous: c2,
    author: 'Linus <linus@example.com>',
    message: 'broken kustomization',
    error: 'rpc error: kustomize build failed: missing resource deployment.yaml',
  }),
]);

t.test('apps history prints the changes newest first: commit, author, message, result, duration, images', async (t) => {
  const h = await cli(['apps', 'history', reachable.tenantId, 'argocd/web'], reachable.apiKey);
  t.equal(h.code, 0, `apps history exits 0 (${h.err})`);
  t.match(h.lines[0], /^WHEN\s+CHANGE\s+AUTHOR\s+MESSAGE\s+RESULT\s+DURATION\s+IMAGES$/, 'a table with its header');
  const rows = h.lines.slice(1, 4);
  t.match(
    rows[0],
    new RegExp(`${c3.slice(0, 7)}\\s+Linus <linus@example.com>\\s+broken kustomization\\s+failed`),
    'the newest change first: failed',
  );
  t.match(
    rows[1],
    new RegExp(
      `${c2.slice(0, 7)}\\s+Grace <grace@example.com>\\s+web: nginx 1.26\\s+succeeded\\s+42s\\s+web: nginx:1.25 → nginx:1.26$`,
    ),
    'the image change: succeeded in 42 s, with the image before → after',
  );
  t.match(
    rows[2],
    new RegExp(`${c1.slice(0, 7)}\\s+Ada <ada@example.com>\\s+scale web to 2\\s+succeeded`),
    "the oldest last, its message's first line only",
  );
  t.notMatch(h.out, /body/, "a message's body is not in the table");
  t.match(
    h.out,
    new RegExp(`^${c3.slice(0, 7)} failed: rpc error: kustomize build failed: missing resource deployment.yaml$`, 'm'),
    "a failed change's reason (Argo CD's message) is printed under the table",
  );

  const asJson = await cli(['--json', 'apps', 'history', reachable.tenantId, 'argocd/web'], reachable.apiKey);
  const page = JSON.parse(asJson.out) as {
    items: { changeRevision: string; result: string }[];
    nextCursor: string | null;
  };
  t.same(
    page.items.map((i) => [i.changeRevision, i.result]),
    [
      [c3, 'failed'],
      [c2, 'succeeded'],
      [c1, 'succeeded'],
    ],
    '--json prints the API answer: three entries, newest first',
  );

  const two = await cli(['apps', 'history', reachable.tenantId, 'argocd/web', '--limit', '2'], reachable.apiKey);
  t.equal(
    two.lines.filter((l) => /succeeded|failed|pending|running/.test(l) && !/ failed: /.test(l)).length,
    2,
    '--limit 2 shows two entries',
  );
  t.match(two.out, /older entries not shown: raise --limit/, 'and says that older ones exist');

  const byRuntime = await cli(
    ['apps', 'history', reachable.tenantId, 'argocd/web', '--runtime', 'hosted'],
    reachable.apiKey,
  );
  t.equal(byRuntime.out, h.out, '--runtime hosted reads the same history through the runtime-scoped route');
});

t.test('apps history refuses a malformed name and names an application never reported', async (t) => {
  const bad = await cli(['apps', 'history', reachable.tenantId, 'web'], reachable.apiKey);
  t.equal(bad.code, 1, 'a name without its namespace exits 1');
  t.match(bad.err, /<namespace>\/<name>, e\.g\. argocd\/guestbook \(got 'web'\)/, 'naming the form expected');
  const missing = await cli(['apps', 'history', reachable.tenantId, 'argocd/nope'], reachable.apiKey);
  t.equal(missing.code, 1, 'an application never reported exits 1');
  t.match(missing.err, /RUNTIME_OBJECT_NOT_FOUND/, "with the API's code");
  const foreign = await cli(['apps', 'history', reachable.tenantId, 'argocd/web'], unreachable.apiKey);
  t.equal(foreign.code, 1, "another tenant's key cannot read the history");
});

t.test('apps diff --revision prints a unified diff of the YAML per resource, fetched through the tunnel', async (t) => {
  asked.length = 0;
  const d = await cli(['apps', 'diff', reachable.tenantId, 'argocd/web', '--revision', c2], reachable.apiKey);
  t.equal(d.code, 0, `apps diff exits 0 (${d.err})`);
  t.same(
    asked,
    [`/api/applications/argocd/web/diff?revision=${c2}`],
    "the runtime's diff route was asked for that revision",
  );
  t.match(
    d.lines[0],
    `application argocd/web: ${c2.slice(0, 7)} against ${c1.slice(0, 7)}, 1 resource differ`,
    'a header names both sides',
  );
  t.match(d.out, /^~ Deployment\.apps default\/web \(modified\)$/m, 'the resource, its kind, group and action');
  t.match(d.out, /^ {2}fields: spec\.template\.spec\.containers\[name=web\]\.image$/m, 'the changed field');
  t.match(d.out, new RegExp(`^--- ${c1.slice(0, 7)}/default/web$`, 'm'), 'the before side named');
  t.match(d.out, new RegExp(`^\\+\\+\\+ ${c2.slice(0, 7)}/default/web$`, 'm'), 'the after side named');
  t.match(d.out, /^- {8}- image: nginx:1\.25$/m, 'the old image as a removed YAML line');
  t.match(d.out, /^\+ {8}- image: nginx:1\.26$/m, 'the new image as an added YAML line');
  t.equal(d.lines.filter((l) => /^[-+] /.test(l)).length, 2, 'and no other line changed');

  const live = await cli(['apps', 'diff', reachable.tenantId, 'argocd/web'], reachable.apiKey);
  t.equal(live.code, 0, live.err);
  t.equal(
    asked.at(-1),
    '/api/applications/argocd/web/diff',
    'without --revision no revision is asked: Git against the cluster',
  );
  t.match(
    live.lines[0],
    `application argocd/web: Git at ${c3.slice(0, 7)} against the live objects`,
    'the header says Git against the cluster',
  );
  t.match(live.out, /^--- live\/default\/web$/m, 'the live side first');

  const asJson = await cli(
    ['--json', 'apps', 'diff', reachable.tenantId, 'argocd/web', '--revision', c2],
    reachable.apiKey,
  );
  t.same(
    JSON.parse(asJson.out),
    imageDiff(web, c2, c1, 'nginx:1.25', 'nginx:1.26'),
    "--json prints the Source Server's answer as is",
  );
});

t.test('apps diff of a runtime without a tunnel: runtime unreachable, with when to retry', async (t) => {
  await report(
    (await api.client.call('POST /v1/keys', { body: { role: 'runtime', name: 'r', tenantId: unreachable.tenantId } }))
      .key,
    [changedApplication('web', 10, { commit: c1, author: 'Ada', message: 'first', sync: 'Succeeded' })],
  );
  const d = await cli(['apps', 'diff', unreachable.tenantId, 'argocd/web', '--revision', c1], unreachable.apiKey);
  t.equal(d.code, 1, 'exits 1');
  t.match(
    d.err,
    /^provisioner: RUNTIME_UNREACHABLE: runtime unreachable, retry in \d+ s: /,
    'says the runtime is unreachable and when to retry',
  );
  t.equal(d.out, '', 'nothing on stdout');
});
