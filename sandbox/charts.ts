/**
 * The charts of the end-to-end tier, in one directory of `<chart>-<version>.tgz` files (the layout
 * `chartRepositories` accepts as a local directory, runtime/component/chart-source.ts).
 *
 *  - vcluster, argo-cd, argo-workflows, argo-rollouts, argo-events: the REAL upstream charts, from
 *    the chart mirror (`../shared/charts` beside the repository, or HRT_CHART_MIRROR), linked into
 *    the directory unmodified at every version the catalog pins. A version the mirror lacks fails
 *    the environment with the file it looked for.
 *  - a chart version that must fail on purpose (a fleet rollback's broken version) is DERIVED at
 *    run time from a real chart of the mirror with one named change (`deriveChart`), repackaged
 *    under its own version.
 *  - ingress-nginx, cert-manager, cloudnative-pg (infra/'s platform charts): small STAND-INS
 *    written here (`writePlatformCharts`); the mirror does not hold them.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseDocument } from 'yaml';
import type { Catalog } from '../runtime/catalog.ts';
import { tarGz, untarGz, type TarEntry } from './tar.ts';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** The chart mirror: HRT_CHART_MIRROR, else `shared/charts` beside the repository's folder. */
export function chartMirror(): string {
  return process.env.HRT_CHART_MIRROR || join(REPO_ROOT, '..', 'shared', 'charts');
}

/** Chart.yaml of the mirror's `<chart>-<version>.tgz`, parsed. */
export async function mirrorChartYaml(
  chart: string,
  version: string,
  mirror = chartMirror(),
): Promise<Record<string, unknown>> {
  const source = join(mirror, `${chart}-${version}.tgz`);
  const entry = untarGz(await readFile(source)).find((e) => e.path === `${chart}/Chart.yaml`);
  if (!entry) throw new Error(`${source} has no ${chart}/Chart.yaml`);
  return parseDocument(entry.content.toString()).toJS() as Record<string, unknown>;
}

/** The tenant charts of a catalog: every (chart, version) its versions pin. */
export function catalogCharts(catalog: Catalog): Array<{ chart: string; version: string }> {
  const seen = new Set<string>();
  const out: Array<{ chart: string; version: string }> = [];
  for (const v of catalog.versions) {
    for (const [chart, version] of [
      ['vcluster', v.components.vcluster],
      ['argo-cd', v.components.argoCd],
      ['argo-workflows', v.components.argoWorkflows],
      ['argo-rollouts', v.components.argoRollouts],
      ['argo-events', v.components.argoEvents],
    ] as const) {
      if (seen.has(`${chart}-${version}`)) continue;
      seen.add(`${chart}-${version}`);
      out.push({ chart, version });
    }
  }
  return out;
}

/**
 * A chart version derived from a real one for a test that needs it to fail: `from` is the mirror's
 * version it copies, `version` the version it is repackaged under (not in the mirror).
 */
export interface DerivedChart {
  chart: string;
  version: string;
  from: string;
  change: 'never-available';
}

/**
 * The one change of a `never-available` chart, per chart: a values default that gives one
 * Deployment a nodeSelector no node has, through the chart's own template (so its pod stays
 * Pending and a Helm release waiting for it fails when its timeout runs out).
 */
export const NEVER_AVAILABLE_CHANGES: Readonly<Record<string, { valuesPath: string[]; deployment: string }>> = {
  'argo-cd': { valuesPath: ['server', 'nodeSelector'], deployment: 'argocd-server' },
};

/** The node label no node has. */
export const NEVER_SCHEDULED_SELECTOR = { 'e2e.hosted-runtimes/never-scheduled': 'true' } as const;

/** What a derived chart changes, in words (test output and docs). */
export function describeDerived(d: DerivedChart): string {
  const c = NEVER_AVAILABLE_CHANGES[d.chart];
  return `${d.chart} ${d.version} = the real ${d.chart} ${d.from} with one change: values ${c?.valuesPath.join('.')} = ${JSON.stringify(NEVER_SCHEDULED_SELECTOR)} (Deployment ${c?.deployment} never scheduled)`;
}

/** Repackages the mirror's `<chart>-<from>.tgz` as `<chart>-<version>.tgz` in `dir` with its change. */
export async function deriveChart(mirror: string, dir: string, d: DerivedChart): Promise<string> {
  const change = NEVER_AVAILABLE_CHANGES[d.chart];
  if (!change) throw new Error(`no never-available change is defined for chart ${d.chart}`);
  const source = join(mirror, `${d.chart}-${d.from}.tgz`);
  const entries = untarGz(await readFile(source));
  const text = (path: string) => {
    const e = entries.find((x) => x.path === path);
    if (!e) throw new Error(`${source} has no ${path}`);
    return { entry: e, text: e.content.toString() };
  };
  // Both edits are textual, so the files differ from the mirror's only where the change is.
  const chartYaml = text(`${d.chart}/Chart.yaml`);
  const versionLine = new RegExp(`^version: ${d.from.replaceAll('.', '\\.')}$`, 'm');
  if (!versionLine.test(chartYaml.text)) throw new Error(`${source}: Chart.yaml has no line 'version: ${d.from}'`);
  chartYaml.entry.content = chartYaml.text.replace(versionLine, `version: ${d.version}`);
  const valuesYaml = text(`${d.chart}/values.yaml`);
  const node = parseDocument(valuesYaml.text).getIn(change.valuesPath, true) as
    { range?: [number, number, number] } | undefined;
  const range = node?.range;
  if (!range || valuesYaml.text.slice(range[0], range[1]) !== '{}')
    throw new Error(`${source}: values.yaml has no empty ${change.valuesPath.join('.')} to set`);
  valuesYaml.entry.content =
    valuesYaml.text.slice(0, range[0]) + JSON.stringify(NEVER_SCHEDULED_SELECTOR) + valuesYaml.text.slice(range[1]);
  const file = `${d.chart}-${d.version}.tgz`;
  await writeFile(join(dir, file), tarGz(entries));
  return file;
}

export interface TenantCharts {
  /** Directory of `<chart>-<version>.tgz` files (links to the mirror, plus derived charts). */
  dir: string;
  mirror: string;
  /** `<chart> <version>` of every real chart linked from the mirror. */
  real: string[];
  /** What each derived chart is. */
  derived: string[];
}

/**
 * Links the mirror's chart of every version the catalog pins into `dir` and builds the derived
 * charts there; throws naming the missing file when the mirror lacks a pinned version.
 */
export async function prepareTenantCharts(
  dir: string,
  catalog: Catalog,
  derived: readonly DerivedChart[] = [],
  mirror = chartMirror(),
): Promise<TenantCharts> {
  await mkdir(dir, { recursive: true });
  const isDerived = (c: { chart: string; version: string }) =>
    derived.some((d) => d.chart === c.chart && d.version === c.version);
  const wanted = catalogCharts(catalog).filter((c) => !isDerived(c));
  const missing = wanted.map((c) => join(mirror, `${c.chart}-${c.version}.tgz`)).filter((f) => !existsSync(f));
  if (missing.length > 0)
    throw new Error(
      `the chart mirror ${mirror} lacks ${missing.join(', ')} (set HRT_CHART_MIRROR to a folder holding the real charts at every version the catalog pins; docs/e2e.md)`,
    );
  for (const c of wanted) {
    const file = `${c.chart}-${c.version}.tgz`;
    await symlink(join(mirror, file), join(dir, file));
  }
  for (const d of derived) await deriveChart(mirror, dir, d);
  return {
    dir,
    mirror,
    real: wanted.map((c) => `${c.chart} ${c.version}`),
    derived: derived.map(describeDerived),
  };
}

function chartYaml(name: string, version: string): string {
  return `apiVersion: v2\nname: ${name}\nversion: ${version}\nappVersion: "${version}"\ndescription: End-to-end test stand-in for the ${name} chart\ntype: application\n`;
}

/** A one-replica Deployment in the release's namespace (KWOK's fake nodes make it Available). */
function standInDeployment(name: string, replicas = '1'): string {
  return `apiVersion: apps/v1
kind: Deployment
metadata:
  name: ${name}
  namespace: {{ .Release.Namespace }}
  labels:
    app.kubernetes.io/name: ${name}
    helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
spec:
  replicas: ${replicas}
  selector:
    matchLabels:
      app.kubernetes.io/name: ${name}
  template:
    metadata:
      labels:
        app.kubernetes.io/name: ${name}
    spec:
      automountServiceAccountToken: false
      securityContext:
        runAsNonRoot: true
        seccompProfile: {type: RuntimeDefault}
      containers:
        - name: ${name}
          image: "platform-e2e/{{ .Chart.Name }}:{{ .Chart.Version }}"
          resources:
            requests: {cpu: 10m, memory: 32Mi}
            limits: {cpu: 100m, memory: 64Mi}
          securityContext:
            allowPrivilegeEscalation: false
            runAsNonRoot: true
            runAsUser: 999
            capabilities: {drop: [ALL]}
            readOnlyRootFilesystem: true
`;
}

/** A stand-in CRD (schema keeps any field), optionally kept on uninstall as the real chart does. */
function standInCrd(group: string, plural: string, kind: string, version: string, keepIf?: string): string {
  const keep = keepIf ? `\n  {{- if ${keepIf} }}\n  annotations:\n    helm.sh/resource-policy: keep\n  {{- end }}` : '';
  return `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: ${plural}.${group}${keep}
spec:
  group: ${group}
  names:
    kind: ${kind}
    listKind: ${kind}List
    plural: ${plural}
    singular: ${kind.toLowerCase()}
  scope: Namespaced
  versions:
    - name: ${version}
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
`;
}

const INGRESS_NGINX_TEMPLATES: Record<string, string> = {
  'ingressclass.yaml': `{{- if .Values.controller.ingressClassResource.enabled }}
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: {{ .Values.controller.ingressClassResource.name }}
  {{- if .Values.controller.ingressClassResource.default }}
  annotations:
    ingressclass.kubernetes.io/is-default-class: "true"
  {{- end }}
spec:
  controller: k8s.io/ingress-nginx
{{- end }}
`,
  'rbac.yaml': `apiVersion: v1
kind: ServiceAccount
metadata:
  name: ingress-nginx
  namespace: {{ .Release.Namespace }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: ingress-nginx
rules:
  - apiGroups: [networking.k8s.io]
    resources: [ingresses, ingressclasses]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: ingress-nginx
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: ingress-nginx
subjects:
  - kind: ServiceAccount
    name: ingress-nginx
    namespace: {{ .Release.Namespace }}
`,
  'controller.yaml': standInDeployment('ingress-nginx-controller', '{{ .Values.controller.replicaCount }}'),
};

const CERT_MANAGER_CRDS = [
  ['certificates', 'Certificate'],
  ['issuers', 'Issuer'],
  ['clusterissuers', 'ClusterIssuer'],
] as const;

/**
 * Stand-ins for the platform charts infra/ installs (ingress-nginx, cert-manager,
 * cloudnative-pg) at the versions infra/charts.ts pins, in one directory of
 * `<chart>-<version>.tgz` (the local-directory form of `chartRepositories`). Each has the real
 * chart's name, honours the values infra/ sets that change what is installed
 * (`controller.ingressClassResource`, `controller.replicaCount`, cert-manager's `crds.enabled`
 * and `crds.keep`, cloudnative-pg's `crds.create`) and installs the kinds of objects the real
 * one does: a controller Deployment, stand-in CRDs with the real names (schemas keep any
 * field), and for ingress-nginx an IngressClass and cluster-scoped RBAC.
 */
export async function writePlatformCharts(
  dir: string,
  charts: Record<'ingressNginx' | 'certManager' | 'cnpg', { chart: string; version: string }>,
): Promise<string[]> {
  await mkdir(dir, { recursive: true });
  const packages: Array<{ chart: string; version: string; values: string; templates: Record<string, string> }> = [
    {
      ...charts.ingressNginx,
      values:
        'controller:\n  replicaCount: 1\n  ingressClassResource:\n    enabled: true\n    name: nginx\n    default: false\n',
      templates: INGRESS_NGINX_TEMPLATES,
    },
    {
      ...charts.certManager,
      values: 'crds:\n  enabled: false\n  keep: true\n',
      templates: {
        'crds.yaml': `{{- if .Values.crds.enabled }}\n${CERT_MANAGER_CRDS.map(([plural, kind]) =>
          standInCrd('cert-manager.io', plural, kind, 'v1', '.Values.crds.keep'),
        ).join('---\n')}{{- end }}\n`,
        'controller.yaml': standInDeployment('cert-manager'),
      },
    },
    {
      ...charts.cnpg,
      values: 'crds:\n  create: true\n',
      templates: {
        'crds.yaml': `{{- if .Values.crds.create }}\n${standInCrd('postgresql.cnpg.io', 'clusters', 'Cluster', 'v1')}{{- end }}\n`,
        'operator.yaml': standInDeployment('cnpg-cloudnative-pg'),
      },
    },
  ];
  const files: string[] = [];
  for (const p of packages) {
    const entries: TarEntry[] = [
      { path: `${p.chart}/Chart.yaml`, content: chartYaml(p.chart, p.version) },
      { path: `${p.chart}/values.yaml`, content: p.values },
      ...Object.entries(p.templates).map(([file, content]) => ({
        path: `${p.chart}/templates/${file}`,
        content,
      })),
    ];
    const file = `${p.chart}-${p.version}.tgz`;
    await writeFile(join(dir, file), tarGz(entries));
    files.push(file);
  }
  return files;
}
