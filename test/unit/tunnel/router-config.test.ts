/**
 * The request router's access mode (runtime/agents/request-router/config.ts): behind a tunnel it
 * checks no token; in ingress mode it needs the tenant, the runtime id and the control plane's
 * public key, and a start-up without one of them fails naming the variable.
 */
import t from 'tap';
import { loadRouterConfig } from '../../../runtime/agents/request-router/config.ts';
import { generateRequestSigningKeys } from '../../../provisioner/tunnel/request-token.ts';

const { publicKeyPem } = generateRequestSigningKeys();
const base = { EVENT_SOURCE_URL: 'http://es:12000' };
const ingress = {
  ...base,
  ACCESS_MODE: 'ingress',
  TENANT_ID: 'b9b4a1e4-3f1d-4c55-9d55-0a7c7b0c2f11',
  RUNTIME_ID: '0f8e3a52-6a51-4d0c-8c1e-1d7a4b2c9e33',
  CONTROL_PLANE_PUBLIC_KEY: publicKeyPem,
};

t.test('tunnel mode (the default) checks no token', async (t) => {
  t.equal(loadRouterConfig(base).requestTokens, undefined, 'no ACCESS_MODE: tunnel, no token check');
  t.equal(loadRouterConfig({ ...base, ACCESS_MODE: 'tunnel' }).requestTokens, undefined, 'ACCESS_MODE=tunnel');
});

t.test('ingress mode reads the tenant, the runtime and the public key', async (t) => {
  const c = loadRouterConfig(ingress).requestTokens;
  t.equal(c?.tenantId, ingress.TENANT_ID);
  t.equal(c?.runtimeId, ingress.RUNTIME_ID);
  t.equal(c?.publicKey.asymmetricKeyType, 'ed25519', 'the Ed25519 public key is loaded');
});

t.test('ingress mode without what it needs does not start, naming the variable', async (t) => {
  const without = (name: keyof typeof ingress) => {
    const env: Record<string, string> = { ...ingress };
    delete env[name];
    return env;
  };
  t.throws(() => loadRouterConfig(without('TENANT_ID')), /TENANT_ID: is required/);
  t.throws(() => loadRouterConfig(without('RUNTIME_ID')), /RUNTIME_ID: is required/);
  t.throws(() => loadRouterConfig(without('CONTROL_PLANE_PUBLIC_KEY')), /CONTROL_PLANE_PUBLIC_KEY/);
  t.throws(() => loadRouterConfig({ ...ingress, RUNTIME_ID: 'prod' }), /RUNTIME_ID: 'prod' is not a runtime id/);
  t.throws(() => loadRouterConfig({ ...ingress, CONTROL_PLANE_PUBLIC_KEY: 'not a key' }), /CONTROL_PLANE_PUBLIC_KEY: /);
  t.throws(
    () => loadRouterConfig({ ...base, ACCESS_MODE: 'open' }),
    /ACCESS_MODE: 'open' is neither tunnel nor ingress/,
  );
});
