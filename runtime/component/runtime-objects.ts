/**
 * The runtime's own objects besides the agents, as plain data: its namespace and the versions
 * ConfigMap. Shared by the GitOpsRuntime component, the offline render and the hybrid install
 * bundle. Nothing here loads Pulumi: the types only.
 */
import type * as k8s from '@pulumi/kubernetes';
import type { RuntimeVersion } from '../versions.ts';
import { RUNTIME_INFO_KEY, RUNTIME_NAMESPACE, VERSIONS_CONFIGMAP } from './agents.ts';

/** The agents' namespace inside the vcluster (Pod Security `restricted` enforced). */
export function runtimeNamespace(): k8s.types.input.core.v1.Namespace {
  return {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: {
      name: RUNTIME_NAMESPACE,
      labels: {
        'app.kubernetes.io/part-of': 'hosted-runtime',
        'pod-security.kubernetes.io/enforce': 'restricted',
        'pod-security.kubernetes.io/enforce-version': 'latest',
      },
    },
  };
}

/** The ConfigMap recording the runtime version and every component version. */
export function versionsConfigMap(entry: RuntimeVersion): k8s.types.input.core.v1.ConfigMap {
  const pins = entry.components;
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: VERSIONS_CONFIGMAP,
      namespace: RUNTIME_NAMESPACE,
      labels: { 'app.kubernetes.io/part-of': 'hosted-runtime' },
    },
    data: {
      runtimeVersion: entry.version,
      releaseDate: entry.releaseDate,
      channel: entry.channel,
      ...pins,
      [RUNTIME_INFO_KEY]: JSON.stringify({ runtimeVersion: entry.version, components: pins }),
    },
  };
}
