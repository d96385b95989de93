/**
 * The four Argo components installed from their upstream argo-helm charts. Values here do not
 * depend on the runtime version, so a version change only changes the chart versions it pins.
 * They depend on the plan only through the resource budgets (runtime/component/resources.ts):
 * `argoReleaseValues` is what the runtime passes to each release.
 *
 * Security contexts: every pod the runtime runs is admitted under Pod Security `restricted` (the
 * vcluster enforces it, and so does the tenant namespace on the root cluster its pods are synced
 * to). The argo-cd and argo-rollouts charts' defaults already comply; argo-workflows' controller
 * and server lack a seccomp profile, and argo-events' controller has no security context at all,
 * so those are set here (pod and container level, for every pinned chart version).
 *
 * CRDs are owned once: each chart installs only its own CRDs (Argo CD: Applications,
 * ApplicationSets, AppProjects; Workflows; Rollouts; Events), each exactly once per vcluster,
 * and every chart keeps them on uninstall (deleting a CRD deletes every object of that kind).
 */
import type { ComponentPins } from '../versions.ts';
import { copyResources, type RuntimeResources } from './resources.ts';

export type ArgoComponent = 'argoCd' | 'argoWorkflows' | 'argoRollouts' | 'argoEvents';

export interface ArgoRelease {
  component: ArgoComponent;
  chart: string;
  /** Helm release name (also the chart's fullname prefix). */
  releaseName: string;
  namespace: string;
  values: Record<string, unknown>;
}

/** UID of the argoexec image's user (Argo Workflows' executor and workflow pods). */
export const ARGO_EXEC_UID = 8737;
/** UID the Argo Events chart's values suggest for its pods (`runAsNonRoot` is checked against a numeric user). */
export const ARGO_EVENTS_UID = 9731;

const RESTRICTED_POD = { runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } } as const;

function restrictedContainer() {
  return {
    allowPrivilegeEscalation: false,
    capabilities: { drop: ['ALL'] },
    runAsNonRoot: true,
    seccompProfile: { type: 'RuntimeDefault' },
  };
}

export const ARGO_RELEASES: readonly ArgoRelease[] = [
  {
    component: 'argoCd',
    chart: 'argo-cd',
    releaseName: 'argocd',
    namespace: 'argocd',
    values: {
      crds: { install: true, keep: true },
      // TLS ends at the control plane; the request router reaches argocd-server over plain HTTP.
      configs: { params: { 'server.insecure': true } },
      dex: { enabled: false },
    },
  },
  {
    component: 'argoWorkflows',
    chart: 'argo-workflows',
    releaseName: 'argo-workflows',
    namespace: 'argo',
    values: {
      crds: { install: true, keep: true },
      controller: {
        podSecurityContext: RESTRICTED_POD,
        securityContext: { ...restrictedContainer(), readOnlyRootFilesystem: true },
        // Tenants' workflow pods run in the same restricted vcluster: by default they run as
        // the executor's non-root user with the runtime's seccomp profile (a workflow may
        // override it; one that runs as root is refused by Pod Security admission).
        workflowDefaults: {
          spec: {
            securityContext: {
              runAsNonRoot: true,
              runAsUser: ARGO_EXEC_UID,
              seccompProfile: { type: 'RuntimeDefault' },
            },
          },
        },
      },
      server: {
        podSecurityContext: RESTRICTED_POD,
        // The chart's default: the server writes to its root filesystem (TLS material, UI assets).
        securityContext: { ...restrictedContainer(), readOnlyRootFilesystem: false },
      },
      executor: { securityContext: { ...restrictedContainer(), readOnlyRootFilesystem: true } },
    },
  },
  {
    component: 'argoRollouts',
    chart: 'argo-rollouts',
    releaseName: 'argo-rollouts',
    namespace: 'argo-rollouts',
    values: { installCRDs: true, keepCRDs: true, dashboard: { enabled: false } },
  },
  {
    component: 'argoEvents',
    chart: 'argo-events',
    releaseName: 'argo-events',
    namespace: 'argo-events',
    values: {
      crds: { install: true, keep: true },
      // Pod level for every Argo Events pod the chart runs (the controller; the webhook when enabled).
      global: { securityContext: { ...RESTRICTED_POD, runAsUser: ARGO_EVENTS_UID, runAsGroup: ARGO_EVENTS_UID } },
      controller: { containerSecurityContext: restrictedContainer() },
    },
  },
];

/**
 * The values the runtime passes to an Argo release: the spec's values with the plan's resources
 * for every container of the chart.
 */
export function argoReleaseValues(spec: ArgoRelease, budget: RuntimeResources): Record<string, unknown> {
  return mergeValues(spec.values, resourceValues(spec.component, budget));
}

function resourceValues(component: ArgoComponent, budget: RuntimeResources): Record<string, unknown> {
  switch (component) {
    case 'argoCd': {
      const r = budget.argoCd;
      return {
        controller: { resources: copyResources(r.applicationController) },
        repoServer: { resources: copyResources(r.repoServer) },
        server: { resources: copyResources(r.server) },
        redis: { resources: copyResources(r.redis) },
        applicationSet: { resources: copyResources(r.applicationSet) },
        notifications: { resources: copyResources(r.notifications) },
        redisSecretInit: { resources: copyResources(r.redisSecretInit) },
      };
    }
    case 'argoWorkflows': {
      const r = budget.argoWorkflows;
      return {
        controller: { resources: copyResources(r.controller) },
        server: { resources: copyResources(r.server) },
        executor: { resources: copyResources(r.executor) },
      };
    }
    case 'argoRollouts':
      return {
        controller: {
          replicas: budget.argoRollouts.replicas,
          resources: copyResources(budget.argoRollouts.controller),
        },
      };
    case 'argoEvents':
      return { controller: { resources: copyResources(budget.argoEvents.controller) } };
  }
}

type Values = Record<string, unknown>;
const isObject = (v: unknown): v is Values => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Deep merge of plain objects (arrays and scalars of `b` replace `a`'s); neither input is changed. */
export function mergeValues(a: Values, b: Values): Values {
  const out: Values = structuredClone(a);
  for (const [key, value] of Object.entries(b)) {
    const current = out[key];
    out[key] = isObject(current) && isObject(value) ? mergeValues(current, value) : structuredClone(value);
  }
  return out;
}

/** Chart version of an Argo component in a set of pins. */
export function argoChartVersion(pins: ComponentPins, component: ArgoComponent): string {
  return pins[component];
}

/** In-vcluster address of the Argo CD API server (argo-cd chart: `<fullname>-server`). */
export const ARGO_CD_NAMESPACE = 'argocd';
export const ARGO_CD_SERVER = `argocd-server.${ARGO_CD_NAMESPACE}.svc`;

/** Namespace of Argo Events (its controller, and the tenant's event sources). */
export const ARGO_EVENTS_NAMESPACE = 'argo-events';
/**
 * Where the request router sends `/webhooks/*`: the Service Argo Events creates for an
 * EventSource named `webhook` in the Argo Events namespace (`<name>-eventsource-svc`), on the
 * webhook event source's customary port. The tenant creates that EventSource; until it does,
 * webhooks are answered 502 by the router.
 */
export const WEBHOOK_EVENT_SOURCE_URL = `http://webhook-eventsource-svc.${ARGO_EVENTS_NAMESPACE}.svc:12000`;

/**
 * Where the request router reaches Argo CD's API server (the argo-cd chart's `argocd-server`
 * Service, port 80 with `server.insecure`: TLS ends at the control plane) for `/argo-cd/*`: what
 * a tenant's `argoCdUrl` (`/v1/tenants/:id/argo-cd/`) serves through the tunnel.
 */
export const ARGOCD_SERVER_URL = 'http://argocd-server.argocd.svc:80';
