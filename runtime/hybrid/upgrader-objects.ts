/**
 * The in-cluster upgrader's objects in a hybrid runtime's install bundle (upgrader.ts says what it
 * does and may do). Apart from upgrader.ts so that bundle.ts, which adds them, and upgrader.ts,
 * which reads bundles, do not import each other. Pure: no I/O.
 */
import {
  AGENT_PORT,
  CREDENTIAL_KEYS,
  CREDENTIALS_SECRET,
  RUNTIME_NAMESPACE,
  VERSIONS_CONFIGMAP,
} from '../component/agents.ts';
import { restrictedContainerSecurityContext, restrictedPodSecurityContext } from '../component/pod-security.ts';
import { UPGRADER } from '../protocol/upgrade.ts';

/**
 * The upgrader's account, its rights (by name: the agents' Deployments and the versions ConfigMap)
 * and its Deployment, in the runtime's namespace (default `hosted-runtime`).
 */
export function upgraderObjects(
  r: { runtimeId: string; namespace?: string },
  image: string,
  deployments: readonly string[],
): unknown[] {
  const namespace = r.namespace ?? RUNTIME_NAMESPACE;
  const labels = { 'app.kubernetes.io/name': UPGRADER };
  const metadata = { name: UPGRADER, namespace, labels };
  const fromCredentials = (name: string, key: string) => ({
    name,
    valueFrom: { secretKeyRef: { name: CREDENTIALS_SECRET, key } },
  });
  return [
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata, automountServiceAccountToken: true },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata,
      rules: [
        {
          apiGroups: ['apps'],
          resources: ['deployments'],
          resourceNames: [...new Set([...deployments, UPGRADER])].sort(),
          verbs: ['get', 'patch'],
        },
        { apiGroups: [''], resources: ['configmaps'], resourceNames: [VERSIONS_CONFIGMAP], verbs: ['get', 'patch'] },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata,
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: UPGRADER },
      subjects: [{ kind: 'ServiceAccount', name: UPGRADER, namespace }],
    },
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata,
      spec: {
        // One at a time: two would apply the same upgrade twice.
        replicas: 1,
        selector: { matchLabels: labels },
        strategy: { type: 'Recreate' },
        template: {
          metadata: { labels },
          spec: {
            serviceAccountName: UPGRADER,
            automountServiceAccountToken: true,
            securityContext: restrictedPodSecurityContext(),
            containers: [
              {
                name: UPGRADER,
                image,
                imagePullPolicy: 'IfNotPresent',
                ports: [{ name: 'http', containerPort: AGENT_PORT, protocol: 'TCP' }],
                env: [
                  { name: 'PORT', value: String(AGENT_PORT) },
                  { name: 'RUNTIME_ID', value: r.runtimeId },
                  fromCredentials('RUNTIME_TOKEN', CREDENTIAL_KEYS.token),
                  fromCredentials('CONTROL_PLANE_URL', CREDENTIAL_KEYS.controlPlaneUrl),
                  { name: 'POD_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
                ],
                resources: { requests: { cpu: '10m', memory: '64Mi' }, limits: { cpu: '200m', memory: '192Mi' } },
                securityContext: restrictedContainerSecurityContext(),
                readinessProbe: { httpGet: { path: '/readyz', port: 'http' }, periodSeconds: 10 },
                livenessProbe: { httpGet: { path: '/healthz', port: 'http' }, periodSeconds: 20, failureThreshold: 3 },
                volumeMounts: [{ name: 'tmp', mountPath: '/tmp' }],
              },
            ],
            volumes: [{ name: 'tmp', emptyDir: { sizeLimit: '16Mi' } }],
          },
        },
      },
    },
  ];
}
