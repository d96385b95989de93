import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '../../../runtime/agents/common/config.ts';
import { loadEventReporterConfig } from '../../../runtime/agents/event-reporter/config.ts';

const dir = mkdtempSync(join(tmpdir(), 'reporter-config-'));
const kubeconfig = join(dir, 'kubeconfig');
writeFileSync(kubeconfig, 'apiVersion: v1\nkind: Config\n');
const base = {
  CONTROL_PLANE_URL: 'https://cp.example.com',
  RUNTIME_TOKEN: 'rt_' + 'a'.repeat(40),
  POD_NAME: 'event-reporter-7d9f-abcde',
  POD_NAMESPACE: 'hosted-runtime',
  KUBERNETES_SERVICE_HOST: '10.96.0.1',
};

/** The variable a ConfigError names, or 'none' when the configuration loads. */
function failing(env: Record<string, string | undefined>): string {
  try {
    loadEventReporterConfig(env);
    return 'none';
  } catch (err) {
    if (err instanceof ConfigError) return err.variable;
    throw err;
  }
}

void t.test('defaults from the pod and the wire contract', async (t) => {
  const c = loadEventReporterConfig(base);
  t.equal(c.replica, 'event-reporter-7d9f-abcde', 'the replica is the pod name');
  t.equal(c.namespace, 'hosted-runtime', 'the Leases live in the pod’s namespace');
  t.equal(c.queueLimit, 1000, 'queue of 1000 distinct objects');
  t.equal(c.leaseDurationSeconds, 15, 'Lease of 15 s');
  t.equal(c.heartbeatIntervalSeconds, 30, 'heartbeat every 30 s');
  t.equal(c.digestIntervalSeconds, 600, 'digest every 10 minutes');
  t.equal(c.kubeconfig, undefined, 'in-cluster credentials');
  t.equal(c.controlPlaneUrl, 'https://cp.example.com', 'no trailing slash');
  t.equal(c.token(), base.RUNTIME_TOKEN, 'the token');
  t.equal(c.watchNamespace, undefined, 'Argo objects of every namespace are watched');
  t.equal(
    loadEventReporterConfig({ ...base, WATCH_NAMESPACE: 'gitops' }).watchNamespace,
    'gitops',
    'WATCH_NAMESPACE limits the watches to that namespace',
  );
  t.equal(c.runtimeVersion, undefined, 'no RUNTIME_VERSION: heartbeats state no version');
  t.equal(
    loadEventReporterConfig({ ...base, RUNTIME_VERSION: '1.6.0' }).runtimeVersion,
    '1.6.0',
    'RUNTIME_VERSION is the version the heartbeats state',
  );
});

void t.test('each wrong or missing variable is named', async (t) => {
  t.equal(failing({ ...base, CONTROL_PLANE_URL: undefined }), 'CONTROL_PLANE_URL', 'missing URL');
  t.equal(
    failing({ ...base, CONTROL_PLANE_URL: 'http://cp.example.com' }),
    'CONTROL_PLANE_URL',
    'plain http off loopback',
  );
  t.equal(failing({ ...base, CONTROL_PLANE_URL: 'http://127.0.0.1:8080' }), 'none', 'plain http on loopback is fine');
  t.equal(failing({ ...base, RUNTIME_TOKEN: 'short' }), 'RUNTIME_TOKEN', 'a token too short');
  t.equal(failing({ ...base, REPLICA_NAME: 'Not_A_Label' }), 'REPLICA_NAME', 'a replica name that is no DNS label');
  t.equal(failing({ ...base, QUEUE_LIMIT: '0' }), 'QUEUE_LIMIT', 'a queue of 0');
  t.equal(failing({ ...base, WATCH_NAMESPACE: 'Argo CD' }), 'WATCH_NAMESPACE', 'a watch namespace that is no name');
  t.equal(failing({ ...base, RUNTIME_VERSION: 'v1.6' }), 'RUNTIME_VERSION', 'a runtime version that is not x.y.z');
  t.equal(
    failing({ ...base, LEASE_DURATION_SECONDS: 'x' }),
    'LEASE_DURATION_SECONDS',
    'a duration that is not a number',
  );
  t.equal(
    failing({ ...base, KUBERNETES_SERVICE_HOST: undefined }),
    'KUBECONFIG',
    'outside a cluster without KUBECONFIG',
  );
  t.equal(failing({ ...base, KUBECONFIG: join(dir, 'missing') }), 'KUBECONFIG', 'a KUBECONFIG that does not exist');
  t.equal(failing({ ...base, KUBECONFIG: kubeconfig }), 'none', 'an existing KUBECONFIG');
});
