/**
 * Provisioner: the control plane service on one root cluster. ServiceAccount with the RBAC it
 * needs (infra/provisioner-rbac.ts: a cluster-wide ClusterRole, and the ClusterRole of tenant
 * namespaces the tenants program binds in each), a long-lived token for the cluster registry's kubeconfig,
 * its secrets, Deployment, Service and Ingress (TLS from cert-manager, WebSocket-friendly
 * timeouts for the tunnel).
 */
import * as k8s from '@pulumi/kubernetes';
import * as pulumi from '@pulumi/pulumi';
import { restrictedContainerSecurityContext, restrictedPodSecurityContext } from '../runtime/component/pod-security.ts';
import {
  PROVISIONER_CLUSTER_RULES,
  PROVISIONER_SERVICE_ACCOUNT,
  PROVISIONER_TENANT_RULES,
  provisionerGuardSpec,
  TENANT_CLUSTER_ROLE,
} from './provisioner-rbac.ts';
import { waitForServiceAccountToken, type TokenWaiter } from './token-wait.ts';

export const PROVISIONER_TYPE = 'hosted:infra:Provisioner';
const NAME = PROVISIONER_SERVICE_ACCOUNT.name;
const PORT = 8080;
/** Mount path of the engine's work volume: the provisioner's data dir (the root filesystem is read-only). */
export const PROVISIONER_DATA_DIR = '/var/lib/provisioner';

export interface ProvisionerArgs {
  /** Platform namespace (created by the caller). */
  readonly namespace: pulumi.Input<string>;
  /** Provisioner image. */
  readonly image: pulumi.Input<string>;
  /** Host name of the Ingress. */
  readonly host: pulumi.Input<string>;
  /** cert-manager ClusterIssuer for the Ingress certificate. */
  readonly clusterIssuer: pulumi.Input<string>;
  /** Secret and key holding the Postgres DSN. */
  readonly databaseSecret: { name: pulumi.Input<string>; key: pulumi.Input<string> };
  /** PROVISIONER_ENCRYPTION_KEY (secret). */
  readonly encryptionKey: pulumi.Input<string>;
  /** PROVISIONER_REQUEST_SIGNING_KEY (secret): one key for all replicas, runtimes verify it. */
  readonly requestSigningKey: pulumi.Input<string>;
  /** PULUMI_CONFIG_PASSPHRASE (secret): every replica must decrypt the same tenant stacks. */
  readonly pulumiPassphrase: pulumi.Input<string>;
  /**
   * The credentials `pulumi up` uses for this cluster (kubeconfig contents, or a context of the
   * ambient kubeconfig): the program reads the ServiceAccount token with them once it is filled in.
   */
  readonly adminCredentials: { kubeconfig?: pulumi.Input<string>; context?: string };
  /** How to wait for the token (default: poll the API server, 2 minutes at most). */
  readonly waitForToken?: TokenWaiter;
  /** API server URL written into the registry kubeconfig. */
  readonly apiServer: pulumi.Input<string>;
  /** Name of the cluster (the kubeconfig's context). */
  readonly clusterName: string;
  /** Replicas (default 2; leases make them safe to run side by side). */
  readonly replicas?: number;
}

export class Provisioner extends pulumi.ComponentResource {
  /** Kubeconfig for the provisioner's own ServiceAccount (secret): what the cluster registry stores. */
  public readonly kubeconfig: pulumi.Output<string>;
  public readonly serviceAccountName: pulumi.Output<string>;

  constructor(name: string, args: ProvisionerArgs, opts?: pulumi.ComponentResourceOptions) {
    super(PROVISIONER_TYPE, name, {}, opts);
    const replicas = args.replicas ?? 2;
    if (!Number.isInteger(replicas) || replicas < 1)
      throw new pulumi.ResourceError(`Provisioner ${name}: replicas must be a positive whole number`, this);
    const child = { parent: this };
    const labels = { 'app.kubernetes.io/name': NAME, 'app.kubernetes.io/part-of': 'hosted-platform' };
    const metadata = { name: NAME, namespace: args.namespace, labels };

    const account = new k8s.core.v1.ServiceAccount(`${name}-sa`, { metadata }, child);
    const role = new k8s.rbac.v1.ClusterRole(
      `${name}-clusterrole`,
      { metadata: { name: 'hosted-platform:provisioner', labels }, rules: PROVISIONER_CLUSTER_RULES },
      child,
    );
    // Bound by the tenants program in each tenant namespace, never cluster-wide.
    new k8s.rbac.v1.ClusterRole(
      `${name}-tenant-clusterrole`,
      { metadata: { name: TENANT_CLUSTER_ROLE, labels }, rules: PROVISIONER_TENANT_RULES },
      child,
    );
    new k8s.rbac.v1.ClusterRoleBinding(
      `${name}-clusterrolebinding`,
      {
        metadata: { name: 'hosted-platform:provisioner', labels },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'hosted-platform:provisioner' },
        subjects: [{ kind: 'ServiceAccount', name: NAME, namespace: args.namespace }],
      },
      { ...child, dependsOn: [role, account] },
    );
    // The provisioner writes nothing outside tenant namespaces, whatever its grants would allow.
    const guard = new k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
      `${name}-guard`,
      {
        metadata: { name: 'hosted-platform-provisioner-guard', labels },
        spec: pulumi.output(args.namespace).apply((ns) => provisionerGuardSpec(`system:serviceaccount:${ns}:${NAME}`)),
      },
      child,
    );
    new k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
      `${name}-guard-binding`,
      {
        metadata: { name: 'hosted-platform-provisioner-guard', labels },
        spec: { policyName: 'hosted-platform-provisioner-guard', validationActions: ['Deny'] },
      },
      { ...child, dependsOn: [guard] },
    );

    const tokenName = `${NAME}-token`;
    const token = new k8s.core.v1.Secret(
      `${name}-token`,
      {
        metadata: {
          name: tokenName,
          namespace: args.namespace,
          labels,
          annotations: { 'kubernetes.io/service-account.name': NAME },
        },
        type: 'kubernetes.io/service-account-token',
      },
      { ...child, dependsOn: [account], additionalSecretOutputs: ['data'] },
    );
    // The token controller fills the Secret after its creation and the provider does not wait for
    // it: wait, then read the Secret. (In a preview of the first install the id stays unknown.)
    const waiter = args.waitForToken ?? waitForServiceAccountToken;
    const tokenId = pulumi
      .all([token.metadata.namespace, args.adminCredentials.kubeconfig])
      .apply(async ([namespace, kubeconfig]) => {
        await waiter({
          ...(kubeconfig !== undefined ? { kubeconfig } : {}),
          ...(args.adminCredentials.context !== undefined ? { context: args.adminCredentials.context } : {}),
          namespace,
          name: tokenName,
          timeoutMs: 120_000,
        });
        return `${namespace}/${tokenName}`;
      });
    const filled = k8s.core.v1.Secret.get(`${name}-token-filled`, tokenId, {
      ...child,
      dependsOn: [token],
      additionalSecretOutputs: ['data'],
    });
    this.kubeconfig = pulumi.secret(
      pulumi.all([filled.data, args.apiServer]).apply(([data, server]) => {
        const tokenB64 = data?.token;
        const ca = data?.['ca.crt'];
        if (!tokenB64 || !ca)
          throw new pulumi.ResourceError(`Provisioner ${name}: the ServiceAccount token Secret has no token`, this);
        return serviceAccountKubeconfig(args.clusterName, server, ca, Buffer.from(tokenB64, 'base64').toString('utf8'));
      }),
    );

    const secrets = new k8s.core.v1.Secret(
      `${name}-secrets`,
      {
        metadata: { name: `${NAME}-secrets`, namespace: args.namespace, labels },
        type: 'Opaque',
        stringData: {
          'encryption-key': pulumi.secret(args.encryptionKey),
          'request-signing-key': pulumi.secret(args.requestSigningKey),
          'pulumi-passphrase': pulumi.secret(args.pulumiPassphrase),
        },
      },
      { ...child, additionalSecretOutputs: ['stringData', 'data'] },
    );

    new k8s.apps.v1.Deployment(
      `${name}-deployment`,
      {
        metadata,
        spec: {
          replicas,
          selector: { matchLabels: { 'app.kubernetes.io/name': NAME } },
          template: {
            metadata: { labels },
            spec: {
              serviceAccountName: NAME,
              // Shutdown runs the reconciler's grace (20 s) and the tunnel drain (10 s) side by side.
              terminationGracePeriodSeconds: 40,
              securityContext: restrictedPodSecurityContext(),
              containers: [
                {
                  name: NAME,
                  image: args.image,
                  ports: [{ name: 'http', containerPort: PORT, protocol: 'TCP' }],
                  env: [
                    { name: 'HOST', value: '0.0.0.0' },
                    { name: 'PORT', value: String(PORT) },
                    // Replicas relay requests for runtimes whose tunnel another replica holds, pod to pod.
                    { name: 'POD_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } },
                    { name: 'PROVISIONER_ADVERTISE_URL', value: `http://$(POD_IP):${PORT}` },
                    { name: 'PROVISIONER_PUBLIC_URL', value: pulumi.interpolate`https://${args.host}` },
                    // Engine work dirs on the mounted volume: the root filesystem is read-only.
                    { name: 'PROVISIONER_DATA_DIR', value: PROVISIONER_DATA_DIR },
                    {
                      name: 'DATABASE_URL',
                      valueFrom: { secretKeyRef: { name: args.databaseSecret.name, key: args.databaseSecret.key } },
                    },
                    {
                      name: 'PROVISIONER_ENCRYPTION_KEY',
                      valueFrom: { secretKeyRef: { name: `${NAME}-secrets`, key: 'encryption-key' } },
                    },
                    {
                      name: 'PROVISIONER_REQUEST_SIGNING_KEY',
                      valueFrom: { secretKeyRef: { name: `${NAME}-secrets`, key: 'request-signing-key' } },
                    },
                    {
                      name: 'PULUMI_CONFIG_PASSPHRASE',
                      valueFrom: { secretKeyRef: { name: `${NAME}-secrets`, key: 'pulumi-passphrase' } },
                    },
                  ],
                  resources: { requests: { cpu: '250m', memory: '512Mi' }, limits: { cpu: '2', memory: '2Gi' } },
                  securityContext: restrictedContainerSecurityContext(),
                  readinessProbe: { httpGet: { path: '/readyz', port: 'http' }, periodSeconds: 10 },
                  livenessProbe: { httpGet: { path: '/healthz', port: 'http' }, periodSeconds: 20 },
                  volumeMounts: [
                    { name: 'tmp', mountPath: '/tmp' },
                    { name: 'engine', mountPath: PROVISIONER_DATA_DIR },
                  ],
                },
              ],
              volumes: [
                { name: 'tmp', emptyDir: {} },
                { name: 'engine', emptyDir: { sizeLimit: '10Gi' } },
              ],
            },
          },
        },
      },
      { ...child, dependsOn: [account, secrets] },
    );

    new k8s.core.v1.Service(
      `${name}-service`,
      {
        metadata,
        spec: {
          type: 'ClusterIP',
          selector: { 'app.kubernetes.io/name': NAME },
          ports: [{ name: 'http', port: 80, targetPort: 'http', protocol: 'TCP' }],
        },
      },
      child,
    );

    new k8s.networking.v1.Ingress(
      `${name}-ingress`,
      {
        metadata: {
          ...metadata,
          annotations: {
            'cert-manager.io/cluster-issuer': args.clusterIssuer,
            // Tunnels are long-lived WebSockets.
            'nginx.ingress.kubernetes.io/proxy-read-timeout': '3600',
            'nginx.ingress.kubernetes.io/proxy-send-timeout': '3600',
          },
        },
        spec: {
          ingressClassName: 'nginx',
          tls: [{ hosts: [args.host], secretName: `${NAME}-tls` }],
          rules: [
            {
              host: args.host,
              http: {
                paths: [
                  { path: '/', pathType: 'Prefix', backend: { service: { name: NAME, port: { name: 'http' } } } },
                ],
              },
            },
          ],
        },
      },
      child,
    );

    this.serviceAccountName = pulumi.output(NAME);
    this.registerOutputs({ kubeconfig: this.kubeconfig, serviceAccountName: this.serviceAccountName });
  }
}

export function serviceAccountKubeconfig(cluster: string, server: string, caBase64: string, token: string): string {
  return JSON.stringify(
    {
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: cluster, cluster: { server, 'certificate-authority-data': caBase64 } }],
      users: [{ name: `${cluster}-provisioner`, user: { token } }],
      contexts: [{ name: cluster, context: { cluster, user: `${cluster}-provisioner` } }],
      'current-context': cluster,
    },
    null,
    2,
  );
}
