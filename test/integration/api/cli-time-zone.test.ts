/**
 * A tenant's time zone from the CLI, against the real API: `tenants signup --time-zone`,
 * `tenants set-time-zone <id> <zone>` and `--clear` (with the tenant's own key and an operator's),
 * `tenants get`'s `time zone` line; a zone the API refuses is exit 1 with its code and the field,
 * and a zone and --clear together, or neither, a usage error.
 */
import t from 'tap';
import { createTestApi, uniqueOrg } from '../../helpers/api.ts';
import { cliAgainst } from '../../helpers/cli.ts';
import { main } from '../../../provisioner/cli/main.ts';

const api = await createTestApi();
const url = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

const operator = cliAgainst(url, api.operatorKey);

/** `tenants signup` needs no key: the CLI with none. */
async function anonymous(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['--url', url, ...args], { out: (s) => out.push(s), err: (s) => err.push(s), env: {} });
  return { code, out: out.join('\n'), err: err.join('\n') };
}

t.test('signup --time-zone; tenants get shows it; set-time-zone sets and clears it', async (t) => {
  const organization = uniqueOrg('cli-tz');
  const s = await anonymous([
    'tenants',
    'signup',
    organization,
    '--email',
    'o@example.com',
    '--time-zone',
    'europe/berlin',
  ]);
  t.equal(s.code, 0, s.err);
  t.match(
    s.out,
    /^signed up \S+ \([0-9a-f-]{36}\): plan free, region any, runtime \S+, time zone Europe\/Berlin$/m,
    'the signup line names the zone',
  );
  const id = /\(([0-9a-f-]{36})\)/.exec(s.out)![1]!;
  const key = s.out.split('\n').at(-1)!;
  const own = cliAgainst(url, key);

  t.match((await own(['tenants', 'get', id])).out, /^time zone: +Europe\/Berlin$/m, 'tenants get shows it');

  const set = await own(['tenants', 'set-time-zone', id, 'Asia/Tokyo']);
  t.equal(set.code, 0, `the tenant's own key sets it (${set.err})`);
  t.equal(set.out, `${organization} (${id}): time zone Asia/Tokyo`, 'it says what it set');
  const json = await own(['--json', 'tenants', 'get', id]);
  t.equal(JSON.parse(json.out).timeZone, 'Asia/Tokyo', '--json: the API answer, with timeZone');

  const byOperator = await operator(['tenants', 'set-time-zone', id, 'America/New_York']);
  t.equal(byOperator.code, 0, `an operator sets it too (${byOperator.err})`);

  const cleared = await own(['tenants', 'set-time-zone', id, '--clear']);
  t.equal(cleared.code, 0, cleared.err);
  t.match(
    cleared.out,
    /: no time zone, its plan's keep-awake windows are read in their own zone$/,
    '--clear unsets it',
  );
  t.match(
    (await operator(['tenants', 'get', id])).out,
    /^time zone: +none \(a plan's keep-awake windows are read in their own zone\)$/m,
    'tenants get says there is none',
  );
});

t.test('a refused zone is exit 1 naming the field; a zone with --clear, or neither, a usage error', async (t) => {
  const { tenantId } = await api.signup({ timeZone: 'Europe/Berlin' });
  const bad = await operator(['tenants', 'set-time-zone', tenantId, 'Mars/Olympus']);
  t.equal(bad.code, 1, 'an unknown zone fails');
  t.match(
    bad.err,
    /^provisioner: VALIDATION_FAILED: 'Mars\/Olympus' is not a known IANA time zone .*\(field: timeZone\)$/m,
    "with the API's code, message and field",
  );

  const both = await operator(['tenants', 'set-time-zone', tenantId, 'Asia/Tokyo', '--clear']);
  t.equal(both.code, 1, 'a zone and --clear: a usage error');
  t.match(both.err, /give a zone or --clear, not both/);
  const neither = await operator(['tenants', 'set-time-zone', tenantId]);
  t.equal(neither.code, 1, 'neither: a usage error');
  t.match(neither.err, /give an IANA time zone \(e\.g\. Europe\/Berlin\), or --clear/);
  t.match((await operator(['tenants', 'get', tenantId])).out, /^time zone: +Europe\/Berlin$/m, 'the zone is unchanged');

  const organization = uniqueOrg('cli-tz-bad');
  const signup = await anonymous([
    'tenants',
    'signup',
    organization,
    '--email',
    'o@example.com',
    '--time-zone',
    '+01:00',
  ]);
  t.equal(signup.code, 1, 'signup with an offset for a zone fails');
  t.match(signup.err, /\(field: timeZone\)$/m, 'naming the field');
  t.equal(signup.out, '', 'nothing on stdout: no key was printed');
});
