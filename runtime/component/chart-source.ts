/**
 * Where a Helm chart comes from. Upstream repositories by default; a mirror (an https Helm
 * repository or an oci:// registry path) or a local directory of packaged charts for
 * air-gapped installs and tests. Used by the runtime component, the tenant program and infra/.
 */
import type * as k8s from '@pulumi/kubernetes';

/** The fields of a helm.v3.Release that select the chart. */
export interface ChartSource {
  chart: string;
  version?: string;
  repositoryOpts?: k8s.types.input.helm.v3.RepositoryOpts;
}

/** Upstream Helm repositories of the charts this project installs. */
export const UPSTREAM_REPOSITORIES = {
  argo: 'https://argoproj.github.io/argo-helm',
  vcluster: 'https://charts.loft.sh',
  ingressNginx: 'https://kubernetes.github.io/ingress-nginx',
  jetstack: 'https://charts.jetstack.io',
  cnpg: 'https://cloudnative-pg.github.io/charts',
} as const;

export type RepositoryName = keyof typeof UPSTREAM_REPOSITORIES;

/**
 * Overrides per repository. A value is one of
 *  - an http(s) URL of a Helm repository (a mirror);
 *  - an `oci://` URL: the chart is `<url>/<chart>`;
 *  - a local directory (absolute, `./…` or `file://…`) holding `<chart>-<version>.tgz` files as
 *    written by `helm package` / `helm pull`.
 */
export type ChartRepositories = Partial<Record<RepositoryName, string>>;

export function isLocalPath(location: string): boolean {
  return (
    location.startsWith('/') ||
    location.startsWith('./') ||
    location.startsWith('../') ||
    location.startsWith('file://')
  );
}

/** Resolves a chart name and version against the configured (or upstream) repository. */
export function chartSource(
  repository: RepositoryName,
  chart: string,
  version: string,
  overrides: ChartRepositories = {},
): ChartSource {
  const location = overrides[repository] ?? UPSTREAM_REPOSITORIES[repository];
  if (isLocalPath(location)) {
    const dir = location.replace(/^file:\/\//, '').replace(/\/+$/, '');
    return { chart: `${dir}/${chart}-${version}.tgz` };
  }
  if (location.startsWith('oci://')) return { chart: `${location.replace(/\/+$/, '')}/${chart}`, version };
  if (!/^https?:\/\//.test(location)) {
    throw new Error(
      `chart repository '${location}' for ${repository} is neither an http(s) URL, an oci:// URL nor a local path`,
    );
  }
  return { chart, version, repositoryOpts: { repo: location } };
}
