/**
 * A tenant's time zone in the console, in Debian's Chromium against a real provisioner on real
 * PostgreSQL with no reconciler (CONSOLE_ENGINE=none: a setting needs no engine run): the tenant
 * page shows the zone in its details; the customer, signed in with the tenant's own key, sets it
 * (a lower-case name comes back as the time zone database spells it), and the details follow
 * without reload; a zone the API refuses is shown with its message, the value and its code, and
 * nothing changes; an operator clears it. Accessibility (axe-core) and a screenshot.
 */
import t from 'tap';
import type { Page } from 'playwright-core';
import { axeViolations } from './harness/browser.ts';
import { consoleFixture } from './harness/fixture.ts';

t.setTimeout(5 * 60_000);
const fx = await consoleFixture(t, { name: 'tenant-time-zone', env: { CONSOLE_ENGINE: 'none' } });
const zoneOf = async (id: string) => (await fx.client.call('GET /v1/tenants/:id', { params: { id } })).timeZone;

const signup = await fx.signup('zoned-org', { email: 'ops@zoned.example' }, null);
const id = signup.id;

/** The details' time zone, once it reads `text` (the page follows the tenant's stream). */
const zoneShown = async (page: Page, text: string) => {
  await page.locator('dd[data-time-zone]', { hasText: text }).waitFor();
  return page.locator('dd[data-time-zone]').innerText();
};

t.test("the customer sets its tenant's time zone; a refused one is shown; an operator clears it", async (t) => {
  const { page, problems } = await fx.open(signup.apiKey);
  // A tenant key lands on its own tenant.
  await page.getByRole('heading', { name: /zoned-org/ }).waitFor();
  t.equal(await zoneShown(page, 'not set'), 'not set', 'the details say no time zone is set');

  const form = page.getByRole('form', { name: 'Time zone' });
  const input = form.getByLabel('Time zone (IANA)');
  const setButton = form.getByRole('button', { name: 'Set time zone' });
  t.ok(await setButton.isDisabled(), 'nothing typed: nothing to set');
  t.equal(await form.getByRole('button', { name: 'Clear time zone' }).count(), 0, 'none set: no Clear');
  t.match(
    await form.innerText(),
    /keep-awake windows \(business hours\) are read in this zone/,
    'it says what the zone does',
  );

  await input.fill('asia/tokyo');
  await setButton.click();
  await page.getByRole('status').filter({ hasText: 'time zone set to Asia/Tokyo' }).waitFor();
  t.equal(
    await zoneShown(page, 'Asia/Tokyo'),
    'Asia/Tokyo',
    'the details follow without reload, spelled as the database does',
  );
  t.equal(await zoneOf(id), 'Asia/Tokyo', 'the API has it');
  t.equal(await input.inputValue(), '', 'the field is empty again');
  await fx.screenshot(page, 'tenant-time-zone.png', { fullPage: true });
  t.same(await axeViolations(page), [], 'the tenant page with the time zone has no serious accessibility violation');

  await input.fill('Mars/Olympus');
  await setButton.click();
  const alert = page.getByRole('alert');
  await alert.waitFor();
  const text = await alert.innerText();
  t.match(
    text,
    /'Mars\/Olympus' is not a known IANA time zone \(e\.g\. Europe\/Berlin/,
    "the API's message, with the value and an example",
  );
  t.match(text, /VALIDATION_FAILED/, 'and its code');
  t.equal(await zoneOf(id), 'Asia/Tokyo', 'nothing changed');
  t.equal(await page.locator('dd[data-time-zone]').innerText(), 'Asia/Tokyo', 'the details still say Asia/Tokyo');
  t.same(
    problems.filter((p) => !/status of 400/.test(p)),
    [],
    'no console error but the refused zone (400), no request to another host',
  );
  await page.context().close();

  const operator = await fx.open(fx.operatorKey);
  await operator.page.getByRole('heading', { name: 'Tenants' }).waitFor();
  await operator.page.evaluate(`location.hash = '#/tenants/${id}'`);
  await operator.page.getByRole('heading', { name: /zoned-org/ }).waitFor();
  t.equal(await zoneShown(operator.page, 'Asia/Tokyo'), 'Asia/Tokyo', 'the operator sees the zone');
  await operator.page.getByRole('form', { name: 'Time zone' }).getByRole('button', { name: 'Clear time zone' }).click();
  await operator.page.getByRole('status').filter({ hasText: 'time zone cleared' }).waitFor();
  t.equal(await zoneShown(operator.page, 'not set'), 'not set', 'cleared, the details follow');
  t.equal(await zoneOf(id), null, 'the API has none');
  t.same(operator.problems, [], 'no console error, no request to another host');
  await operator.page.context().close();
});
