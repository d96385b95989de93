/**
 * `provisioner fleet` against the real API (no driver runs: the fleet upgrade stays where the
 * commands put it): plan, start, status, pause, resume, abort; `status --follow` on the progress
 * stream, through a TCP proxy the test cuts to drop the connection.
 */
import net from 'node:net';
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';
import { main } from '../../../provisioner/cli/main.ts';
import { cliAgainst } from '../../helpers/cli.ts';
import { parseWaves } from '../../../provisioner/cli/fleet-commands.ts';
import { insertCluster } from '../../../provisioner/store/clusters.ts';
import { until } from '../../../sandbox/until.ts';
import { markReconciled } from '../../helpers/tenants.ts';
import { fleetEventsOf } from '../../helpers/fleet.ts';

const api = await createTestApi();
const url = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

const cli = cliAgainst(url, api.operatorKey);

await insertCluster(api.db.pool, {
  name: 'cli-root',
  region: 'eu-1',
  labels: {},
  capacity: 10,
  plans: [],
  kubeconfigEnc: api.services.box.encrypt('x', 'cluster/cli-root'),
});
async function ready(version: string, suspended = false): Promise<string> {
  const { tenantId } = await api.signup({ runtimeVersion: version });
  await markReconciled(api.db.pool, tenantId, {
    phase: suspended ? 'Suspended' : 'Ready',
    suspended,
    cluster: 'cli-root',
  });
  return tenantId;
}

t.test('--waves takes counts and cumulative percentages', async (t) => {
  t.same(
    parseWaves('1,5%,25%,100%'),
    [{ count: 1 }, { percent: 5 }, { percent: 25 }, { percent: 100 }],
    'counts and percentages',
  );
});

t.test('fleet plan, start, status, pause, resume, abort', async (t) => {
  const a = await ready('1.3.0');
  const b = await ready('1.4.1');
  const s = await ready('1.4.1', true);
  const plan = await cli(['fleet', 'plan', '1.5.0', '--tenants', `${a},${b},${s}`, '--waves', '1,100%']);
  t.equal(plan.code, 0, `plan exits 0 (${plan.err})`);
  t.match(plan.out, /1\.4\.1 -> 1\.5\.0/, 'the plan shows the multi-hop path');
  t.match(plan.out, /waves: canary 1, wave 1 1/, 'the plan shows the waves');
  t.match(
    plan.out,
    new RegExp(`not upgradeable \\(1\\):[\\s\\S]*${s}[\\s\\S]*suspended`),
    'the plan lists the suspended tenant with why',
  );
  const none = await cli(['fleet', 'plan', '1.5.0']);
  t.equal(none.code, 1, 'a plan without a selector is a usage error');
  t.match(none.err, /--all, or --from-version/, 'which names the selector options');

  const start = await cli(['fleet', 'start', '1.5.0', '--tenants', `${a},${b}`, '--waves', '1,100%']);
  t.equal(start.code, 0, `start exits 0 (${start.err})`);
  const id = /started fleet upgrade (\S+)/.exec(start.out)?.[1];
  t.ok(id, 'start prints the fleet upgrade id');
  const status = await cli(['fleet', 'status', id!]);
  t.match(status.out, /to 1\.5\.0: running/, 'status shows the state');
  t.match(status.out, /canary\s+\[\.{20}\] 0\/1 done, 0 running\s+pending/, 'status has a progress bar per wave');
  t.match(
    (await cli(['fleet', 'status'])).out,
    new RegExp(`${id}\\s+1\\.5\\.0\\s+running`),
    'status without id lists fleet upgrades',
  );
  t.match(
    (await cli(['fleet', 'pause', id!, '--reason', 'night'])).out,
    /paused \(night\)/,
    'pause prints the paused state and reason',
  );
  t.match((await cli(['fleet', 'resume', id!])).out, /: running/, 'resume prints the running state');
  const upgrade = await cli(['tenants', 'upgrade', b, '1.5.0']);
  t.equal(upgrade.code, 1, 'an individual upgrade of a held tenant fails');
  t.match(upgrade.err, new RegExp(`TENANT_IN_FLEET_UPGRADE: .*${id}`), 'naming the fleet upgrade');
  const abort = await cli(['fleet', 'abort', id!, '--rollback']);
  t.match(abort.out, /: aborted/, 'abort prints the aborted state');
  const follow = await cli(['fleet', 'status', id!, '--follow']);
  t.equal(follow.code, 1, 'status --follow of an aborted fleet upgrade exits 1');
  t.match(follow.err, /is aborted/, 'saying it was aborted');
});

t.test('tenants set-windows, fleet start --override-windows and fleet override-windows', async (t) => {
  const a = await ready('1.4.1');
  const b = await ready('1.4.1');
  const set = await cli([
    'tenants',
    'set-windows',
    a,
    '--window',
    'FREQ=WEEKLY;BYDAY=SA;BYHOUR=2 Europe/Berlin 240',
    '--window',
    'FREQ=DAILY;BYHOUR=3 America/New_York 60 2026-01-01T03:00',
  ]);
  t.equal(set.code, 0, `set-windows exits 0 (${set.err})`);
  t.match(set.out, /2 maintenance windows set/, 'it says what it set');
  const got = await cli(['tenants', 'get', a]);
  t.match(
    got.out,
    /windows: +FREQ=WEEKLY;BYDAY=SA;BYHOUR=2 Europe\/Berlin 240 min; FREQ=DAILY;BYHOUR=3 America\/New_York 60 min from 2026-01-01T03:00/,
    'tenants get shows the windows',
  );
  const bad = await cli(['tenants', 'set-windows', a, '--window', 'FREQ=DAILY Mars/Base 60']);
  t.equal(bad.code, 1, 'an unknown zone fails');
  t.match(bad.err, /maintenanceWindows\.0\.timeZone|not a known IANA time zone/, 'naming the zone');
  t.equal(
    (await cli(['tenants', 'set-windows', a, '--window', 'FREQ=DAILY'])).code,
    1,
    'a window without zone and minutes is a usage error',
  );

  const start = await cli([
    'fleet',
    'start',
    '1.5.0',
    '--tenants',
    `${a},${b}`,
    '--waves',
    '2',
    '--freeze',
    '2027-12-24T00:00:00Z/2027-12-27T00:00:00Z',
    '--override-windows',
    'CVE-2026-1234',
  ]);
  t.equal(start.code, 0, `start with --override-windows exits 0 (${start.err})`);
  const id = /started fleet upgrade (\S+)/.exec(start.out)?.[1];
  const status = await cli(['fleet', 'status', id!]);
  t.match(
    status.out,
    /maintenance windows overridden by .*: CVE-2026-1234/,
    'status shows the override and its reason',
  );
  const again = await cli(['fleet', 'override-windows', id!, '--reason', 'still the CVE']);
  t.equal(again.code, 0, `override-windows exits 0 (${again.err})`);
  t.match(again.out, /overridden by .*: still the CVE/, 'the override answers the fleet upgrade with the new reason');
  t.equal((await cli(['fleet', 'override-windows', id!])).code, 1, 'override-windows without --reason fails');
  t.equal((await cli(['fleet', 'abort', id!])).code, 0, 'abort');
  t.equal((await cli(['tenants', 'set-windows', a, '--clear'])).code, 0, 'set-windows --clear');
});

/** A TCP proxy in front of the API: `cut()` drops every connection and refuses new ones until `restore()`. */
async function proxy(target: string) {
  const { hostname, port } = new URL(target);
  const sockets = new Set<net.Socket>();
  const requests: string[] = [];
  let down = false;
  const server = net.createServer((client) => {
    if (down) return void client.destroy();
    const upstream = net.connect(Number(port), hostname);
    sockets.add(client).add(upstream);
    client.on('data', (d: Buffer) => requests.push(d.toString('latin1')));
    client.pipe(upstream);
    upstream.pipe(client);
    const close = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    for (const s of [client, upstream]) s.on('error', close).on('close', close);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    /** The requests' bytes, as the CLI sent them. */
    requests,
    cut(): void {
      down = true;
      for (const s of sockets) s.destroy();
    },
    restore(): void {
      down = false;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

t.test('fleet status --follow reads the progress stream and resumes after a dropped connection', async (t) => {
  const a = await ready('1.4.1');
  const b = await ready('1.4.1');
  const start = await cli(['fleet', 'start', '1.5.0', '--tenants', `${a},${b}`, '--waves', '1,100%']);
  t.equal(start.code, 0, `start exits 0 (${start.err})`);
  const id = /started fleet upgrade (\S+)/.exec(start.out)![1]!;
  const p = await proxy(url);
  t.teardown(() => p.close());

  const out: string[] = [];
  const err: string[] = [];
  const text = () => out.join('\n');
  const following = main(['--url', p.url, '--token', api.operatorKey, 'fleet', 'status', id, '--follow'], {
    out: (s) => out.push(s),
    err: (s) => err.push(s),
    env: {},
  });
  let ended = false;
  void following.finally(() => (ended = true));
  const count = (re: RegExp) => (text().match(new RegExp(re.source, `g${re.flags}`)) ?? []).length;

  await until('the first drawing', 10_000, () => /to 1\.5\.0: running/.test(text()));
  t.match(text(), /canary\s+\[\.{20}\] 0\/1 done/, 'the first drawing has a progress bar per wave');
  // The drawing comes from the fleet upgrade's state; the decisions follow as the stream replays them.
  await until('the start decision (the stream replays from the first event)', 10_000, () => / start\b/.test(text()));
  t.notOk(
    p.requests.some((r) => /GET \/v1\/fleet-upgrades\/[^/ ]+ HTTP/.test(r)),
    'the fleet upgrade is not polled: only its events are read',
  );

  t.equal((await cli(['fleet', 'pause', id, '--reason', 'night'])).code, 0, 'pause');
  await until('the pause', 10_000, () => /: paused \(night\)/.test(text()));
  // The state drawing and the decision's line come as two stream events, in either order.
  await until('the pause decision shown as it happens', 10_000, () => /Z pause$/m.test(text()));

  // The connection drops; while it is down the fleet upgrade goes on: those decisions must still be shown.
  p.cut();
  await until('the CLI to notice the drop', 10_000, () => err.some((e) => /interrupted/.test(e)));
  t.equal((await cli(['fleet', 'resume', id])).code, 0, 'resume while the follower is cut off');
  t.equal(
    (await cli(['fleet', 'override-windows', id, '--reason', 'CVE-2026-1234'])).code,
    0,
    'override the windows while it is cut off',
  );
  t.notOk(ended, 'the follower keeps trying while the connection is down');
  p.restore();
  await until('the decisions made meanwhile', 10_000, () => / override_windows: CVE-2026-1234/.test(text()));
  t.match(text(), / resume\b/, 'the resume made while disconnected is shown after the reconnect');
  const pauseSeq = String((await fleetEventsOf(api.db.pool, id, { action: 'pause' }))[0]!.seq);
  const streams = p.requests.filter((r) => /\/events HTTP/.test(r));
  t.ok(streams.length >= 2, 'the CLI opened the stream again after the drop');
  t.notMatch(streams[0]!, /last-event-id/i, 'the first connection starts from the beginning');
  t.ok(
    streams.slice(1).every((r) => new RegExp(`last-event-id: ${pauseSeq}\r\n`, 'i').test(r)),
    `every reconnect resumes with Last-Event-ID ${pauseSeq}, the last event it saw (the pause)`,
  );
  t.equal(count(/ start\b/), 1, 'no event is shown twice after the reconnect (start)');
  t.equal(count(/Z pause$/m), 1, 'no event is shown twice after the reconnect (pause)');
  await until('the redraw', 10_000, () => /maintenance windows overridden by .*: CVE-2026-1234/.test(text()));

  t.equal((await cli(['fleet', 'abort', id])).code, 0, 'abort');
  const code = await following;
  t.equal(code, 1, '--follow exits 1 once the fleet upgrade is aborted');
  t.match(err.join('\n'), new RegExp(`fleet upgrade ${id} is aborted`), 'saying it was aborted');
  t.match(text(), / abort\b[\s\S]* aborted\b/, 'the abort and the end are shown');
});

t.test('fleet list lists the fleet upgrades; fleet status without an id still does', async (t) => {
  const a = await ready('1.4.1');
  const start = await cli(['fleet', 'start', '1.5.0', '--tenants', a]);
  t.equal(start.code, 0, `start exits 0 (${start.err})`);
  const id = /started fleet upgrade (\S+)/.exec(start.out)?.[1];
  const list = await cli(['fleet', 'list']);
  t.equal(list.code, 0, `fleet list exits 0 (${list.err})`);
  t.match(list.out, /^ID\s+TARGET\s+STATE\s+WAVE/, 'fleet list prints the table header');
  t.match(list.out, new RegExp(`${id}\\s+1\\.5\\.0\\s+running`), 'and the fleet upgrade just started');
  // Less the AGE column: a second may tick between the two calls.
  const withoutAge = (table: string) => table.replace(/\s+\S+$/gm, '');
  t.equal(
    withoutAge((await cli(['fleet', 'status'])).out),
    withoutAge(list.out),
    '`fleet status` without an id prints the same list',
  );
  const json = JSON.parse((await cli(['--json', 'fleet', 'list'])).out) as { items: Array<{ id: string }> };
  t.ok(
    json.items.some((f) => f.id === id),
    '--json fleet list prints the API items',
  );
  t.equal((await cli(['fleet', 'abort', id!])).code, 0, 'abort it (it holds its tenant)');
});

t.test('fleet plan and start with nothing to upgrade say so and exit 4', async (t) => {
  const suspended = await ready('1.4.1', true);
  const current = await ready('1.5.0');
  const plan = await cli(['fleet', 'plan', '1.5.0', '--tenants', `${suspended},${current}`]);
  t.equal(plan.code, 4, `a plan that upgrades no tenant exits 4 (${plan.err})`);
  t.match(
    plan.out,
    /nothing to do: none of the 2 selected tenants can be upgraded to 1\.5\.0/,
    'with a line that says nothing would be upgraded',
  );
  t.match(plan.out, new RegExp(`not upgradeable \\(2\\):[\\s\\S]*${suspended}\\s[\\s\\S]*suspended`), 'and why');
  t.notMatch(plan.out, /^TENANT\s+ORGANIZATION\s+FROM/m, 'no empty table of upgradeable tenants');
  t.notMatch(plan.out, /^waves:/m, 'and no waves');
  const json = await cli(['--json', 'fleet', 'plan', '1.5.0', '--tenants', `${suspended},${current}`]);
  t.equal(json.code, 4, '--json: exit 4 as well');
  t.equal(
    (JSON.parse(json.out) as { counts: { upgradeable: number } }).counts.upgradeable,
    0,
    '--json: stdout is the plan alone, 0 upgradeable',
  );
  t.match(json.err, /nothing to do: none of the 2 selected tenants/, '--json: the line goes to stderr');
  const start = await cli(['fleet', 'start', '1.5.0', '--tenants', `${suspended},${current}`]);
  t.equal(start.code, 4, 'start with nothing to upgrade exits 4');
  t.match(start.err, /NOTHING_TO_UPGRADE/, "with the API's code");
});
