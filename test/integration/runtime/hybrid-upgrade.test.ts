/**
 * A hybrid runtime's upgrade applied the way its customer applies it, against a real
 * kube-apiserver standing for the customer's cluster: the install bundle at 1.4.1 applied with
 * kubectl, the runtime installed at the control plane (the real app and Postgres), the upgrade to
 * 1.5.0 asked for; `kubectl diff` of the answered upgrade bundle against the cluster finds exactly
 * the objects the answer says change, and its apply moves the agents to the new images. The
 * install bundle of the new version could not be applied instead (a Job's pod template cannot be
 * changed): the reason the upgrade bundle has no bootstrap Job.
 */
import t from 'tap';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTestApi } from '../../helpers/api.ts';
import { missingKubeToolchain, startCustomerCluster } from '../../helpers/kubectl.ts';
import { hybridInstallBundle } from '../../../runtime/hybrid/bundle.ts';
import { catalog } from '../../../runtime/catalog.ts';
import type { RuntimeRegistered, RuntimeUpgraded } from '../../../provisioner/http/api-types.ts';

const toolchainBin = process.env.HRT_TOOLCHAIN_BIN;
const missing = missingKubeToolchain(toolchainBin);

if (missing && process.env.CI === 'true') {
  t.fail(`a real kube-apiserver is needed and CI=true: ${missing}`);
} else if (missing) {
  t.plan(0, `skipped: needs a real kube-apiserver: ${missing}`);
} else {
  t.setTimeout(240_000);
  const dir = await mkdtemp(join(tmpdir(), 'hrt-hybrid-upgrade-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));

  const api = await createTestApi({ env: { PROVISIONER_PUBLIC_URL: 'https://cp.example.test' } });
  t.teardown(() => api.close());
  const { kubectl } = await startCustomerCluster(t, toolchainBin!, dir);
  const images = async (): Promise<Record<string, string>> => {
    const r = await kubectl(['get', 'deployments', '-n', 'hosted-runtime-plant-u', '-o', 'json']); // the runtime's own namespace
    const list = JSON.parse(r.stdout) as {
      items: Array<{
        metadata: { name: string };
        spec: { template: { spec: { containers: Array<{ image: string }> } } };
      }>;
    };
    return Object.fromEntries(list.items.map((d) => [d.metadata.name, d.spec.template.spec.containers[0]!.image]));
  };

  const tenant = await api.signup();
  const reg = await api.request('POST', `/v1/tenants/${tenant.tenantId}/runtimes`, {
    key: tenant.apiKey,
    body: {
      name: 'plant-u',
      mode: 'hybrid',
      access: 'tunnel',
      argo: 'existing',
      argoNamespace: 'gitops',
      version: '1.4.1',
    },
  });
  const registered = reg.json<RuntimeRegistered>();

  t.test('installed at 1.4.1 from its install bundle', async (t) => {
    t.equal(reg.statusCode, 201, 'registered');
    const file = join(dir, 'install.yaml');
    await writeFile(file, registered.install.manifests, { mode: 0o600 });
    t.equal((await kubectl(['create', 'namespace', 'gitops'])).code, 0, "the customer's Argo CD namespace");
    const applied = await kubectl(['apply', '-f', file]);
    t.equal(applied.code, 0, `the install bundle applies: ${applied.output}`);
    // The bundle's Job would redeem the token; the route is the same.
    const redeemed = await api.request('POST', '/v1/runtimes/bootstrap', { key: registered.bootstrapToken, body: {} });
    t.equal(redeemed.statusCode, 200, 'the bootstrap token is redeemed: the runtime is installed');
    t.same(
      new Set(Object.values(await images()).map((i) => i.split(':').at(-1))),
      new Set(['1.4.1']),
      'every agent runs 1.4.1',
    );
  });

  t.test('upgraded to 1.5.0: kubectl diff agrees with the answer, and the apply moves the agents', async (t) => {
    const res = await api.request('POST', `/v1/tenants/${tenant.tenantId}/runtimes/plant-u/upgrade`, {
      key: tenant.apiKey,
      body: { version: '1.5.0' },
    });
    t.equal(res.statusCode, 200, `the upgrade is recorded: ${res.body.slice(0, 300)}`);
    const up = res.json<RuntimeUpgraded>().upgrade;
    const file = join(dir, 'hybrid-runtime-plant-u-1.5.0.yaml');
    await writeFile(file, up.install.manifests);

    // kubectl diff (a server-side dry run against the live objects) names each object that would change.
    const diff = await kubectl(['diff', '-f', file]);
    t.equal(diff.code, 1, `kubectl diff finds differences (exit 1): ${diff.output.slice(0, 500)}`);
    const live = new Set(
      [...diff.stdout.matchAll(/^diff -u -N \S+\/(\S+?)\s/gm)].map((m) => {
        // <group>.<version>.<Kind>.<namespace>.<name>, group empty for the core group
        const parts = m[1]!.split('.');
        return `${parts.at(-3)} ${parts.at(-1)}`;
      }),
    );
    const answered = new Set(
      up.changes.objects.filter((o) => o.change !== 'removed').map((o) => `${o.kind} ${o.name}`),
    );
    t.same([...live].sort(), [...answered].sort(), 'the objects kubectl diff finds are the ones the answer lists');
    t.ok(answered.has('Deployment app-proxy'), 'among them the app-proxy');

    const applied = await kubectl(['apply', '-f', file]);
    t.equal(applied.code, 0, `the upgrade bundle applies over the install: ${applied.output}`);
    t.same(
      new Set(Object.values(await images()).map((i) => i.split(':').at(-1))),
      new Set(['1.5.0']),
      'every agent runs 1.5.0',
    );
    const again = await kubectl(['diff', '-f', file]);
    t.equal(again.code, 0, `after the apply, kubectl diff finds nothing: ${again.output.slice(0, 300)}`);
    const versions = await kubectl([
      'get',
      'configmap',
      'runtime-versions',
      '-n',
      registered.install.namespace,
      '-o',
      'json',
    ]);
    t.match(versions.stdout, /1\.5\.0/, 'the versions ConfigMap names 1.5.0');
  });

  t.test('the new version as an install bundle could not be applied over it: the Job is immutable', async (t) => {
    const install = hybridInstallBundle({
      runtime: {
        tenantId: tenant.tenantId,
        runtimeId: registered.runtime.id,
        name: 'plant-u',
        access: 'tunnel',
        argo: 'existing',
        argoNamespace: 'gitops',
        upgrader: false,
        namespace: registered.install.namespace,
      },
      version: catalog.get('1.5.0')!,
      controlPlaneUrl: 'https://cp.example.test',
      tunnelUrl: 'wss://cp.example.test/v1/tunnel',
      publicKey: 'unused',
      bootstrapToken: 'hrth_' + 'B'.repeat(43),
    });
    const file = join(dir, 'reinstall.yaml');
    await writeFile(file, install.manifests);
    const applied = await kubectl(['apply', '-f', file]);
    t.not(applied.code, 0, 'kubectl apply fails');
    t.match(applied.output, /field is immutable/, `on the Job's pod template: ${applied.output.slice(-400)}`);
  });
}
