/**
 * Ready is not green until the runtime runs, in Debian's Chromium against a real provisioner on
 * real PostgreSQL (the ScriptedEngine TEST DOUBLE provisions; the e2e tier runs the real engine):
 * two tenants are provisioned (phase Ready); one's runtime never connects, the other's real tunnel
 * client connects and its event reporter's heartbeat arrives. On the tenants page and the tenant
 * page the first is an amber badge with the reason, and the "Why" column says what is wrong; the
 * second is the green Ready badge.
 */
import { join } from 'node:path';
import http from 'node:http';
import { once } from 'node:events';
import t from 'tap';
import type { Browser } from 'playwright-core';
import { createKey } from '../../provisioner/store/keys.ts';
import { KUBECONFIG } from '../integration/reconciler/harness.ts';
import { createTestDatabase } from '../helpers/postgres.ts';
import { startTunnelClient } from '../../runtime/agents/tunnel-client/client.ts';
import { EVENTS_PATH } from '../../runtime/protocol/events.ts';
import {
  axeViolations,
  chromiumAvailable,
  CHROMIUM,
  freePort,
  launch,
  newEncryptionKey,
  openPage,
  screenshotDir,
  signIn,
  startServer,
  type PageGlobals,
  type ServerProcess,
} from './harness/browser.ts';
import { until } from '../../sandbox/until.ts';

t.setTimeout(5 * 60_000);
if (!chromiumAvailable()) throw new Error(`no Chromium at ${CHROMIUM} (scripts/test.sh installs Debian's chromium)`);

const db = await createTestDatabase();
const operatorKey = (await createKey(db.pool, { role: 'operator', name: 'console test', createdBy: 'test' })).key;
const server: ServerProcess = await startServer({
  databaseUrl: db.url,
  port: await freePort(),
  encryptionKey: newEncryptionKey(),
  CONSOLE_ENGINE_DELAY_MS: 50,
});
const browser: Browser = await launch();
const shots = screenshotDir('runtime-connected');
t.comment(`screenshots: ${shots}`);
const upstream = http.createServer((_req, res) => res.end('{}')).listen(0, '127.0.0.1');
await once(upstream, 'listening');
t.teardown(async () => {
  upstream.close();
  await browser.close();
  await server.stop();
  await db.drop();
});

async function call(method: string, path: string, body?: unknown, key = operatorKey): Promise<unknown> {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${key}`,
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res.json();
}

/** A tenant signed up and provisioned by the reconciler (phase Ready). */
async function provisioned(organization: string): Promise<string> {
  const s = (await call('POST', '/v1/signup', { organization, email: `ops@${organization}.example` })) as {
    tenant: { id: string };
  };
  const id = s.tenant.id;
  await until(
    `${organization} Ready`,
    120_000,
    async () => ((await call('GET', `/v1/tenants/${id}`)) as { status: { phase: string } }).status.phase === 'Ready',
    100,
  );
  return id;
}

// A root cluster at a documentation address (forced: nobody answers there); the scripted engine needs none.
await call('POST', '/v1/clusters', {
  name: 'eu-1a',
  region: 'eu-west-1',
  capacity: 50,
  kubeconfig: KUBECONFIG,
  force: true,
});

const dark = await provisioned('dark-runtime');
const lit = await provisioned('lit-runtime');

// The lit tenant's runtime: its tunnel client dials the provisioner, its event reporter reports.
const runtimeKey = (await createKey(db.pool, { role: 'runtime', tenantId: lit, name: 'runtime', createdBy: 'test' }))
  .key;
const port = (upstream.address() as { port: number }).port;
const tunnel = startTunnelClient({
  url: `${server.url.replace('http', 'ws')}/v1/tunnel`,
  token: runtimeKey,
  upstream: `http://127.0.0.1:${port}`,
  backoff: { initialMs: 50, maxMs: 200 },
});
t.teardown(() => tunnel.close());
if (!tunnel.connected) await once(tunnel.events, 'connected');
await call(
  'POST',
  EVENTS_PATH,
  {
    replica: 'reporter-0',
    items: [],
    heartbeat: { replica: 'reporter-0', ownedObjects: 0, queueDepth: 0, oldestPendingSeconds: 0 },
  },
  runtimeKey,
);

t.test('a Ready tenant whose runtime is not connected is amber and says why; a connected one is green', async (t) => {
  const { page, problems } = await openPage(browser, server.url);
  await signIn(page, server.url, operatorKey);
  await page.getByRole('heading', { name: 'Tenants' }).waitFor();

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
  await page.screenshot({ path: join(shots, 'tenants.png'), fullPage: true });
  t.same(await axeViolations(page), [], 'the tenants page has no serious accessibility violation');

  await darkRow.getByRole('link', { name: 'dark-runtime' }).click();
  const heading = page.getByRole('heading', { name: /dark-runtime/ });
  await heading.waitFor();
  t.equal(
    await heading.locator('.phase').getAttribute('data-degraded'),
    'TunnelNotConnected',
    'the tenant page badge is amber with the reason',
  );
  await page.screenshot({ path: join(shots, 'tenant.png'), fullPage: true });
  t.same(problems, [], 'no console error, no request to another host');
  await page.context().close();
});
