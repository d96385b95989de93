/**
 * The Source Server's configuration (runtime/agents/source-server/config.ts): the Argo CD
 * account's password is required (inline or as a mounted file, re-read at each login) and never
 * part of the configuration object's visible fields; defaults point at the runtime's own Argo CD.
 */
import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '../../../runtime/agents/common/config.ts';
import { loadSourceServerConfig } from '../../../runtime/agents/source-server/config.ts';
import { sourceServerPassword } from '../../../runtime/component/source-server-account.ts';

const dir = mkdtempSync(join(tmpdir(), 'source-server-config-'));
const kubeconfig = join(dir, 'kubeconfig');
writeFileSync(kubeconfig, 'apiVersion: v1\nkind: Config\n');
const PASSWORD = 'pw-9f2c1e7a-source';
const base = { KUBECONFIG: kubeconfig, ARGOCD_PASSWORD: PASSWORD };

function refusal(env: Record<string, string | undefined>): ConfigError {
  try {
    loadSourceServerConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error('the configuration loaded');
}

t.test('defaults: the runtime’s Argo CD, its source-server account, bounded cache', async (t) => {
  const c = loadSourceServerConfig(base);
  t.equal(c.argoCdServerUrl, 'http://argocd-server.argocd.svc', 'Argo CD’s Service by default, no trailing slash');
  t.equal(c.argoCdUsername, 'source-server', 'the source-server account by default');
  t.equal(c.argoCdPassword(), PASSWORD, 'the password from ARGOCD_PASSWORD');
  t.equal(c.argoCdNamespace, 'argocd', 'repository Secrets are read in argocd by default');
  t.equal(c.cacheMaxBytes, 64 * 1024 * 1024, 'the cache holds at most 64 MiB by default');
  t.equal(c.port, 8080, 'port 8080 by default');
  t.equal(c.gitCacheDir, '/tmp/source-server-git', 'mirrors under /tmp/source-server-git by default');
  t.notOk(JSON.stringify(c).includes(PASSWORD), 'the password is not in the serialized configuration');
});

t.test('the password: required, named when missing, read from a file when mounted', async (t) => {
  const missing = refusal({ KUBECONFIG: kubeconfig });
  t.equal(missing.variable, 'ARGOCD_PASSWORD', 'a missing password names ARGOCD_PASSWORD');
  t.match(missing.message, /ARGOCD_PASSWORD: is required/, 'and says it is required');

  const file = join(dir, 'password');
  writeFileSync(file, 'first\n');
  const c = loadSourceServerConfig({ KUBECONFIG: kubeconfig, ARGOCD_PASSWORD_FILE: file });
  t.equal(c.argoCdPassword(), 'first', 'the file’s password, trimmed');
  writeFileSync(file, 'rotated\n');
  t.equal(c.argoCdPassword(), 'rotated', 'a rotated file is read again at the next login');

  const unreadable = refusal({ KUBECONFIG: kubeconfig, ARGOCD_PASSWORD_FILE: join(dir, 'absent') });
  t.equal(unreadable.variable, 'ARGOCD_PASSWORD_FILE', 'an unreadable file names ARGOCD_PASSWORD_FILE');
});

t.test('wrong values are named', async (t) => {
  t.equal(refusal({ ...base, ARGOCD_SERVER_URL: 'ftp://x' }).variable, 'ARGOCD_SERVER_URL', 'a non-http URL');
  t.equal(refusal({ ...base, ARGOCD_NAMESPACE: 'Not_A_Namespace' }).variable, 'ARGOCD_NAMESPACE', 'a bad namespace');
  t.equal(refusal({ ...base, GIT_CACHE_DIR: 'relative' }).variable, 'GIT_CACHE_DIR', 'a relative cache folder');
  t.equal(refusal({ ...base, CACHE_MAX_BYTES: '10' }).variable, 'CACHE_MAX_BYTES', 'a cache below 1 MiB');
  t.equal(
    refusal({ ARGOCD_PASSWORD: PASSWORD, KUBERNETES_SERVICE_HOST: '' }).variable,
    'KUBECONFIG',
    'outside a cluster KUBECONFIG is required',
  );
});

t.test('an Argo CD API token instead of a login (a hybrid runtime beside an existing Argo CD)', async (t) => {
  const file = join(dir, 'token');
  const c = loadSourceServerConfig({ KUBECONFIG: kubeconfig, ARGOCD_TOKEN_FILE: file });
  t.equal(c.argoCdToken?.(), undefined, 'a token file not there yet: no token, and no error at start');
  t.equal(c.argoCdTokenSource, file, 'the file is named for the message');
  writeFileSync(file, 'eyJ-token\n');
  t.equal(c.argoCdToken?.(), 'eyJ-token', 'the token once the Secret is mounted, trimmed, read at each use');
  t.notOk(JSON.stringify(c).includes('eyJ-token'), 'the token is not in the serialized configuration');
  const inline = loadSourceServerConfig({ KUBECONFIG: kubeconfig, ARGOCD_TOKEN: 'inline-tok' });
  t.equal(inline.argoCdToken?.(), 'inline-tok', 'ARGOCD_TOKEN inline');
  t.equal(
    refusal({ KUBECONFIG: kubeconfig, ARGOCD_TOKEN_FILE: 'relative' }).variable,
    'ARGOCD_TOKEN_FILE',
    'a relative file',
  );
  t.equal(
    refusal({ KUBECONFIG: kubeconfig, ARGOCD_TOKEN: 'x', ARGOCD_ACCOUNT_SETUP: 'argocd-secret' }).variable,
    'ARGOCD_ACCOUNT_SETUP',
    'a token and the account set-up exclude each other',
  );
});

t.test('ARGOCD_ACCOUNT_SETUP=argocd-secret: the password derived from the runtime token', async (t) => {
  const c = loadSourceServerConfig({
    KUBECONFIG: kubeconfig,
    ARGOCD_ACCOUNT_SETUP: 'argocd-secret',
    RUNTIME_TOKEN: 'hrt_runtime-a',
  });
  const d = loadSourceServerConfig({
    KUBECONFIG: kubeconfig,
    ARGOCD_ACCOUNT_SETUP: 'argocd-secret',
    RUNTIME_TOKEN: 'hrt_runtime-b',
  });
  t.ok(c.argoCdAccountSetup, 'set-up on');
  t.equal(c.argoCdPassword(), sourceServerPassword('hrt_runtime-a'), 'the password the hosted runtime would derive');
  t.not(c.argoCdPassword(), d.argoCdPassword(), 'another runtime token, another password');
  t.equal(
    refusal({ KUBECONFIG: kubeconfig, ARGOCD_ACCOUNT_SETUP: 'argocd-secret' }).variable,
    'RUNTIME_TOKEN',
    'without the runtime token: RUNTIME_TOKEN named',
  );
  t.equal(refusal({ ...base, ARGOCD_ACCOUNT_SETUP: 'yes' }).variable, 'ARGOCD_ACCOUNT_SETUP', 'an unknown mode');
  t.equal(refusal({ ...base, ARGOCD_CA_SECRET: 'Not A Name' }).variable, 'ARGOCD_CA_SECRET', 'a bad Secret name');
  t.equal(
    loadSourceServerConfig({ ...base, ARGOCD_CA_SECRET: 'argocd-server-tls' }).argoCdCaSecret,
    'argocd-server-tls',
  );
});
