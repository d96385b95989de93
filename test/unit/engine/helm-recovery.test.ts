import t from 'tap';
import {
  HELM_RELEASE_TYPE,
  describeRepair,
  interruptedResources,
  recordsToRemove,
  repairHelmReleases,
  revealSecrets,
  virtualClusterUrns,
  type HelmRecord,
  type HelmRecordStore,
  type InterruptedResource,
} from '../../../provisioner/engine/helm-recovery.ts';
import { execMarkerKubeconfig } from '../../helpers/exec-kubeconfig.ts';

const SIG = '4dabf18193072939515e22adb298388d';
const secret = (value: unknown) => ({ [SIG]: '1b47061264138c4ac30d75fd1eb44270', plaintext: JSON.stringify(value) });
const KUBECONFIG = 'apiVersion: v1\nkind: Config\nclusters: []\n';
const ROOT_PROVIDER = 'urn:pulumi:tenant-1::tenants::pulumi:providers:kubernetes::root';

/** The shape `pulumi stack export --show-secrets` prints after a crash during the vcluster install. */
function exported(pendingType = 'creating') {
  return {
    version: 3,
    deployment: {
      resources: [
        {
          urn: ROOT_PROVIDER,
          id: 'prov-1',
          type: 'pulumi:providers:kubernetes',
          inputs: { kubeconfig: secret(KUBECONFIG), enableServerSideApply: 'true' },
        },
        {
          urn: 'urn:pulumi:tenant-1::tenants::kubernetes:core/v1:Namespace::ns',
          id: 'tenant-1',
          type: 'kubernetes:core/v1:Namespace',
          provider: `${ROOT_PROVIDER}::prov-1`,
        },
      ],
      pending_operations: [
        {
          type: pendingType,
          resource: {
            urn: 'urn:pulumi:tenant-1::tenants::hosted:tenant:VirtualCluster$kubernetes:helm.sh/v3:Release::t-release',
            type: HELM_RELEASE_TYPE,
            inputs: { name: 'vcluster', namespace: 'tenant-1', values: secret({ a: 1 }) },
            provider: `${ROOT_PROVIDER}::prov-1`,
          },
        },
      ],
    },
  };
}

t.test('revealSecrets replaces secret envelopes with their values, deeply', async (t) => {
  t.same(revealSecrets({ a: secret('x'), b: [secret({ c: 2 })], d: 3 }), { a: 'x', b: [{ c: 2 }], d: 3 });
  t.equal(
    revealSecrets({ [SIG]: '1b47061264138c4ac30d75fd1eb44270', ciphertext: 'abc' }),
    undefined,
    'an encrypted value is not usable',
  );
});

t.test('interruptedResources lists pending operations with their provider inputs', async (t) => {
  const [r, ...rest] = interruptedResources(exported());
  t.same(rest, []);
  t.equal(r!.type, HELM_RELEASE_TYPE);
  t.equal(r!.operation, 'creating');
  t.same(r!.inputs, { name: 'vcluster', namespace: 'tenant-1', values: { a: 1 } });
  t.equal(r!.providerInputs?.kubeconfig, KUBECONFIG, 'the provider kubeconfig is revealed');
  t.same(interruptedResources({ version: 3, deployment: {} }), []);
  t.same(interruptedResources(undefined), []);
  t.same(
    interruptedResources({ deployment: { pending_operations: [{ type: 'creating' }, 'junk'] } }),
    [],
    'malformed entries are ignored',
  );
});

t.test(
  'recordsToRemove: every record of an interrupted create, the pending ones of an interrupted update',
  async (t) => {
    const records: HelmRecord[] = [
      { name: 'sh.helm.release.v1.x.v3', status: 'pending-upgrade', revision: 3 },
      { name: 'sh.helm.release.v1.x.v1', status: 'superseded', revision: 1 },
      { name: 'sh.helm.release.v1.x.v2', status: 'deployed', revision: 2 },
      { name: 'sh.helm.release.v1.x.v4', status: 'pending-rollback', revision: 4 },
    ];
    t.same(
      recordsToRemove('updating', records).map((r) => r.name),
      ['sh.helm.release.v1.x.v3', 'sh.helm.release.v1.x.v4'],
    );
    t.same(recordsToRemove('updating', records.slice(1, 3)), [], 'deployed and superseded revisions stay');
    t.same(
      recordsToRemove('creating', records).map((r) => r.revision),
      [1, 2, 3, 4],
      'a release the state does not know goes entirely',
    );
  },
);

/** In-memory record store (a double of the API server; the e2e crash test uses a real one). */
function memoryStore(
  records: Record<string, HelmRecord[]>,
  seen: string[] = [],
): (kubeconfig: string) => HelmRecordStore {
  return (kubeconfig) => {
    seen.push(kubeconfig);
    return {
      list: async (namespace, release) => (records[`${namespace}/${release}`] ?? []).slice(),
      remove: async (namespace, name) => {
        for (const key of Object.keys(records)) {
          if (key.startsWith(`${namespace}/`)) records[key] = records[key]!.filter((r) => r.name !== name);
        }
      },
    };
  };
}

t.test('repairHelmReleases removes the record of an interrupted install, with the provider kubeconfig', async (t) => {
  const records = {
    'tenant-1/vcluster': [{ name: 'sh.helm.release.v1.vcluster.v1', status: 'pending-install', revision: 1 }],
  };
  const seen: string[] = [];
  const repairs = await repairHelmReleases(interruptedResources(exported()), memoryStore(records, seen));
  t.same(seen, [KUBECONFIG]);
  t.same(records['tenant-1/vcluster'], [], 'the pending record is gone');
  t.same(repairs.map(describeRepair), [
    'Helm release tenant-1/vcluster: removed record(s) sh.helm.release.v1.vcluster.v1 (pending-install)',
  ]);
});

t.test('an interrupted upgrade loses only its pending revision', async (t) => {
  const records = {
    'tenant-1/vcluster': [
      { name: 'sh.helm.release.v1.vcluster.v1', status: 'deployed', revision: 1 },
      { name: 'sh.helm.release.v1.vcluster.v2', status: 'pending-upgrade', revision: 2 },
    ],
  };
  await repairHelmReleases(interruptedResources(exported('updating')), memoryStore(records));
  t.same(
    records['tenant-1/vcluster'].map((r) => r.status),
    ['deployed'],
  );
});

t.test(
  'a create interrupted after Helm finished: the deployed release the state does not know is removed',
  async (t) => {
    const records = {
      'tenant-1/vcluster': [{ name: 'sh.helm.release.v1.vcluster.v1', status: 'deployed', revision: 1 }],
    };
    const repairs = await repairHelmReleases(interruptedResources(exported()), memoryStore(records));
    t.same(repairs.map(describeRepair), [
      'Helm release tenant-1/vcluster: removed record(s) sh.helm.release.v1.vcluster.v1 (deployed)',
    ]);
    t.same(records['tenant-1/vcluster'], []);
  },
);

t.test('nothing is touched for deletes, other types, or an update without a pending record', async (t) => {
  const records = {
    'tenant-1/vcluster': [{ name: 'sh.helm.release.v1.vcluster.v1', status: 'deployed', revision: 1 }],
  };
  t.same(await repairHelmReleases(interruptedResources(exported('deleting')), memoryStore(records)), []);
  const other: InterruptedResource = { urn: 'u', type: 'kubernetes:core/v1:Secret', operation: 'creating', inputs: {} };
  t.same(await repairHelmReleases([other], memoryStore(records)), []);
  const repairs = await repairHelmReleases(interruptedResources(exported('updating')), memoryStore(records));
  t.same(repairs.map(describeRepair), [
    'Helm release tenant-1/vcluster: nothing to remove (records: sh.helm.release.v1.vcluster.v1 (deployed))',
  ]);
  t.equal(records['tenant-1/vcluster'].length, 1);
});

t.test('problems are reported, not thrown', async (t) => {
  const noProvider = { ...interruptedResources(exported())[0]!, providerInputs: undefined };
  const [a] = await repairHelmReleases([noProvider], memoryStore({}));
  t.match(describeRepair(a!), /not repaired, its provider has no kubeconfig contents/);
  const refused = Object.assign(new TypeError('fetch failed'), {
    cause: Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6443\nmore'), { code: 'ECONNREFUSED' }),
  });
  const failing = () => ({ list: () => Promise.reject(refused), remove: () => Promise.resolve() });
  const [b] = await repairHelmReleases(interruptedResources(exported()), failing);
  t.equal(
    describeRepair(b!),
    'Helm release tenant-1/vcluster: not repaired, the cluster could not be reached (ECONNREFUSED)',
  );
  t.notMatch(describeRepair(b!), /apiVersion/, 'the kubeconfig never reaches the log line');
});

t.test('an upstream answer body never reaches the operation log line, only its status', async (t) => {
  // client-node's ApiException carries the HTTP status in `code` and the upstream's body in its message.
  const upstream = Object.assign(
    new Error('HTTP-Code: 500\nMessage: Unknown API Status Code!\nBody: "upstream-said-this-private-thing"'),
    { code: 500, body: 'upstream-said-this-private-thing' },
  );
  const [r] = await repairHelmReleases(interruptedResources(exported()), () => ({
    list: () => Promise.reject(upstream),
    remove: () => Promise.resolve(),
  }));
  t.equal(describeRepair(r!), 'Helm release tenant-1/vcluster: not repaired, the cluster answered HTTP 500');
  t.notMatch(describeRepair(r!), /upstream-said/, 'the upstream body is not in the line');
});

t.test('recovery with a provider kubeconfig whose exec would write a marker runs nothing', async (t) => {
  const { kubeconfig: execKubeconfig, ran } = execMarkerKubeconfig(t, 'helm-exec-');
  const state = exported();
  state.deployment.resources[0]!.inputs = { kubeconfig: secret(execKubeconfig), enableServerSideApply: 'true' };
  // The default store: @kubernetes/client-node behind the kubeconfig policy.
  const [r] = await repairHelmReleases(interruptedResources(state));
  t.match(describeRepair(r!), /not repaired, kubeconfig refused: users\[0\]\.user\.exec/);
  t.notOk(ran(), 'the exec command never ran');
});

t.test('virtualClusterUrns: the vcluster provider and what uses it, not the root cluster or the components', (t) => {
  const stack = 'urn:pulumi:tenant-1::tenants::';
  const tenant = 'hosted:tenant:Tenant';
  const vc = `${tenant}$hosted:tenant:VirtualCluster`;
  const vcProvider = `${stack}${vc}$pulumi:providers:kubernetes::tenant-1-vcluster-provider`;
  const exported = {
    deployment: {
      resources: [
        { urn: `${stack}pulumi:pulumi:Stack::tenants-tenant-1`, type: 'pulumi:pulumi:Stack' },
        { urn: ROOT_PROVIDER, type: 'pulumi:providers:kubernetes', id: 'r1' },
        { urn: `${stack}${tenant}::tenant-1`, type: tenant },
        {
          urn: `${stack}${vc}$kubernetes:helm.sh/v3:Release::vcluster`,
          type: HELM_RELEASE_TYPE,
          provider: `${ROOT_PROVIDER}::r1`,
        },
        { urn: vcProvider, type: 'pulumi:providers:kubernetes', id: 'v1' },
        {
          urn: `${stack}${tenant}$kubernetes:helm.sh/v3:Release::argo-cd`,
          type: HELM_RELEASE_TYPE,
          provider: `${vcProvider}::v1`,
        },
        {
          urn: `${stack}${tenant}$kubernetes:core/v1:Secret::runtime-key`,
          type: 'kubernetes:core/v1:Secret',
          provider: `${vcProvider}::v1`,
        },
        // A reference to an older id of the same provider is still the vcluster's.
        {
          urn: `${stack}${tenant}$kubernetes:core/v1:ConfigMap::settings`,
          type: 'kubernetes:core/v1:ConfigMap',
          provider: `${vcProvider}::v0`,
        },
      ],
    },
  };
  t.same(
    virtualClusterUrns(exported, 'root').sort(),
    [
      vcProvider,
      `${stack}${tenant}$kubernetes:helm.sh/v3:Release::argo-cd`,
      `${stack}${tenant}$kubernetes:core/v1:Secret::runtime-key`,
      `${stack}${tenant}$kubernetes:core/v1:ConfigMap::settings`,
    ].sort(),
    'the vcluster provider and its three resources; the root provider, the release it installs and the components stay',
  );
  t.same(virtualClusterUrns({}, 'root'), [], 'an empty export: nothing');
  t.same(virtualClusterUrns({ deployment: { resources: 'x' } }, 'root'), [], 'a malformed export: nothing');
  t.end();
});
