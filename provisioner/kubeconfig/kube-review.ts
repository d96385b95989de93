/** The Kubernetes review requests both probes ask: shared with the runtime (runtime/kube/kube-review.ts). */
export * from '../../runtime/kube/kube-review.ts';
