/**
 * The Source Server's cache (runtime/agents/source-server/cache.ts): bounded by the bytes of what
 * it holds, least recently used evicted first, a value larger than the bound never kept.
 */
import t from 'tap';
import { ByteLruCache } from '../../../runtime/agents/source-server/cache.ts';

t.test('bounded by bytes: the least recently used goes first', async (t) => {
  const c = new ByteLruCache<string>(1000);
  c.set('a', 'A', 299);
  c.set('b', 'B', 299);
  c.set('c', 'C', 299);
  t.equal(c.stats().bytes, 900, 'three entries of 300 bytes (value and key) are held');
  t.equal(c.get('a'), 'A', 'a is read: now the most recently used');
  c.set('d', 'D', 299);
  t.notOk(c.has('b'), 'b, the least recently used, was evicted to make room for d');
  t.ok(c.has('a') && c.has('c') && c.has('d'), 'a, c and d are kept');
  t.ok(c.stats().bytes <= 1000, 'the bytes held stay within the bound');
  t.equal(c.stats().evictions, 1, 'one eviction counted');
  c.set('e', 'E', 650);
  t.same(
    ['a', 'c', 'd', 'e'].filter((k) => c.has(k)),
    ['d', 'e'],
    'a 650-byte entry evicts the two least recently used (a, c)',
  );
});

t.test('a value larger than the bound is not kept, and replaces nothing', async (t) => {
  const c = new ByteLruCache<string>(100);
  c.set('small', 's', 10);
  c.set('huge', 'h', 1000);
  t.notOk(c.has('huge'), 'the oversized value is not cached');
  t.ok(c.has('small'), 'what was there stays');
});

t.test('replacing a key frees its old size; hits and misses are counted', async (t) => {
  const c = new ByteLruCache<string>(100);
  c.set('k', 'one', 49);
  c.set('k', 'two', 19);
  t.equal(c.stats().bytes, 20, 'only the new size is held');
  t.equal(c.get('k'), 'two', 'the new value is read');
  t.equal(c.get('missing'), undefined, 'an absent key is a miss');
  t.match(c.stats(), { hits: 1, misses: 1, entries: 1 }, 'one hit, one miss, one entry');
});
