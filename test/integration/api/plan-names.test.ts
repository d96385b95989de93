/**
 * A plan is one of the plans, never a name every JavaScript object inherits: signup refuses
 * `constructor`, `__proto__` and `toString` with a 400 naming `plan` and stores nothing; an
 * operator's plan change refuses them too; `provisioner runtime render --plan constructor` says
 * the plan is unknown instead of crashing.
 */
import t from 'tap';
import { createTestApi, uniqueOrg } from '../../helpers/api.ts';
import { main } from '../../../provisioner/cli/main.ts';
import { catalog } from '../../../runtime/catalog.ts';

const api = await createTestApi();
t.teardown(() => api.close());

const INHERITED = ['constructor', '__proto__', 'toString', 'hasOwnProperty'];

/** A request with a plan the route's types refuse on purpose (an inherited name): the one raw request. */
async function call(method: 'POST' | 'PATCH', path: string, body: unknown, key: string | null) {
  const res = await api.request(method, path, { key, body });
  return { status: res.statusCode, body: res.json<{ error?: { code: string; field?: string; message: string } }>() };
}

t.test('signup refuses an inherited name as a plan, naming the field, and stores nothing', async (t) => {
  for (const plan of INHERITED) {
    const organization = uniqueOrg('plan');
    const res = await call('POST', '/v1/signup', { organization, email: 'owner@example.com', plan }, null);
    t.equal(res.status, 400, `plan '${plan}': 400`);
    t.equal(res.body.error?.field, 'plan', `plan '${plan}': the error names plan`);
    t.match(
      res.body.error?.message,
      /must be one of: free, team, enterprise/,
      `plan '${plan}': the message lists the plans`,
    );
    const found = await api.client.call('GET /v1/tenants', { query: { q: organization } });
    t.same(found.items, [], `plan '${plan}': no tenant was stored`);
  }
  const team = await api.as(null).request('POST /v1/signup', {
    body: { organization: uniqueOrg('plan'), email: 'owner@example.com', plan: 'team' },
  });
  t.equal(team.status, 202, 'a real plan is accepted');
});

t.test("an operator's plan change refuses an inherited name", async (t) => {
  const { tenantId } = await api.signup();
  for (const plan of INHERITED) {
    const res = await call('PATCH', `/v1/tenants/${tenantId}`, { plan }, api.operatorKey);
    t.equal(res.status, 400, `plan '${plan}': 400`);
    t.equal(res.body.error?.field, 'plan', `plan '${plan}': the error names plan`);
  }
  const tenant = await api.as(api.operatorKey).call('GET /v1/tenants/:id', { params: { id: tenantId } });
  t.equal(tenant.spec.plan, 'free', 'the plan is unchanged');
});

t.test('runtime render --plan constructor is an unknown plan, not a crash', async (t) => {
  const version = catalog.versions.at(-1)!.version;
  for (const plan of INHERITED) {
    const out: string[] = [];
    const err: string[] = [];
    // Any executable as helm: the refusal comes before helm runs.
    const code = await main(
      ['runtime', 'render', version, '--plan', plan, '--out', '/nonexistent', '--helm', process.execPath],
      {
        out: (s) => out.push(s),
        err: (s) => err.push(s),
        env: {},
      },
    );
    t.equal(code, 1, `--plan ${plan}: exit code 1`);
    t.match(
      err.join('\n'),
      new RegExp(`^provisioner: unknown plan '${plan}' \\(plans: free, team, enterprise\\)$`),
      `--plan ${plan}: the error names the plans`,
    );
  }
});
