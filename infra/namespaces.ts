/**
 * The namespace a platform chart is installed into, owned by the program rather than by Helm:
 * Helm's `createNamespace` never deletes the namespace again, so `pulumi destroy` would leave it
 * behind.
 */
import * as k8s from '@pulumi/kubernetes';
import type * as pulumi from '@pulumi/pulumi';

export function chartNamespace(
  name: string,
  namespace: string,
  opts: pulumi.CustomResourceOptions,
): k8s.core.v1.Namespace {
  return new k8s.core.v1.Namespace(
    `${name}-namespace`,
    { metadata: { name: namespace, labels: { 'app.kubernetes.io/part-of': 'hosted-platform' } } },
    opts,
  );
}
