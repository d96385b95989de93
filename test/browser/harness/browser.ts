/**
 * Browser test helpers: a provisioner process (console-server.ts) that can be killed and started
 * again on its port, Debian's Chromium driven by playwright-core, and a page watched for what must
 * never happen (a console error, an uncaught exception, a request to any host but the
 * provisioner), with axe-core's accessibility check and screenshots under one folder per run.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { chromium, type Browser, type Page } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const SERVER = join(import.meta.dirname, 'console-server.ts');
const AXE = readFileSync(join(import.meta.dirname, '../../../node_modules/axe-core/axe.min.js'), 'utf8');

export function chromiumAvailable(): boolean {
  return existsSync(CHROMIUM);
}

/** A free loopback port (the server is restarted on the same one). */
export async function freePort(): Promise<number> {
  const s = createServer();
  s.listen(0, '127.0.0.1');
  await once(s, 'listening');
  const port = (s.address() as { port: number }).port;
  s.close();
  await once(s, 'close');
  return port;
}

export interface ServerProcess {
  url: string;
  child: ChildProcess;
  /** SIGKILL, as a crash: nothing is shut down. */
  kill(): Promise<void>;
  /** SIGTERM and wait. */
  stop(): Promise<void>;
}

export async function startServer(
  env: { databaseUrl: string; port: number; encryptionKey: string } & Record<string, string | number>,
): Promise<ServerProcess> {
  const { databaseUrl, port, encryptionKey, ...rest } = env;
  const child = spawn(process.execPath, [SERVER], {
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl,
      PORT: String(port),
      PROVISIONER_ENCRYPTION_KEY: encryptionKey,
      ...Object.fromEntries(Object.entries(rest).map(([k, v]) => [k, String(v)])),
    },
    // stdin is a pipe the server watches: if this process dies, the server exits too (it never
    // outlives a test file, even one killed by tap's timeout).
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout });
  const url = await new Promise<string>((resolve, reject) => {
    // A bound, not a claim about speed: on a loaded 2-core machine the start took over 60 s.
    const timer = setTimeout(() => reject(new Error('console-server did not print `listening` within 180 s')), 180_000);
    child.once('exit', (code) => reject(new Error(`console-server exited with ${code} before listening`)));
    lines.on('line', (line) => {
      const m = /^listening (\S+)$/.exec(line);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
  });
  const exited = once(child, 'exit');
  return {
    url,
    child,
    async kill() {
      child.kill('SIGKILL');
      await exited;
    },
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}

export const newEncryptionKey = () => randomBytes(32).toString('hex');

export async function launch(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    // Root in a CI container: Chromium's sandbox needs user namespaces it may not have.
    args: ['--no-sandbox', '--disable-dev-shm-usage'],
  });
}

export interface WatchedPage {
  page: Page;
  /** Console errors, uncaught exceptions and requests to other hosts, as they happened. */
  problems: string[];
  /** Requests the page made (URLs). */
  requests: string[];
}

/** A fresh context and page; every request to a host other than `origin` is refused and recorded. */
export async function openPage(browser: Browser, origin: string): Promise<WatchedPage> {
  const context = await browser.newContext({ acceptDownloads: true, viewport: { width: 1400, height: 1000 } });
  const page = await context.newPage();
  const problems: string[] = [];
  const requests: string[] = [];
  const own = new URL(origin).host;
  await context.route('**/*', async (route) => {
    const u = new URL(route.request().url());
    if ((u.protocol === 'http:' || u.protocol === 'https:') && u.host !== own) {
      problems.push(`request to another host: ${u.href}`);
      await route.abort();
    } else await route.continue();
  });
  page.on('request', (r) => requests.push(r.url()));
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`console error: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`uncaught: ${e.message}`));
  return { page, problems, requests };
}

/**
 * What functions run in the page (waitForFunction) may read, typed without the DOM library (the
 * project's TypeScript is Node's). Such functions see only their own body and argument: cast
 * `globalThis` to this inside them. (The console's CSP refuses functions passed as strings.)
 */
export interface PageGlobals {
  getComputedStyle(element: unknown): { color: string };
  document: {
    querySelector(selector: string): { dataset: Record<string, string | undefined>; textContent: string | null } | null;
  };
}

/** Serious and critical axe-core violations on the page as it is now. */
export async function axeViolations(page: Page): Promise<string[]> {
  await page.evaluate(AXE);
  const result = await page.evaluate<{
    violations: { id: string; impact: string; help: string; nodes: { target: string[] }[] }[];
  }>("axe.run(document, { resultTypes: ['violations'] })");
  return result.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
}

/** One folder per run for the screenshots (printed, kept). */
export function screenshotDir(name: string): string {
  return process.env.CONSOLE_SCREENSHOTS_DIR ?? mkdtempSync(join(tmpdir(), `console-${name}-`));
}

export function p95(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(0.95 * s.length) - 1)]!;
}
export function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

/** Signs in through the form with `key`. */
export async function signIn(page: Page, url: string, key: string): Promise<void> {
  await page.goto(`${url}/console`);
  await page.getByLabel('API key').fill(key);
  await page.getByRole('button', { name: 'Sign in' }).click();
}
