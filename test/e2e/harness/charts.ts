/**
 * Local test charts, packaged at run time into one directory of `<chart>-<version>.tgz` files
 * (the layout `chartRepositories` accepts as a local directory, runtime/component/chart-source.ts).
 * Nothing is fetched: every chart here is a small stand-in written for the tests.
 *
 *  - `vcluster` at every vcluster version the catalog pins: a StatefulSet named after the release
 *    that honours `controlPlane.statefulSet.highAvailability.replicas` (0 when suspended), the
 *    resources, priority class and security contexts the program sets, and a ClusterIP Service.
 *    Annotations record the chart version, the Kubernetes version and `exportKubeConfig.server`.
 *    (The vcluster itself, i.e. its API server, is emulated by vcluster-emulator.ts.)
 *  - `argo-cd`, `argo-workflows`, `argo-rollouts`, `argo-events` at every version the catalog pins:
 *    a ConfigMap `<release>-chart-info` recording chart name and version, a one-replica
 *    Deployment whose image tag is the chart version, and its CRDs in `crds/` (as the real charts
 *    install theirs), so an upgrade visibly changes what exists in the tenant's API server.
 *    The CRDs are the real ones when scripts/argo-crds.sh's folder is given (HRT_ARGO_CRDS_DIR,
 *    exported by test/e2e/prepare.sh): Application and AppProject in argo-cd, Rollout in
 *    argo-rollouts, Workflow in argo-workflows; otherwise, and always for argo-events, a
 *    stand-in CRD with the real names and a schema that keeps any field.
 */
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Catalog } from '../../../runtime/catalog.ts';
import { tarGz, type TarEntry } from './tar.ts';

const VCLUSTER_STATEFULSET = `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ .Release.Name }}
  namespace: {{ .Release.Namespace }}
  labels:
    app: vcluster
    release: {{ .Release.Name }}
    chart: vcluster-{{ .Chart.Version }}
  annotations:
    e2e.hosted-runtimes/chart-version: {{ .Chart.Version | quote }}
    e2e.hosted-runtimes/kubernetes-version: {{ .Values.controlPlane.distro.k8s.image.tag | default .Values.controlPlane.distro.k8s.version | default "" | quote }}
    e2e.hosted-runtimes/export-server: {{ .Values.exportKubeConfig.server | default "" | quote }}
spec:
  replicas: {{ .Values.controlPlane.statefulSet.highAvailability.replicas }}
  serviceName: {{ .Release.Name }}-headless
  podManagementPolicy: Parallel
  selector:
    matchLabels:
      app: vcluster
      release: {{ .Release.Name }}
  template:
    metadata:
      labels:
        app: vcluster
        release: {{ .Release.Name }}
    spec:
      {{- with .Values.controlPlane.statefulSet.scheduling.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      automountServiceAccountToken: false
      securityContext:
        {{- toYaml .Values.controlPlane.statefulSet.security.podSecurityContext | nindent 8 }}
      containers:
        - name: syncer
          image: "vcluster-e2e/syncer:{{ .Chart.Version }}"
          resources:
            {{- toYaml .Values.controlPlane.statefulSet.resources | nindent 12 }}
          securityContext:
            {{- toYaml .Values.controlPlane.statefulSet.security.containerSecurityContext | nindent 12 }}
`;

const VCLUSTER_SERVICE = `apiVersion: v1
kind: Service
metadata:
  name: {{ .Release.Name }}
  namespace: {{ .Release.Namespace }}
  labels:
    app: vcluster
    release: {{ .Release.Name }}
spec:
  type: {{ .Values.controlPlane.service.spec.type | default "ClusterIP" }}
  selector:
    app: vcluster
    release: {{ .Release.Name }}
  ports:
    - name: https
      port: 443
      targetPort: 8443
      protocol: TCP
`;

const VCLUSTER_VALUES = `controlPlane:
  distro:
    k8s:
      enabled: true
      image:
        tag: ""
  statefulSet:
    highAvailability:
      replicas: 1
    resources:
      requests: {cpu: 200m, memory: 256Mi}
      limits: {cpu: "1", memory: 1Gi}
    scheduling:
      priorityClassName: ""
    security:
      podSecurityContext: {}
      containerSecurityContext: {}
  service:
    spec:
      type: ClusterIP
exportKubeConfig:
  server: ""
`;

const ARGO_CONFIGMAP = `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-chart-info
  namespace: {{ .Release.Namespace }}
  labels:
    helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
data:
  chart: {{ .Chart.Name | quote }}
  version: {{ .Chart.Version | quote }}
  appVersion: {{ .Chart.AppVersion | quote }}
`;

const ARGO_DEPLOYMENT = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-controller
  namespace: {{ .Release.Namespace }}
  labels:
    app.kubernetes.io/name: {{ .Chart.Name }}
    helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
spec:
  replicas: 1
  selector:
    matchLabels:
      app.kubernetes.io/name: {{ .Chart.Name }}
      app.kubernetes.io/instance: {{ .Release.Name }}
  template:
    metadata:
      labels:
        app.kubernetes.io/name: {{ .Chart.Name }}
        app.kubernetes.io/instance: {{ .Release.Name }}
    spec:
      automountServiceAccountToken: false
      securityContext:
        runAsNonRoot: true
        seccompProfile: {type: RuntimeDefault}
      containers:
        - name: controller
          image: "argo-e2e/{{ .Chart.Name }}:{{ .Chart.Version }}"
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

/**
 * The controller of a stand-in chart version that never becomes healthy: its pods ask for a node
 * label no node has, so they stay Pending and the Deployment never becomes Available (a Helm
 * release waiting for it fails when its timeout runs out).
 */
const ARGO_DEPLOYMENT_NEVER_AVAILABLE = ARGO_DEPLOYMENT.replace(
  '      automountServiceAccountToken: false\n',
  '      automountServiceAccountToken: false\n      nodeSelector:\n        e2e.hosted-runtimes/stand-in: never-available\n',
);

/** One CRD per Argo chart (plural, kind, group), as the real charts install. */
const ARGO_CRDS: Record<string, { plural: string; kind: string }> = {
  'argo-cd': { plural: 'applications', kind: 'Application' },
  'argo-workflows': { plural: 'workflows', kind: 'Workflow' },
  'argo-rollouts': { plural: 'rollouts', kind: 'Rollout' },
  'argo-events': { plural: 'eventsources', kind: 'EventSource' },
};

function crd(plural: string, kind: string): string {
  return `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: ${plural}.argoproj.io
spec:
  group: argoproj.io
  names:
    kind: ${kind}
    listKind: ${kind}List
    plural: ${plural}
    singular: ${kind.toLowerCase()}
  scope: Namespaced
  versions:
    - name: v1alpha1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
`;
}

/** The real CRD files (scripts/argo-crds.sh) each chart installs, by chart. */
const REAL_ARGO_CRDS: Record<string, string[]> = {
  'argo-cd': ['applications.argoproj.io', 'appprojects.argoproj.io'],
  'argo-rollouts': ['rollouts.argoproj.io'],
  'argo-workflows': ['workflows.argoproj.io'],
};

function realCrds(crdsDir: string | undefined, chart: string): TarEntry[] | undefined {
  const names = REAL_ARGO_CRDS[chart];
  if (!crdsDir || !names) return undefined;
  const files = names.map((n) => join(crdsDir, `${n}.yaml`));
  if (!files.every((f) => existsSync(f))) return undefined;
  return names.map((n, i) => ({ path: `${chart}/crds/${n}.yaml`, content: readFileSync(files[i]!, 'utf8') }));
}

function chartYaml(name: string, version: string): string {
  return `apiVersion: v2\nname: ${name}\nversion: ${version}\nappVersion: "${version}"\ndescription: End-to-end test stand-in for the ${name} chart\ntype: application\n`;
}

export interface TestChartRepository {
  /** Directory of `<chart>-<version>.tgz` files. */
  dir: string;
  /** Every packaged file name. */
  files: string[];
  /** Whether argo-cd, argo-rollouts and argo-workflows carry the real CRDs or stand-ins. */
  argoCrds: 'real' | 'stand-in';
}

/**
 * Packages the test charts at every version the catalog pins into `dir`; the Argo charts carry
 * the real CRDs from `argoCrdsDir` (default HRT_ARGO_CRDS_DIR) when it holds them. The Argo chart
 * versions in `neverAvailable` are stand-ins whose controller never becomes Available.
 */
export async function writeTestCharts(
  dir: string,
  catalog: Catalog,
  argoCrdsDir: string | undefined = process.env.HRT_ARGO_CRDS_DIR,
  neverAvailable: ReadonlyArray<{ chart: string; version: string }> = [],
): Promise<TestChartRepository> {
  await mkdir(dir, { recursive: true });
  const wanted = new Map<string, Set<string>>();
  const add = (chart: string, version: string) => {
    const set = wanted.get(chart) ?? new Set<string>();
    set.add(version);
    wanted.set(chart, set);
  };
  for (const v of catalog.versions) {
    add('vcluster', v.components.vcluster);
    add('argo-cd', v.components.argoCd);
    add('argo-workflows', v.components.argoWorkflows);
    add('argo-rollouts', v.components.argoRollouts);
    add('argo-events', v.components.argoEvents);
  }
  const files: string[] = [];
  let realUsed = false;
  for (const [chart, versions] of wanted) {
    for (const version of versions) {
      const entries: TarEntry[] = [{ path: `${chart}/Chart.yaml`, content: chartYaml(chart, version) }];
      if (chart === 'vcluster') {
        entries.push(
          { path: `${chart}/values.yaml`, content: VCLUSTER_VALUES },
          { path: `${chart}/templates/statefulset.yaml`, content: VCLUSTER_STATEFULSET },
          { path: `${chart}/templates/service.yaml`, content: VCLUSTER_SERVICE },
        );
      } else {
        const c = ARGO_CRDS[chart]!;
        const real = realCrds(argoCrdsDir, chart);
        if (real) realUsed = true;
        entries.push(
          { path: `${chart}/values.yaml`, content: '{}\n' },
          ...(real ?? [{ path: `${chart}/crds/${c.plural}.yaml`, content: crd(c.plural, c.kind) }]),
          { path: `${chart}/templates/chart-info.yaml`, content: ARGO_CONFIGMAP },
          {
            path: `${chart}/templates/controller.yaml`,
            content: neverAvailable.some((n) => n.chart === chart && n.version === version)
              ? ARGO_DEPLOYMENT_NEVER_AVAILABLE
              : ARGO_DEPLOYMENT,
          },
        );
      }
      const file = `${chart}-${version}.tgz`;
      await writeFile(join(dir, file), tarGz(entries));
      files.push(file);
    }
  }
  return { dir, files, argoCrds: realUsed ? 'real' : 'stand-in' };
}

export { ARGO_CRDS };

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
