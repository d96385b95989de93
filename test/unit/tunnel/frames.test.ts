import t from 'tap';
import {
  decodeFrame,
  encodeDataFrameInto,
  encodeFrame,
  type Frame,
  headBytes,
  PROTOCOL_VERSION,
  ProtocolError,
  ResetCode,
} from '../../../runtime/protocol/frames.ts';

void t.test('every frame type survives an encode/decode round trip', async (t) => {
  const frames: Frame[] = [
    {
      type: 'hello',
      streamId: 0,
      hello: { version: PROTOCOL_VERSION, window: 262144, maxMessageBytes: 1048576, maxStreams: 512 },
    },
    {
      type: 'open',
      streamId: 1,
      head: {
        method: 'POST',
        path: '/api/x?y=1',
        headers: [
          ['content-type', 'application/json'],
          ['set-cookie', 'a'],
          ['set-cookie', 'b'],
        ],
      },
    },
    { type: 'response', streamId: 3, head: { status: 201, headers: [['x-a', 'é ok']] } },
    { type: 'data', streamId: 5, chunk: Buffer.from([0, 1, 2, 255]) },
    { type: 'end', streamId: 7 },
    { type: 'window', streamId: 9, increment: 65536 },
    { type: 'reset', streamId: 11, code: ResetCode.refused, message: 'busy' },
    {
      type: 'hello',
      streamId: 0,
      hello: {
        version: PROTOCOL_VERSION,
        window: 65536,
        maxMessageBytes: 1048576,
        maxStreams: 8,
        features: ['goaway'],
      },
    },
    { type: 'goaway', streamId: 0, message: 'replica shutting down', reconnect: true },
    { type: 'goaway', streamId: 0, message: 'replaced', reconnect: false },
  ];
  for (const f of frames) t.same(decodeFrame(encodeFrame(f)), f, f.type);
});

void t.test('goaway is a connection frame; unknown features in a hello are kept as names, nothing else', async (t) => {
  const onStream = encodeFrame({ type: 'goaway', streamId: 0, message: 'x', reconnect: true });
  onStream.writeUInt32BE(3, 2);
  t.throws(() => decodeFrame(onStream), ProtocolError);
  const hello = Buffer.concat([
    Buffer.from([PROTOCOL_VERSION, 1, 0, 0, 0, 0]),
    Buffer.from(
      JSON.stringify({
        version: 1,
        window: 1024,
        maxMessageBytes: 65536,
        maxStreams: 1,
        features: ['goaway', 'future', 7, null],
      }),
    ),
  ]);
  const f = decodeFrame(hello);
  t.same(f.type === 'hello' ? f.hello.features : null, ['goaway', 'future']);
});

void t.test('data frames carry raw bytes after a 6-byte header, not JSON', async (t) => {
  const buf = encodeFrame({ type: 'data', streamId: 0x01020304, chunk: Buffer.from('abc') });
  t.same([...buf], [PROTOCOL_VERSION, 4, 1, 2, 3, 4, 97, 98, 99]);
});

void t.test('a data frame gathered from several pieces into a reused buffer decodes like an encoded one', async (t) => {
  const target = Buffer.alloc(64, 0xee);
  const frame = encodeDataFrameInto(target, 7, [Buffer.from('ab'), Buffer.from(''), Buffer.from('cde')], 5);
  t.equal(frame.buffer, target.buffer, 'a view of the target, no new allocation');
  t.same(frame, encodeFrame({ type: 'data', streamId: 7, chunk: Buffer.from('abcde') }));
  t.throws(() => encodeDataFrameInto(Buffer.alloc(8), 7, [Buffer.from('abcde')], 5), RangeError, 'target too small');
  t.throws(() => encodeDataFrameInto(target, 7, [Buffer.from('abc')], 5), RangeError, 'pieces shorter than announced');
  t.throws(() => encodeDataFrameInto(target, 0, [Buffer.from('a')], 1), RangeError, 'stream id 0');
});

void t.test('malformed frames are refused with a ProtocolError, never a crash', async (t) => {
  const bad: Array<[string, Buffer]> = [
    ['too short', Buffer.from([1, 4])],
    ['other version', Buffer.from([2, 4, 0, 0, 0, 1])],
    ['unknown type', Buffer.from([1, 42, 0, 0, 0, 1])],
    ['stream 0 for data', Buffer.from([1, 4, 0, 0, 0, 0])],
    [
      'hello on a stream',
      encodeFrame({
        type: 'hello',
        streamId: 0,
        hello: { version: 1, window: 1, maxMessageBytes: 1, maxStreams: 1 },
      }).fill(1, 5, 6),
    ],
    ['zero window', Buffer.from([1, 6, 0, 0, 0, 1, 0, 0, 0, 0])],
    ['end with payload', Buffer.from([1, 5, 0, 0, 0, 1, 9])],
  ];
  const json = (type: number, value: unknown): Buffer =>
    Buffer.concat([Buffer.from([1, type, 0, 0, 0, 1]), Buffer.from(JSON.stringify(value))]);
  bad.push(['open not JSON', Buffer.concat([Buffer.from([1, 2, 0, 0, 0, 1]), Buffer.from('{nope')])]);
  bad.push(['open without leading slash', json(2, { method: 'GET', path: 'api', headers: [] })]);
  bad.push(['open with a CRLF in a header', json(2, { method: 'GET', path: '/', headers: [['x', 'a\r\nb: c']] })]);
  bad.push(['open with a bad header name', json(2, { method: 'GET', path: '/', headers: [['x y', 'a']] })]);
  bad.push(['response with status 101', json(3, { status: 101, headers: [] })]);
  bad.push(['response headers not pairs', json(3, { status: 200, headers: [['a']] })]);
  for (const [what, buf] of bad) t.throws(() => decodeFrame(buf), ProtocolError, what);
});

void t.test('an unknown reset code from a newer peer reads as INTERNAL_ERROR', async (t) => {
  const buf = Buffer.concat([
    Buffer.from([1, 7, 0, 0, 0, 1]),
    Buffer.from(JSON.stringify({ code: 'SOMETHING_NEW', message: 'm' })),
  ]);
  t.same(decodeFrame(buf), { type: 'reset', streamId: 1, code: ResetCode.internal, message: 'm' });
});

void t.test('head size counts method, path and every header', async (t) => {
  t.equal(headBytes({ method: 'GET', path: '/a', headers: [['k', 'vv']] }), 3 + 2 + 1 + 2 + 4);
});
