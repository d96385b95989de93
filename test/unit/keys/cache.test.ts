import t from 'tap';
import { KeyCache } from '../../../provisioner/keys/cache.ts';

const id = (keyId: string, tenantId: string | null = null) => ({ keyId, role: 'tenant' as const, tenantId });

t.test('entries expire after the TTL', async (t) => {
  let now = 1000;
  const cache = new KeyCache({ ttlMs: 2000, now: () => now });
  cache.set('h1', id('k1'));
  t.same(cache.get('h1'), id('k1'));
  now += 1999;
  t.ok(cache.get('h1'), 'still valid just before the TTL');
  now += 1;
  t.equal(cache.get('h1'), undefined, 'gone at the TTL');
});

t.test('revoking a key or a tenant drops its entries at once', async (t) => {
  const cache = new KeyCache();
  cache.set('a', id('k1', 't1'));
  cache.set('b', id('k2', 't1'));
  cache.set('c', id('k3', 't2'));
  cache.revoke('k1');
  t.equal(cache.get('a'), undefined);
  t.ok(cache.get('b'));
  cache.revokeTenant('t1');
  t.equal(cache.get('b'), undefined);
  t.ok(cache.get('c'), 'other tenants untouched');
});

t.test('the cache is bounded and a zero TTL caches nothing', async (t) => {
  const cache = new KeyCache({ max: 3 });
  for (const k of ['a', 'b', 'c', 'd']) cache.set(k, id(k));
  t.equal(cache.get('a'), undefined, 'the oldest went first');
  t.ok(cache.get('d'));
  const off = new KeyCache({ ttlMs: 0 });
  off.set('x', id('x'));
  t.equal(off.get('x'), undefined);
});

t.test('a revoked key, or a deleted tenant’s, is not cached again by a lookup that answers after it', async (t) => {
  let now = 1000;
  const cache = new KeyCache({ now: () => now, revokedMs: 60_000 });
  cache.revoke('k1');
  cache.revokeTenant('t9');
  t.ok(cache.revoked({ keyId: 'k1' }), 'the revoked key is remembered');
  t.ok(cache.revoked({ keyId: 'k5', tenantId: 't9' }), 'so is every key of the deleted tenant');
  t.notOk(cache.revoked({ keyId: 'k2', tenantId: 't1' }), 'other keys are not');
  cache.set('a', id('k1'));
  cache.set('b', id('k5', 't9'));
  t.equal(cache.get('a'), undefined, 'the revoked key is not cached again');
  t.equal(cache.get('b'), undefined, 'nor a key of the deleted tenant');
  now += 60_000;
  cache.revoke('k3'); // forgets what is older than revokedMs
  t.notOk(cache.revoked({ keyId: 'k1' }), 'forgotten after revokedMs (a lookup cannot take that long)');
  t.ok(cache.revoked({ keyId: 'k3' }));
});
