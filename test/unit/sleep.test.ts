/**
 * Idle sleep's pure rules: the configuration of idle times per plan, the idle time as words, and
 * what RuntimeConnected says for a runtime just woken (Waking, not an alarm) and one that did not
 * come back within the grace (the alarm again).
 */
import t from 'tap';
import { loadConfig } from '../../provisioner/config.ts';
import { formatIdle, idlePlans } from '../../provisioner/sleep/service.ts';
import { RUNTIME_NOT_CONNECTED_REASONS, runtimeConnected } from '../../provisioner/tenant-api/tenant-view.ts';
import { WAKE_CONNECT_GRACE_SECONDS } from '../../provisioner/store/sleep.ts';

t.test('PROVISIONER_SLEEP_IDLE_SECONDS: plan=seconds pairs of known plans', async (t) => {
  t.same(loadConfig({}).sleep.idleSeconds, { free: 1800 }, 'free tenants after 30 minutes by default');
  t.same(loadConfig({ PROVISIONER_SLEEP_IDLE_SECONDS: 'free=600, team=14400' }).sleep.idleSeconds, {
    free: 600,
    team: 14400,
  });
  t.same(loadConfig({ PROVISIONER_SLEEP_IDLE_SECONDS: 'free=0' }).sleep.idleSeconds, { free: 0 }, '0: never');
  for (const [value, message] of [
    ['gold=60', /unknown plan 'gold' \(plans: free, team/],
    ['free', /'free' is not plan=seconds/],
    ['free=5', /free=5: at least 10 seconds, or 0 for never/],
    ['free=-1', /'free=-1' is not plan=seconds/],
  ] as const) {
    t.throws(() => loadConfig({ PROVISIONER_SLEEP_IDLE_SECONDS: value }), {
      message: new RegExp(`PROVISIONER_SLEEP_IDLE_SECONDS.*${message.source}`),
    });
  }
  t.throws(() => loadConfig({ PROVISIONER_WAKE_WAIT_SECONDS: '600' }), /PROVISIONER_WAKE_WAIT_SECONDS/);
});

t.test('idle times read as words', async (t) => {
  t.equal(formatIdle(1800), '30m');
  t.equal(formatIdle(3725), '1h2m5s');
  t.equal(formatIdle(45), '45s');
  t.equal(formatIdle(0), '0s');
});

t.test('RuntimeConnected: Waking for a runtime just woken, the alarm once the grace is over', async (t) => {
  const now = Date.parse('2026-11-29T10:00:00Z');
  const tenant = (wokeAt: string | null) => ({
    spec: { suspended: false, deleted: false },
    status: {
      phase: 'Ready',
      conditions: [],
      sleep: { wokeAt },
    },
  });
  const down = { connected: false, since: null };
  const woken = runtimeConnected(tenant(new Date(now - 60_000).toISOString()), down, now);
  t.match(woken, { status: 'False', reason: 'Waking', message: /woken at .* TENANT_WAKING/ });
  t.notOk(RUNTIME_NOT_CONNECTED_REASONS.has(woken!.reason), 'Waking is not an alarm reason');
  const late = runtimeConnected(
    tenant(new Date(now - (WAKE_CONNECT_GRACE_SECONDS + 1) * 1000).toISOString()),
    down,
    now,
  );
  t.equal(late?.reason, 'TunnelNotConnected', 'past the grace, a runtime that did not come back is flagged');
  t.equal(runtimeConnected(tenant(null), down, now)?.reason, 'TunnelNotConnected', 'never woken: as before');
  const up = runtimeConnected(tenant(new Date(now - 1000).toISOString()), { connected: true, since: null }, now);
  t.equal(up?.reason, 'NeverReported', 'connected: the usual checks, whatever the wake');
});

t.test('keep-awake windows: a plan inside one of its windows is not put to sleep', async (t) => {
  const config = loadConfig({
    PROVISIONER_SLEEP_IDLE_SECONDS: 'free=600,team=3600',
    PROVISIONER_SLEEP_AWAKE_WINDOWS: 'team=FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=8 Europe/Berlin 600',
  }).sleep;
  t.equal(config.awakeWindows.team?.[0]?.timeZone, 'Europe/Berlin');
  const plans = (now: number, zones: string[] = []) => idlePlans(config.idleSeconds, config.awakeWindows, zones, now);
  // Monday 2026-11-30 10:00 in Berlin (09:00 UTC): inside; 20:00 in Berlin: outside; Saturday: outside.
  const monday = Date.parse('2026-11-30T09:00:00Z');
  t.same(
    plans(monday),
    [
      { plan: 'free', seconds: 600 },
      { plan: 'team', seconds: 3600, zones: [] },
    ],
    'free: any tenant; team: none (tenants without a zone read the window in Berlin time, and it is open)',
  );
  t.same(
    plans(Date.parse('2026-11-30T19:00:00Z'))[1],
    { plan: 'team', seconds: 3600, zones: [null] },
    'after hours: team tenants without a zone may sleep',
  );
  t.same(
    plans(Date.parse('2026-11-28T09:00:00Z'))[1],
    { plan: 'team', seconds: 3600, zones: [null] },
    'on a Saturday too',
  );
  for (const [value, message] of [
    ['team=FREQ=WEEKLY;BYDAY=MO Europe/Berlin', /is not plan=RRULE TIME-ZONE MINUTES/],
    ['gold=FREQ=DAILY;BYHOUR=8 UTC 60', /unknown plan 'gold'/],
    ['team=FREQ=DAILY;BYHOUR=8 Mars/Olympus 60', /team: .*Mars\/Olympus/],
  ] as const) {
    t.throws(() => loadConfig({ PROVISIONER_SLEEP_AWAKE_WINDOWS: value }), {
      message: new RegExp(`PROVISIONER_SLEEP_AWAKE_WINDOWS.*${message.source}`),
    });
  }
});

t.test("keep-awake windows are read in the tenant's time zone", async (t) => {
  const config = loadConfig({
    PROVISIONER_SLEEP_IDLE_SECONDS: 'free=600',
    PROVISIONER_SLEEP_AWAKE_WINDOWS: 'free=FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYHOUR=9 UTC 480',
  }).sleep;
  const zones = ['America/New_York', 'Asia/Tokyo', 'Europe/Berlin'];
  // Monday 2026-11-30 14:00 UTC: 15:00 in Berlin and 09:00 in New York (inside 09:00–17:00), 23:00 in Tokyo (night).
  t.same(
    idlePlans(config.idleSeconds, config.awakeWindows, zones, Date.parse('2026-11-30T14:00:00Z')),
    [{ plan: 'free', seconds: 600, zones: ['Asia/Tokyo'] }],
    'only the tenants in Tokyo may sleep; those without a zone are in the window read in UTC',
  );
  // 08:30 UTC: 17:30 in Tokyo, 09:30 in Berlin, 03:30 in New York, 08:30 UTC (before the window).
  t.same(
    idlePlans(config.idleSeconds, config.awakeWindows, zones, Date.parse('2026-11-30T08:30:00Z'))[0]?.zones,
    [null, 'America/New_York', 'Asia/Tokyo'],
    'the zone decides: Berlin is at work, the others are not',
  );
  // Saturday 2026-12-05 12:00 UTC: the weekday is the tenant's local one.
  t.same(
    idlePlans(config.idleSeconds, config.awakeWindows, zones, Date.parse('2026-12-05T12:00:00Z'))[0]?.zones,
    [null, ...zones],
    'on a Saturday everywhere, all of them',
  );
  // Monday 2026-11-30 00:30 UTC is Monday 09:30 in Tokyo and still Sunday in New York.
  t.same(
    idlePlans(config.idleSeconds, config.awakeWindows, zones, Date.parse('2026-11-30T00:30:00Z'))[0]?.zones,
    [null, 'America/New_York', 'Europe/Berlin'],
    "a local Monday morning in Tokyo while it is Sunday night elsewhere: the tenant's weekday counts",
  );
});
