/**
 * consoleFixture: the setup every browser test file shares, in one call. It checks that Chromium
 * is there, creates the file's test database and an operator key on it, starts a provisioner
 * process on it (console-server.ts), launches Chromium, makes the file's screenshot folder (printed
 * as a tap comment) and registers on `t` one teardown that closes, in this order, what the file
 * added with `onClose` (tunnels, test doubles' servers), Chromium, the provisioner and the database.
 *
 *   const fx = await consoleFixture(t, { name: 'capacity', env: { CONSOLE_ENGINE_DELAY_MS: 50 } });
 *   const { page, problems } = await fx.signedIn();
 *   await fx.screenshot(page, 'capacity.png', { fullPage: true });
 *
 * Its API helpers talk to the provisioner with the operator key unless told another (or `null`, no
 * key at all): `client` is the one API client (provisioner/http/api-client.ts), called by route
 * key (`fx.client.call('GET /v1/capacity')`, `fx.as(key)` for another key); `call` and `ok`, by
 * method and path with the answer's type chosen by the caller, are what the files not moved onto
 * the client still use (docs/architecture.md "One API client"); its page helpers open a fresh watched page (harness/browser.ts `openPage`) and sign
 * in through the form. Each test still closes its own pages, and checks their problems itself.
 */
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { join } from 'node:path';
import type { Browser, Locator, Page } from 'playwright-core';
import { createKey } from '../../../provisioner/store/keys.ts';
import { KUBECONFIG } from '../../integration/reconciler/harness.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/postgres.ts';
import { startTunnelClient } from '../../../runtime/agents/tunnel-client/client.ts';
import { EVENTS_PATH } from '../../../runtime/protocol/events.ts';
import { ApiClient, type BodyOf } from '../../../provisioner/http/api-client.ts';
import {
  chromiumAvailable,
  CHROMIUM,
  freePort,
  launch,
  newEncryptionKey,
  openPage,
  screenshotDir,
  signIn,
  startServer,
  type ServerProcess,
  type WatchedPage,
} from './browser.ts';

type CreatedKey = Awaited<ReturnType<typeof createKey>>;
type TunnelClient = ReturnType<typeof startTunnelClient>;

/** What the fixture needs of the file's tap object (the root `t`). */
export interface FixtureTest {
  teardown(fn: () => unknown): void;
  comment(...message: unknown[]): void;
}

export interface ConsoleFixtureOptions {
  /** Names the screenshot folder (console-<name>-…), usually the file's name. */
  name: string;
  /**
   * More environment for console-server.ts: CONSOLE_ENGINE ('none': no reconciler),
   * CONSOLE_ENGINE_DELAY_MS, PROVISIONER_* settings.
   */
  env?: Record<string, string | number>;
  /** The provisioner's port; a free one when not given (live.test.ts restarts it on a fixed one). */
  port?: number;
  /** The operator key's name (pages show it as who acted: gate-wait.test.ts); 'console test' when not given. */
  operatorName?: string;
  /** Runs on the database before the provisioner starts (fleet.test.ts seeds its 10,000 tenants). */
  beforeStart?: (db: TestDatabase) => Promise<void>;
  /** `signup` sends a fresh Idempotency-Key with each POST /v1/signup. */
  signupIdempotencyKey?: boolean;
}

export interface ConsoleFixture {
  db: TestDatabase;
  browser: Browser;
  /** The screenshot folder. */
  shots: string;
  /** The operator key, made before the provisioner started. */
  operatorKey: string;
  /** That key as createKey made it (its `info`: id, name, role). */
  operator: CreatedKey;
  /** The provisioner process now running (a new one after `restart`). */
  readonly server: ServerProcess;
  /** Its base URL (http://127.0.0.1:<port>). */
  readonly url: string;
  /** The one API client, on the provisioner now running, with the operator key. */
  readonly client: ApiClient;
  /** The client with another key (`null`: none). */
  as: (key: string | null) => ApiClient;
  /**
   * Signs a tenant up through the API (`fields` beside the organization; the email is
   * `ops@<organization>.example` unless given); throws unless it was accepted.
   */
  signup: (
    organization: string,
    fields?: Partial<BodyOf<'POST /v1/signup'>>,
    key?: string | null,
  ) => Promise<{ id: string; apiKey: string; warm: boolean }>;
  /**
   * Registers the root cluster `eu-1a` (eu-west-1, capacity 50) at the integration kubeconfig's
   * documentation address, forced (its probe skipped: nobody answers there); throws unless 201.
   */
  registerCluster: () => Promise<void>;
  /** POSTs `body` (an event batch) to the runtime events endpoint with the runtime `key`; throws unless 200. */
  postEvents: (key: string, body: unknown) => Promise<void>;
  /**
   * A runtime's tunnel client dialling the provisioner with the runtime `key`, forwarding to
   * `127.0.0.1:<upstreamPort>` (a test double of the runtime's services): connected when it
   * returns, closed in the teardown.
   */
  tunnel: (key: string, upstreamPort: number) => Promise<TunnelClient>;
  /** A fresh watched page on the console, signed in with `key` through the form (nothing waited for). */
  open: (key: string) => Promise<WatchedPage>;
  /**
   * `open` with `key` (the operator key unless given), then waits for `landed` (the Tenants
   * heading unless given): the console has answered the sign-in.
   */
  signedIn: (key?: string, landed?: (page: Page) => Locator) => Promise<WatchedPage>;
  /** Saves a screenshot of `page` as `file` in the screenshot folder. */
  screenshot: (page: Page, file: string, options?: { fullPage?: boolean }) => Promise<void>;
  /** Starts the provisioner again, same port and settings (after `server.kill()` or `server.stop()`). */
  restart: () => Promise<ServerProcess>;
  /** Registers something to close in the teardown, before Chromium; run in the order registered. */
  onClose: (fn: () => unknown) => void;
  /** What the teardown does (once; later calls wait for the first). */
  close: () => Promise<void>;
}

export async function consoleFixture(t: FixtureTest, options: ConsoleFixtureOptions): Promise<ConsoleFixture> {
  if (!chromiumAvailable()) throw new Error(`no Chromium at ${CHROMIUM} (scripts/test.sh installs Debian's chromium)`);
  const db = await createTestDatabase();
  const closers: Array<() => unknown> = [];
  const opened: { browser?: Browser } = {};
  let server: ServerProcess | undefined;
  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      for (const fn of closers) await fn();
      await opened.browser?.close();
      await server?.stop();
      await db.drop();
    })());
  t.teardown(close);

  const operator = await createKey(db.pool, {
    role: 'operator',
    name: options.operatorName ?? 'console test',
    createdBy: 'test',
  });
  const operatorKey = operator.key;
  await options.beforeStart?.(db);
  const serverEnv = {
    databaseUrl: db.url,
    port: options.port ?? (await freePort()),
    encryptionKey: newEncryptionKey(),
    ...options.env,
  };
  server = await startServer(serverEnv);
  const browser = (opened.browser = await launch());
  const shots = screenshotDir(options.name);
  t.comment(`screenshots: ${shots}`);

  const running = () => server!;
  // The provisioner keeps its port across restarts: one client for the fixture's life.
  const client = new ApiClient({ baseUrl: running().url, token: operatorKey });
  const open = async (key: string): Promise<WatchedPage> => {
    const w = await openPage(browser, running().url);
    await signIn(w.page, running().url, key);
    return w;
  };

  return {
    db,
    browser,
    shots,
    operatorKey,
    operator,
    get server() {
      return running();
    },
    get url() {
      return running().url;
    },
    client,
    as: (key) => client.withToken(key ?? undefined),
    async signup(organization, fields = {}, key) {
      const s = await client.call('POST /v1/signup', {
        body: { organization, email: `ops@${organization}.example`, ...fields },
        headers: options.signupIdempotencyKey ? { 'idempotency-key': randomBytes(16).toString('hex') } : {},
        ...(key !== undefined ? { token: key ?? '' } : {}),
      });
      return { id: s.tenant.id, apiKey: s.apiKey, warm: s.warm === true };
    },
    async registerCluster() {
      await client.call('POST /v1/clusters', {
        body: { name: 'eu-1a', region: 'eu-west-1', capacity: 50, kubeconfig: KUBECONFIG, force: true },
      });
    },
    async postEvents(key, body) {
      const res = await fetch(`${running().url}${EVENTS_PATH}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      if (res.status !== 200) throw new Error(`events: ${res.status} ${await res.text()}`);
    },
    async tunnel(key, upstreamPort) {
      const client = startTunnelClient({
        url: `${running().url.replace('http', 'ws')}/v1/tunnel`,
        token: key,
        upstream: `http://127.0.0.1:${upstreamPort}`,
        backoff: { initialMs: 50, maxMs: 200 },
      });
      closers.push(() => client.close());
      if (!client.connected) await once(client.events, 'connected');
      return client;
    },
    open,
    async signedIn(key = operatorKey, landed = (page: Page) => page.getByRole('heading', { name: 'Tenants' })) {
      const w = await open(key);
      await landed(w.page).waitFor();
      return w;
    },
    async screenshot(page, file, shotOptions = {}) {
      await page.screenshot({ path: join(shots, file), ...shotOptions });
    },
    async restart() {
      server = await startServer(serverEnv);
      return server;
    },
    onClose(fn) {
      closers.push(fn);
    },
    close,
  };
}
