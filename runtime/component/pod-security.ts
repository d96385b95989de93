/**
 * Pod and container security contexts that satisfy the Pod Security `restricted` profile:
 * non-root, no privilege escalation, every capability dropped, RuntimeDefault seccomp, read-only
 * root filesystem (writable scratch space comes from an emptyDir at /tmp).
 */
import type * as k8s from '@pulumi/kubernetes';

/** UID/GID of the distroless "nonroot" user the agent images run as. */
export const NONROOT_ID = 65532;

export function restrictedPodSecurityContext(): k8s.types.input.core.v1.PodSecurityContext {
  return {
    runAsNonRoot: true,
    runAsUser: NONROOT_ID,
    runAsGroup: NONROOT_ID,
    fsGroup: NONROOT_ID,
    seccompProfile: { type: 'RuntimeDefault' },
  };
}

export function restrictedContainerSecurityContext(): k8s.types.input.core.v1.SecurityContext {
  return {
    allowPrivilegeEscalation: false,
    privileged: false,
    readOnlyRootFilesystem: true,
    runAsNonRoot: true,
    capabilities: { drop: ['ALL'] },
    seccompProfile: { type: 'RuntimeDefault' },
  };
}
