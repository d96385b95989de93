/**
 * The harness's process starter (sandbox/processes.ts): a descendant that outlives the process it
 * was started under keeps the output pipes open. Its later output must neither crash the process
 * that started it (a write after the log ended) nor keep the log open.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { startProcess, until } from '../../../sandbox/processes.ts';

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

t.test('output of a descendant that outlives the leader does not write to the ended log', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'processes-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const log = join(dir, 'out.log');
  const pidFile = join(dir, 'writer.pid');
  const uncaught: Error[] = [];
  const onUncaught = (err: Error) => uncaught.push(err);
  process.on('uncaughtException', onUncaught);
  t.teardown(() => process.off('uncaughtException', onUncaught));

  // The leader exits at once; its background child keeps stdout and writes without pause for up
  // to ten seconds.
  const proc = startProcess(
    'leader',
    'sh',
    ['-c', `sh -c 'echo $$ > ${pidFile}; exec timeout 10 sh -c "while :; do echo late; done"' & echo early`],
    log,
  );
  t.teardown(() => proc.kill());
  const exit = await proc.exited;
  t.equal(exit.code, 0, 'the leader exited by itself');
  await proc.logClosed;
  const writer = Number(await until('the writer’s pid', 5000, () => readFile(pidFile, 'utf8')));
  await until('the writer to stop, its output no longer read', 8000, () => !alive(writer));
  t.same(
    uncaught.map((e) => e.message),
    [],
    'no uncaught error from the output after the log ended',
  );
  const text = await readFile(log, 'utf8');
  t.match(text, /^early$/m, "the leader's own output is in the log");
});

t.test('the last lines of a process that exits at once are kept', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'processes-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const log = join(dir, 'out.log');
  const proc = startProcess(
    'burst',
    'sh',
    ['-c', 'i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done; echo done >&2'],
    log,
  );
  await proc.logClosed;
  const text = await readFile(log, 'utf8');
  t.match(text, /line-1999\n/, 'the last stdout line is in the log');
  t.match(text, /^done$/m, 'the stderr line is in the log');
});
