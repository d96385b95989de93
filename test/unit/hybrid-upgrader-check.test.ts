/**
 * What the in-cluster upgrader accepts in a plan (runtime/protocol/upgrade-check.ts): the changes
 * a version upgrade makes to the objects it runs, nothing else. The plans the control plane builds
 * pass for every catalog version on the upgrade path; a plan changing the pod's account, an image
 * repository, a volume, a Secret mount or environment, the host settings or the containers is
 * refused, naming the object and the field; fields the API server defaults do not count.
 */
import t from 'tap';
import {
  hybridAgents,
  hybridInstallBundle,
  type InstallBundleInput,
  type KubeObject,
} from '../../runtime/hybrid/bundle.ts';
import {
  agentRefusal,
  upgraderPatchable,
  upgraderPlan,
  planDifferences,
  planRefusal,
  repositoryOf,
} from '../../runtime/hybrid/upgrader.ts';
import { compareBundles } from '../../runtime/hybrid/upgrade.ts';
import { catalog, compareVersions } from '../../runtime/catalog.ts';
import { VERSIONS_CONFIGMAP } from '../../runtime/component/agents.ts';
import type { PlannedObject } from '../../runtime/protocol/upgrade.ts';

type Obj = Record<string, unknown>;
type Pod = {
  serviceAccountName: string;
  hostNetwork?: boolean;
  volumes?: Obj[];
  securityContext?: Obj;
  containers: Array<{
    name: string;
    image: string;
    env: Obj[];
    envFrom?: Obj[];
    volumeMounts?: Obj[];
    securityContext?: Obj;
    resources?: Obj;
    ports?: Obj[];
    command?: string[];
  }>;
  initContainers?: Obj[];
};

const at = (version: string, over: Partial<InstallBundleInput['runtime']> = {}) =>
  hybridInstallBundle({
    runtime: {
      tenantId: '3f6c1a52-6a0e-4c1b-9a57-2d8e0f4b7c11',
      runtimeId: '8d1e5b7a-0c2f-4e7d-b1a3-6f9e2c4d8a10',
      name: 'plant-a',
      access: 'tunnel',
      argo: 'existing',
      argoNamespace: 'gitops',
      upgrader: true,
      ...over,
    },
    controlPlaneUrl: 'https://cp.example.test',
    tunnelUrl: 'wss://cp.example.test/v1/tunnel',
    publicKey: '-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n',
    version: catalog.get(version)!,
    purpose: 'upgrade',
  });

const key = (o: { kind: string; metadata: { name: string } }) => `${o.kind}/${o.metadata.name}`;
/** What `planRefusal` says about `objects` against the objects of `running` (a bundle's, standing for the cluster). */
const refusal = (objects: PlannedObject[], running: KubeObject[]) => {
  const byKey = new Map(running.map((o) => [key(o), o]));
  return planRefusal(objects, (o) => byKey.get(key(o)), VERSIONS_CONFIGMAP);
};
const pod = (o: KubeObject | PlannedObject) =>
  (o as unknown as { spec: { template: { spec: Pod } } }).spec.template.spec;

/** The plan of 1.4.1 → 1.5.0 with `change` made to the app-proxy's Deployment in it, against 1.4.1. */
function tampered(change: (p: Pod) => void) {
  const before = at('1.4.1');
  const plan = upgraderPlan(before, at('1.5.0'));
  const apply = structuredClone(plan.apply) as PlannedObject[];
  change(pod(apply.find((o) => key(o) === 'Deployment/app-proxy')!));
  return refusal([...apply, ...plan.rollback], before.objects);
}

// Every version on the upgrade path, each with the one before it, in each access and Argo mode.
const versions = [...catalog.versions].sort((a, b) => compareVersions(a.version, b.version));
for (let i = 1; i < versions.length; i++) {
  const from = versions[i - 1]!.version;
  const to = versions[i]!.version;
  t.test(`the control plane's plan ${from} → ${to} passes the upgrader's check`, async (t) => {
    t.ok(catalog.upgradePath(from, to).allowed, `${from} → ${to} is an upgrade the catalog allows`);
    for (const over of [
      {},
      { access: 'ingress' as const, ingressUrl: 'https://plant.example.test' },
      { argo: 'new' as const, argoNamespace: undefined },
    ]) {
      const before = at(from, over);
      const after = at(to, over);
      const mode = JSON.stringify(over);
      const added = hybridAgents(to).filter((a) => !hybridAgents(from).some((b) => b.name === a.name));
      if (added.length > 0) {
        // A version that adds an agent adds objects and RBAC: the customer's to apply, never the upgrader's.
        const up = compareBundles(before, after, { name: 'plant-a', from, to });
        const why = agentRefusal(up, upgraderPatchable(before));
        for (const a of added)
          t.match(why, new RegExp(`/${a.name} \\(added\\)`), `${mode}: refused, naming the added ${a.name}`);
        continue;
      }
      const plan = upgraderPlan(before, after);
      t.ok(plan.apply.length > 0, `${mode}: the plan changes objects`);
      t.equal(
        refusal([...plan.apply, ...plan.rollback], before.objects),
        undefined,
        `${mode}: accepted against the objects at ${from}`,
      );
      t.equal(
        refusal(plan.rollback, after.objects),
        undefined,
        `${mode}: its rollback is accepted against the objects at ${to} (a rollout that failed)`,
      );
    }
  });
}

t.test('a plan that runs a pod under another ServiceAccount is refused, naming the field', async (t) => {
  const why = tampered((p) => {
    p.serviceAccountName = 'runtime-upgrader';
  });
  t.match(
    why,
    /Deployment hosted-runtime\/app-proxy: spec\.template\.spec\.serviceAccountName differs/,
    `the object and the field: ${why}`,
  );
});

t.test('an image from another repository is refused; another tag or a digest of the same one is not', async (t) => {
  const other = tampered((p) => {
    p.containers[0]!.image = 'registry.attacker.test/hosted-runtimes/app-proxy:1.5.0';
  });
  t.match(
    other,
    /spec\.template\.spec\.containers\[app-proxy\]\.image is outside the repository it runs from \(hosted-runtimes\/app-proxy\)/,
    `another registry: ${other}`,
  );
  const sibling = tampered((p) => {
    p.containers[0]!.image = 'hosted-runtimes/upgrader:1.5.0';
  });
  t.match(sibling, /containers\[app-proxy\]\.image is outside/, 'another image of ours is another repository too');
  const smuggled = tampered((p) => {
    p.containers[0]!.image = 'hosted-runtimes/app-proxy:1.5.0 --privileged';
  });
  t.match(smuggled, /containers\[app-proxy\]\.image has a tag or digest of another shape/, 'a tag of another shape');
  const digest = tampered((p) => {
    p.containers[0]!.image = `hosted-runtimes/app-proxy:1.5.0@sha256:${'ab'.repeat(32)}`;
  });
  t.equal(digest, undefined, 'a digest in the same repository is an upgrade');
  t.equal(repositoryOf('registry.example.test:5000/team/app:1.2@sha256:00'), 'registry.example.test:5000/team/app');
  t.equal(
    repositoryOf('registry.example.test:5000/team/app'),
    'registry.example.test:5000/team/app',
    'a port is no tag',
  );
});

t.test(
  'a plan that adds a volume, mounts the credentials Secret or takes it into the environment is refused',
  async (t) => {
    const volume = tampered((p) => {
      p.volumes = [...(p.volumes ?? []), { name: 'credentials', secret: { secretName: 'runtime-credentials' } }];
      p.containers[0]!.volumeMounts = [
        ...(p.containers[0]!.volumeMounts ?? []),
        { name: 'credentials', mountPath: '/var/run/credentials', readOnly: true },
      ];
    });
    t.match(volume, /app-proxy: spec\.template\.spec\.volumes differs/, `the volume: ${volume}`);
    t.match(volume, /spec\.template\.spec\.containers\[app-proxy\]\.volumeMounts differs/, 'and its mount');

    const envFrom = tampered((p) => {
      p.containers[0]!.envFrom = [{ secretRef: { name: 'runtime-credentials' } }];
    });
    t.match(envFrom, /containers\[app-proxy\]\.envFrom differs/, `the Secret as environment: ${envFrom}`);

    const env = tampered((p) => {
      p.containers[0]!.env.push({
        name: 'STOLEN',
        valueFrom: { secretKeyRef: { name: 'runtime-credentials', key: 'runtime-token' } },
      });
    });
    t.match(env, /containers\[app-proxy\]\.env names other variables/, `a variable from the Secret: ${env}`);

    const source = tampered((p) => {
      const e = p.containers[0]!.env.find((x) => x.name === 'RUNTIME_ID')!;
      delete e.value;
      e.valueFrom = { secretKeyRef: { name: 'runtime-credentials', key: 'runtime-token' } };
    });
    t.match(source, /containers\[app-proxy\]\.env\[RUNTIME_ID\] differs/, `a variable's source: ${source}`);
  },
);

t.test('host settings, security contexts, commands and the set of containers are pinned', async (t) => {
  t.match(
    tampered((p) => {
      p.hostNetwork = true;
    }),
    /app-proxy: spec\.template\.spec\.hostNetwork differs/,
    'hostNetwork',
  );
  t.match(
    tampered((p) => {
      p.securityContext = {};
    }),
    /spec\.template\.spec\.securityContext differs/,
    'the pod security context dropped',
  );
  t.match(
    tampered((p) => {
      p.containers[0]!.securityContext = { privileged: true };
    }),
    /containers\[app-proxy\]\.securityContext differs/,
    "the container's security context",
  );
  t.match(
    tampered((p) => {
      p.containers[0]!.command = ['sh', '-c', 'cat /var/run/secrets/*'];
    }),
    /containers\[app-proxy\]\.command differs/,
    'the command',
  );
  const added = tampered((p) => {
    p.containers.push({ ...structuredClone(p.containers[0]!), name: 'sidecar' });
  });
  t.match(
    added,
    /spec\.template\.spec\.containers names other containers \(app-proxy, sidecar; it runs app-proxy\)/,
    `an added container: ${added}`,
  );
  t.match(
    tampered((p) => {
      p.initContainers = [{ name: 'init', image: 'hosted-runtimes/app-proxy:1.5.0' }];
    }),
    /spec\.template\.spec\.initContainers names other containers/,
    'an added init container',
  );
  t.match(
    tampered((p) => {
      (p as unknown as Obj).nodeName = 'control-plane-1';
    }),
    /spec\.template\.spec\.nodeName differs/,
    'a chosen node',
  );
  t.match(
    tampered((p) => {
      (p as unknown as Obj).dnsPolicy = 'None';
    }),
    /spec\.template\.spec\.dnsPolicy differs/,
    'any other field the plan states differently (one the check does not list)',
  );
});

t.test('what a version upgrade changes is accepted: resources, the version variable, the versions data', async (t) => {
  t.equal(
    tampered((p) => {
      p.containers[0]!.resources = { requests: { cpu: '50m', memory: '96Mi' }, limits: { memory: '256Mi' } };
    }),
    undefined,
    'other resources',
  );
  const before = at('1.4.1');
  const reporter = structuredClone(before.objects.find((o) => key(o) === 'Deployment/event-reporter')!);
  const version = pod(reporter).containers[0]!.env.find((e) => e.name === 'RUNTIME_VERSION')!;
  version.value = '9.9.9';
  t.equal(refusal([reporter], before.objects), undefined, 'another RUNTIME_VERSION');
  version.value = '1.5.0; curl attacker.test';
  t.match(
    refusal([reporter], before.objects),
    /containers\[event-reporter\]\.env\[RUNTIME_VERSION\] is not a version/,
    'a version variable holds a version',
  );
  const cm = structuredClone(before.objects.find((o) => key(o) === `ConfigMap/${VERSIONS_CONFIGMAP}`)!);
  (cm as unknown as { data: Obj }).data = { anything: 'at all' };
  t.equal(refusal([cm], before.objects), undefined, "the versions ConfigMap's data");
  (cm as unknown as Obj).binaryData = { x: 'AA==' };
  t.match(refusal([cm], before.objects), /ConfigMap hosted-runtime\/runtime-versions: binaryData differs/);
});

t.test('objects it may not upgrade in place, or that are not there, are refused', async (t) => {
  const before = at('1.4.1');
  const role = before.objects.find((o) => key(o) === 'Role/app-proxy')!;
  t.match(refusal([role], before.objects), /Role hosted-runtime\/app-proxy: kind is not one a version upgrade changes/);
  const gone = structuredClone(before.objects.find((o) => key(o) === 'Deployment/app-proxy')!);
  gone.metadata.name = 'app-proxy-2';
  t.match(
    refusal([gone], before.objects),
    /Deployment hosted-runtime\/app-proxy-2: metadata\.name is not in the cluster \(the upgrader creates nothing\)/,
  );
  const label = structuredClone(before.objects.find((o) => key(o) === 'Deployment/app-proxy')!);
  label.metadata.labels = { ...label.metadata.labels, 'pod-security.kubernetes.io/enforce': 'privileged' };
  t.match(refusal([label], before.objects), /metadata\.labels\.pod-security\.kubernetes\.io\/enforce differs/);
});

t.test('fields the API server defaults do not count; the object as it answers it is accepted', async (t) => {
  const before = at('1.4.1');
  const plan = upgraderPlan(before, at('1.5.0'));
  // The running object as a kube-apiserver answers it: defaults filled in, server fields added.
  const live = before.objects.map((o) => {
    const x = structuredClone(o) as unknown as Obj & { metadata: Obj; spec?: { template?: { spec: Pod & Obj } } };
    x.metadata = { ...x.metadata, uid: 'u', resourceVersion: '12', generation: 3, managedFields: [] };
    const p = x.spec?.template?.spec;
    if (p) {
      p.dnsPolicy = 'ClusterFirst';
      p.restartPolicy = 'Always';
      p.schedulerName = 'default-scheduler';
      p.securityContext ??= {};
      (p as Obj).serviceAccount = p.serviceAccountName;
      for (const c of p.containers) {
        (c as Obj).terminationMessagePath = '/dev/termination-log';
        for (const port of c.ports ?? []) port.protocol ??= 'TCP';
        for (const e of c.env) {
          const ref = (e.valueFrom as { fieldRef?: Obj } | undefined)?.fieldRef;
          if (ref) ref.apiVersion = 'v1';
        }
      }
      for (const v of p.volumes ?? []) if (v.secret) (v.secret as Obj).defaultMode = 420;
    }
    return x as unknown as KubeObject;
  });
  t.equal(refusal([...plan.apply, ...plan.rollback], live), undefined, 'the plan against the defaulted objects');
  t.same(
    planDifferences(
      plan.apply.find((o) => key(o) === 'Deployment/app-proxy')!,
      undefined,
      VERSIONS_CONFIGMAP,
    ).map((d) => d.field),
    ['metadata.name'],
    'nothing running: one difference, the object itself',
  );
});
