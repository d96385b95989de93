/**
 * Certificates of a test control plane, made with the openssl CLI (node:crypto cannot sign
 * X.509 certificates): one CA, per API server a serving certificate for 127.0.0.1, an admin
 * client certificate (O=system:masters) and a service-account key pair. Kubeconfigs carry the
 * certificates inline (the provisioner stores kubeconfig contents, not paths).
 *
 * Every key is ECDSA P-256, as kubeadm can make them: an RSA 2048 key costs openssl about 0.15 CPU
 * seconds to generate and a P-256 key about 0.005, and the tests make several hundred (every
 * control plane, etcd and API server certificate; docs/toolchain.md).
 */
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { run } from './processes.ts';

export interface CertificateAuthority {
  dir: string;
  certFile: string;
  keyFile: string;
  certPem: string;
}

export interface ServingCertificate {
  certFile: string;
  keyFile: string;
}

export interface ClientCertificate {
  certFile: string;
  keyFile: string;
  certPem: string;
  keyPem: string;
}

export interface ServiceAccountKeys {
  privateKeyFile: string;
  publicKeyFile: string;
}

const openssl = (args: string[], cwd: string) => run('openssl', args, { cwd, timeoutMs: 60_000 });

/** `openssl req` options for a new P-256 key. */
const NEW_KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1'];

export async function createCa(dir: string, name: string): Promise<CertificateAuthority> {
  await mkdir(dir, { recursive: true });
  await openssl(
    ['req', '-x509', ...NEW_KEY, '-nodes', '-days', '2', '-subj', `/CN=${name}`, '-keyout', 'ca.key', '-out', 'ca.crt'],
    dir,
  );
  const certFile = join(dir, 'ca.crt');
  return { dir, certFile, keyFile: join(dir, 'ca.key'), certPem: await readFile(certFile, 'utf8') };
}

async function signed(
  ca: CertificateAuthority,
  base: string,
  subject: string,
  extensions: string,
): Promise<{ certFile: string; keyFile: string }> {
  const dir = ca.dir;
  await writeFile(join(dir, `${base}.ext`), extensions);
  await openssl(['req', ...NEW_KEY, '-nodes', '-subj', subject, '-keyout', `${base}.key`, '-out', `${base}.csr`], dir);
  await openssl(
    [
      'x509',
      '-req',
      '-in',
      `${base}.csr`,
      '-CA',
      'ca.crt',
      '-CAkey',
      'ca.key',
      // A random serial per certificate: a shared ca.srl (-CAcreateserial) is read and rewritten
      // by every signing, and two signings at once (serving and client certificates are made in
      // parallel) could read it half-written ("Unable to load number from ca.srl").
      '-set_serial',
      `0x${randomBytes(8).toString('hex')}`,
      '-days',
      '2',
      '-extfile',
      `${base}.ext`,
      '-out',
      `${base}.crt`,
    ],
    dir,
  );
  return { certFile: join(dir, `${base}.crt`), keyFile: join(dir, `${base}.key`) };
}

/**
 * Serving certificate for an API server on loopback (plus the in-cluster names and `extraIps`,
 * the addresses a pod network reaches it at).
 */
export async function createServingCert(
  ca: CertificateAuthority,
  base: string,
  extraIps: readonly string[] = [],
): Promise<ServingCertificate> {
  const ips = ['127.0.0.1', '10.96.0.1', ...extraIps].map((ip) => `IP:${ip}`).join(',');
  return signed(
    ca,
    base,
    '/CN=kube-apiserver',
    `subjectAltName=${ips},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n` +
      'extendedKeyUsage=serverAuth\n',
  );
}

export async function createClientCert(
  ca: CertificateAuthority,
  base: string,
  user: string,
  group: string,
): Promise<ClientCertificate> {
  const files = await signed(ca, base, `/O=${group}/CN=${user}`, 'extendedKeyUsage=clientAuth\n');
  return { ...files, certPem: await readFile(files.certFile, 'utf8'), keyPem: await readFile(files.keyFile, 'utf8') };
}

/** etcd's certificates: a CA of its own, the member's (serving and peer, 127.0.0.1) and one client certificate for the API servers. */
export interface EtcdCertificates {
  caFile: string;
  caPem: string;
  member: ServingCertificate;
  client: ClientCertificate;
}

/**
 * Certificates for an etcd on loopback that accepts clients (and peers) only with a certificate its
 * own CA signed: nothing else on the machine can read or write the clusters' state through its port.
 */
export async function createEtcdCertificates(dir: string): Promise<EtcdCertificates> {
  const ca = await createCa(dir, 'etcd-ca');
  const [member, client] = await Promise.all([
    signed(
      ca,
      'member',
      '/CN=etcd',
      'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n',
    ),
    createClientCert(ca, 'apiserver-etcd-client', 'kube-apiserver', 'etcd-clients'),
  ]);
  return { caFile: ca.certFile, caPem: ca.certPem, member, client };
}

export async function createServiceAccountKeys(ca: CertificateAuthority, base: string): Promise<ServiceAccountKeys> {
  await openssl(['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', `${base}.key`], ca.dir);
  await openssl(['pkey', '-in', `${base}.key`, '-pubout', '-out', `${base}.pub`], ca.dir);
  return { privateKeyFile: join(ca.dir, `${base}.key`), publicKeyFile: join(ca.dir, `${base}.pub`) };
}

const b64 = (s: string) => Buffer.from(s, 'utf8').toString('base64');

/** A kubeconfig (YAML-compatible JSON) with the certificates inline. */
export function kubeconfigFor(opts: {
  name: string;
  server: string;
  ca: CertificateAuthority;
  client: ClientCertificate;
  context?: string;
}): string {
  const context = opts.context ?? opts.name;
  return JSON.stringify(
    {
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [
        { name: opts.name, cluster: { server: opts.server, 'certificate-authority-data': b64(opts.ca.certPem) } },
      ],
      users: [
        {
          name: `${opts.name}-admin`,
          user: { 'client-certificate-data': b64(opts.client.certPem), 'client-key-data': b64(opts.client.keyPem) },
        },
      ],
      contexts: [{ name: context, context: { cluster: opts.name, user: `${opts.name}-admin` } }],
      'current-context': context,
    },
    null,
    2,
  );
}
