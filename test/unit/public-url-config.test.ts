/**
 * PROVISIONER_PUBLIC_URL, where customers' clusters send runtime keys and bootstrap tokens: https,
 * or plain http only on a loopback host or with PROVISIONER_PUBLIC_URL_ALLOW_HTTP=true. A refused
 * URL stops `provisioner serve` before it starts anything, with exit code 2 and the variable named.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import t from 'tap';
import { loadConfig } from '../../provisioner/config.ts';

const root = join(import.meta.dirname, '..', '..');

t.test('plain http on a host other than loopback is refused, naming the setting that allows it', async (t) => {
  for (const url of ['http://cp.example.test', 'http://10.0.0.7:8080', 'http://[fd00::1]:8080'])
    t.throws(
      () => loadConfig({ PROVISIONER_PUBLIC_URL: url }),
      {
        name: 'ConfigError',
        message: /^PROVISIONER_PUBLIC_URL: .*plain http.*PROVISIONER_PUBLIC_URL_ALLOW_HTTP=true/,
      },
      `${url} is refused with a message naming PROVISIONER_PUBLIC_URL and the setting that allows it`,
    );
  t.throws(
    () => loadConfig({ PROVISIONER_PUBLIC_URL: 'http://cp.example.test', PROVISIONER_PUBLIC_URL_ALLOW_HTTP: 'yes' }),
    { name: 'ConfigError', message: /^PROVISIONER_PUBLIC_URL_ALLOW_HTTP: 'yes' is not one of true, false/ },
    'an allow setting that is not a boolean is refused, naming it',
  );
});

t.test('https anywhere, http on loopback, and http elsewhere when explicitly allowed are accepted', async (t) => {
  const accepted: Array<[Record<string, string>, string]> = [
    [{ PROVISIONER_PUBLIC_URL: 'https://cp.example.test/' }, 'https://cp.example.test'],
    [{ PROVISIONER_PUBLIC_URL: 'http://127.0.0.1:8080' }, 'http://127.0.0.1:8080'],
    [{ PROVISIONER_PUBLIC_URL: 'http://127.10.0.2:8080' }, 'http://127.10.0.2:8080'],
    [{ PROVISIONER_PUBLIC_URL: 'http://[::1]:8080' }, 'http://[::1]:8080'],
    [{ PROVISIONER_PUBLIC_URL: 'http://localhost:8080' }, 'http://localhost:8080'],
    [
      { PROVISIONER_PUBLIC_URL: 'http://172.18.0.1:8080', PROVISIONER_PUBLIC_URL_ALLOW_HTTP: 'true' },
      'http://172.18.0.1:8080',
    ],
  ];
  for (const [env, expected] of accepted) {
    const config = loadConfig(env);
    t.equal(config.hybrid.publicUrl, expected, `${env.PROVISIONER_PUBLIC_URL} is the hybrid runtimes' public URL`);
    t.equal(
      config.engine.publicUrl,
      env.PROVISIONER_PUBLIC_URL,
      `${env.PROVISIONER_PUBLIC_URL} is given to hosted runtimes`,
    );
  }
  t.equal(
    loadConfig({}).hybrid.publicUrl,
    undefined,
    'unset, hybrid runtimes have no public URL (registration is refused)',
  );
});

t.test('provisioner serve with a plain-http public URL stops at start-up with exit code 2', async (t) => {
  const child = spawn(process.execPath, [join(root, 'bin', 'provisioner.ts'), 'serve'], {
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: process.env.HOME ?? '/tmp',
      PROVISIONER_PUBLIC_URL: 'http://cp.example.test',
      // Were the URL accepted, serve would go on to this unreachable database and fail there,
      // with another message.
      PORT: '0',
      DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (output += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (output += d));
  const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
  t.equal(code, 2, 'serve exits with code 2 (invalid configuration)');
  t.match(
    output,
    /PROVISIONER_PUBLIC_URL: 'http:\/\/cp\.example\.test' is plain http/,
    'its output names the variable and the URL',
  );
});
