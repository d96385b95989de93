/**
 * The shared list+watch (runtime/kube/reflector.ts) against an API server on loopback that fails
 * for a while: what an operator sees in the log (one warning for a run of failures, not one per
 * retry; one line when it is back) and that the list goes through once the server answers.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { KubeConfig } from '@kubernetes/client-node';
import { pino } from 'pino';
import t from 'tap';
import { Reflector, type WatchSink } from '../../../runtime/kube/reflector.ts';

void t.test(
  'an API server failing 5 lists in a row: one warning, retries at debug, one line when it answers',
  async (t) => {
    let lists = 0;
    const failFirst = 5;
    const server = createServer((req, res) => {
      const u = new URL(req.url ?? '/', 'http://x');
      if (u.searchParams.get('watch') === 'true') {
        res.writeHead(200, { 'content-type': 'application/json' });
        return; // held open until the test stops the reflector
      }
      lists += 1;
      if (lists <= failFirst) {
        res.writeHead(503, { 'content-type': 'application/json' }).end('{"kind":"Status","code":503}');
        return;
      }
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ metadata: { resourceVersion: '7' }, items: [{ metadata: { name: 'a' } }] }));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    t.teardown(() => {
      server.closeAllConnections();
      server.close();
    });
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [
        { name: 'c', server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, skipTLSVerify: true },
      ],
      users: [{ name: 'u', token: 'test-token' }],
      contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
      currentContext: 'x',
    });

    const lines: Array<{ level: number; msg: string; failures?: number }> = [];
    const log = pino(
      { level: 'debug' },
      new Writable({
        write(chunk: Buffer, _enc, cb) {
          lines.push(JSON.parse(chunk.toString()) as (typeof lines)[number]);
          cb();
        },
      }),
    );
    let relisted: { items: number; resourceVersion: string } | undefined;
    let listedResolve: () => void = () => {};
    const listed = new Promise<void>((r) => (listedResolve = r));
    const sink: WatchSink = {
      upsert: () => true,
      remove: () => true,
      relisted: async (_k, items, resourceVersion) => {
        relisted = { items: items.length, resourceVersion };
        listedResolve();
      },
      advanced: () => {},
      reconnected: () => {},
      availability: () => {},
      waitForRoom: () => Promise.resolve(),
      onRestart: () => {},
    };
    const r = new Reflector({ kind: 'Namespace', kc, sink, log, path: '/api/v1/namespaces', maxBackoffMs: 20 });
    r.start();
    // The event itself (stopped at once, before the watch that follows opens); tap's timeout bounds it.
    await listed;
    await r.stop();

    t.same(relisted, { items: 1, resourceVersion: '7' }, 'the list that went through reached the sink');
    const failed = lines.filter((l) => l.msg === 'watch failed; reconnecting');
    t.equal(failed.length, failFirst, `every failed list is logged (${failed.length})`);
    t.equal(failed.filter((l) => l.level === 40).length, 1, 'only the first failure of the run is a warning');
    t.equal(failed.filter((l) => l.level === 20).length, failFirst - 1, 'the retries after it are debug lines');
    const back = lines.filter((l) => l.msg === 'listed again after failures');
    t.equal(back.length, 1, 'one line says the API server answers again');
    t.equal(back[0]?.failures, failFirst, 'and how many tries failed before');
  },
);
