/**
 * The end-to-end run lock (harness/environment.ts, acquireRunLock): at most HRT_E2E_SLOTS test
 * files hold a slot at once, a file lock left by the older single-holder format keeps every slot
 * closed while its owner runs, and the older format cannot take the lock while a slot is held.
 * Runs in a temp folder of its own (TMPDIR), apart from the lock the other e2e files share.
 */
import t from 'tap';
import { spawn } from 'node:child_process';
import { mkdtemp, open, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const dir = await mkdtemp(join(tmpdir(), 'hrt-run-lock-'));
process.env.TMPDIR = dir;
t.teardown(() => rm(dir, { recursive: true, force: true }));
const { acquireRunLock, e2eSlots } = await import('./harness/environment.ts');
const LOCK = join(dir, 'hosted-runtimes-e2e.lock');

/** The error code of a rejected promise, or 'resolved'. */
async function failure(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'resolved';
  } catch (err) {
    return (err as { code?: string; name?: string }).code ?? (err as Error).name;
  }
}

t.test('two slots by default: a third file waits until one is released', async (t) => {
  delete process.env.HRT_E2E_SLOTS;
  t.equal(e2eSlots(), 2, 'HRT_E2E_SLOTS unset means 2 slots');
  const first = await acquireRunLock(5_000);
  const second = await acquireRunLock(5_000);
  t.same((await readdir(LOCK)).sort(), ['slot-0', 'slot-1'], 'the lock folder holds one file per slot taken');
  await t.rejects(
    acquireRunLock(1_500),
    /timed out after 1500 ms waiting for a slot/,
    'a third file does not get a slot in 1.5 s while two are held',
  );
  const waiting = acquireRunLock(10_000);
  await first();
  const third = await waiting;
  t.same(
    (await readdir(LOCK)).sort(),
    ['slot-0', 'slot-1'],
    'the waiting file took the released slot within 10 s (two slots held again)',
  );
  await second();
  await third();
  t.equal(await failure(stat(LOCK)), 'ENOENT', 'the last release removes the lock folder');
});

t.test('HRT_E2E_SLOTS=1: one file at a time', async (t) => {
  process.env.HRT_E2E_SLOTS = '1';
  t.teardown(() => void delete process.env.HRT_E2E_SLOTS);
  const only = await acquireRunLock(5_000);
  await t.rejects(
    acquireRunLock(1_500),
    /1 slots/,
    'a second file does not get a slot in 1.5 s while the only one is held',
  );
  await only();
  const next = await acquireRunLock(5_000);
  await next();
});

t.test('HRT_E2E_SLOTS that is not a whole number from 1 to 8 is refused, naming it', async (t) => {
  for (const bad of ['0', '-1', '2.5', 'two', '9']) {
    process.env.HRT_E2E_SLOTS = bad;
    t.throws(
      () => e2eSlots(),
      new RegExp(`HRT_E2E_SLOTS must be a whole number from 1 to 8, not "${bad.replace('.', '\\.')}"`),
      `HRT_E2E_SLOTS=${bad} is refused`,
    );
  }
  delete process.env.HRT_E2E_SLOTS;
});

t.test('the older single-file lock and the slot folder exclude each other', async (t) => {
  // The older format: a file at the lock's path holding its owner's pid (a live process here).
  const owner = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  t.teardown(() => void owner.kill('SIGKILL'));
  await writeFile(LOCK, String(owner.pid));
  await t.rejects(acquireRunLock(1_500), /timed out/, 'no slot while a live process holds the older file lock');
  owner.kill('SIGKILL');
  await new Promise((resolve) => owner.once('exit', resolve));
  const release = await acquireRunLock(5_000);
  t.ok((await stat(LOCK)).isDirectory(), 'the older lock of a process that died is taken over (a slot folder now)');
  // What the older format does to take the lock: create the file exclusively. It fails while a
  // slot is held, and the older code then waits (it reads no owner pid from a folder).
  t.equal(await failure(open(LOCK, 'wx')), 'EEXIST', 'the older exclusive create fails while a slot is held');
  await release();
  t.equal(
    await failure(open(LOCK, 'wx').then((fh) => fh.close())),
    'resolved',
    'the older exclusive create succeeds once the last slot is released',
  );
  await rm(LOCK);
});

t.test('a slot whose owner died is taken over', async (t) => {
  delete process.env.HRT_E2E_SLOTS;
  const dead = spawn(process.execPath, ['-e', '']);
  await new Promise((resolve) => dead.once('exit', resolve));
  const a = await acquireRunLock(5_000);
  await writeFile(join(LOCK, 'slot-1'), String(dead.pid));
  const b = await acquireRunLock(5_000);
  t.equal(
    (await readFile(join(LOCK, 'slot-1'), 'utf8')).trim(),
    String(process.pid),
    'slot-1, which named a process that had exited, now names this process',
  );
  await a();
  await b();
});

t.test('an exclusive file runs alone: it waits for every slot, and holds them all', async (t) => {
  delete process.env.HRT_E2E_SLOTS;
  const normal = await acquireRunLock(5_000);
  await t.rejects(
    acquireRunLock(1_500, { exclusive: true }),
    /timed out/,
    'an exclusive file does not start in 1.5 s while another file holds a slot',
  );
  t.same(await readdir(LOCK), ['slot-0'], 'the exclusive file that gave up holds no slot');
  await normal();
  const alone = await acquireRunLock(5_000, { exclusive: true });
  t.same((await readdir(LOCK)).sort(), ['slot-0', 'slot-1'], 'the exclusive file holds both slots');
  await t.rejects(
    acquireRunLock(1_500),
    /timed out/,
    'no other file gets a slot in 1.5 s while the exclusive one runs',
  );
  await alone();
  t.equal(await failure(stat(LOCK)), 'ENOENT', 'the exclusive release frees every slot and removes the folder');
});
