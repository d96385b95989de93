import t from 'tap';
import { randomBytes } from 'node:crypto';
import { loadConfig, ConfigError } from '../../provisioner/config.ts';
import { SecretBox } from '../../provisioner/crypto.ts';
import { decodeCursor, encodeCursor } from '../../provisioner/http/cursor.ts';
import { generateKey, hashKey, keyPrefix, looksLikeKey } from '../../provisioner/auth/keys.ts';

t.test('config defaults follow the documented contract', async (t) => {
  const c = loadConfig({}, '/srv/app');
  t.match(c, { port: 8080, host: '127.0.0.1', databaseUrl: undefined, dataDir: '/srv/app/.data', adminToken: undefined, encryptionKey: undefined });
  const hex = randomBytes(32).toString('hex');
  t.equal(loadConfig({ PROVISIONER_ENCRYPTION_KEY: hex }).encryptionKey?.toString('hex'), hex);
  const b64 = randomBytes(32).toString('base64');
  t.equal(loadConfig({ PROVISIONER_ENCRYPTION_KEY: b64 }).encryptionKey?.toString('base64'), b64);
  t.throws(() => loadConfig({ HOST: 'a b' }), ConfigError);
});

t.test('sealed values round-trip, are randomised, and detect tampering', async (t) => {
  const box = new SecretBox(randomBytes(32));
  const a = box.encrypt('kubeconfig', 'cluster/a');
  const b = box.encrypt('kubeconfig', 'cluster/a');
  t.not(a.toString('hex'), b.toString('hex'), 'a fresh nonce each time');
  t.equal(box.decrypt(a, 'cluster/a').toString(), 'kubeconfig');
  const tampered = Buffer.from(a);
  tampered[tampered.length - 1]! ^= 1;
  t.throws(() => box.decrypt(tampered, 'cluster/a'));
  t.throws(() => new SecretBox(randomBytes(32)).decrypt(a, 'cluster/a'), 'another key cannot open it');
});

t.test('cursors are opaque and signed', async (t) => {
  const box = new SecretBox(randomBytes(32));
  const c = encodeCursor(box, 'tenants', { ts: '2026-01-01 00:00:00.123456+00', id: 'abc' });
  t.same(decodeCursor(box, 'tenants', c), { ts: '2026-01-01 00:00:00.123456+00', id: 'abc' });
  t.throws(() => decodeCursor(box, 'operations', c), { code: 'INVALID_CURSOR' }, 'a cursor of another listing is refused');
  t.throws(() => decodeCursor(new SecretBox(randomBytes(32)), 'tenants', c), { code: 'INVALID_CURSOR' });
});

t.test('API keys carry their role, are hashed, and have a display prefix', async (t) => {
  const k = generateKey('operator');
  t.match(k, /^hrt_operator_[\w-]{43}$/);
  t.ok(looksLikeKey(k));
  t.notOk(looksLikeKey('a b'));
  t.equal(hashKey(k).length, 32);
  t.not(generateKey('operator'), k);
  t.equal(keyPrefix(k), k.slice(0, 'hrt_operator_'.length + 6));
});
