/**
 * A real Argo Workflows controller for the end-to-end tier: `workflow-controller` v3.7.2, built
 * from its Go module by scripts/argo-workflows.sh (its bin folder HRT_ARGO_WORKFLOWS_BIN, found as
 * harness/argo-controller.ts says), against an API server with the CRDs of the real
 * argo-workflows chart (rendered by the chart tools' helm from the chart mirror).
 *
 * Pods do not run here: KWOK ends each Workflow pod. `WORKFLOW_POD_STAGE` is the KWOK Stage that
 * does it, in place of a kubelet and Argo's executor: once KWOK has made a pod of a Workflow
 * (label `workflows.argoproj.io/workflow`) Running, the stage ends it — every container and init
 * container terminated, `main` with the exit code the pod's annotation `WORKFLOW_EXIT_CODE`
 * names (default 0) and the message of `WORKFLOW_EXIT_MESSAGE`, the pod Succeeded (0) or Failed;
 * a pod annotated `WORKFLOW_HOLD` is left Running.
 * The test decides the outcome by setting those annotations on a template's `metadata` (Argo
 * copies a template's metadata onto its pod).
 *
 * What the controller needs to finish a node whose pod ends without an executor (checked in the
 * v3.7.2 source, workflow/controller/operator.go and taskresult.go): a pod node starts with
 * `taskResultSynced: true`, and only a WorkflowTaskResult labelled
 * `workflows.argoproj.io/report-outputs-completed: "false"` (which the executor's wait container
 * writes) marks it incomplete; with no executor no task result exists, so the pod's phase and
 * container statuses alone decide the node. The `wait` container must be terminated too: while it
 * is running the controller keeps the node's phase ("wait container is not yet terminated"). A
 * failed node's message is the main container's `<reason> (exit code N): <message>`.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ManagedProcess } from '../../../sandbox/processes.ts';
import type { KubectlRun } from '../../helpers/kubectl.ts';
import {
  argoChartCrds,
  argoControllerUnavailable,
  startArgoController,
  type ArgoController,
} from './argo-controller.ts';
import { refuseInEarlyPhase } from './phase.ts';

/** The controller's version (scripts/argo-workflows.sh builds it). */
export const ARGO_WORKFLOWS_VERSION = 'v3.7.2';

/** Pod annotation: the exit code KWOK gives the `main` container (default 0: the pod Succeeded). */
export const WORKFLOW_EXIT_CODE = 'e2e.hosted-runtimes.test/exit-code';
/** Pod annotation: the `main` container's termination message. */
export const WORKFLOW_EXIT_MESSAGE = 'e2e.hosted-runtimes.test/exit-message';
/** Pod annotation: KWOK leaves the pod Running (its Workflow runs until something stops it). */
export const WORKFLOW_HOLD = 'e2e.hosted-runtimes.test/hold';

/** The KWOK Stage that ends every Workflow pod KWOK made Running (module comment). */
export const WORKFLOW_POD_STAGE = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-complete-argo-workflow
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    - key: '.metadata.labels["workflows.argoproj.io/workflow"]'
      operator: 'Exists'
    - key: '.metadata.annotations["${WORKFLOW_HOLD}"]'
      operator: 'DoesNotExist'
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $code := "0" }}
      {{ $message := "" }}
      {{ with .metadata.annotations }}
      {{ with index . "${WORKFLOW_EXIT_CODE}" }}{{ $code = . }}{{ end }}
      {{ with index . "${WORKFLOW_EXIT_MESSAGE}" }}{{ $message = . }}{{ end }}
      {{ end }}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            {{ if and (eq .name "main") (ne $code "0") }}
            exitCode: {{ $code }}
            reason: Error
            {{ with $message }}message: {{ . | Quote }}{{ end }}
            {{ else }}
            exitCode: 0
            reason: Completed
            {{ end }}
            finishedAt: {{ $now | Quote }}
            startedAt: {{ $now | Quote }}
      {{ end }}
      initContainerStatuses:
      {{ range .spec.initContainers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        state:
          terminated:
            exitCode: 0
            finishedAt: {{ $now | Quote }}
            reason: Completed
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: {{ if eq $code "0" }}Succeeded{{ else }}Failed{{ end }}
`;

const WORKFLOWS: ArgoController = {
  title: 'the Argo Workflows controller',
  version: ARGO_WORKFLOWS_VERSION,
  chart: 'argo-workflows',
  binary: 'workflow-controller',
};

/** Why a real workflow controller cannot run here (no build, no chart, no helm), or undefined. */
export const argoWorkflowsUnavailable = (): string | undefined => argoControllerUnavailable(WORKFLOWS);

/** The chart's CRDs, as its `crds.install` renders them (helm template of the real chart). */
export const argoWorkflowsCrds = (): ReturnType<typeof argoChartCrds> => argoChartCrds(WORKFLOWS);

export interface WorkflowControllerOptions {
  kubeconfigFile: string;
  /** The namespace it runs in and manages (`--namespaced`), where its ConfigMap is written. */
  namespace: string;
  /** Folder for its ConfigMap file and log. */
  dir: string;
  kubectl: (args: string[]) => Promise<KubectlRun>;
}

/**
 * Installs nothing but its ConfigMap (metrics off: no port opened) and starts the controller as a
 * process, namespaced, without leader election. Stopped in `t.teardown`.
 */
export async function startWorkflowController(
  t: { teardown(fn: () => unknown): void },
  o: WorkflowControllerOptions,
): Promise<ManagedProcess> {
  refuseInEarlyPhase('startWorkflowController (the Argo Workflows controller)');
  const configMap = join(o.dir, 'workflow-controller-configmap.json');
  await writeFile(
    configMap,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'workflow-controller-configmap', namespace: o.namespace },
      data: { metricsConfig: 'enabled: false\n', telemetryConfig: 'enabled: false\n' },
    }),
  );
  const applied = await o.kubectl(['apply', '-f', configMap]);
  if (applied.code !== 0) throw new Error(`the workflow controller's ConfigMap: ${applied.output}`);
  return startArgoController(t, WORKFLOWS, {
    args: [
      '--kubeconfig',
      o.kubeconfigFile,
      '--namespace',
      o.namespace,
      '--namespaced',
      '--managed-namespace',
      o.namespace,
      // Nothing pulls it: KWOK runs the pods (WORKFLOW_POD_STAGE).
      '--executor-image',
      `argoproj/argoexec:${ARGO_WORKFLOWS_VERSION}`,
      '--workflow-workers',
      '4',
    ],
    dir: o.dir,
    env: { LEADER_ELECTION_DISABLE: 'true' },
  });
}
