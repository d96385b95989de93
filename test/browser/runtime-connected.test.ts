/**
 * Ready is not green until the runtime runs, in Debian's Chromium against a real provisioner on
 * real PostgreSQL (the ScriptedEngine TEST DOUBLE provisions; the e2e tier runs the real engine):
 * two tenants are provisioned (phase Ready); one's runtime never connects, the other's real tunnel
 * client connects and its event reporter's heartbeat arrives. On the tenants page and the tenant
 * page the first is an amber badge with the reason, and the "Why" column says what is wrong; the
 * second is the green Ready badge.
 */
import http from 'node:http';
import { once } from 'node:events';
import t from 'tap';
import { createKey } from '../../provisioner/store/keys.ts';
import { axeViolations, type PageGlobals } from './harness/browser.ts';
import { consoleFixture } from './harness/fixture.ts';
import { until } from '../../sandbox/until.ts';

t.setTimeout(5 * 60_000);
const fx = await consoleFixture(t, { name: 'runtime-connected', env: { CONSOLE_ENGINE_DELAY_MS: 50 } });
const upstream = http.createServer((_req, res) => res.end('{}')).listen(0, '127.0.0.1');
await once(upstream, 'listening');
fx.onClose(() => upstream.close());

/** A tenant signed up and provisioned by the reconciler (phase Ready). */
async function provisioned(organization: string): Promise<string> {
  const { id } = await fx.signup(organization);
  await until(
    `${organization} Ready`,
    120_000,
    async () => (await fx.client.call('GET /v1/tenants/:id', { params: { id } })).status.phase === 'Ready',
    100,
  );
  return id;
}

// A root cluster at a documentation address (forced: nobody answers there); the scripted engine needs none.
await fx.registerCluster();

const dark = await provisioned('dark-runtime');
const lit = await provisioned('lit-runtime');

// The lit tenant's runtime: its tunnel client dials the provisioner, its event reporter reports.
const runtimeKey = (await createKey(fx.db.pool, { role: 'runtime', tenantId: lit, name: 'runtime', createdBy: 'test' }))
  .key;
const port = (upstream.address() as { port: number }).port;
await fx.tunnel(runtimeKey, port);
await fx.postEvents(runtimeKey, {
  replica: 'reporter-0',
  items: [],
  heartbeat: { replica: 'reporter-0', ownedObjects: 0, queueDepth: 0, oldestPendingSeconds: 0 },
});

t.test('a Ready tenant whose runtime is not connected is amber and says why; a connected one is green', async (t) => {
  const { page, problems } = await fx.signedIn();

  const darkRow = page.locator(`tr[data-tenant="${dark}"]`);
  const litRow = page.locator(`tr[data-tenant="${lit}"]`);
  await darkRow.waitFor();
  const darkBadge = darkRow.locator('td.status .phase');
  t.equal(
    await darkBadge.getAttribute('class'),
    'phase phase-degraded',
    'the not-connected tenant has the amber badge, not phase-ready',
  );
  t.equal(await darkBadge.innerText(), 'Ready, not connected', 'its badge says Ready, not connected');
  const color = await darkBadge.evaluate((e) => (globalThis as unknown as PageGlobals).getComputedStyle(e).color);
  t.not(color, 'rgb(17, 99, 41)', "its badge's colour is not the Ready green");
  t.match(
    await darkRow.locator('td.why').innerText(),
    /^TunnelNotConnected: the runtime was provisioned but its tunnel client is not connected.*tunnel-client Deployment/s,
    'the Why column gives the reason and what to check',
  );

  const litBadge = litRow.locator('td.status .phase');
  t.equal(await litBadge.getAttribute('class'), 'phase phase-ready', 'the connected tenant has the green Ready badge');
  t.equal(await litBadge.innerText(), 'Ready', 'its badge says Ready');
  t.equal(
    await litBadge.evaluate((e) => (globalThis as unknown as PageGlobals).getComputedStyle(e).color),
    'rgb(17, 99, 41)',
    'in the Ready green',
  );
  t.notMatch(await litRow.locator('td.why').innerText(), /Tunnel|Report/, 'its Why names no runtime problem');
  await fx.screenshot(page, 'tenants.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the tenants page has no serious accessibility violation');

  await darkRow.getByRole('link', { name: 'dark-runtime' }).click();
  const heading = page.getByRole('heading', { name: /dark-runtime/ });
  await heading.waitFor();
  t.equal(
    await heading.locator('.phase').getAttribute('data-degraded'),
    'TunnelNotConnected',
    'the tenant page badge is amber with the reason',
  );
  await fx.screenshot(page, 'tenant.png', { fullPage: true });
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});
