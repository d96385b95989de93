import t from 'tap';
import { createRequestSigner, generateRequestSigningKeys } from '../../../provisioner/tunnel/request-token.ts';
import { loadPublicKey, ReplayCache, verifyRequestToken } from '../../../runtime/agents/app-proxy/request-token.ts';
import { buildAppProxy } from '../../../runtime/agents/app-proxy/app.ts';
import { staticRuntimeInfo } from '../../../runtime/agents/app-proxy/runtime-info.ts';
import { REQUEST_TOKEN_HEADER } from '../../../runtime/protocol/request-token.ts';

const keys = generateRequestSigningKeys();
const publicKey = loadPublicKey(keys.publicKeyPem);
const now = 1_800_000_000_000;
const signer = createRequestSigner({ privateKeyPem: keys.privateKeyPem, ttlSeconds: 30, now: () => now });
const input = { tenantId: 'tenant-a', method: 'get', path: '/api/runtime?x=1', subject: 'key-1' };
const verifyAt = (token: string, at: number, over: Partial<{ tenantId: string; method: string; path: string }> = {}) =>
  verifyRequestToken(token, {
    publicKey,
    tenantId: 'tenant-a',
    method: 'GET',
    path: '/api/runtime?x=1',
    nowMs: at,
    ...over,
  });

void t.test('a token verifies with only the public key, for its tenant, method and path', async (t) => {
  const r = verifyAt(signer.sign(input), now + 1000);
  t.ok(r.ok);
  if (r.ok)
    t.match(r.claims, {
      aud: 'runtime:tenant-a',
      htm: 'GET',
      htu: '/api/runtime?x=1',
      sub: 'key-1',
      exp: now / 1000 + 30,
    });
  t.equal(signer.publicKeyPem, keys.publicKeyPem);
});

void t.test('tokens are refused for another tenant, method or path, when expired, or tampered with', async (t) => {
  const token = signer.sign(input);
  t.same(verifyAt(token, now, { tenantId: 'tenant-b' }), { ok: false, reason: 'token is for another runtime' });
  t.same(verifyAt(token, now, { method: 'POST' }), { ok: false, reason: 'token is for another request' });
  t.same(verifyAt(token, now, { path: '/api/runtime' }), { ok: false, reason: 'token is for another request' });
  t.same(verifyAt(token, now + 36_000), { ok: false, reason: 'token expired' });
  t.same(verifyAt(token, now - 10_000), { ok: false, reason: 'token issued in the future' });
  const [h, p, s] = token.split('.') as [string, string, string];
  const claims = JSON.parse(Buffer.from(p, 'base64url').toString()) as Record<string, unknown>;
  const forgedPayload = Buffer.from(JSON.stringify({ ...claims, aud: 'runtime:tenant-b' })).toString('base64url');
  t.same(
    verifyRequestToken(`${h}.${forgedPayload}.${s}`, {
      publicKey,
      tenantId: 'tenant-b',
      method: 'GET',
      path: '/api/runtime?x=1',
      nowMs: now,
    }),
    { ok: false, reason: 'bad signature' },
  );
  t.same(verifyAt('not-a-token', now), { ok: false, reason: 'malformed token' });
  const noneAlg = `${Buffer.from('{"alg":"none"}').toString('base64url')}.${p}.`;
  t.same(verifyAt(noneAlg, now), { ok: false, reason: 'unsupported token algorithm' });
});

void t.test('a token is bound to one runtime: the hosted one, or one hybrid runtime of the tenant', async (t) => {
  const hosted = signer.sign(input);
  const hybridA = signer.sign({ ...input, runtimeId: 'runtime-a' });
  const decode = (token: string) =>
    JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as { aud: string };
  t.equal(decode(hybridA).aud, 'runtime:tenant-a/runtime-a', "a hybrid runtime's audience names tenant and runtime");
  const at = (token: string, runtimeId?: string) =>
    verifyRequestToken(token, {
      publicKey,
      tenantId: 'tenant-a',
      runtimeId,
      method: 'GET',
      path: input.path,
      nowMs: now,
    });
  t.ok(at(hybridA, 'runtime-a').ok, 'runtime-a accepts its own token');
  t.same(
    at(hosted, 'runtime-a'),
    { ok: false, reason: 'token is for another runtime' },
    "a hybrid runtime refuses the hosted runtime's token",
  );
  t.same(
    at(hybridA),
    { ok: false, reason: 'token is for another runtime' },
    "the hosted runtime refuses a hybrid runtime's token",
  );
  t.same(
    at(hybridA, 'runtime-b'),
    { ok: false, reason: 'token is for another runtime' },
    "runtime-b refuses runtime-a's token",
  );
});

void t.test('the app-proxy answers a request only with a token for its own runtime', async (t) => {
  const live = createRequestSigner({ privateKeyPem: keys.privateKeyPem });
  const runtimeInfo = staticRuntimeInfo({ runtimeVersion: '1.5.0', components: {} });
  const hybridProxy = await buildAppProxy({ tenantId: 'tenant-a', runtimeId: 'runtime-a', publicKey, runtimeInfo });
  const hostedProxy = await buildAppProxy({ tenantId: 'tenant-a', publicKey, runtimeInfo });
  t.teardown(() => Promise.all([hybridProxy.close(), hostedProxy.close()]));
  const call = async (app: typeof hostedProxy, runtimeId?: string) => {
    const token = live.sign({
      tenantId: 'tenant-a',
      ...(runtimeId ? { runtimeId } : {}),
      method: 'GET',
      path: '/api/runtime',
    });
    const res = await app.inject({ method: 'GET', url: '/api/runtime', headers: { [REQUEST_TOKEN_HEADER]: token } });
    return { status: res.statusCode, body: res.json<{ error?: { message: string } }>() };
  };
  t.equal((await call(hybridProxy, 'runtime-a')).status, 200, "the hybrid app-proxy serves its own runtime's token");
  t.match(
    await call(hybridProxy),
    { status: 401, body: { error: { message: 'request token refused: token is for another runtime' } } },
    "the hybrid app-proxy refuses a token for the tenant's hosted runtime with 401",
  );
  t.match(
    await call(hybridProxy, 'runtime-b'),
    { status: 401, body: { error: { message: 'request token refused: token is for another runtime' } } },
    'the hybrid app-proxy refuses a token for another hybrid runtime of the tenant with 401',
  );
  t.equal((await call(hostedProxy)).status, 200, "the hosted app-proxy serves the hosted runtime's token");
  t.match(
    await call(hostedProxy, 'runtime-a'),
    { status: 401, body: { error: { message: 'request token refused: token is for another runtime' } } },
    "the hosted app-proxy refuses a hybrid runtime's token with 401",
  );
});

void t.test('signer configuration is checked', async (t) => {
  t.throws(() => createRequestSigner({ privateKeyPem: 'nope' }), /not a PEM private key/);
  t.throws(() => createRequestSigner({ privateKeyPem: keys.privateKeyPem, ttlSeconds: 600 }), /ttl/);
});

void t.test('the replay cache accepts an id once and stays bounded', async (t) => {
  const cache = new ReplayCache(3);
  t.ok(cache.use('a', 100, 0));
  t.notOk(cache.use('a', 100, 0));
  for (const id of ['b', 'c', 'd', 'e']) cache.use(id, 100, 0);
  t.ok(cache.size <= 3);
});
