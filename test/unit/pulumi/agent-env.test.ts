/**
 * Contract between the tenants program and the runtime agents: each agent's Deployment is
 * rendered the way the program renders it, the environment a pod of it would get is built from
 * that Deployment (plain values, the credentials Secret and versions ConfigMap the program
 * writes, the downward API from a sample pod, ConfigMap and Secret volumes as files), and the
 * agent's own config loader runs on it: it must start, with the values the product intends.
 */
import { generateKeyPairSync } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { IDeployment } from 'kubernetes-models/apps/v1';
import type { IConfigMap, IContainer, ISecret, IVolume } from 'kubernetes-models/v1';
import { catalog } from '../../../runtime/catalog.ts';
import {
  CREDENTIALS_SECRET,
  GIT_CACHE_DIR,
  GITOPS_WORK_DIR,
  RUNTIME_NAMESPACE,
  SOURCE_SERVER_URL,
  VERSIONS_CONFIGMAP,
} from '../../../runtime/component/agents.ts';
import { sourceServerPassword } from '../../../runtime/component/source-server-account.ts';
import { loadSourceServerConfig } from '../../../runtime/agents/source-server/config.ts';
import { loadOperatorConfig } from '../../../runtime/agents/gitops-operator/config.ts';
import {
  ARGO_CD_NAMESPACE,
  ARGOCD_SERVER_URL,
  WEBHOOK_EVENT_SOURCE_URL,
} from '../../../runtime/component/argo-releases.ts';
import { loadAppProxyConfig } from '../../../runtime/agents/app-proxy/config.ts';
import { loadEventReporterConfig } from '../../../runtime/agents/event-reporter/config.ts';
import { loadRouterConfig } from '../../../runtime/agents/request-router/config.ts';
import { loadTunnelClientConfig } from '../../../runtime/agents/tunnel-client/config.ts';
import type { Env } from '../../../runtime/agents/common/config.ts';
import { createTenantProgram } from '../../../tenants/program.ts';
import { inputsOf, metaOf, runProgram } from './harness.ts';
import { recordingWaiter, tenantConfig, tenantInput, ROOT_ACCESS } from './fixtures.ts';

const { publicKey } = generateKeyPairSync('ed25519');
const publicKeyPem = publicKey.export({ type: 'spki', format: 'pem' }).toString();
const runtimeToken = 'rt_0123456789abcdefghijklmnopqrstuvwxyz';
const tenantId = tenantInput().tenantId;
const version = catalog.versions.at(-1)!;

const r = await runProgram(
  createTenantProgram({ rootAccess: ROOT_ACCESS, waitForSecret: recordingWaiter().waiter }),
  tenantConfig({ runtimeVersion: version.version, runtimeToken, controlPlanePublicKey: publicKeyPem }),
);
const secrets = r.ofType('kubernetes:core/v1:Secret').map((s) => inputsOf<ISecret>(s));
const credentials = secrets.find((s) => s.metadata?.name === CREDENTIALS_SECRET);
const configMaps = r.ofType('kubernetes:core/v1:ConfigMap').map((c) => inputsOf<IConfigMap>(c));
const deployments = new Map(
  r.ofType('kubernetes:apps/v1:Deployment').map((d) => [metaOf(d).name!, inputsOf<IDeployment>(d)]),
);

const root = mkdtempSync(join(tmpdir(), 'agent-env-'));
t.teardown(() => rmSync(root, { recursive: true, force: true }));

/** What a pod of `name` would see: its container, its environment, the port its probes use. */
function pod(name: string): { env: Env; container: IContainer; podName: string } {
  const d = deployments.get(name);
  if (!d) throw new Error(`no Deployment ${name}; have: ${[...deployments.keys()].join(', ')}`);
  const spec = d.spec!.template.spec!;
  const container = spec.containers[0]!;
  const podName = `${name}-5d8f7c9b6-x2k4q`;
  const podMeta: Record<string, string> = { 'metadata.name': podName, 'metadata.namespace': d.metadata!.namespace! };
  // Set by the kubelet in every pod; the agents take it as "in a cluster, use the service account".
  const env: Env = { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443', HOSTNAME: podName };
  // ConfigMap and Secret volumes become files under `root` + mountPath; values naming a mount path follow.
  const mounts = new Map<string, string>();
  for (const m of container.volumeMounts ?? []) {
    const volume: IVolume | undefined = spec.volumes?.find((v) => v.name === m.name);
    if (volume?.secret) {
      const ref = volume.secret;
      const secret = secrets.find(
        (x) => x.metadata?.name === ref.secretName && x.metadata?.namespace === RUNTIME_NAMESPACE,
      );
      if (!secret) throw new Error(`${name}: volume ${m.name} names Secret ${ref.secretName}, which is not written`);
      const dir = join(root, name, m.mountPath);
      mkdirSync(dir, { recursive: true });
      const items = ref.items ?? Object.keys(secret.stringData ?? {}).map((key) => ({ key, path: key }));
      for (const item of items) {
        const data = secret.stringData?.[item.key];
        if (data === undefined) throw new Error(`${name}: Secret ${ref.secretName} has no key ${item.key}`);
        writeFileSync(join(dir, item.path), data);
      }
      mounts.set(m.mountPath, dir);
      continue;
    }
    if (!volume?.configMap) continue;
    const cm = configMaps.find((c) => c.metadata?.name === volume.configMap!.name);
    if (!cm)
      throw new Error(`${name}: volume ${m.name} names ConfigMap ${volume.configMap.name}, which is not written`);
    const dir = join(root, name, m.mountPath);
    mkdirSync(dir, { recursive: true });
    const items = volume.configMap.items ?? Object.keys(cm.data ?? {}).map((key) => ({ key, path: key }));
    for (const item of items) {
      const data = cm.data?.[item.key];
      if (data === undefined) throw new Error(`${name}: ConfigMap ${cm.metadata?.name} has no key ${item.key}`);
      writeFileSync(join(dir, item.path), data);
    }
    mounts.set(m.mountPath, dir);
  }
  const local = (value: string): string => {
    for (const [mountPath, dir] of mounts)
      if (value.startsWith(`${mountPath}/`)) return dir + value.slice(mountPath.length);
    return value;
  };
  for (const v of container.env ?? []) {
    const from = v.valueFrom;
    if (!from) {
      env[v.name] = local(v.value ?? '');
    } else if (from.secretKeyRef) {
      const ref = from.secretKeyRef;
      const secret = secrets.find((s) => s.metadata?.name === ref.name && s.metadata?.namespace === RUNTIME_NAMESPACE);
      const value = secret?.stringData?.[ref.key];
      if (value === undefined)
        throw new Error(`${name}: ${v.name} reads Secret ${ref.name} key ${ref.key}, not written`);
      env[v.name] = value;
    } else if (from.configMapKeyRef) {
      const ref = from.configMapKeyRef;
      const value = configMaps.find((c) => c.metadata?.name === ref.name)?.data?.[ref.key];
      if (value === undefined)
        throw new Error(`${name}: ${v.name} reads ConfigMap ${ref.name} key ${ref.key}, not written`);
      env[v.name] = value;
    } else if (from.fieldRef) {
      const value = podMeta[from.fieldRef.fieldPath];
      if (value === undefined) throw new Error(`${name}: ${v.name} reads field ${from.fieldRef.fieldPath}`);
      env[v.name] = value;
    } else {
      throw new Error(`${name}: ${v.name} has a valueFrom this test does not know`);
    }
  }
  return { env, container, podName };
}

/** The container port the Deployment's probes call (they name the port `http`). */
function probePort(t: Test, container: IContainer): number {
  t.equal(container.readinessProbe?.httpGet?.port, 'http', `${container.name}: readiness probe calls port http`);
  t.equal(container.livenessProbe?.httpGet?.port, 'http', `${container.name}: liveness probe calls port http`);
  const port = container.ports?.find((p) => p.name === 'http')?.containerPort;
  if (port === undefined) throw new Error(`${container.name}: no container port named http`);
  return port;
}

t.test('the program writes the credentials Secret the agents read', async (t) => {
  t.ok(credentials, `Secret ${CREDENTIALS_SECRET} is written`);
  t.equal(
    credentials?.metadata?.namespace,
    RUNTIME_NAMESPACE,
    `Secret ${CREDENTIALS_SECRET} is in ${RUNTIME_NAMESPACE}`,
  );
});

t.test('tunnel-client starts with the tenant token, the tunnel URL and serves health on the probed port', async (t) => {
  const { env, container } = pod('tunnel-client');
  const config = loadTunnelClientConfig(env);
  t.equal(config.tunnelUrl, 'wss://control.example.test/v1/tunnel', 'tunnel URL derived from the control plane URL');
  t.equal(config.token(), runtimeToken, 'token is the runtime token');
  t.equal(
    env.RUNTIME_TOKEN,
    undefined,
    'read from the mounted Secret file, not the environment (a key exchanged later reaches the running agent)',
  );
  const mount = container.volumeMounts?.find((m) =>
    env.RUNTIME_TOKEN_FILE?.startsWith(`${root}/tunnel-client${m.mountPath}/`),
  );
  t.ok(
    mount && mount.subPath === undefined && mount.readOnly,
    'a read-only mount of the whole Secret volume, no subPath (the kubelet updates it)',
  );
  t.equal(config.routerUrl, `http://request-router.${RUNTIME_NAMESPACE}.svc:8080/`, 'router URL is the router Service');
  t.equal(config.healthPort, probePort(t, container), 'health endpoints are served on the port the probes call');
});

t.test('request-router starts with the app-proxy and event source addresses on the probed port', async (t) => {
  const { env, container } = pod('request-router');
  const config = loadRouterConfig(env);
  t.equal(config.appProxyUrl, `http://app-proxy.${RUNTIME_NAMESPACE}.svc:8080/`, 'app-proxy URL is its Service');
  t.equal(config.eventSourceUrl, new URL(WEBHOOK_EVENT_SOURCE_URL).toString(), 'webhooks go to the event source');
  t.equal(config.port, probePort(t, container), 'serves on the port the probes and the Service call');
});

t.test('app-proxy starts with the tenant id, the public key and the runtime versions', async (t) => {
  const { env, container } = pod('app-proxy');
  const config = loadAppProxyConfig(env);
  t.equal(config.tenantId, tenantId, 'tenant id is the tenant the program was run for');
  t.equal(
    config.publicKey.export({ type: 'spki', format: 'pem' }).toString(),
    publicKeyPem,
    'public key is the control plane key the program was given',
  );
  t.same(
    await config.runtimeInfo(),
    { runtimeVersion: version.version, components: { ...version.components } },
    'runtime info is the installed version and its pins, from the versions ConfigMap',
  );
  t.equal(config.kubeconfigFile, undefined, 'acts with the pod service account');
  t.equal(config.port, probePort(t, container), 'serves on the port the probes and the Service call');
  t.equal(config.sourceServerUrl, SOURCE_SERVER_URL, 'diffs are asked of the Source Server Service');
  t.ok(
    configMaps.some((c) => c.metadata?.name === VERSIONS_CONFIGMAP),
    `runtime info comes from the ${VERSIONS_CONFIGMAP} ConfigMap`,
  );
});

t.test(
  'event-reporter starts as its pod, with the token, the control plane URL and its Leases namespace',
  async (t) => {
    const { env, container, podName } = pod('event-reporter');
    const config = loadEventReporterConfig(env);
    t.equal(config.controlPlaneUrl, 'https://control.example.test', 'reports go to the control plane URL');
    t.equal(config.token(), runtimeToken, 'token is the runtime token');
    t.equal(config.replica, podName, 'replica name is the pod name (downward API)');
    t.equal(config.namespace, RUNTIME_NAMESPACE, 'Leases live in the runtime namespace');
    t.equal(config.queueLimit, 1000, 'queue limit as the program sets it');
    t.equal(config.kubeconfig, undefined, 'acts with the pod service account');
    t.equal(config.port, probePort(t, container), 'serves /metrics and health on the port the probes call');
    t.equal(config.sourceServerUrl, SOURCE_SERVER_URL, 'changes are asked of the Source Server Service');
    t.equal(
      env.NODE_OPTIONS,
      '--max-semi-space-size=1 --max-old-space-size=384',
      "Node runs with the reporter's V8 flags (small young generation, old generation under the container limit)",
    );
  },
);

t.test('gitops-operator starts with its namespace, its clones’ folder and the console’s products page', async (t) => {
  const { env, container, podName } = pod('gitops-operator');
  const config = loadOperatorConfig(env);
  t.equal(config.namespace, ARGO_CD_NAMESPACE, 'reads the promotion resources in Argo CD’s namespace');
  t.equal(config.identity, podName, 'holds its Lease as its pod');
  t.equal(config.gitWorkDir, GITOPS_WORK_DIR, 'clones into its work folder');
  t.ok(
    container.volumeMounts?.some((m) => m.mountPath === GITOPS_WORK_DIR && !m.readOnly),
    'the work folder is a writable mount',
  );
  t.equal(config.sourceServerUrl, SOURCE_SERVER_URL, 'dry runs ask the Source Server Service');
  t.equal(
    config.productsUrl,
    `https://control.example.test/console/#/tenants/${tenantId}/products/${ARGO_CD_NAMESPACE}`,
    'its pull requests link to the tenant’s products page in the console of the control plane’s public URL',
  );
  t.equal(config.port, probePort(t, container), 'serves health on the port the probes call');
});

t.test(
  'source-server starts with Argo CD’s address, its account’s password and its Git cache on the probed port',
  async (t) => {
    const { env, container } = pod('source-server');
    const config = loadSourceServerConfig(env);
    t.equal(
      config.argoCdServerUrl.replace(/\/+$/, ''),
      new URL(ARGOCD_SERVER_URL).toString().replace(/\/+$/, ''),
      'reads the Argo CD API server',
    );
    t.equal(config.argoCdUsername, 'source-server', 'as the source-server account');
    t.equal(
      config.argoCdPassword(),
      sourceServerPassword(runtimeToken),
      'with the password derived from the runtime token',
    );
    t.equal(config.gitCacheDir, GIT_CACHE_DIR, 'keeps its clones in the Git cache');
    t.ok(
      container.volumeMounts?.some((m) => m.mountPath === GIT_CACHE_DIR && !m.readOnly),
      'the Git cache is a writable mount',
    );
    t.equal(config.kubeconfig, undefined, 'reads repository credentials with the pod service account');
    t.equal(config.port, probePort(t, container), 'serves on the port the probes and the Service call');
  },
);
