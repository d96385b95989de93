/**
 * The sandbox's demo product (docs/promotions.md), in the demo tenant's running runtime: a
 * configuration repository on a Git server that needs credentials (they are in an Argo CD
 * repository Secret, which Argo CD reads with and the GitOps Operator pushes with), Applications
 * shop-dev and shop-prod syncing it automatically, and product `shop` with its promotion
 * resources (dev → prod, the release in `release.yaml`). Once the operator has read the product,
 * the sandbox commits release 1.1.0 to dev: the operator promotes it to prod by a commit of its
 * own, and the control plane shows the promotion (CLI `promotions`, console Products).
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { CoreV1Api, CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node';
import { startGitServer } from './git-server.ts';
import { until } from './processes.ts';
import { PROMOTIONS_API_VERSION, PROMOTIONS_GROUP, PROMOTIONS_VERSION } from '../runtime/protocol/promotions.ts';

const NS = 'argocd';
const ENVS = ['dev', 'prod'] as const;

/** A release file: the template's fields are `data.version` and `data.image`. */
export const releaseFile = (version: string, image: string): string =>
  `# The shop's release in this environment: what a promotion copies.\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shop-release\ndata:\n  version: "${version}"\n  image: ${image}\n`;

export interface DemoProduct {
  repo: string;
  stop(): Promise<void>;
}

export async function startDemoProduct(o: {
  /** The tenant's vcluster, as an admin. */
  kc: KubeConfig;
  dir: string;
  /** The address the runtime's processes reach the Git server at. */
  host: string;
  /** The control plane's view of the tenant's products (GET /v1/tenants/:id/products). */
  products: () => Promise<Array<{ name: string; summary: Record<string, unknown> }>>;
  say: (line: string) => void;
}): Promise<DemoProduct> {
  const credentials = { username: 'sandbox', password: randomBytes(12).toString('base64url') };
  const git = await startGitServer(join(o.dir, 'git-config'), o.host, { credentials });
  try {
    const repo = await git.repository('config');
    await repo.commit(
      Object.fromEntries(ENVS.map((env) => [`shop/${env}/release.yaml`, releaseFile('1.0.0', 'nginx:1.27.0')])),
      'shop 1.0.0 in dev and prod',
      { author: { name: 'Sandbox', email: 'sandbox@example.test' } },
    );
    await o.kc.makeApiClient(CoreV1Api).createNamespacedSecret({
      namespace: NS,
      body: {
        metadata: { name: 'config-repo', namespace: NS, labels: { 'argocd.argoproj.io/secret-type': 'repository' } },
        stringData: { type: 'git', url: repo.url, ...credentials },
      },
    });
    const custom = o.kc.makeApiClient(CustomObjectsApi);
    for (const env of ENVS)
      await custom.createNamespacedCustomObject({
        group: 'argoproj.io',
        version: 'v1alpha1',
        namespace: NS,
        plural: 'applications',
        body: {
          apiVersion: 'argoproj.io/v1alpha1',
          kind: 'Application',
          metadata: { name: `shop-${env}`, namespace: NS },
          spec: {
            project: 'default',
            source: { repoURL: repo.url, path: `shop/${env}`, targetRevision: 'main' },
            destination: { server: 'https://kubernetes.default.svc', namespace: `shop-${env}` },
            syncPolicy: { automated: {}, syncOptions: ['CreateNamespace=true'] },
          },
        },
      });
    const resource = (kind: string, plural: string, name: string, spec: unknown) =>
      custom.createNamespacedCustomObject({
        group: PROMOTIONS_GROUP,
        version: PROMOTIONS_VERSION,
        namespace: NS,
        plural,
        body: { apiVersion: PROMOTIONS_API_VERSION, kind, metadata: { name, namespace: NS }, spec },
      });
    await resource('Environment', 'environments', 'dev', { kind: 'NON_PROD' });
    await resource('Environment', 'environments', 'prod', { kind: 'PROD' });
    await resource('PromotionTemplate', 'promotiontemplates', 'release', {
      version: { file: 'release.yaml', jsonPath: '$.data.version' },
      files: [{ path: 'release.yaml', jsonPaths: ['$.data.version', '$.data.image'] }],
    });
    await resource('PromotionFlow', 'promotionflows', 'dev-to-prod', {
      triggerEnvironment: 'dev',
      steps: [{ environment: 'prod' }],
    });
    await resource('Product', 'products', 'shop', {
      repository: repo.url,
      branch: 'main',
      template: 'release',
      flow: 'dev-to-prod',
      environments: ENVS.map((env) => ({ environment: env, path: `shop/${env}`, applications: [`shop-${env}`] })),
    });
    // The operator reads the product's releases from Git; the event reporter reports them.
    await until(
      'product shop to be reported with its releases',
      3 * 60_000,
      async () =>
        (await o.products()).some(
          (p) => p.name === 'shop' && Array.isArray(p.summary.environments) && p.summary.environments.length === 2,
        ),
      1000,
    );
    await repo.commit({ 'shop/dev/release.yaml': releaseFile('1.1.0', 'nginx:1.27.1') }, 'dev: shop 1.1.0', {
      author: { name: 'Sandbox', email: 'sandbox@example.test' },
    });
    o.say('✓ product shop reported (dev and prod hold 1.0.0); 1.1.0 committed to dev starts its promotion to prod');
    return { repo: repo.url, stop: () => git.stop() };
  } catch (err) {
    await git.stop();
    throw err;
  }
}
