/**
 * Many tenants' root-cluster objects, written straight into a kube-apiserver (no engine): the
 * Namespace, ResourceQuota, LimitRange and a NetworkPolicy of each, labelled as the tenants
 * program labels them (tenants/tenant-namespace.ts), and the tenant rows a reconciler would have
 * after provisioning them (Ready, reconciled a while ago). For the root-cluster watch's scale test
 * and benchmark.
 */
import { randomUUID } from 'node:crypto';
import { Agent, request } from 'undici';
import type { KubeControlPlane } from '../../../sandbox/control-plane.ts';
import type pg from 'pg';
import { ownershipLabels } from '../../../tenants/tenant-namespace.ts';
import { insertReadyTenantsWithIds } from '../../helpers/bulk.ts';

/** Objects written per tenant. */
export const OBJECTS_PER_TENANT = 4;

/**
 * Writes the objects of `ids` over `connections` keep-alive TLS connections (the API client opens
 * one per request, which makes seeding tens of thousands of objects take many minutes); returns
 * objects per second.
 */
export async function seedTenantObjects(
  plane: KubeControlPlane,
  ids: readonly string[],
  connections = 16,
): Promise<number> {
  const agent = new Agent({
    connect: { ca: plane.ca.certPem, cert: plane.admin.certPem, key: plane.admin.keyPem },
    connections,
    pipelining: 1,
  });
  const post = async (path: string, body: unknown) => {
    const res = await request(`${plane.server}${path}`, {
      method: 'POST',
      dispatcher: agent,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const text = await res.body.text();
    if (res.statusCode !== 201) throw new Error(`POST ${path}: ${res.statusCode} ${text.slice(0, 200)}`);
  };
  const started = Date.now();
  let next = 0;
  const one = async (id: string) => {
    const namespace = `tenant-${id}`;
    const labels = ownershipLabels(id, 'starter');
    await post('/api/v1/namespaces', { metadata: { name: namespace, labels } });
    await Promise.all([
      post(`/api/v1/namespaces/${namespace}/resourcequotas`, {
        metadata: { name: 'tenant-quota', labels },
        spec: { hard: { pods: '40', 'requests.cpu': '2' } },
      }),
      post(`/api/v1/namespaces/${namespace}/limitranges`, {
        metadata: { name: 'tenant-limits', labels },
        spec: { limits: [{ type: 'Container', default: { cpu: '500m' }, defaultRequest: { cpu: '100m' } }] },
      }),
      post(`/apis/networking.k8s.io/v1/namespaces/${namespace}/networkpolicies`, {
        metadata: { name: 'default-deny', labels },
        spec: { podSelector: {}, policyTypes: ['Ingress'] },
      }),
    ]);
  };
  try {
    await Promise.all(
      Array.from({ length: connections }, async () => {
        while (next < ids.length) await one(ids[next++]!);
      }),
    );
  } finally {
    await agent.close();
  }
  return (ids.length * OBJECTS_PER_TENANT) / ((Date.now() - started) / 1000);
}

/** Inserts `n` Ready tenants placed on `clusterId`, last reconciled an hour ago; returns their ids. */
export async function insertReadyTenants(pool: pg.Pool, clusterId: string, n: number): Promise<string[]> {
  const ids = Array.from({ length: n }, () => randomUUID());
  await insertReadyTenantsWithIds(pool, ids, clusterId);
  return ids;
}
