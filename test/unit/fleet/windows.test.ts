import t from 'tap';
import {
  allowedIntervals,
  checkFreezes,
  checkWindow,
  checkWindows,
  explainNoFit,
  nextFit,
  occurrences,
} from '../../../provisioner/fleet/windows.ts';
import type { MaintenanceWindow } from '../../../provisioner/store/tenants.ts';
import { isAppError } from '../../../provisioner/errors.ts';

const ms = (iso: string) => Date.parse(iso);
const iso = (n: number) => new Date(n).toISOString();
const H = 3_600_000;
const nightly = (timeZone: string, hour: number, minutes = 120): MaintenanceWindow => ({
  rrule: `FREQ=DAILY;BYHOUR=${hour};BYMINUTE=0`,
  timeZone,
  durationMinutes: minutes,
});
const intervals = (w: MaintenanceWindow, from: string, to: string) =>
  occurrences(w, ms(from), ms(to)).map((i) => [iso(i.start), iso(i.end)]);

t.test('Europe/Berlin, spring forward (2026-03-29, 02:00 CET -> 03:00 CEST): 02:00-04:00 local', async (t) => {
  t.same(
    intervals(nightly('Europe/Berlin', 2), '2026-03-27T23:00:00Z', '2026-03-30T12:00:00Z'),
    [
      ['2026-03-28T01:00:00.000Z', '2026-03-28T03:00:00.000Z'],
      ['2026-03-29T01:00:00.000Z', '2026-03-29T02:00:00.000Z'],
      ['2026-03-30T00:00:00.000Z', '2026-03-30T02:00:00.000Z'],
    ],
    'the night before 01:00Z-03:00Z (CET); on the change night 02:00 does not exist, so the window is 03:00-04:00 CEST (01:00Z-02:00Z, one hour); after it 00:00Z-02:00Z (CEST)',
  );
});

t.test(
  'America/New_York, fall back (2026-11-01, 02:00 EDT -> 01:00 EST): 02:00-04:00 and 01:00-03:00 local',
  async (t) => {
    t.same(
      intervals(nightly('America/New_York', 2), '2026-10-31T00:00:00Z', '2026-11-02T12:00:00Z'),
      [
        ['2026-10-31T06:00:00.000Z', '2026-10-31T08:00:00.000Z'],
        ['2026-11-01T07:00:00.000Z', '2026-11-01T09:00:00.000Z'],
        ['2026-11-02T07:00:00.000Z', '2026-11-02T09:00:00.000Z'],
      ],
      '02:00-04:00 EDT the night before (06:00Z-08:00Z); on the change night 02:00 EST to 04:00 EST (07:00Z-09:00Z); then EST',
    );
    t.same(
      intervals(nightly('America/New_York', 1), '2026-11-01T00:00:00Z', '2026-11-01T12:00:00Z'),
      [['2026-11-01T05:00:00.000Z', '2026-11-01T08:00:00.000Z']],
      '01:00-03:00 on the change night: from the first 01:00 (EDT, 05:00Z) to 03:00 EST (08:00Z), three hours of wall clock',
    );
  },
);

t.test('a weekly window with dtstart; nextFit takes a window only when the need fits in what is left', async (t) => {
  const w = checkWindow(
    {
      rrule: 'RRULE:freq=weekly;byday=sa',
      timeZone: 'europe/berlin',
      durationMinutes: 240,
      dtstart: '2026-01-03T02:00',
    },
    'w',
  );
  t.same(
    w,
    { rrule: 'FREQ=WEEKLY;BYDAY=SA', timeZone: 'Europe/Berlin', durationMinutes: 240, dtstart: '2026-01-03T02:00' },
    'the window is normalised: upper-case rule without RRULE:, the canonical zone name',
  );
  const schedule = { windows: [w], freezes: [] };
  // Saturday 2026-06-06 02:00-06:00 CEST = 00:00Z-04:00Z.
  t.same(
    nextFit(schedule, ms('2026-06-06T01:00:00Z'), 2 * H, 8 * 24 * H),
    { at: ms('2026-06-06T01:00:00Z'), until: ms('2026-06-06T04:00:00Z') },
    'inside the window with 3 h left, a 2 h step starts now',
  );
  t.same(
    nextFit(schedule, ms('2026-06-06T03:00:00Z'), 2 * H, 8 * 24 * H),
    { at: ms('2026-06-13T00:00:00Z'), until: ms('2026-06-13T04:00:00Z') },
    'with 1 h left a 2 h step waits for the next Saturday 02:00 CEST',
  );
  t.same(
    nextFit(schedule, ms('2026-06-06T03:00:00Z'), 2 * H, 3 * 24 * H),
    { at: null, why: 'too-short', horizonEnd: ms('2026-06-09T03:00:00Z') },
    'within a 3-day horizon no window fits: too short',
  );
});

t.test('a freeze always wins over a window; no window means any time outside freezes', async (t) => {
  const w = nightly('UTC', 0, 360); // 00:00-06:00Z
  const freezes = checkFreezes([
    { from: '2026-12-24T02:00:00+00:00', until: '2026-12-26T00:00:00Z', reason: 'holidays' },
  ]);
  t.same(
    freezes[0],
    { from: '2026-12-24T02:00:00.000Z', until: '2026-12-26T00:00:00.000Z', reason: 'holidays' },
    'an interval freeze is stored as UTC instants',
  );
  t.same(
    allowedIntervals({ windows: [w], freezes }, ms('2026-12-24T00:00:00Z'), ms('2026-12-27T00:00:00Z')).map((i) => [
      iso(i.start),
      iso(i.end),
    ]),
    [
      ['2026-12-24T00:00:00.000Z', '2026-12-24T02:00:00.000Z'],
      ['2026-12-26T00:00:00.000Z', '2026-12-26T06:00:00.000Z'],
    ],
    "the freeze cuts the 24th's window and removes the 25th's",
  );
  t.same(
    nextFit({ windows: [w], freezes }, ms('2026-12-24T01:00:00Z'), 2 * H, 7 * 24 * H).at,
    ms('2026-12-26T00:00:00Z'),
    'a 2 h step does not start at 01:00 (the freeze begins at 02:00): it waits until after the freeze',
  );
  const weekly = checkFreezes([{ rrule: 'FREQ=WEEKLY;BYDAY=FR;BYHOUR=0', timeZone: 'UTC', durationMinutes: 3 * 1440 }]);
  t.same(
    nextFit({ windows: [], freezes: weekly }, ms('2026-06-05T12:00:00Z'), H, 7 * 24 * H),
    { at: ms('2026-06-08T00:00:00Z'), until: ms('2026-06-12T00:00:00Z') },
    'without windows a tenant may start any time outside the freezes (a weekend freeze Friday-Sunday)',
  );
  const always = nextFit({ windows: [], freezes: [] }, ms('2026-06-05T12:00:00Z'), H, 24 * H);
  t.equal(always.at, ms('2026-06-05T12:00:00Z'), 'no windows, no freezes: now');
});

t.test('a tenant never in a window, and one whose windows all fall in freezes, are told apart', async (t) => {
  const past = checkWindow({ rrule: 'FREQ=DAILY;BYHOUR=2;COUNT=3', timeZone: 'UTC', durationMinutes: 60 }, 'w');
  const none = nextFit({ windows: [past], freezes: [] }, ms('2026-06-01T00:00:00Z'), H, 7 * 24 * H);
  t.same(none, { at: null, why: 'no-window', horizonEnd: ms('2026-06-08T00:00:00Z') }, 'a rule that ended never opens');
  if (none.at === null)
    t.match(
      explainNoFit(none, H, 'the p95'),
      /^outside every maintenance window: none of its windows opens before 2026-06-08/,
      'the reason says so',
    );
  const frozen = nextFit(
    { windows: [nightly('UTC', 2, 60)], freezes: [{ from: '2026-06-01T00:00:00Z', until: '2026-07-01T00:00:00Z' }] },
    ms('2026-06-01T00:00:00Z'),
    H,
    7 * 24 * H,
  );
  t.equal(frozen.at === null && frozen.why, 'frozen', 'windows inside a freeze count as frozen');
});

t.test('bad windows are refused with a 400 naming the field', async (t) => {
  const refused = (f: () => unknown, field: string, message: RegExp, what: string) => {
    try {
      f();
      t.fail(`${what}: refused`);
    } catch (err) {
      t.ok(isAppError(err) && err.statusCode === 400, `${what}: a 400`);
      t.equal(isAppError(err) ? err.field : undefined, field, `${what}: names ${field}`);
      t.match((err as Error).message, message, `${what}: says why`);
    }
  };
  const ok: MaintenanceWindow = { rrule: 'FREQ=DAILY;BYHOUR=2', timeZone: 'UTC', durationMinutes: 60 };
  refused(
    () => checkWindows([ok, { ...ok, rrule: 'FREQ=HOURLY' }]),
    'maintenanceWindows.1.rrule',
    /DAILY, WEEKLY/,
    'FREQ=HOURLY',
  );
  refused(() => checkWindows([{ ...ok, rrule: 'BYHOUR=2' }]), 'maintenanceWindows.0.rrule', /no FREQ/, 'no FREQ');
  refused(
    () => checkWindows([{ ...ok, rrule: 'FREQ=DAILY;BYHOUR=2;BYHOUR=3' }]),
    'maintenanceWindows.0.rrule',
    /twice/,
    'a part twice',
  );
  refused(
    () => checkWindows([{ ...ok, rrule: 'FREQ=DAILY;EVERY=2' }]),
    'maintenanceWindows.0.rrule',
    /not supported/,
    'unknown part',
  );
  refused(
    () => checkWindows([{ ...ok, rrule: 'FREQ=DAILY;BYHOUR=24' }]),
    'maintenanceWindows.0.rrule',
    /BYHOUR=24: .* 0 to 23/,
    'BYHOUR=24',
  );
  refused(
    () => checkWindows([{ ...ok, rrule: 'FREQ=DAILY;INTERVAL=0' }]),
    'maintenanceWindows.0.rrule',
    /INTERVAL=0/,
    'INTERVAL=0',
  );
  refused(
    () => checkWindows([{ ...ok, rrule: 'FREQ=WEEKLY;BYDAY=XX' }]),
    'maintenanceWindows.0.rrule',
    /cannot be expanded: .*BYDAY/,
    "BYDAY=XX (the library's refusal)",
  );
  refused(() => checkWindows([{ ...ok, rrule: 'not a rule' }]), 'maintenanceWindows.0.rrule', /not a part/, 'garbage');
  refused(
    () => checkWindows([{ ...ok, timeZone: 'Mars/Olympus_Mons' }]),
    'maintenanceWindows.0.timeZone',
    /not a known IANA/,
    'unknown zone',
  );
  refused(
    () => checkWindows([{ ...ok, timeZone: '+01:00' }]),
    'maintenanceWindows.0.timeZone',
    /not an IANA/,
    'an offset',
  );
  refused(
    () => checkWindows([{ ...ok, durationMinutes: 5 }]),
    'maintenanceWindows.0.durationMinutes',
    /15 to 10080/,
    'too short',
  );
  refused(
    () => checkWindows([{ ...ok, durationMinutes: 20_000 }]),
    'maintenanceWindows.0.durationMinutes',
    /15 to 10080/,
    'too long',
  );
  refused(
    () => checkWindows([{ ...ok, dtstart: '2026-02-30T02:00' }]),
    'maintenanceWindows.0.dtstart',
    /not a valid/,
    'Feb 30',
  );
  refused(
    () => checkWindows([{ ...ok, dtstart: '2026-02-03T02:00Z' }]),
    'maintenanceWindows.0.dtstart',
    /local date-time/,
    'an offset in dtstart',
  );
  refused(
    () => checkWindows([{ ...ok, timeZone: 'Pacific/Auckland', rrule: 'FREQ=DAILY;BYHOUR=2;UNTIL=20261210T140000' }]),
    'maintenanceWindows.0.rrule',
    /UNTIL=20261210T140000: give UNTIL in UTC with a Z, e.g\. UNTIL=\d{8}T\d{6}Z/,
    'a local UNTIL',
  );
  refused(
    () => checkWindows([{ ...ok, rrule: 'FREQ=DAILY;BYHOUR=2;UNTIL=20261210' }]),
    'maintenanceWindows.0.rrule',
    /give UNTIL in UTC with a Z/,
    'a date-only UNTIL',
  );
  refused(
    () => checkWindows([{ ...ok, rrule: 'FREQ=DAILY;BYHOUR=2;COUNT=3;UNTIL=20261210T000000Z' }]),
    'maintenanceWindows.0.rrule',
    /COUNT or UNTIL, not both/,
    'COUNT and UNTIL',
  );
  refused(
    () => checkFreezes([{ from: '2026-01-02T00:00:00Z', until: '2026-01-01T00:00:00Z' }]),
    'freezes.0.until',
    /after from/,
    'until before from',
  );
  refused(
    () => checkFreezes([{ from: '2026-01-02', until: '2026-01-03T00:00:00Z' }]),
    'freezes.0.from',
    /with an offset/,
    'a date without a time',
  );
});

t.test('UNTIL is an instant in UTC (RFC 5545), compared with each occurrence placed in its zone', async (t) => {
  // Pacific/Auckland in December is NZDT, UTC+13: 02:00 local on the 11th is 13:00Z on the 10th.
  const auckland = checkWindow(
    {
      rrule: 'FREQ=DAILY;BYHOUR=2;BYMINUTE=0;UNTIL=20261210T140000Z',
      timeZone: 'Pacific/Auckland',
      durationMinutes: 60,
    },
    'w',
  );
  t.same(
    intervals(auckland, '2026-12-08T00:00:00Z', '2026-12-14T00:00:00Z'),
    [
      ['2026-12-08T13:00:00.000Z', '2026-12-08T14:00:00.000Z'],
      ['2026-12-09T13:00:00.000Z', '2026-12-09T14:00:00.000Z'],
      ['2026-12-10T13:00:00.000Z', '2026-12-10T14:00:00.000Z'],
    ],
    'Auckland: the window of the 11th (02:00 NZDT = 13:00Z on the 10th) starts before UNTIL 14:00Z and occurs (read as local 14:00 on the 10th it would not); the 12th (13:00Z on the 11th) does not',
  );
  t.same(
    intervals(
      { ...auckland, rrule: 'FREQ=DAILY;BYHOUR=2;BYMINUTE=0;UNTIL=20261210T130000Z' },
      '2026-12-10T00:00:00Z',
      '2026-12-14T00:00:00Z',
    ),
    [['2026-12-10T13:00:00.000Z', '2026-12-10T14:00:00.000Z']],
    'an occurrence starting exactly at UNTIL is the last one (UNTIL is inclusive)',
  );

  // America/Los_Angeles in December is PST, UTC-8: 20:00 local on the 10th is 04:00Z on the 11th.
  const losAngeles = checkWindow(
    {
      rrule: 'FREQ=DAILY;BYHOUR=20;BYMINUTE=0;UNTIL=20261210T230000Z',
      timeZone: 'America/Los_Angeles',
      durationMinutes: 120,
    },
    'w',
  );
  t.same(
    intervals(losAngeles, '2026-12-09T07:00:00Z', '2026-12-14T00:00:00Z'),
    [['2026-12-10T04:00:00.000Z', '2026-12-10T06:00:00.000Z']],
    'Los Angeles: 20:00 PST on the 9th (04:00Z on the 10th) occurs; 20:00 PST on the 10th is 04:00Z on the 11th, after UNTIL 23:00Z on the 10th, so it does not (read as local 23:00 it would)',
  );
  const fit = nextFit({ windows: [losAngeles], freezes: [] }, ms('2026-12-10T12:00:00Z'), H, 7 * 24 * H);
  t.equal(fit.at === null && fit.why, 'no-window', 'after the last occurrence before UNTIL, no window opens any more');
  const before = nextFit({ windows: [losAngeles], freezes: [] }, ms('2026-12-09T12:00:00Z'), H, 7 * 24 * H);
  t.equal(
    before.at !== null ? iso(before.at) : null,
    '2026-12-10T04:00:00.000Z',
    'before it, the last occurrence is the next fit',
  );
});
