/**
 * The etcd the sandbox and the end-to-end tiers run (sandbox/control-plane.ts startEtcd) holds every
 * local cluster's state, Secrets included, on a loopback port any process of the machine can
 * reach. It serves TLS only and accepts a client only with a certificate its own CA signed: a
 * plain-http client, a TLS client without a certificate and one with a certificate of another CA
 * are refused, while the kube-apiserver started on it (with the client certificate) works.
 */
import t from 'tap';
import { request } from 'node:https';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startCustomerCluster, missingKubeToolchain } from '../../helpers/kubectl.ts';
import { startEtcd, toolchainFrom } from '../../../sandbox/control-plane.ts';
import { createCa, createClientCert } from '../../../sandbox/pki.ts';

const toolchainBin = process.env.HRT_TOOLCHAIN_BIN;
const missing = missingKubeToolchain(toolchainBin);

/** GET `url` over TLS with the given client certificate (or none): the status, or the error's message. */
function tlsGet(url: string, tls: { ca: string; cert?: string; key?: string }): Promise<number | string> {
  return new Promise((resolve) => {
    const req = request(url, { method: 'GET', timeout: 10_000, ...tls }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.once('timeout', () => req.destroy(new Error('timed out')));
    req.once('error', (err) => resolve(err.message));
    req.end();
  });
}

if (missing && process.env.CI === 'true') {
  t.fail(`a real etcd and kube-apiserver are needed and CI=true: ${missing}`);
} else if (missing) {
  t.plan(0, `skipped: needs a real etcd and kube-apiserver: ${missing}`);
} else {
  t.setTimeout(180_000);
  const dir = await mkdtemp(join(tmpdir(), 'hrt-etcd-certs-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const etcd = await startEtcd(toolchainFrom(toolchainBin!), join(dir, 'etcd'));
  t.teardown(() => etcd.stop());
  const ca = await readFile(etcd.caFile, 'utf8');

  t.test('etcd answers only clients with a certificate of its own CA', async (t) => {
    t.match(etcd.url, /^https:\/\/127\.0\.0\.1:\d+$/, 'etcd listens with TLS on loopback');
    const own = await tlsGet(`${etcd.url}/health`, {
      ca,
      cert: await readFile(etcd.certFile, 'utf8'),
      key: await readFile(etcd.keyFile, 'utf8'),
    });
    t.equal(own, 200, "with the API servers' client certificate, /health answers 200");

    const none = await tlsGet(`${etcd.url}/health`, { ca });
    t.not(none, 200, `without a client certificate the request is refused (got: ${none})`);

    const other = await createCa(join(dir, 'other-ca'), 'other-ca');
    const stranger = await createClientCert(other, 'stranger', 'stranger', 'system:masters');
    const foreign = await tlsGet(`${etcd.url}/health`, { ca, cert: stranger.certPem, key: stranger.keyPem });
    t.not(foreign, 200, `a certificate of another CA is refused (got: ${foreign})`);

    const plain = await fetch(`${etcd.url.replace('https:', 'http:')}/health`).then(
      (res) => res.status,
      (err: Error) => err.message,
    );
    t.not(plain, 200, `plain http is refused (got: ${plain})`);
  });

  t.test('a kube-apiserver started on an etcd of its own stores and reads objects', async (t) => {
    const { kubectl } = await startCustomerCluster(t, toolchainBin!, join(dir, 'cluster'));
    const created = await kubectl(['create', 'namespace', 'etcd-certs']);
    t.equal(created.code, 0, `kubectl create namespace succeeded through the API server (${created.output.trim()})`);
    const got = await kubectl(['get', 'namespace', 'etcd-certs', '-o', 'name']);
    t.equal(got.stdout.trim(), 'namespace/etcd-certs', 'the namespace is read back from etcd');
  });
}
