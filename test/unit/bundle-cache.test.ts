/**
 * The cache of generated bundles (provisioner/runtime-registry/bundle-cache.ts): bounded by entries and
 * by bytes, least recently used out first, entries frozen; queued builds shared by concurrent
 * requests for one key and served one tenant at a time in turn.
 */
import t from 'tap';
import { BuildQueue, BundleCache, bundleCacheKey } from '../../provisioner/runtime-registry/bundle-cache.ts';

t.test('an entry is built once and shared, frozen', async (t) => {
  const cache = new BundleCache();
  let built = 0;
  const build = () => ({ text: `bundle ${++built}`, nested: { list: [1, 2] } });
  const one = cache.get('k', build, () => 10);
  const two = cache.get('k', build, () => 10);
  t.equal(built, 1, 'built once');
  t.equal(two, one, 'the second get answers the same entry');
  t.ok(Object.isFrozen(one.nested.list), 'nested values are frozen: no request can change what others get');
  t.match(cache.stats(), { hits: 1, builds: 1, entries: 1, bytes: 10 }, 'the stats count a hit and a build');
});

t.test('bounded by entries and by bytes, the least recently used out first', async (t) => {
  const cache = new BundleCache({ maxEntries: 2, maxBytes: 100 });
  cache.get(
    'a',
    () => 'a',
    () => 10,
  );
  cache.get(
    'b',
    () => 'b',
    () => 10,
  );
  cache.get(
    'a',
    () => 'a2',
    () => 10,
  ); // a is now the most recently used
  cache.get(
    'c',
    () => 'c',
    () => 10,
  );
  t.equal(
    cache.get(
      'a',
      () => 'rebuilt',
      () => 10,
    ),
    'a',
    'the recently used entry stayed',
  );
  t.equal(
    cache.get(
      'b',
      () => 'rebuilt',
      () => 10,
    ),
    'rebuilt',
    'the least recently used went',
  );
  const bytes = new BundleCache({ maxEntries: 10, maxBytes: 100 });
  bytes.get(
    'x',
    () => 'x',
    () => 60,
  );
  bytes.get(
    'y',
    () => 'y',
    () => 60,
  );
  t.equal(bytes.stats().entries, 1, 'two entries of 60 bytes do not fit in 100');
  t.equal(
    bytes.get(
      'too-big',
      () => 'big',
      () => 500,
    ),
    'big',
    'an entry larger than the cache is answered',
  );
  t.equal(bytes.stats().entries, 1, 'and not kept');
  const off = new BundleCache({ maxBytes: 0 });
  off.get(
    'k',
    () => 'v',
    () => 1,
  );
  t.equal(off.stats().entries, 0, 'maxBytes 0 keeps nothing');
});

t.test('the key covers every part', async (t) => {
  t.not(bundleCacheKey('u', { a: 1 }, '1.4.1'), bundleCacheKey('u', { a: 2 }, '1.4.1'), 'settings differ');
  t.not(bundleCacheKey('u', { a: 1 }, '1.4.1'), bundleCacheKey('u', { a: 1 }, '1.5.0'), 'versions differ');
  t.equal(bundleCacheKey('u', { a: 1 }, '1.4.1'), bundleCacheKey('u', { a: 1 }, '1.4.1'), 'same parts, same key');
});

t.test('concurrent queued requests for one key share one build; a failed build keeps nothing', async (t) => {
  const cache = new BundleCache();
  let built = 0;
  const results = await Promise.all(
    Array.from({ length: 5 }, () =>
      cache.getQueued(
        'k',
        'tenant',
        () => ({ n: ++built }),
        () => 1,
      ),
    ),
  );
  t.equal(built, 1, 'built once for five requests');
  t.ok(
    results.every((r) => r === results[0]),
    'all five get the one entry',
  );
  await t.rejects(
    cache.getQueued(
      'bad',
      'tenant',
      () => {
        throw new Error('no such version');
      },
      () => 1,
    ),
    /no such version/,
    "a build's error reaches the request",
  );
  t.equal(
    await cache.getQueued(
      'bad',
      'tenant',
      () => 'fine',
      () => 1,
    ),
    'fine',
    'and the key is built again later',
  );
});

t.test('queued builds are served one tenant at a time in turn', async (t) => {
  const queue = new BuildQueue();
  const order: string[] = [];
  const runs = [
    ...['a1', 'a2', 'a3'].map((id) => queue.run('greedy', () => order.push(id))),
    queue.run('other', () => order.push('b1')),
  ];
  await Promise.all(runs);
  t.same(
    order,
    ['a1', 'b1', 'a2', 'a3'],
    "another tenant's build goes after one of the greedy tenant's, not after all",
  );
});
