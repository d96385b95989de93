/**
 * The complete install of a hybrid runtime as one YAML document, what its install URL serves
 * (`kubectl apply --server-side -f <url>`, docs/hybrid.md "Install"): with argo=new the four Argo
 * charts rendered by the control plane at the catalog's pins with the hosted runtime's values
 * (plain objects: no helm and no chart repository on the customer's side), then the install
 * bundle (bundle.ts: the runtime's namespace, agents, bootstrap Secret and Job). Pure: no I/O;
 * the control plane renders the charts (provisioner/runtime-registry/argo-charts.ts) and passes them here.
 *
 * One apply must work, so the order is Namespaces, then CustomResourceDefinitions, then every
 * other object, the bootstrap Job last; and the install creates no object of a kind its own CRDs
 * define (an apply of a CRD and such an object in one go can fail with "no matches for kind"):
 * a chart that renders one is refused (`InstallDocumentError`). The charts' CRDs and their
 * namespaces carry no runtime label, so the remove command keeps them, as it keeps what helm
 * installed (deleting a CRD deletes every object of its kind); every other chart object carries
 * the bundle's labels, of a kind the remove command deletes. Images the catalog has digests for
 * are pinned (images.ts).
 */
import { ARGO_RELEASES } from '../component/argo-releases.ts';
import type { RuntimeVersion } from '../versions.ts';
import {
  HYBRID_LABELS,
  HYBRID_MANAGED_BY,
  removableKinds,
  type HybridRuntimeSpec,
  type InstallBundle,
  type KubeObject,
} from './bundle.ts';
import { pinChartImages, unpinnedImages } from './images.ts';
import { shellCommand } from './shell.ts';
import { yamlText } from './yaml-text.ts';

/** One Argo chart as `helm template` rendered it (release and namespace of ARGO_RELEASES). */
export interface RenderedChart {
  release: string;
  namespace: string;
  objects: readonly KubeObject[];
}

/** The charts' part of an install: its YAML documents and the images in it without a digest. */
export interface ChartsPart {
  /** `---`-separated documents (each starting with `---`). */
  text: string;
  unpinnedImages: string[];
}

export class InstallDocumentError extends Error {
  override name = 'InstallDocumentError';
}

/** Kinds that have no namespace: a chart object of another kind without one is put in its release's. */
const CLUSTER_SCOPED = new Set([
  'Namespace',
  'CustomResourceDefinition',
  'ClusterRole',
  'ClusterRoleBinding',
  'PriorityClass',
  'StorageClass',
  'IngressClass',
  'PersistentVolume',
  'APIService',
  'MutatingWebhookConfiguration',
  'ValidatingWebhookConfiguration',
  'ValidatingAdmissionPolicy',
  'ValidatingAdmissionPolicyBinding',
]);

const groupOf = (apiVersion: string): string => (apiVersion.includes('/') ? apiVersion.split('/')[0]! : '');

/** Kinds first in an apply: namespaces, then CRDs; then the bundle's own order. */
function rank(kind: string): number {
  return kind === 'Namespace' ? 0 : kind === 'CustomResourceDefinition' ? 1 : 2;
}

/**
 * The charts' objects in the install of `runtime` at `version`: the charts' namespaces, CRDs and
 * objects in apply order, labelled, pinned and checked (InstallDocumentError naming what could
 * not be applied in one go or removed). `charts` is not changed.
 */
export function chartObjects(
  runtime: Pick<HybridRuntimeSpec, 'tenantId' | 'name'>,
  version: RuntimeVersion,
  charts: readonly RenderedChart[],
): KubeObject[] {
  const labels = {
    [HYBRID_LABELS.managedBy]: HYBRID_MANAGED_BY,
    [HYBRID_LABELS.tenant]: runtime.tenantId,
    [HYBRID_LABELS.runtime]: runtime.name,
  };
  const removable = new Set(removableKinds('new'));
  const defined = new Set(
    charts
      .flatMap((c) => c.objects)
      .filter((o) => o.kind === 'CustomResourceDefinition')
      .map((o) => {
        const spec = o.spec as { group: string; names: { kind: string } };
        return `${spec.group}/${spec.names.kind}`;
      }),
  );
  const objects: KubeObject[] = [];
  for (const chart of charts)
    for (const rendered of chart.objects) {
      const hook = rendered.metadata.annotations?.['helm.sh/hook'] ?? '';
      // A chart's tests are for `helm test`, not part of what it installs.
      if (/(^|,)\s*test(-success|-failure)?\s*(,|$)/.test(hook)) continue;
      if (defined.has(`${groupOf(rendered.apiVersion)}/${rendered.kind}`))
        throw new InstallDocumentError(
          `the install would create ${rendered.kind} ${rendered.metadata.name} of a kind its own CRDs define: one apply cannot create both`,
        );
      const o = structuredClone<KubeObject>(rendered);
      if (!CLUSTER_SCOPED.has(o.kind) && !o.metadata.namespace) o.metadata.namespace = chart.namespace;
      if (o.kind !== 'CustomResourceDefinition' && o.kind !== 'Namespace') {
        if (!removable.has(o.kind))
          throw new InstallDocumentError(
            `chart ${chart.release} renders ${o.kind} ${o.metadata.name}, a kind the remove command does not delete: add it to ARGO_CHART_KINDS`,
          );
        o.metadata.labels = { ...o.metadata.labels, ...labels };
      }
      objects.push(o);
    }
  pinChartImages(objects, version);
  const namespaces: KubeObject[] = [...new Set(ARGO_RELEASES.map((r) => r.namespace))].map((name) => ({
    apiVersion: 'v1',
    kind: 'Namespace',
    // The runtime's labels would make the remove command delete the namespace and all in it.
    metadata: { name, labels: { [HYBRID_LABELS.managedBy]: HYBRID_MANAGED_BY } },
  }));
  return [...namespaces, ...objects]
    .map((o, i) => ({ o, i }))
    .sort((a, b) => rank(a.o.kind) - rank(b.o.kind) || a.i - b.i)
    .map(({ o }) => o);
}

/** The charts' part of the install of `runtime` at `version` (chartObjects as YAML documents). */
export function chartsPart(
  runtime: Pick<HybridRuntimeSpec, 'tenantId' | 'name'>,
  version: RuntimeVersion,
  charts: readonly RenderedChart[],
): ChartsPart {
  const objects = chartObjects(runtime, version, charts);
  return { text: objects.map((o) => '---\n' + yamlText(o)).join(''), unpinnedImages: unpinnedImages(objects) };
}

/** The install without Argo charts (argo=existing). */
export const EMPTY_CHARTS_PART: ChartsPart = Object.freeze({ text: '', unpinnedImages: [] });

/**
 * The whole install document: a comment naming what it is and how to apply it, the charts' part,
 * then the bundle's objects (its namespace first, the bootstrap Job last). No value a caller gave
 * is written into the comment.
 */
export function installDocument(
  bundle: Pick<InstallBundle, 'objects' | 'unpinnedImages'>,
  version: RuntimeVersion,
  charts: ChartsPart,
): { text: string; unpinnedImages: string[] } {
  const header = [
    `# The complete install of a hybrid runtime of the hosted GitOps service, runtime version ${version.version}:`,
    ...(charts.text !== ''
      ? ["# the Argo charts rendered at the catalog's versions (namespaces and CRDs first), then the runtime's agents"]
      : ["# the runtime's agents"]),
    '# and the bootstrap Job, which exchanges the single-use token of this install for the runtime key.',
    '# Apply it once, as it is: kubectl apply --server-side -f with the URL the control plane gave.',
    ...(bundle.unpinnedImages.length + charts.unpinnedImages.length > 0
      ? ['# Some images carry no digest yet (the registration answer lists them: install.unpinnedImages).']
      : []),
  ];
  const text = header.join('\n') + '\n' + charts.text + bundle.objects.map((o) => '---\n' + yamlText(o)).join('');
  return {
    text,
    unpinnedImages: [...new Set([...charts.unpinnedImages, ...bundle.unpinnedImages])].sort(),
  };
}

/** The one command that installs from `url`: a server-side apply (the Argo CD CRDs are too large for the annotation a client-side apply writes). */
export const installUrlCommand = (url: string): string =>
  shellCommand(['kubectl', 'apply', '--server-side', '-f', url]);

/** The path of a runtime's install URL, under the control plane's public URL: the bootstrap token in it, `.yaml` after. */
export const INSTALL_PATH_PREFIX = '/v1/install/';
export const installPath = (bootstrapToken: string): string => `${INSTALL_PATH_PREFIX}${bootstrapToken}.yaml`;
