/**
 * The event ids of the tenant change streams: opaque (no sequence number shows), bound to their
 * stream (another tenant's id or a changed one is refused, naming the field), `0` kept.
 */
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { SecretBox } from '../../provisioner/crypto.ts';
import { AppError } from '../../provisioner/errors.ts';
import { decodeStreamCursor, encodeStreamCursor, STREAM_CURSOR } from '../../provisioner/http/stream-cursor.ts';

const box = new SecretBox(randomBytes(32));

t.test('a cursor hides its position and gives it back on the stream it came from', async (t) => {
  const id = encodeStreamCursor(box, 'changes/a', '123456');
  t.match(id, new RegExp(STREAM_CURSOR), 'matches the documented pattern');
  t.notMatch(id, /123456/, 'the position does not show');
  t.not(encodeStreamCursor(box, 'changes/a', '123456'), id, 'two ids of one position differ (nothing to compare)');
  t.equal(decodeStreamCursor(box, 'changes/a', id, 'Last-Event-ID'), '123456', 'resumes at the position');
  t.equal(encodeStreamCursor(box, 'changes/a', '0'), '0', '0 stays 0');
  t.equal(decodeStreamCursor(box, 'changes/a', '0', 'after'), '0');
});

t.test('anything but an id of this stream is a 400 naming the field', async (t) => {
  const id = encodeStreamCursor(box, 'changes/a', '42');
  const flipped = `${id.slice(0, -2)}${id.at(-2) === 'A' ? 'B' : 'A'}${id.at(-1)}`;
  for (const [what, cursor, scope] of [
    ['a plain sequence number', '42', 'changes/a'],
    ["another tenant's stream's id", id, 'changes/b'],
    ['a changed id', flipped, 'changes/a'],
    ['an id of another key', encodeStreamCursor(new SecretBox(randomBytes(32)), 'changes/a', '42'), 'changes/a'],
  ] as const) {
    let err: unknown;
    try {
      decodeStreamCursor(box, scope, cursor, 'Last-Event-ID');
    } catch (e) {
      err = e;
    }
    t.ok(err instanceof AppError && err.code === 'VALIDATION_FAILED', `${what}: VALIDATION_FAILED`);
    t.equal((err as AppError).field, 'Last-Event-ID', `${what}: names the field`);
  }
});
