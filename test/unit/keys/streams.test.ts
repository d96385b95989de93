/**
 * The per-key event stream places (provisioner/keys/streams.ts): a key holds at most `limit`; a
 * revoked key's streams are ended and give their places back; and a request authenticated just
 * before the revocation, which reaches its route after it, opens no stream (INVALID_API_KEY).
 */
import t from 'tap';
import { KeyCache } from '../../../provisioner/keys/cache.ts';
import { KeyStreams } from '../../../provisioner/keys/streams.ts';

t.test('a key holds at most the limit; a place is given back once', async (t) => {
  const streams = new KeyStreams();
  const a = streams.reserve('k1', 2);
  streams.reserve('k1', 2);
  t.throws(() => streams.reserve('k1', 2), { code: 'TOO_MANY_STREAMS' });
  t.equal(streams.count('k2'), 0, 'another key is not counted with it');
  a.release();
  a.release();
  t.equal(streams.count('k1'), 1, 'released once');
});

t.test('revoked: the streams end, and a late open of the key is refused, not counted', async (t) => {
  const cache = new KeyCache();
  const streams = new KeyStreams({ revoked: (keyId) => cache.revoked({ keyId }) });
  const open = streams.reserve('k1', 5);
  cache.revoke('k1');
  streams.closeKey('k1');
  t.ok(open.revoked && open.signal.aborted, 'the open stream is told and aborted');
  t.equal(streams.count('k1'), 0, 'its place is given back');
  t.throws(() => streams.reserve('k1', 5), { code: 'INVALID_API_KEY' }, 'an open that was under way is refused');
  t.equal(streams.count('k1'), 0, 'and takes no place');
  t.ok(streams.reserve('k2', 5), 'other keys open as before');
});
