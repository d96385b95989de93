import t from 'tap';
import { prettyLine, prettyStream } from '../../provisioner/logger.ts';

t.test('a terminal gets readable lines: time, level, component, message, fields', async (t) => {
  const line = prettyLine(
    JSON.stringify({
      level: 40,
      time: Date.UTC(2026, 0, 2, 12, 4, 5, 123),
      pid: 1,
      hostname: 'h',
      component: 'reconciler',
      msg: 'pulumi CLI not found',
      where: 'on PATH',
      message: 'the Pulumi CLI was not found on PATH: install it',
    }),
  );
  t.equal(
    line,
    '12:04:05.123 WARN  [reconciler] pulumi CLI not found where="on PATH" message="the Pulumi CLI was not found on PATH: install it"\n',
    'one line, values with spaces quoted, pid and hostname left out',
  );
  t.equal(
    prettyLine(
      JSON.stringify({
        level: 30,
        time: 0,
        msg: 'request completed',
        req: { method: 'POST', url: '/v1/signup' },
        res: { statusCode: 202 },
        responseTime: 3.5,
      }),
    ),
    '00:00:00.000 INFO  request completed POST /v1/signup status=202 responseTime=3.5\n',
    'a request line shows method, path and status',
  );
  t.match(
    prettyLine(
      JSON.stringify({
        level: 50,
        time: 0,
        msg: 'request failed',
        err: { type: 'Error', message: 'boom', stack: 'Error: boom\n    at x' },
      }),
    ),
    /^00:00:00\.000 ERROR request failed\n {4}Error: boom\n {8}at x\n$/,
    "an error's stack follows on indented lines",
  );
  t.equal(prettyLine('not json'), 'not json\n', 'a line that is not JSON passes through');
});

t.test('the pretty stream writes whole lines', async (t) => {
  const out: string[] = [];
  const stream = prettyStream((s) => out.push(s));
  stream.write('{"level":30,"time":0,"msg":"a"}\n{"level":30,');
  stream.write('"time":0,"msg":"b"}\n');
  await new Promise((resolve) => setImmediate(resolve));
  t.same(out, ['00:00:00.000 INFO  a\n', '00:00:00.000 INFO  b\n'], 'a line split across writes comes out whole');
});
