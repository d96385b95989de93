import t from 'tap';
import {
  fingerprint,
  objectKey,
  stableJson,
  tenantOf,
  VCLUSTER_RELEASE,
  WATCHED_KINDS,
} from '../../../provisioner/drift-watch/objects.ts';
import { ownershipLabels } from '../../../tenants/tenant-namespace.ts';
import { VCLUSTER_RELEASE as PROGRAM_RELEASE } from '../../../tenants/virtual-cluster.ts';

const ID = '2946536e-4b39-4968-b1ca-34efd5db92f2';
const kind = (name: string) => WATCHED_KINDS.find((k) => k.kind === name)!;
const quota = (over: Record<string, unknown> = {}) => ({
  apiVersion: 'v1',
  kind: 'ResourceQuota',
  metadata: {
    name: 'tenant-quota',
    namespace: `tenant-${ID}`,
    labels: { 'hosted.gitops/tenant-id': ID },
    resourceVersion: '100',
    uid: 'u-1',
    managedFields: [{ manager: 'pulumi-kubernetes', operation: 'Apply' }],
  },
  spec: { hard: { 'requests.cpu': '2', pods: '40' } },
  status: { hard: { pods: '40' }, used: { pods: '3' } },
  ...over,
});

t.test('what the watch selects is what the tenants program writes', async (t) => {
  const [label, value] = WATCHED_KINDS[0]!.labelSelector!.split('=');
  t.equal(ownershipLabels(ID, 'starter')[label!], value, 'the managed-by selector matches the ownership labels');
  t.equal(VCLUSTER_RELEASE, PROGRAM_RELEASE, "the vcluster release name is the program's");
  t.same(
    WATCHED_KINDS.map((k) => k.kind),
    ['Namespace', 'ResourceQuota', 'LimitRange', 'NetworkPolicy', 'StatefulSet'],
    'one watch per kind the program owns on the root cluster, no Secrets (no cluster-wide read of them)',
  );
});

t.test('the tenant of an object is read from its namespace (or, for a Namespace, its name)', async (t) => {
  t.equal(tenantOf(kind('ResourceQuota'), quota()), ID);
  t.equal(tenantOf(kind('Namespace'), { metadata: { name: `tenant-${ID}` } }), ID);
  t.equal(
    tenantOf(kind('StatefulSet'), { metadata: { name: 'controller', namespace: 'ingress' } }),
    undefined,
    'not a tenant namespace',
  );
  t.equal(
    tenantOf(kind('Namespace'), { metadata: { name: 'tenant-not-a-uuid' } }),
    undefined,
    'a name that only looks like one',
  );
  t.equal(objectKey(quota()), `tenant-${ID}/tenant-quota`);
  t.equal(objectKey({ metadata: { name: `tenant-${ID}` } }), `tenant-${ID}`);
});

t.test('the fingerprint moves with what the program or a person sets, not with status or server fields', async (t) => {
  const base = fingerprint(quota());
  t.equal(fingerprint(quota({ status: { used: { pods: '9' } } })), base, 'status.used written by the quota controller');
  t.equal(
    fingerprint({ ...quota(), metadata: { ...quota().metadata, resourceVersion: '101', managedFields: [] } }),
    base,
    'resourceVersion and managedFields',
  );
  t.not(fingerprint(quota({ spec: { hard: { 'requests.cpu': '4', pods: '40' } } })), base, 'spec.hard changed by hand');
  t.not(
    fingerprint({ ...quota(), metadata: { ...quota().metadata, labels: {} } }),
    base,
    'the ownership label removed by hand',
  );
  t.not(
    fingerprint({ ...quota(), metadata: { ...quota().metadata, deletionTimestamp: '2026-11-23T18:00:00Z' } }),
    base,
    'being deleted (a namespace Terminating)',
  );
  t.equal(
    fingerprint({ spec: quota().spec, metadata: quota().metadata, kind: 'ResourceQuota', apiVersion: 'v1' }),
    base,
    'key order does not matter',
  );
  const { kind: _kind, apiVersion: _apiVersion, ...asListed } = quota();
  t.equal(
    fingerprint(asListed),
    base,
    'an item of a list (no kind, no apiVersion) is the same object as a watch event',
  );
  t.equal(stableJson({ b: 1, a: [2, { d: 1, c: 2 }] }), '{"a":[2,{"c":2,"d":1}],"b":1}');
});
