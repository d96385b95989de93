/**
 * NetworkPolicies of a tenant namespace. The vcluster control plane and every pod it syncs
 * (Argo, agents) run in this namespace, so the rules cover the whole runtime:
 *  - deny all ingress and egress by default;
 *  - allow traffic inside the namespace (synced pods reach the vcluster API server);
 *  - allow ingress from the platform's ingress controller and the provisioner namespaces;
 *  - allow egress to cluster DNS, to the Kubernetes API, and to the public internet, never to
 *    private, shared, loopback or link-local ranges (cloud metadata) unless allow-listed.
 */
import type * as k8s from '@pulumi/kubernetes';

/** Ranges public-internet egress excludes: RFC 1918, CGNAT (RFC 6598), loopback, link-local. */
export const PRIVATE_RANGES: readonly string[] = [
  '10.0.0.0/8',
  '172.16.0.0/12',
  '192.168.0.0/16',
  '100.64.0.0/10',
  '127.0.0.0/8',
  '169.254.0.0/16',
];

export interface NetworkPolicyOptions {
  /** Namespaces allowed to reach the tenant (platform ingress controller, provisioner). */
  ingressNamespaces: readonly string[];
  /** Private CIDRs egress may reach in addition to the public internet. */
  egressAllowedCidrs: readonly string[];
  /** CIDRs of the host Kubernetes API server (the vcluster syncer talks to it). */
  kubernetesApiCidrs: readonly string[];
}

export type NamedPolicy = { name: string; spec: k8s.types.input.networking.v1.NetworkPolicySpec };

const NAME_LABEL = 'kubernetes.io/metadata.name';

export function tenantNetworkPolicies(opts: NetworkPolicyOptions): NamedPolicy[] {
  return [
    { name: 'default-deny', spec: { podSelector: {}, policyTypes: ['Ingress', 'Egress'] } },
    {
      name: 'allow-same-namespace',
      spec: {
        podSelector: {},
        policyTypes: ['Ingress', 'Egress'],
        ingress: [{ from: [{ podSelector: {} }] }],
        egress: [{ to: [{ podSelector: {} }] }],
      },
    },
    {
      name: 'allow-platform-ingress',
      spec: {
        podSelector: {},
        policyTypes: ['Ingress'],
        ingress: [
          {
            from: [
              {
                namespaceSelector: {
                  matchExpressions: [{ key: NAME_LABEL, operator: 'In', values: [...opts.ingressNamespaces] }],
                },
              },
            ],
          },
        ],
      },
    },
    {
      name: 'allow-dns-egress',
      spec: {
        podSelector: {},
        policyTypes: ['Egress'],
        egress: [
          {
            to: [
              {
                namespaceSelector: { matchLabels: { [NAME_LABEL]: 'kube-system' } },
                podSelector: { matchLabels: { 'k8s-app': 'kube-dns' } },
              },
            ],
            ports: [
              { protocol: 'UDP', port: 53 },
              { protocol: 'TCP', port: 53 },
            ],
          },
        ],
      },
    },
    {
      name: 'allow-kube-api-egress',
      spec: {
        podSelector: {},
        policyTypes: ['Egress'],
        egress: [
          {
            to: opts.kubernetesApiCidrs.map((cidr) => ({ ipBlock: { cidr } })),
            ports: [
              { protocol: 'TCP', port: 443 },
              { protocol: 'TCP', port: 6443 },
            ],
          },
        ],
      },
    },
    {
      name: 'allow-internet-egress',
      spec: {
        podSelector: {},
        policyTypes: ['Egress'],
        egress: [
          {
            to: [
              { ipBlock: { cidr: '0.0.0.0/0', except: [...PRIVATE_RANGES] } },
              ...opts.egressAllowedCidrs.map((cidr) => ({ ipBlock: { cidr } })),
            ],
          },
        ],
      },
    },
  ];
}
