/**
 * The in-cluster upgrader applies an upgrade and nothing else, against a real kube-apiserver
 * standing for the customer's cluster: the install bundle at 1.4.1 (upgrades: agent) applied with
 * kubectl, the runtime installed at the control plane (the real app on loopback, real Postgres),
 * the upgrade to 1.5.0 asked for.
 *
 *  - The plan the control plane answers passes the upgrader's check against the objects as the
 *    API server has them (defaults filled in, managed fields, the kubectl annotation).
 *  - The upgrader itself (runtime/agents/upgrader, with its own ServiceAccount's token and the
 *    runtime key) pulls the plan through a proxy that tampers with it in transit (a double of a
 *    compromised path: the app-proxy under the upgrader's account, an image from another
 *    registry, the credentials Secret mounted). It refuses the plan: nothing in the cluster
 *    changes, not even the versions ConfigMap the plan applies first, and the control plane
 *    records the upgrade `failed` with the object and the fields that differ.
 *
 * The rollout of an accepted plan needs controllers: test/e2e/hybrid-upgrader.test.ts.
 */
import t from 'tap';
import http from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { createTestApi } from '../../helpers/api.ts';
import { auditActions } from '../../helpers/audit.ts';
import { missingKubeToolchain, startCustomerCluster } from '../../helpers/kubectl.ts';
import { agentKubeTransport } from '../../../runtime/agents/common/kube.ts';
import { FIELD_MANAGER, Upgrader } from '../../../runtime/agents/upgrader/upgrader.ts';
import { planRefusal } from '../../../runtime/protocol/upgrade-check.ts';
import { VERSIONS_CONFIGMAP, type PlannedObject, type UpgraderAssignment } from '../../../runtime/protocol/upgrade.ts';

const toolchainBin = process.env.HRT_TOOLCHAIN_BIN;
const missing = missingKubeToolchain(toolchainBin);
/** The runtime's namespace in the customer's cluster: its own, by its name. */
const NS = 'hosted-runtime-plant-p';

type Deployment = {
  metadata: { name: string; generation: number; resourceVersion: string; managedFields?: Array<{ manager: string }> };
  spec: {
    template: {
      spec: {
        serviceAccountName: string;
        volumes?: Array<{ name: string }>;
        containers: Array<{ image: string; volumeMounts?: Array<{ name: string; mountPath: string }> }>;
      };
    };
  };
};

if (missing && process.env.CI === 'true') {
  t.fail(`a real kube-apiserver is needed and CI=true: ${missing}`);
} else if (missing) {
  t.plan(0, `skipped: needs a real kube-apiserver: ${missing}`);
} else {
  t.setTimeout(240_000);
  const dir = await mkdtemp(join(tmpdir(), 'hrt-hybrid-upgrader-plan-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));

  const api = await createTestApi({ env: { PROVISIONER_PUBLIC_URL: 'https://cp.example.test' } });
  t.teardown(() => api.close());
  await api.app.listen({ port: 0, host: '127.0.0.1' });
  const controlPlane = `http://127.0.0.1:${(api.app.server.address() as AddressInfo).port}`;
  const { plane, kubectl } = await startCustomerCluster(t, toolchainBin!, dir);
  const get = async <T>(kind: string, name: string): Promise<T> => {
    const r = await kubectl(['get', kind, name, '-n', NS, '-o', 'json', '--show-managed-fields']);
    if (r.code !== 0) throw new Error(`kubectl get ${kind} ${name}: ${r.output}`);
    return JSON.parse(r.stdout) as T;
  };

  const tenant = await api.signup();
  const asTenant = api.as(tenant.apiKey);
  const registered = await asTenant.call('POST /v1/tenants/:id/runtimes', {
    params: { id: tenant.tenantId },
    body: {
      name: 'plant-p',
      mode: 'hybrid',
      access: 'tunnel',
      argo: 'existing',
      argoNamespace: 'gitops',
      upgrades: 'agent',
      version: '1.4.1',
    },
  });
  let runtimeKey = '';

  t.test('installed at 1.4.1 with kubectl; the upgrade to 1.5.0 is left to the upgrader', async (t) => {
    t.match(registered.runtime, { version: '1.4.1', upgrades: 'agent' }, 'registered at 1.4.1, upgrades by the agent');
    const file = join(dir, 'install.yaml');
    await writeFile(file, registered.install.manifests, { mode: 0o600 });
    t.equal((await kubectl(['create', 'namespace', 'gitops'])).code, 0, "the customer's Argo CD namespace");
    const applied = await kubectl(['apply', '-f', file]);
    t.equal(applied.code, 0, `the install bundle applies: ${applied.output.slice(-500)}`);
    const redeemed = await api.as(registered.bootstrapToken).call('POST /v1/runtimes/bootstrap', { body: {} });
    t.equal(redeemed.runtimeId, registered.runtime.id, 'the bootstrap token is redeemed: the runtime is installed');
    runtimeKey = redeemed.runtimeToken;
    const asked = await asTenant.call('POST /v1/tenants/:id/runtimes/:name/upgrade', {
      params: { id: tenant.tenantId, name: 'plant-p' },
      body: { version: '1.5.0' },
    });
    t.equal(asked.changed, true, 'the upgrade is asked');
    t.equal(asked.appliedBy, 'agent', 'the upgrader is to apply it');
  });

  t.test("the control plane's plan passes the check against the objects as the API server has them", async (t) => {
    const res = await fetch(`${controlPlane}/v1/runtime/upgrade`, {
      headers: { authorization: `Bearer ${runtimeKey}` },
    });
    t.equal(res.status, 200, 'the runtime key pulls the plan');
    const up = ((await res.json()) as UpgraderAssignment).upgrade!;
    const objects = [...up.apply, ...up.rollback];
    const running = new Map<string, unknown>();
    for (const o of objects)
      running.set(`${o.kind}/${o.metadata.name}`, await get(o.kind.toLowerCase(), o.metadata.name));
    t.ok(
      up.apply.some((o) => o.kind === 'Deployment' && o.metadata.name === 'app-proxy'),
      'the plan has the app-proxy',
    );
    t.equal(
      planRefusal(objects, (o) => running.get(`${o.kind}/${o.metadata.name}`), VERSIONS_CONFIGMAP),
      undefined,
      'every object of the plan and of its rollback changes only what a version upgrade changes',
    );
  });

  t.test(
    'a plan tampered with in transit is refused by the upgrader: nothing applied, the fields reported',
    async (t) => {
      // A double of a compromised path between the upgrader and the control plane: it forwards both
      // ways and rewrites the app-proxy's Deployment in the plan it answers.
      const proxy = http.createServer((req, res) => {
        void (async () => {
          const chunks: Buffer[] = [];
          for await (const c of req) chunks.push(c as Buffer);
          const upstream = await fetch(controlPlane + req.url, {
            method: req.method,
            headers: { authorization: req.headers.authorization ?? '', 'content-type': 'application/json' },
            ...(chunks.length > 0 ? { body: Buffer.concat(chunks) } : {}),
          });
          let body = await upstream.text();
          if (req.method === 'GET' && upstream.status === 200) {
            const assignment = JSON.parse(body) as UpgraderAssignment;
            const proxyDeployment = assignment.upgrade?.apply.find(
              (o) => o.kind === 'Deployment' && o.metadata.name === 'app-proxy',
            ) as (PlannedObject & Deployment) | undefined;
            if (proxyDeployment) {
              const pod = proxyDeployment.spec.template.spec;
              pod.serviceAccountName = 'runtime-upgrader';
              pod.containers[0]!.image = 'registry.attacker.test/app-proxy:1.5.0';
              pod.volumes = [
                ...(pod.volumes ?? []),
                { name: 'stolen', secret: { secretName: 'runtime-credentials' } } as never,
              ];
              pod.containers[0]!.volumeMounts = [
                ...(pod.containers[0]!.volumeMounts ?? []),
                { name: 'stolen', mountPath: '/var/run/stolen' },
              ];
            }
            body = JSON.stringify(assignment);
          }
          res.writeHead(upstream.status, { 'content-type': 'application/json' });
          res.end(body);
        })().catch((err: unknown) => {
          res.writeHead(502);
          res.end(String(err));
        });
      });
      proxy.listen(0, '127.0.0.1');
      await once(proxy, 'listening');
      t.teardown(() => new Promise<void>((resolve) => proxy.close(() => resolve())));

      const before = await get<Deployment>('deployment', 'app-proxy');
      const versionsBefore = await get<{ metadata: { resourceVersion: string } }>('configmap', VERSIONS_CONFIGMAP);

      // The upgrader with its own ServiceAccount's token, as its pod runs it.
      const token = await kubectl(['create', 'token', 'runtime-upgrader', '-n', NS]);
      t.equal(token.code, 0, `a token for the upgrader's ServiceAccount: ${token.output.slice(0, 200)}`);
      const doc = JSON.parse(plane.kubeconfig) as { users: Array<{ user: Record<string, string> }> };
      doc.users[0]!.user = { token: token.stdout.trim() };
      const kubeconfig = join(dir, 'upgrader-kubeconfig');
      await writeFile(kubeconfig, JSON.stringify(doc), { mode: 0o600 });
      const upgrader = new Upgrader({
        config: {
          controlPlaneUrl: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`,
          token: runtimeKey,
          namespace: NS,
          kubeconfig,
          port: 0,
          host: '127.0.0.1',
          pollSeconds: 3600,
          rolloutTimeoutSeconds: 5,
          requestTimeoutSeconds: 15,
          logLevel: 'silent',
        },
        kube: agentKubeTransport(kubeconfig),
        log: pino({ level: 'silent' }),
        rolloutPollMs: 200,
      });

      t.equal(await upgrader.cycle(), 'failed', 'the upgrader ends the upgrade failed');

      const after = await get<Deployment>('deployment', 'app-proxy');
      t.equal(after.metadata.resourceVersion, before.metadata.resourceVersion, 'the app-proxy Deployment is untouched');
      t.equal(after.spec.template.spec.serviceAccountName, 'app-proxy', 'it runs under its own account');
      t.equal(after.spec.template.spec.containers[0]!.image, 'hosted-runtimes/app-proxy:1.4.1', 'and its own image');
      t.notOk(
        after.metadata.managedFields?.some((f) => f.manager === FIELD_MANAGER),
        'the upgrader applied nothing to it',
      );
      const versionsAfter = await get<{ metadata: { resourceVersion: string } }>('configmap', VERSIONS_CONFIGMAP);
      t.equal(
        versionsAfter.metadata.resourceVersion,
        versionsBefore.metadata.resourceVersion,
        'the versions ConfigMap, first in the plan, is untouched too',
      );

      const shown = await asTenant.call('GET /v1/tenants/:id/runtimes/:name', {
        params: { id: tenant.tenantId, name: 'plant-p' },
      });
      const upgrade = shown.upgrade;
      t.equal(upgrade?.phase, 'failed', 'the control plane shows the upgrade failed');
      for (const field of [
        /Deployment hosted-runtime-plant-p\/app-proxy: spec\.template\.spec\.serviceAccountName differs/,
        /spec\.template\.spec\.containers\[app-proxy\]\.image is outside the repository it runs from \(hosted-runtimes\/app-proxy\)/,
        /spec\.template\.spec\.volumes differs/,
        /spec\.template\.spec\.containers\[app-proxy\]\.volumeMounts differs/,
        /nothing was applied/,
      ])
        t.match(upgrade?.message, field, `the report says ${String(field)}`);
      t.same(
        await auditActions(api.db.pool, { targetId: registered.runtime.id, actionPrefix: 'runtime.upgrade.' }),
        ['runtime.upgrade.failed'],
        'audited as failed, straight from pending (it never reported applying)',
      );
    },
  );
}
