/**
 * A hybrid runtime's upgrade applied the way its customer applies it, against a real
 * kube-apiserver standing for the customer's cluster: the install bundle at 1.4.1 applied with
 * kubectl, the runtime installed at the control plane (the real app and Postgres), the upgrade to
 * 1.5.0 asked for; `kubectl diff` of the answered upgrade bundle against the cluster finds exactly
 * the objects the answer says change, and its apply moves the agents to the new images. The
 * install bundle of the new version could not be applied instead (a Job's pod template cannot be
 * changed): the reason the upgrade bundle has no bootstrap Job.
 *
 * A runtime with the in-cluster upgrader at 1.7.0 upgraded to 1.8.0, which adds the GitOps
 * Operator: the answer says the customer applies it (the upgrader may create nothing, and the
 * promotion CRDs are cluster-scoped), `kubectl diff` finds the objects it lists (the seven CRDs
 * among them), and its apply adds the CRDs, established, and the operator with its Role in the
 * customer's Argo CD namespace; the upgrader's Role may then patch the operator's Deployment.
 */
import t from 'tap';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTestApi } from '../../helpers/api.ts';
import { missingKubeToolchain, startCustomerCluster } from '../../helpers/kubectl.ts';
import { hybridInstallBundle } from '../../../runtime/hybrid/bundle.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { promotionCrds } from '../../../runtime/component/promotion-crds.ts';
import { until } from '../../../sandbox/until.ts';

const PROMOTION_CRDS = promotionCrds().map((c) => (c.metadata as { name: string }).name);

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
  const asTenant = api.as(tenant.apiKey);
  const registered = await asTenant.call('POST /v1/tenants/:id/runtimes', {
    params: { id: tenant.tenantId },
    body: {
      name: 'plant-u',
      mode: 'hybrid',
      access: 'tunnel',
      argo: 'existing',
      argoNamespace: 'gitops',
      version: '1.4.1',
    },
  });

  t.test('installed at 1.4.1 from its install bundle', async (t) => {
    t.equal(registered.runtime.version, '1.4.1', 'registered at 1.4.1');
    const file = join(dir, 'install.yaml');
    await writeFile(file, registered.install.manifests, { mode: 0o600 });
    t.equal((await kubectl(['create', 'namespace', 'gitops'])).code, 0, "the customer's Argo CD namespace");
    const applied = await kubectl(['apply', '-f', file]);
    t.equal(applied.code, 0, `the install bundle applies: ${applied.output}`);
    // The bundle's Job would redeem the token; the route is the same.
    const redeemed = await api.as(registered.bootstrapToken).call('POST /v1/runtimes/bootstrap', { body: {} });
    t.equal(redeemed.runtimeId, registered.runtime.id, 'the bootstrap token is redeemed: the runtime is installed');
    t.same(
      new Set(Object.values(await images()).map((i) => i.split(':').at(-1))),
      new Set(['1.4.1']),
      'every agent runs 1.4.1',
    );
  });

  t.test('upgraded to 1.5.0: kubectl diff agrees with the answer, and the apply moves the agents', async (t) => {
    const res = await asTenant.call('POST /v1/tenants/:id/runtimes/:name/upgrade', {
      params: { id: tenant.tenantId, name: 'plant-u' },
      body: { version: '1.5.0' },
    });
    t.equal(res.changed, true, 'the upgrade is recorded');
    const up = res.upgrade;
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

  t.test('1.7.0 → 1.8.0 adds the GitOps Operator and the promotion CRDs: the customer applies it', async (t) => {
    const ns = 'hosted-runtime-plant-o';
    const o = await asTenant.call('POST /v1/tenants/:id/runtimes', {
      params: { id: tenant.tenantId },
      body: {
        name: 'plant-o',
        mode: 'hybrid',
        access: 'tunnel',
        argo: 'existing',
        argoNamespace: 'gitops',
        upgrades: 'agent',
        version: '1.7.0',
      },
    });
    t.equal(o.runtime.version, '1.7.0', 'registered at 1.7.0');
    const file = join(dir, 'install-plant-o.yaml');
    await writeFile(file, o.install.manifests, { mode: 0o600 });
    const installed = await kubectl(['apply', '-f', file]);
    t.equal(installed.code, 0, `its install bundle applies: ${installed.output}`);
    const redeemed = await api.as(o.bootstrapToken).call('POST /v1/runtimes/bootstrap', { body: {} });
    t.equal(redeemed.runtimeId, o.runtime.id, 'installed');
    const operatorThere = async () =>
      (
        await kubectl(['get', 'deployment', 'gitops-operator', '-n', ns, '-o', 'name', '--ignore-not-found'])
      ).stdout.trim();
    t.equal(await operatorThere(), '', '1.7.0 has no operator');

    const answer = await asTenant.call('POST /v1/tenants/:id/runtimes/:name/upgrade', {
      params: { id: tenant.tenantId, name: 'plant-o' },
      body: { version: '1.8.0' },
    });
    t.equal(answer.changed, true, 'the upgrade is recorded');
    t.equal(answer.appliedBy, 'customer', 'the in-cluster upgrader does not apply it');
    t.match(
      answer.customerActionReason,
      /Deployment hosted-runtime-plant-o\/gitops-operator \(added\)/,
      `the reason names the operator it would have to create: ${answer.customerActionReason}`,
    );
    const up = answer.upgrade;
    const added = up.changes.objects.filter((c) => c.change === 'added').map((c) => `${c.kind} ${c.name}`);
    for (const crd of PROMOTION_CRDS)
      t.ok(added.includes(`CustomResourceDefinition ${crd}`), `the answer lists ${crd} as added`);
    t.ok(added.includes('Deployment gitops-operator'), 'and the operator');

    const upgradeFile = join(dir, 'hybrid-runtime-plant-o-1.8.0.yaml');
    await writeFile(upgradeFile, up.install.manifests);
    const diff = await kubectl(['diff', '-f', upgradeFile]);
    t.equal(diff.code, 1, `kubectl diff finds differences (exit 1): ${diff.output.slice(0, 300)}`);
    // <group>.<version>.<Kind>.<namespace>.<name>: the Kind is the first part that starts with a capital.
    const live = new Set(
      [...diff.stdout.matchAll(/^diff -u -N \S+\/(\S+?)\s/gm)].map((m) => {
        const found = /\.([A-Z][A-Za-z]+)\.([^.]*)\.(.+)$/.exec(m[1]!)!;
        return `${found[1]} ${found[3]}`;
      }),
    );
    t.same(
      [...live].sort(),
      up.changes.objects.map((c) => `${c.kind} ${c.name}`).sort(),
      'the objects kubectl diff finds are the ones the answer lists, the CRDs among them',
    );

    const applied = await kubectl(['apply', '-f', upgradeFile]);
    t.equal(applied.code, 0, `the upgrade bundle applies: ${applied.output}`);
    const crds = await until('the promotion CRDs established', 30_000, async () => {
      const r = await kubectl(['get', 'crd', ...PROMOTION_CRDS, '-o', 'json']);
      if (r.code !== 0) return undefined;
      const items = (
        JSON.parse(r.stdout) as {
          items: Array<{ status?: { conditions?: Array<{ type: string; status: string }> } }>;
        }
      ).items;
      return items.length === PROMOTION_CRDS.length &&
        items.every((c) => c.status?.conditions?.some((x) => x.type === 'Established' && x.status === 'True'))
        ? items
        : undefined;
    });
    t.equal(crds.length, 7, 'the seven promotion CRDs are added and established');
    t.equal(await operatorThere(), 'deployment.apps/gitops-operator', 'the operator is added');
    t.equal(
      (await kubectl(['get', 'role', 'hosted-runtime-plant-o:gitops-operator', '-n', 'gitops', '-o', 'name'])).code,
      0,
      "with its Role in the customer's Argo CD namespace",
    );
    const can = async (verb: string, what: string, namespace: string) =>
      (
        await kubectl([
          'auth',
          'can-i',
          verb,
          what,
          '-n',
          namespace,
          `--as=system:serviceaccount:${ns}:runtime-upgrader`,
        ])
      ).stdout.trim();
    t.equal(
      await can('patch', 'deployments/gitops-operator', ns),
      'yes',
      "the upgrader may patch the operator's Deployment now",
    );
    t.equal(await can('create', 'customresourcedefinitions', ''), 'no', 'and still creates nothing cluster-wide');
    t.equal(await can('create', 'roles', 'gitops'), 'no', 'nor RBAC');
    const again = await kubectl(['diff', '-f', upgradeFile]);
    t.equal(again.code, 0, `after the apply, kubectl diff finds nothing: ${again.output.slice(0, 300)}`);
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
