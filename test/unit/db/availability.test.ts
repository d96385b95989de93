import t from 'tap';
import { DatabaseHealth, isConnectionError } from '../../../provisioner/db/availability.ts';
import { RateLimitedLog } from '../../../provisioner/logger.ts';

const withCode = (code: string, message = 'x') => Object.assign(new Error(message), { code });

t.test('connection errors are told from other failures', async (t) => {
  for (const err of [
    withCode('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:5432'),
    withCode('ECONNRESET'),
    withCode('57P01', 'terminating connection due to administrator command'),
    withCode('57P03', 'the database system is starting up'),
    withCode('08006'),
    withCode('25006', 'cannot execute INSERT in a read-only transaction'),
    new Error('Connection terminated unexpectedly'),
    new Error('timeout exceeded when trying to connect'),
    new AggregateError([withCode('ECONNREFUSED')], ''),
    new Error('wrapped', { cause: withCode('ECONNRESET') }),
  ])
    t.ok(isConnectionError(err), `${String((err as { code?: string }).code ?? err.message)} is a connection error`);
  for (const err of [
    withCode('23505', 'duplicate key'),
    withCode('42P01', 'relation does not exist'),
    new Error('boom'),
    'ECONNREFUSED',
    undefined,
  ]) {
    t.notOk(isConnectionError(err), `${String(err instanceof Error ? err.message : err)} is not a connection error`);
  }
});

t.test('the health logs each change of state once', async (t) => {
  const lines: string[] = [];
  const health = new DatabaseHealth({
    error: (_o, m) => lines.push(`error ${m}`),
    info: (_o, m) => lines.push(`info ${m}`),
  });
  const events: string[] = [];
  health.on('down', () => events.push('down')).on('up', () => events.push('up'));
  health.up();
  health.down(withCode('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:1'));
  health.down(withCode('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:1'));
  t.equal(health.available, false);
  t.equal(health.outage?.reason, 'connect ECONNREFUSED 127.0.0.1:1', 'the outage keeps its reason');
  health.up();
  health.up();
  t.same(events, ['down', 'up'], 'one down and one up event for one outage');
  t.equal(lines.length, 2, 'one line when it went down, one when it came back');
  t.match(lines[0], /^error database unavailable/);
  t.match(lines[1], /^info database available again/);
});

t.test('the rate-limited log writes one line per key per window and counts the rest', async (t) => {
  let now = 0;
  const log = new RateLimitedLog(10_000, () => now);
  const written: Array<[string, number]> = [];
  for (let i = 0; i < 5; i++) log.maybe('A', (n) => written.push(['A', n]));
  log.maybe('B', (n) => written.push(['B', n]));
  now = 10_000;
  log.maybe('A', (n) => written.push(['A', n]));
  t.same(
    written,
    [
      ['A', 0],
      ['B', 0],
      ['A', 4],
    ],
    'first line at once, the next after the window with the 4 left out',
  );
});
