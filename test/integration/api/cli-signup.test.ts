/**
 * `provisioner tenants signup`: a new tenant through POST /v1/signup, with no key of one's own. It
 * prints the tenant and its API key (the one time the key is shown) and the key works; bad input
 * is refused with the API's code and the field at fault, and nothing is created.
 */
import t from 'tap';
import { join } from 'node:path';
import { createTestApi, uniqueOrg } from '../../helpers/api.ts';
import { main } from '../../../provisioner/cli/main.ts';
import { run } from '../../../sandbox/processes.ts';
import { countTenantRecords } from '../../helpers/tenants.ts';

const api = await createTestApi();
const url = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

async function cli(args: string[], token?: string): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['--url', url, ...(token ? ['--token', token] : []), ...args], {
    out: (s) => out.push(s),
    err: (s) => err.push(s),
    env: {},
  });
  return { code, out: out.join('\n'), err: err.join('\n') };
}

const tenantsNamed = async (organization: string) => countTenantRecords(api.db.pool, { organization });

t.test('signup without a key prints the tenant and its key once; the key reads the tenant', async (t) => {
  const organization = uniqueOrg('cli-signup');
  const res = await cli(['tenants', 'signup', organization, '--email', 'owner@example.com']);
  t.equal(res.code, 0, res.err);
  const id = /signed up \S+ \(([0-9a-f-]{36})\): plan free, region any, runtime \d+\.\d+\.\d+/.exec(res.out)?.[1];
  t.ok(id, `the first line names the tenant, its id, plan, region and runtime: ${res.out}`);
  t.match(res.out, /provisioning: operation [0-9a-f-]{36} \(follow it with: provisioner operations logs/);
  const key = res.out.split('\n').at(-1)!;
  t.match(res.out, /the tenant API key, shown only now/);
  t.match(key, /^\S{20,}$/, 'the last line is the key alone');
  const own = await cli(['--json', 'tenants', 'get', id!], key);
  t.equal(own.code, 0, own.err);
  t.equal(JSON.parse(own.out).organization, organization, 'the printed key reads its tenant');
  t.equal(await tenantsNamed(organization), 1, 'one tenant was created');
});

t.test('--json prints the API answer: tenant, key and operation; a plan and region are passed on', async (t) => {
  const organization = uniqueOrg('cli-signup-json');
  const res = await cli(['--json', 'tenants', 'signup', organization, '--email', 'a@example.com', '--plan', 'team']);
  t.equal(res.code, 0, res.err);
  const answer = JSON.parse(res.out) as {
    tenant: { organization: string; spec: { plan: string } };
    apiKey: string;
    operationId: string;
  };
  t.equal(answer.tenant.organization, organization);
  t.equal(answer.tenant.spec.plan, 'team');
  t.type(answer.apiKey, 'string');
  t.match(answer.operationId, /^[0-9a-f-]{36}$/);
});

t.test('an Idempotency-Key gives the first answer again, with the same tenant and key', async (t) => {
  const organization = uniqueOrg('cli-signup-idem');
  const key = 'cli-signup-0123456789abcdef';
  const args = ['--json', 'tenants', 'signup', organization, '--email', 'a@example.com', '--idempotency-key', key];
  const first = JSON.parse((await cli(args)).out) as { tenant: { id: string }; apiKey: string };
  const again = JSON.parse((await cli(args)).out) as { tenant: { id: string }; apiKey: string };
  t.equal(again.tenant.id, first.tenant.id);
  t.equal(again.apiKey, first.apiKey);
  t.equal(await tenantsNamed(organization), 1);
});

t.test('bad input is refused with the code and the field at fault, and creates nothing', async (t) => {
  const badName = await cli(['tenants', 'signup', 'Not_A_Label', '--email', 'a@example.com']);
  t.equal(badName.code, 1);
  t.match(badName.err, /^provisioner: VALIDATION_FAILED: .*\(field: organization\)$/m);
  t.equal(badName.out, '', 'nothing on stdout: no key was printed');
  t.equal(await tenantsNamed('Not_A_Label'), 0);

  const organization = uniqueOrg('cli-signup-bad');
  const badEmail = await cli(['tenants', 'signup', organization, '--email', 'not-an-email']);
  t.equal(badEmail.code, 1);
  t.match(badEmail.err, /VALIDATION_FAILED: .*\(field: email\)/);
  const badPlan = await cli(['tenants', 'signup', organization, '--email', 'a@example.com', '--plan', 'gold']);
  t.equal(badPlan.code, 1);
  t.match(badPlan.err, /VALIDATION_FAILED: .*\(field: plan\)/);
  t.equal(await tenantsNamed(organization), 0, 'no tenant was created');

  const noEmail = await cli(['tenants', 'signup', organization]);
  t.equal(noEmail.code, 1);
  t.match(noEmail.err, /required option '--email <address>' not specified/);
});

t.test('the installed CLI (bin/provisioner.ts, its own process) signs up over HTTP', async (t) => {
  const organization = uniqueOrg('cli-signup-bin');
  const { stdout } = await run(
    process.execPath,
    [
      join(import.meta.dirname, '../../../bin/provisioner.ts'),
      '--url',
      url,
      'tenants',
      'signup',
      organization,
      '--email',
      'a@example.com',
    ],
    { env: { PATH: process.env.PATH ?? '' } },
  );
  t.match(stdout, new RegExp(`^signed up ${organization} \\(`));
  t.equal(await tenantsNamed(organization), 1);
});
