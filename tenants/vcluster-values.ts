/**
 * Values of the vcluster chart for a tenant. The keys follow the chart's values.schema.json of
 * the pinned versions (0.24–0.34; the schema rejects unknown keys):
 *  - Kubernetes version: `controlPlane.distro.k8s.version` up to 0.24, the k8s distro image tag
 *    `controlPlane.distro.k8s.image.tag` from 0.25 (where `version` is deprecated);
 *  - suspension: `controlPlane.statefulSet.highAvailability.replicas: 0` (the statefulset template
 *    passes the value through; the backing store and the exported kubeconfig Secret stay);
 *  - the kubeconfig export: `exportKubeConfig.server` (an address the provisioner can reach) and
 *    `exportKubeConfig.context`; that address's host also goes into `controlPlane.proxy.extraSANs`,
 *    since vcluster's serving certificate names only its own Service and localhost otherwise (a
 *    client of the exported kubeconfig would fail TLS verification: found by running vcluster
 *    0.30.0 itself);
 *  - resources from the plan for every container the vcluster runs: the control plane
 *    (`controlPlane.statefulSet.resources`), its init containers (`controlPlane.distro.k8s.resources`)
 *    and CoreDNS inside the vcluster (`controlPlane.coredns.deployment.resources`; its default
 *    manifest already complies with Pod Security `restricted`);
 *  - no volume-snapshot rules (`rbac.enableVolumeSnapshotRules`, from 0.30), which would make the
 *    chart create a ClusterRole;
 *  - isolation: `policies.podSecurityStandard: restricted` inside the vcluster. The chart's own
 *    ResourceQuota, LimitRange and NetworkPolicy are disabled: the tenant program owns those
 *    objects (plan-driven, validated), and a second quota would cap tenants at the chart
 *    defaults (20 pods).
 */
import { compareVersions } from '../runtime/catalog.ts';
import { copyResources } from '../runtime/component/resources.ts';
import type { Plan } from './plans.ts';

export interface VclusterValuesInput {
  /** vcluster chart version (decides where the Kubernetes version goes). */
  chartVersion: string;
  /** Kubernetes version of the virtual cluster, e.g. v1.32.1. */
  kubernetes: string;
  plan: Plan;
  suspended: boolean;
  /** URL written into the exported kubeconfig. */
  exportServer: string;
  /** Context name in the exported kubeconfig. */
  context: string;
  /** PriorityClass of the control plane pods ('' for none). */
  priorityClassName: string;
}

interface ContainerSecurity {
  allowPrivilegeEscalation: boolean;
  runAsNonRoot: boolean;
  runAsUser: number;
  runAsGroup: number;
  capabilities: { drop: string[] };
  seccompProfile: { type: 'RuntimeDefault' };
}

type Resources = { cpu: string; memory: string };

/** The subset of the vcluster chart's values this program sets. */
export interface VclusterValues {
  controlPlane: {
    distro: {
      k8s: {
        enabled: true;
        version?: string;
        image?: { tag: string };
        securityContext: ContainerSecurity;
        resources: { requests: Resources; limits: Resources };
        /** Flags merged over the ones vcluster starts kube-controller-manager with (a same-named flag replaces its). */
        controllerManager: { extraArgs: string[] };
      };
    };
    coredns: { deployment: { resources: { requests: Resources; limits: Resources } } };
    statefulSet: {
      highAvailability: { replicas: number };
      resources: { requests: Resources; limits: Resources };
      scheduling: { priorityClassName: string };
      security: {
        podSecurityContext: { runAsNonRoot: boolean; fsGroup: number; seccompProfile: { type: 'RuntimeDefault' } };
        containerSecurityContext: ContainerSecurity;
      };
      persistence: { volumeClaim: { enabled: boolean; size: string; retentionPolicy: 'Retain' | 'Delete' } };
    };
    service: { spec: { type: 'ClusterIP' } };
    ingress: { enabled: boolean };
    proxy: { extraSANs: string[] };
  };
  policies: {
    podSecurityStandard: '' | 'privileged' | 'baseline' | 'restricted';
    resourceQuota: { enabled: boolean };
    limitRange: { enabled: boolean };
    networkPolicy: { enabled: boolean };
  };
  exportKubeConfig: { server: string; context: string };
  telemetry: { enabled: boolean };
  /** From 0.30 (the key does not exist before; the schema rejects unknown keys). */
  rbac?: { enableVolumeSnapshotRules: { enabled: boolean } };
}

/** UID the control plane runs as (non-root, so the namespace can enforce `restricted`). */
export const CONTROL_PLANE_UID = 12345;

export function vclusterValues(input: VclusterValuesInput): VclusterValues {
  const legacyVersionKey = compareVersions(input.chartVersion, '0.25.0') < 0;
  const { plan } = input;
  const init = copyResources(plan.controlPlaneInit);
  // One control plane replica (highAvailability.replicas is 0 or 1): its kube-controller-manager
  // needs no leader election. With it, every start (a wake, an upgrade) waited the dead
  // instance's 15 s lease out before any controller ran, so no runtime pod came back before it.
  const controllerManager = { extraArgs: ['--leader-elect=false'] };
  const k8s: VclusterValues['controlPlane']['distro']['k8s'] = legacyVersionKey
    ? {
        enabled: true,
        version: input.kubernetes,
        securityContext: restrictedContainer(),
        resources: init,
        controllerManager,
      }
    : {
        enabled: true,
        image: { tag: input.kubernetes },
        securityContext: restrictedContainer(),
        resources: init,
        controllerManager,
      };
  return {
    controlPlane: {
      distro: { k8s },
      coredns: { deployment: { resources: copyResources(plan.coreDns) } },
      statefulSet: {
        highAvailability: { replicas: input.suspended ? 0 : 1 },
        resources: {
          requests: { ...plan.controlPlane.requests },
          limits: { ...plan.controlPlane.limits },
        },
        scheduling: { priorityClassName: input.priorityClassName },
        security: {
          podSecurityContext: {
            runAsNonRoot: true,
            fsGroup: CONTROL_PLANE_UID,
            seccompProfile: { type: 'RuntimeDefault' },
          },
          containerSecurityContext: restrictedContainer(),
        },
        persistence: { volumeClaim: { enabled: true, size: plan.controlPlane.storage, retentionPolicy: 'Retain' } },
      },
      service: { spec: { type: 'ClusterIP' } },
      ingress: { enabled: false },
      proxy: { extraSANs: [exportHost(input.exportServer)] },
    },
    policies: {
      podSecurityStandard: 'restricted',
      resourceQuota: { enabled: false },
      limitRange: { enabled: false },
      networkPolicy: { enabled: false },
    },
    exportKubeConfig: { server: input.exportServer, context: input.context },
    telemetry: { enabled: false },
    // From 0.30 the chart grants volume-snapshot rules by default ('auto'), which also makes it
    // create a ClusterRole: outside the tenant namespace and beyond the provisioner's grants
    // (infra/provisioner-rbac.ts). Tenants get no snapshot support, so neither is needed.
    ...(compareVersions(input.chartVersion, '0.30.0') >= 0
      ? { rbac: { enableVolumeSnapshotRules: { enabled: false } } }
      : {}),
  };
}

/** The host (name or address, without brackets) of the export URL. */
function exportHost(server: string): string {
  return new URL(server).hostname.replace(/^\[(.*)\]$/, '$1');
}

function restrictedContainer(): ContainerSecurity {
  return {
    allowPrivilegeEscalation: false,
    runAsNonRoot: true,
    runAsUser: CONTROL_PLANE_UID,
    runAsGroup: CONTROL_PLANE_UID,
    capabilities: { drop: ['ALL'] },
    seccompProfile: { type: 'RuntimeDefault' },
  };
}
