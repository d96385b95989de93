/**
 * Runtime versions. Each pins every component it installs; the upgrade and rollback rules are
 * explained in runtime/catalog.ts.
 *
 * Every chart pin is a published chart version. Sources (see docs/pulumi.md, "Version pins"):
 *  - argo-cd, argo-workflows, argo-rollouts, argo-events: the `version:` field of
 *    charts/<chart>/Chart.yaml in the argoproj/argo-helm repository, at the commit that released
 *    it (date in the comment next to each pin; the app version is the chart's appVersion).
 *  - vcluster: release tags v<version> of loft-sh/vcluster (the chart in chart/ is published with
 *    the release's version), only releases whose Go module the module proxy serves (0.25.0,
 *    0.26.0, 0.27.0, 0.30.0, 0.33.1, 0.34.0), so that the end-to-end tier runs the very vcluster a
 *    version pins, built from its module (scripts/vcluster.sh; test/unit/vcluster-versions.test.ts
 *    names a pin that is not buildable). 1.3.0–1.5.0 pin 0.33.1 and 1.6.0 moves to 0.34.0, one
 *    minor: the upgrade path vcluster allows (docs/decisions.md). `kubernetes` is the k8s distro
 *    image tag the release's values set (controlPlane.distro.k8s.image.tag, or the apiServer
 *    image tag before 0.25).
 */
export type Channel = 'stable' | 'latest';

/** Chart (and image) versions a runtime version pins. */
export interface ComponentPins {
  /** vcluster Helm chart version. */
  vcluster: string;
  /** Kubernetes version of the virtual cluster (the vcluster chart's k8s distro image tag). */
  kubernetes: string;
  /** argo-cd chart version (argo-helm). */
  argoCd: string;
  /** argo-workflows chart version (argo-helm). */
  argoWorkflows: string;
  /** argo-rollouts chart version (argo-helm). */
  argoRollouts: string;
  /** argo-events chart version (argo-helm). */
  argoEvents: string;
  /** Image tag of the runtime agents (tunnel client, request router, app-proxy, event reporter, Source Server from 1.7.0, GitOps Operator from 1.8.0). */
  agents: string;
}

/**
 * The versions of the applications the Argo charts a runtime version pins install: each chart's
 * `appVersion` (its Chart.yaml), what a user knows them by ("Argo CD v3.0.6"), where the pins
 * above are chart versions. test/unit/catalog-app-versions.test.ts checks them against the chart mirror.
 */
export interface AppVersions {
  /** Argo CD, of the argo-cd chart. */
  argoCd: string;
  /** Argo Workflows, of the argo-workflows chart. */
  argoWorkflows: string;
  /** Argo Rollouts, of the argo-rollouts chart. */
  argoRollouts: string;
  /** Argo Events, of the argo-events chart. */
  argoEvents: string;
}

/**
 * What the release pipeline records of a release's images once it pushed them: the registry (and
 * path) of the agents' images and each image's digest. A hybrid runtime's bundle names an image
 * `registry/name:tag@sha256:<digest>` where a digest is recorded, and lists the images it could
 * not pin (`unpinnedImages`). The pipeline writes these fields; nobody writes a digest by hand.
 */
export interface ReleaseImages {
  /** Registry and path of the agents' images (`registry.example.com/hosted-runtimes`); default DEFAULT_AGENT_IMAGE_REPOSITORY. */
  registry?: string;
  /** `sha256:<64 hex>` of each agent image pushed (`tunnel-client`, …, `bootstrap`, `upgrader`), by its name. */
  agents?: Readonly<Record<string, string>>;
  /** `sha256:<64 hex>` of each image the Argo charts run, by the reference the chart renders (`quay.io/argoproj/argocd:v3.0.6`). */
  charts?: Readonly<Record<string, string>>;
}

export interface RuntimeVersion {
  version: string;
  releaseDate: string;
  channel: Channel;
  components: ComponentPins;
  /** The Argo applications' own versions (the charts' appVersion); absent in test catalogs that do not show them. */
  appVersions?: AppVersions;
  /** Upgrade rules into this version. */
  upgrade: {
    /** Oldest version a tenant may upgrade from directly (inclusive). */
    minFrom?: string;
    /** A mandatory stepping stone: no upgrade may jump over this version. */
    steppingStone?: boolean;
  };
  /** Whether a tenant on this version may go back to an older one. Default: allowed (subject to the vcluster rules). */
  rollback?: { allowed: boolean; reason?: string };
  /** Release notes shown by the API (what changed, what to watch for). */
  notes?: string;
  /** The release's image registry and digests, as the release pipeline recorded them; absent: none recorded. */
  images?: ReleaseImages;
}

export const VERSIONS: readonly RuntimeVersion[] = [
  {
    version: '1.3.0',
    releaseDate: '2026-03-26',
    channel: 'stable',
    components: {
      vcluster: '0.33.1', // tag v0.33.1, 2026-03-24
      kubernetes: 'v1.32.1',
      argoCd: '7.8.2', // 2025-02-06, Argo CD v2.14.2
      argoWorkflows: '0.45.4', // 2025-01-10, Argo Workflows v3.6.2
      argoRollouts: '2.39.0', // 2025-01-31, Argo Rollouts v1.8.0
      argoEvents: '2.4.13', // 2025-01-11, Argo Events v1.9.5
      agents: '1.3.0',
    },
    appVersions: { argoCd: 'v2.14.2', argoWorkflows: 'v3.6.2', argoRollouts: 'v1.8.0', argoEvents: 'v1.9.5' },
    upgrade: {},
    notes: 'First hosted runtime line: Argo CD 2.14, Workflows 3.6, Rollouts 1.8, Events 1.9.',
  },
  {
    version: '1.4.0',
    releaseDate: '2026-03-31',
    channel: 'stable',
    components: {
      vcluster: '0.33.1', // tag v0.33.1, 2026-03-24
      kubernetes: 'v1.32.1',
      argoCd: '7.9.1', // 2025-05-06, Argo CD v2.14.11
      argoWorkflows: '0.45.12', // 2025-04-03, Argo Workflows v3.6.5
      argoRollouts: '2.39.5', // 2025-04-02, Argo Rollouts v1.8.2
      argoEvents: '2.4.15', // 2025-04-07, Argo Events v1.9.6
      agents: '1.4.0',
    },
    appVersions: { argoCd: 'v2.14.11', argoWorkflows: 'v3.6.5', argoRollouts: 'v1.8.2', argoEvents: 'v1.9.6' },
    upgrade: { minFrom: '1.3.0' },
    notes: 'Argo CD 2.14.11, Workflows 3.6.5, Rollouts 1.8.2, Events 1.9.6.',
  },
  {
    version: '1.4.1',
    releaseDate: '2026-04-07',
    channel: 'stable',
    components: {
      vcluster: '0.33.1',
      kubernetes: 'v1.32.1',
      argoCd: '7.9.1',
      argoWorkflows: '0.45.13', // 2025-04-30, Argo Workflows v3.6.7
      argoRollouts: '2.39.5',
      argoEvents: '2.4.15',
      agents: '1.4.1',
    },
    appVersions: { argoCd: 'v2.14.11', argoWorkflows: 'v3.6.7', argoRollouts: 'v1.8.2', argoEvents: 'v1.9.6' },
    upgrade: { minFrom: '1.3.0' },
    notes: 'Patch: Argo Workflows 3.6.7 and agent fixes; can be rolled back to 1.4.0.',
  },
  {
    version: '1.5.0',
    releaseDate: '2026-04-14',
    channel: 'stable',
    components: {
      vcluster: '0.33.1',
      kubernetes: 'v1.32.1',
      argoCd: '8.0.17', // 2025-06-10, Argo CD v3.0.6
      argoWorkflows: '0.45.19', // 2025-06-20, Argo Workflows v3.6.10
      argoRollouts: '2.39.6', // 2025-06-07, Argo Rollouts v1.8.3
      argoEvents: '2.4.15',
      agents: '1.5.0',
    },
    appVersions: { argoCd: 'v3.0.6', argoWorkflows: 'v3.6.10', argoRollouts: 'v1.8.3', argoEvents: 'v1.9.6' },
    upgrade: { minFrom: '1.4.0', steppingStone: true },
    rollback: { allowed: false, reason: 'Argo CD 3.0 migrates its configuration; 2.14 cannot read it back' },
    notes: 'Argo CD 3.0. A mandatory stepping stone: every tenant passes through 1.5.x.',
  },
  {
    version: '1.6.0',
    releaseDate: '2026-05-04',
    channel: 'latest',
    components: {
      vcluster: '0.34.0', // tag v0.34.0, 2026-04-29
      kubernetes: 'v1.33.4',
      argoCd: '8.3.7', // 2025-09-12, Argo CD v3.1.5
      argoWorkflows: '0.45.24', // 2025-09-12, Argo Workflows v3.7.2
      argoRollouts: '2.40.4', // 2025-09-11, Argo Rollouts v1.8.3
      argoEvents: '2.4.16', // 2025-07-14, Argo Events v1.9.7
      agents: '1.6.0',
    },
    appVersions: { argoCd: 'v3.1.5', argoWorkflows: 'v3.7.2', argoRollouts: 'v1.8.3', argoEvents: 'v1.9.7' },
    upgrade: { minFrom: '1.5.0' },
    notes: 'Argo CD 3.1, Workflows 3.7, vcluster 0.34, Kubernetes 1.33 in the vcluster.',
  },
  {
    version: '1.7.0',
    releaseDate: '2026-11-28',
    channel: 'latest',
    // The charts of 1.6.0: only the agents change (a fifth agent, the Source Server, and the
    // reporter and app-proxy that use it; runtime/component/agents.ts `since`).
    components: {
      vcluster: '0.34.0',
      kubernetes: 'v1.33.4',
      argoCd: '8.3.7',
      argoWorkflows: '0.45.24',
      argoRollouts: '2.40.4',
      argoEvents: '2.4.16',
      agents: '1.7.0',
    },
    appVersions: { argoCd: 'v3.1.5', argoWorkflows: 'v3.7.2', argoRollouts: 'v1.8.3', argoEvents: 'v1.9.7' },
    upgrade: { minFrom: '1.5.0' },
    notes: 'Source Server: change revisions, commit metadata and Git-vs-cluster diffs.',
  },
  {
    version: '1.8.0',
    releaseDate: '2026-11-29',
    channel: 'latest',
    // The charts of 1.7.0: a sixth agent, the GitOps Operator, and the promotion CRDs it reads
    // (runtime/component/promotion-crds.ts).
    components: {
      vcluster: '0.34.0',
      kubernetes: 'v1.33.4',
      argoCd: '8.3.7',
      argoWorkflows: '0.45.24',
      argoRollouts: '2.40.4',
      argoEvents: '2.4.16',
      agents: '1.8.0',
    },
    appVersions: { argoCd: 'v3.1.5', argoWorkflows: 'v3.7.2', argoRollouts: 'v1.8.3', argoEvents: 'v1.9.7' },
    upgrade: { minFrom: '1.5.0' },
    notes: 'GitOps Operator: promotions of a product from one environment to the next through Git.',
  },
];
