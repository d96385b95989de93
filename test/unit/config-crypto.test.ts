import t from 'tap';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createCa } from '../../sandbox/pki.ts';
import { advertiseUrl, loadConfig, ConfigError } from '../../provisioner/config.ts';
import { SecretBox } from '../../provisioner/crypto.ts';
import { decodeCursor, encodeCursor } from '../../provisioner/http/cursor.ts';
import { generateKey, hashKey, keyPrefix, looksLikeKey } from '../../provisioner/store/key-format.ts';

t.test('config defaults follow the documented contract', async (t) => {
  const c = loadConfig({}, '/srv/app');
  t.match(c, {
    port: 8080,
    host: '127.0.0.1',
    databaseUrl: undefined,
    dataDir: '/srv/app/.data',
    adminToken: undefined,
    encryptionKey: undefined,
  });
  const hex = randomBytes(32).toString('hex');
  t.equal(loadConfig({ PROVISIONER_ENCRYPTION_KEY: hex }).encryptionKey?.toString('hex'), hex);
  const b64 = randomBytes(32).toString('base64');
  t.equal(loadConfig({ PROVISIONER_ENCRYPTION_KEY: b64 }).encryptionKey?.toString('base64'), b64);
  t.throws(() => loadConfig({ HOST: 'a b' }), ConfigError);
});

t.test(
  'tenant budgets: defaults, settings, and values out of range refused at start-up naming the variable',
  async (t) => {
    t.same(
      loadConfig({}).budgets,
      {
        runtimeObjects: 20_000,
        runtimeObjectBytes: 64 * 1024 * 1024,
        eventBatchesPerSecond: 20,
        digestsPerMinute: 120,
        managedClusters: 50,
        keys: 100,
        hybridRuntimes: 10,
        hybridRegistrationsPerHour: 30,
        hybridBundlesPerMinute: 60,
        hybridBundlesPerRuntimePerMinute: 20,
        upgraderPollsPerMinute: 120,
        upgraderPollsPerRuntimePerMinute: 60,
        appHistoryEntries: 10_000,
        appHistoryBytes: 64 * 1024 * 1024,
      },
      'the documented defaults',
    );
    t.equal(
      loadConfig({ PROVISIONER_HYBRID_RUNTIMES_PER_TENANT: '3' }).budgets.hybridRuntimes,
      3,
      'the hybrid runtimes budget is read',
    );
    t.equal(
      loadConfig({ PROVISIONER_RUNTIME_OBJECTS_PER_TENANT: '5000' }).budgets.runtimeObjects,
      5000,
      'a setting is read',
    );
    for (const [name, value] of [
      ['PROVISIONER_RUNTIME_OBJECTS_PER_TENANT', '0'],
      ['PROVISIONER_RUNTIME_OBJECT_BYTES_PER_TENANT', '1000'],
      ['PROVISIONER_RUNTIME_EVENT_BATCHES_PER_SECOND', 'many'],
      ['PROVISIONER_RUNTIME_DIGESTS_PER_MINUTE', '0'],
      ['PROVISIONER_MANAGED_CLUSTERS_PER_TENANT', '-1'],
      ['PROVISIONER_KEYS_PER_TENANT', '1'],
      ['PROVISIONER_HYBRID_RUNTIMES_PER_TENANT', '0'],
      ['PROVISIONER_HYBRID_REGISTRATIONS_PER_HOUR', '0'],
      ['PROVISIONER_HYBRID_BUNDLES_PER_MINUTE', 'x'],
      ['PROVISIONER_HYBRID_UPGRADER_POLLS_PER_RUNTIME_PER_MINUTE', '0'],
      ['PROVISIONER_APP_HISTORY_MAX_PER_TENANT', '0'],
      ['PROVISIONER_APP_HISTORY_MAX_BYTES_PER_TENANT', '1000'],
    ] as const)
      t.throws(
        () => loadConfig({ [name]: value }),
        { name: 'ConfigError', message: new RegExp(name) },
        `${name}=${value} is refused`,
      );
  },
);

t.test(
  'hybrid runtimes: the public URL (no trailing slash) and the bootstrap token life, refused out of range',
  async (t) => {
    t.same(
      loadConfig({}).hybrid,
      {
        publicUrl: undefined,
        bootstrapTtlSeconds: 86_400,
        ingress: {
          allowedCidrs: [],
          allowedCidrsVariable: 'PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS',
          caPem: undefined,
          requestsPerRuntime: 32,
          requestsPerTenant: 64,
        },
        removedRetentionHours: 24,
        bundleCacheBytes: 64 * 1024 * 1024,
      },
      'no public URL, a day by default; ingress: public addresses only, the default CAs, 32 requests per runtime and 64 per tenant; removed runtimes kept 24 hours; a 64 MiB bundle cache',
    );
    t.same(
      loadConfig({
        PROVISIONER_PUBLIC_URL: 'https://cp.example.test/',
        PROVISIONER_HYBRID_BOOTSTRAP_TTL_SECONDS: '600',
      }).hybrid,
      {
        publicUrl: 'https://cp.example.test',
        bootstrapTtlSeconds: 600,
        ingress: {
          allowedCidrs: [],
          allowedCidrsVariable: 'PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS',
          caPem: undefined,
          requestsPerRuntime: 32,
          requestsPerTenant: 64,
        },
        removedRetentionHours: 24,
        bundleCacheBytes: 64 * 1024 * 1024,
      },
      'both settings are read; the URL loses its trailing slash',
    );
    for (const [name, value] of [
      ['PROVISIONER_HYBRID_BOOTSTRAP_TTL_SECONDS', '59'],
      ['PROVISIONER_HYBRID_BOOTSTRAP_TTL_SECONDS', '604801'],
      ['PROVISIONER_PUBLIC_URL', 'ftp://cp.example.test'],
      ['PROVISIONER_HYBRID_INGRESS_REQUESTS_PER_TENANT', '0'],
      ['PROVISIONER_REMOVED_RUNTIME_RETENTION_HOURS', '0'],
      ['PROVISIONER_HYBRID_BUNDLE_CACHE_MB', '-1'],
    ] as const)
      t.throws(
        () => loadConfig({ [name]: value }),
        { name: 'ConfigError', message: new RegExp(name) },
        `${name}=${value} is refused`,
      );
  },
);

t.test(
  'ingress-based hybrid runtimes: allowed ranges, the operator CA bundle read at start-up, the per-runtime budget',
  async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'ingress-ca-'));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    const ca = await createCa(join(dir, 'ca'), 'ingress-test-ca');
    const c = loadConfig({
      PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS: '127.0.0.0/8, ::1/128',
      PROVISIONER_HYBRID_INGRESS_CA_FILE: ca.certFile,
      PROVISIONER_HYBRID_INGRESS_REQUESTS_PER_RUNTIME: '4',
    }).hybrid.ingress;
    t.same(c.allowedCidrs, ['127.0.0.0/8', '::1/128'], 'the ranges are read');
    t.equal(c.caPem?.trim(), ca.certPem.trim(), "the CA file's certificate is read at start-up");
    t.equal(c.requestsPerRuntime, 4, 'the budget is read');
    const notPem = join(dir, 'not-pem.txt');
    await writeFile(notPem, 'not a certificate\n');
    const broken = join(dir, 'broken.pem');
    await writeFile(broken, '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n');
    for (const [name, value, why] of [
      ['PROVISIONER_HYBRID_INGRESS_ALLOWED_CIDRS', '127.0.0.1', /not a CIDR/],
      ['PROVISIONER_HYBRID_INGRESS_CA_FILE', join(dir, 'missing.pem'), /cannot read .*ENOENT/],
      ['PROVISIONER_HYBRID_INGRESS_CA_FILE', notPem, /holds no PEM certificate/],
      ['PROVISIONER_HYBRID_INGRESS_CA_FILE', broken, /certificate 1 .* does not parse/],
      ['PROVISIONER_HYBRID_INGRESS_REQUESTS_PER_RUNTIME', '0', /0 is outside 1\.\.4096/],
      ['PROVISIONER_HYBRID_INGRESS_REQUESTS_PER_RUNTIME', '4097', /4097 is outside 1\.\.4096/],
    ] as const)
      t.throws(
        () => loadConfig({ [name]: value }),
        { name: 'ConfigError', message: new RegExp(`${name}.*${why.source}`) },
        `${name}=${value} is refused: ${why.source}`,
      );
  },
);

t.test('PROVISIONER_ADVERTISE_URL: an http(s) origin; the default follows the listen address', async (t) => {
  t.equal(loadConfig({}).advertiseUrl, undefined);
  t.equal(loadConfig({ PROVISIONER_ADVERTISE_URL: 'http://10.0.3.7:8080' }).advertiseUrl, 'http://10.0.3.7:8080');
  t.equal(
    loadConfig({ PROVISIONER_ADVERTISE_URL: 'https://provisioner-0.provisioner.platform.svc/' }).advertiseUrl,
    'https://provisioner-0.provisioner.platform.svc',
  );
  for (const bad of [
    '10.0.3.7:8080',
    'ftp://10.0.3.7',
    'http://10.0.3.7:8080/api',
    'http://u:p@10.0.3.7',
    'not a url',
  ]) {
    t.throws(
      () => loadConfig({ PROVISIONER_ADVERTISE_URL: bad }),
      { name: 'ConfigError', message: /PROVISIONER_ADVERTISE_URL/ },
      bad,
    );
  }
  const listening = { address: '0.0.0.0', family: 'IPv4', port: 43210 };
  t.equal(advertiseUrl(loadConfig({ HOST: '127.0.0.1' }), listening), 'http://127.0.0.1:43210');
  t.match(
    advertiseUrl(loadConfig({ HOST: '0.0.0.0' }), listening),
    /^http:\/\/\d+\.\d+\.\d+\.\d+:43210$/,
    'a wildcard host becomes an address of this machine',
  );
  t.equal(advertiseUrl(loadConfig({ HOST: '::1' }), listening), 'http://[::1]:43210');
  t.equal(
    advertiseUrl(loadConfig({ PROVISIONER_ADVERTISE_URL: 'http://10.0.3.7:8080' }), listening),
    'http://10.0.3.7:8080',
  );
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
  t.throws(
    () => decodeCursor(box, 'operations', c),
    { code: 'INVALID_CURSOR' },
    'a cursor of another listing is refused',
  );
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
