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

/** Whether `pid` still runs: an exited process nobody reaped yet (a zombie) does not. */
const running = async (pid: number) => {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
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

  // The leader exits at once; its background child keeps stdout and writes without pause until the
  // pipe is closed under it (its write fails: SIGPIPE), or for a minute.
  const proc = startProcess(
    'leader',
    'sh',
    ['-c', `sh -c 'echo $$ > ${pidFile}; exec timeout 60 sh -c "while :; do echo late; done"' & echo early`],
    log,
  );
  t.teardown(() => proc.kill());
  const exit = await proc.exited;
  t.equal(exit.code, 0, 'the leader exited by itself');
  await proc.logClosed;
  const writer = Number(await until('the writer’s pid', 5000, () => readFile(pidFile, 'utf8')));
  t.teardown(() => {
    try {
      process.kill(writer, 'SIGKILL');
    } catch {
      // gone
    }
  });
  await until('the writer to stop: the pipe it writes to was closed', 20_000, async () => !(await running(writer)));
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
