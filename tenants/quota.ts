/**
 * ResourceQuota and LimitRange specs of a tenant namespace, from its plan.
 */
import type * as k8s from '@pulumi/kubernetes';
import type { Plan } from './plans.ts';

export function quotaSpec(plan: Plan): k8s.types.input.core.v1.ResourceQuotaSpec {
  return {
    hard: {
      'requests.cpu': plan.quota.cpu,
      'requests.memory': plan.quota.memory,
      'limits.cpu': plan.quota.limits.cpu,
      'limits.memory': plan.quota.limits.memory,
      pods: String(plan.quota.pods),
      'requests.storage': plan.quota.storage,
      persistentvolumeclaims: String(plan.quota.pvcs),
      // Tenants are reached through the platform ingress and the tunnel, never directly.
      'services.loadbalancers': '0',
      'services.nodeports': '0',
    },
  };
}

export function limitRangeSpec(plan: Plan): k8s.types.input.core.v1.LimitRangeSpec {
  return {
    limits: [
      {
        type: 'Container',
        default: { ...plan.container.default },
        defaultRequest: { ...plan.container.defaultRequest },
        max: { ...plan.container.max },
      },
      { type: 'PersistentVolumeClaim', max: { storage: plan.quota.storage } },
    ],
  };
}
