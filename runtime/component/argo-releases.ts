/**
 * The four Argo components installed from their upstream argo-helm charts. Values here do not
 * depend on the runtime version, so a version change only changes the chart versions it pins.
 *
 * CRDs are owned once: each chart installs only its own CRDs (Argo CD: Applications,
 * ApplicationSets, AppProjects; Workflows; Rollouts; Events), each exactly once per vcluster,
 * and every chart keeps them on uninstall (deleting a CRD deletes every object of that kind).
 */
import type { ComponentPins } from '../catalog.ts';

export type ArgoComponent = 'argoCd' | 'argoWorkflows' | 'argoRollouts' | 'argoEvents';

export interface ArgoRelease {
  component: ArgoComponent;
  chart: string;
  /** Helm release name (also the chart's fullname prefix). */
  releaseName: string;
  namespace: string;
  values: Record<string, unknown>;
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
    values: { crds: { install: true, keep: true } },
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
    values: { crds: { install: true, keep: true } },
  },
];

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
