/**
 * The bootstrap Job's configuration (runtime/agents/bootstrap/config.ts): the token comes from the
 * mounted Secret's file, which may be absent once redeemed; a malformed token is refused without
 * repeating it; the control plane must be https off loopback.
 */
import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '../../runtime/agents/common/config.ts';
import { loadBootstrapConfig } from '../../runtime/agents/bootstrap/config.ts';

const dir = mkdtempSync(join(tmpdir(), 'bootstrap-config-'));
const kubeconfig = join(dir, 'kubeconfig');
writeFileSync(kubeconfig, 'apiVersion: v1\nkind: Config\n');
const TOKEN = 'hrth_' + 'A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0U1v';
const tokenFile = join(dir, 'bootstrap-token');
writeFileSync(tokenFile, TOKEN + '\n');
const base = { CONTROL_PLANE_URL: 'https://cp.example.test', KUBECONFIG: kubeconfig, BOOTSTRAP_TOKEN_FILE: tokenFile };

function refusal(env: Record<string, string | undefined>): ConfigError {
  try {
    loadBootstrapConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error('the configuration loaded');
}

t.test('the token from the mounted file; none when the Secret is gone', async (t) => {
  const c = loadBootstrapConfig(base);
  t.equal(c.token, TOKEN, 'the file’s token, trimmed');
  t.equal(c.namespace, 'hosted-runtime', 'the runtime namespace by default');
  t.equal(c.maxAttempts, 8, '8 attempts by default');
  const gone = loadBootstrapConfig({ ...base, BOOTSTRAP_TOKEN_FILE: join(dir, 'absent') });
  t.equal(gone.token, undefined, 'no file: no token, not an error (the credentials are then expected written)');
});

t.test('wrong input is named, and a token never repeated', async (t) => {
  const bad = join(dir, 'bad-token');
  writeFileSync(bad, 'hrt_secretvalue_that_is_not_a_bootstrap_token');
  const e = refusal({ ...base, BOOTSTRAP_TOKEN_FILE: bad });
  t.equal(e.variable, 'BOOTSTRAP_TOKEN_FILE', 'a malformed token names the file variable');
  t.notMatch(e.message, /secretvalue/, 'the message does not repeat the value');
  t.equal(
    refusal({ ...base, CONTROL_PLANE_URL: 'http://cp.example.test' }).variable,
    'CONTROL_PLANE_URL',
    'plain http off loopback is refused',
  );
  t.equal(
    loadBootstrapConfig({ ...base, CONTROL_PLANE_URL: 'http://127.0.0.1:8080/' }).controlPlaneUrl,
    'http://127.0.0.1:8080',
    'plain http on loopback is accepted, without the trailing slash',
  );
  t.equal(
    refusal({ ...base, TUNNEL_URL: 'https://cp.example.test' }).variable,
    'TUNNEL_URL',
    'a tunnel URL that is not ws(s)',
  );
  t.equal(
    refusal({ ...base, POD_NAMESPACE: 'Hosted Runtime' }).variable,
    'POD_NAMESPACE',
    'a namespace that is no name',
  );
  t.equal(
    refusal({ CONTROL_PLANE_URL: 'https://cp.example.test', BOOTSTRAP_TOKEN_FILE: tokenFile }).variable,
    'KUBECONFIG',
    'outside a pod without a kubeconfig',
  );
});
