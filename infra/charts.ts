/**
 * Charts the root clusters run, with published versions:
 *  - ingress-nginx 4.13.0 (release helm-chart-4.13.0 of kubernetes/ingress-nginx, 2025-07-07,
 *    controller v1.13.0);
 *  - cert-manager v1.17.2 (jetstack chart, CRDs through `crds.enabled`, which replaced
 *    `installCRDs`);
 *  - cloudnative-pg 0.26.1 (cloudnative-pg/charts; operator for postgresql.cnpg.io/v1 Cluster).
 */
export const PLATFORM_CHARTS = {
  ingressNginx: { repository: 'ingressNginx', chart: 'ingress-nginx', version: '4.13.0', namespace: 'ingress-nginx' },
  certManager: { repository: 'jetstack', chart: 'cert-manager', version: 'v1.17.2', namespace: 'cert-manager' },
  cnpg: { repository: 'cnpg', chart: 'cloudnative-pg', version: '0.26.1', namespace: 'cnpg-system' },
} as const;

/** Namespace of the provisioner and its database on every root cluster. */
export const PLATFORM_NAMESPACE = 'hosted-platform';
/** PriorityClass of tenant vcluster control planes (tenants/ sets it on the vcluster). */
export const TENANT_PRIORITY_CLASS = 'tenant-control-plane';
