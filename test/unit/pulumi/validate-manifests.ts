/**
 * Validates the inputs of registered Kubernetes resources against the Kubernetes OpenAPI schemas
 * (kubernetes-models). Unknown kinds fail loudly so new object types cannot slip through.
 */
import { ConfigMap, LimitRange, Namespace, ResourceQuota, Secret, Service, ServiceAccount } from 'kubernetes-models/v1';
import { Deployment } from 'kubernetes-models/apps/v1';
import { Ingress, NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { ClusterRole, ClusterRoleBinding, Role, RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import { PriorityClass } from 'kubernetes-models/scheduling.k8s.io/v1';
import { CustomResourceDefinition } from 'kubernetes-models/apiextensions.k8s.io/v1';
import {
  ValidatingAdmissionPolicy,
  ValidatingAdmissionPolicyBinding,
} from 'kubernetes-models/admissionregistration.k8s.io/v1';
import type { Registered } from './harness.ts';

type Validatable = { validate(): void };
// Each model's constructor takes its own ModelData; `never` accepts them all.
const MODELS: Record<string, (data: never) => Validatable> = {
  'kubernetes:core/v1:Namespace': (d) => new Namespace(d),
  'kubernetes:core/v1:ResourceQuota': (d) => new ResourceQuota(d),
  'kubernetes:core/v1:LimitRange': (d) => new LimitRange(d),
  'kubernetes:core/v1:ConfigMap': (d) => new ConfigMap(d),
  'kubernetes:core/v1:Secret': (d) => new Secret(d),
  'kubernetes:core/v1:Service': (d) => new Service(d),
  'kubernetes:core/v1:ServiceAccount': (d) => new ServiceAccount(d),
  'kubernetes:apps/v1:Deployment': (d) => new Deployment(d),
  'kubernetes:networking.k8s.io/v1:NetworkPolicy': (d) => new NetworkPolicy(d),
  'kubernetes:networking.k8s.io/v1:Ingress': (d) => new Ingress(d),
  'kubernetes:rbac.authorization.k8s.io/v1:Role': (d) => new Role(d),
  'kubernetes:rbac.authorization.k8s.io/v1:RoleBinding': (d) => new RoleBinding(d),
  'kubernetes:rbac.authorization.k8s.io/v1:ClusterRole': (d) => new ClusterRole(d),
  'kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding': (d) => new ClusterRoleBinding(d),
  'kubernetes:scheduling.k8s.io/v1:PriorityClass': (d) => new PriorityClass(d),
  'kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition': (d) => new CustomResourceDefinition(d),
  'kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy': (d) => new ValidatingAdmissionPolicy(d),
  'kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding': (d) =>
    new ValidatingAdmissionPolicyBinding(d),
};

/** Plain Kubernetes objects a program creates (not Helm releases, custom resources, reads or components). */
export function plainObjects(resources: Registered[]): Registered[] {
  return resources.filter(
    (r) =>
      r.custom &&
      r.id === undefined &&
      r.type.startsWith('kubernetes:') &&
      !r.type.startsWith('kubernetes:helm.sh') &&
      r.type !== 'kubernetes:apiextensions.k8s.io:CustomResource' &&
      !r.type.startsWith('kubernetes:postgresql'),
  );
}

/** Returns `type name: message` for every object that fails validation. */
export function validateObjects(resources: Registered[]): string[] {
  const problems: string[] = [];
  for (const r of plainObjects(resources)) {
    const model = MODELS[r.type];
    if (!model) {
      problems.push(`${r.type} ${r.name}: no schema registered in the test`);
      continue;
    }
    try {
      model(r.inputs as never).validate();
    } catch (err) {
      problems.push(`${r.type} ${r.name}: ${(err as Error).message}`);
    }
  }
  return problems;
}
