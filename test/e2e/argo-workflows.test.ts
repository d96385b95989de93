/**
 * A real Argo Workflows controller (harness/argo-workflows.ts): `workflow-controller` v3.7.2 built
 * from its Go module, against a real kube-apiserver with the controller-manager, scheduler and KWOK
 * and the CRDs of the real argo-workflows chart. Pods do not run here: KWOK ends each Workflow pod
 * Succeeded, or Failed with the exit code and message the test puts in the template's pod
 * annotations (WORKFLOW_POD_STAGE) — in place of a kubelet and Argo's executor.
 *
 * The Workflows are the shape the GitOps Operator creates for a promotion's pre- and post-actions
 * (runtime/agents/gitops-operator/engine.ts): `workflowTemplateRef` to the customer's
 * WorkflowTemplate, with the promotion's parameters. A template whose one step passes makes the
 * Workflow Succeeded; after the template is changed to fail, the next Workflow is Failed with the
 * step's message, which is what the operator shows as the action's reason.
 */
import t from 'tap';
import { backgroundBuild } from './harness/background-build.ts';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { argoApiServerUnavailable, ARGO_GROUP, ARGO_VERSION, startArgoApiServer } from './harness/argo.ts';
import {
  ARGO_WORKFLOWS_VERSION,
  argoWorkflowsCrds,
  argoWorkflowsUnavailable,
  startWorkflowController,
  WORKFLOW_EXIT_CODE,
  WORKFLOW_EXIT_MESSAGE,
  WORKFLOW_POD_STAGE,
} from './harness/argo-workflows.ts';
import { kubectlRunner } from '../helpers/kubectl.ts';
import { until } from '../../sandbox/processes.ts';

// In scripts/test.sh's late phase this build may still be compiling: wait for it.
await backgroundBuild(t, 'argo-workflows');
t.setTimeout(10 * 60_000);

const unavailable = argoApiServerUnavailable() ?? argoWorkflowsUnavailable();
if (unavailable) {
  if (process.env.CI === 'true') t.fail(`a real Argo Workflows controller cannot run: ${unavailable}`);
  else t.plan(0, unavailable);
} else {
  const started = Date.now();
  const cluster = await startArgoApiServer(t, {
    name: 'workflows',
    crds: [],
    pods: { extraKwokStages: WORKFLOW_POD_STAGE },
  });
  const kubectl = kubectlRunner(process.env.HRT_TOOLCHAIN_BIN ?? join(cluster.dir, 'missing'), cluster.kubeconfigFile);
  const ns = 'promotions';
  const crds = await argoWorkflowsCrds();
  const crdFile = join(cluster.dir, 'argo-workflows-crds.yaml');
  await writeFile(crdFile, crds.yaml);
  for (const args of [
    ['create', '-f', crdFile],
    ['wait', '--for=condition=Established', '--timeout=120s', ...crds.names.map((n) => `crd/${n}`)],
    ['create', 'namespace', ns],
  ]) {
    const r = await kubectl(args);
    if (r.code !== 0) throw new Error(`kubectl ${args.join(' ')}: ${r.output}`);
  }
  t.comment(`argo-workflows chart CRDs from ${crds.chart}: ${crds.names.join(', ')}`);
  const controller = await startWorkflowController(t, {
    kubeconfigFile: cluster.kubeconfigFile,
    namespace: ns,
    dir: cluster.dir,
    kubectl,
  });
  t.comment(
    `timing: API server, KWOK, the chart's CRDs and the controller started in ${((Date.now() - started) / 1000).toFixed(1)} s`,
  );

  const objects = cluster.objects;
  const ref = { group: ARGO_GROUP, version: ARGO_VERSION, namespace: ns };
  type Workflow = {
    metadata: { name: string };
    status?: {
      phase?: string;
      message?: string;
      storedWorkflowTemplateSpec?: unknown;
      nodes?: Record<string, { type: string; phase: string; message?: string; outputs?: { exitCode?: string } }>;
    };
  };
  /** The customer's WorkflowTemplate: one container step, whose pod ends as `outcome` says. */
  const template = (outcome?: { exitCode: number; message: string }) => ({
    apiVersion: `${ARGO_GROUP}/${ARGO_VERSION}`,
    kind: 'WorkflowTemplate',
    metadata: { name: 'smoke-tests', namespace: ns },
    spec: {
      entrypoint: 'smoke',
      arguments: {
        parameters: ['product', 'environment', 'release', 'promotion'].map((name) => ({ name, value: '' })),
      },
      templates: [
        {
          name: 'smoke',
          ...(outcome
            ? {
                metadata: {
                  annotations: {
                    [WORKFLOW_EXIT_CODE]: String(outcome.exitCode),
                    [WORKFLOW_EXIT_MESSAGE]: outcome.message,
                  },
                },
              }
            : {}),
          container: {
            image: 'registry.example.test/smoke-tests:1.0',
            command: ['smoke', '--env', '{{workflow.parameters.environment}}'],
          },
        },
      ],
    },
  });
  /** A Workflow as the operator creates one for a pre-action. */
  const submit = async (name: string) =>
    objects.createNamespacedCustomObject({
      ...ref,
      plural: 'workflows',
      body: {
        apiVersion: `${ARGO_GROUP}/${ARGO_VERSION}`,
        kind: 'Workflow',
        metadata: { name, namespace: ns, labels: { 'gitops.example.test/environment': 'prod' } },
        spec: {
          workflowTemplateRef: { name: 'smoke-tests' },
          arguments: {
            parameters: [
              { name: 'product', value: 'shop' },
              { name: 'environment', value: 'prod' },
              { name: 'release', value: '1.1.0' },
              { name: 'promotion', value: 'shop-1.1.0' },
            ],
          },
        },
      },
    });
  const finished = (name: string) =>
    until(`Workflow ${name} finished`, 180_000, async () => {
      if (!controller.running()) throw new Error(`the workflow controller exited: ${await controller.tail(20)}`);
      const wf = (await objects.getNamespacedCustomObject({ ...ref, plural: 'workflows', name })) as Workflow;
      return wf.status?.phase && !['Pending', 'Running'].includes(wf.status.phase) ? wf : undefined;
    });
  const podOf = async (name: string) => {
    const r = await kubectl([
      'get',
      'pods',
      '-n',
      ns,
      '-l',
      `workflows.argoproj.io/workflow=${name}`,
      '-o',
      'jsonpath={range .items[*]}{.status.phase} {range .status.containerStatuses[*]}{.name}={.state.terminated.exitCode},{end}{"\\n"}{end}',
    ]);
    return r.stdout.trim();
  };

  await t.test('a Workflow whose pod KWOK ends with exit code 0 is Succeeded', async (t) => {
    await objects.createNamespacedCustomObject({ ...ref, plural: 'workflowtemplates', body: template() });
    const t0 = Date.now();
    await submit('promotion-pre-prod-1');
    const wf = await finished('promotion-pre-prod-1');
    t.comment(`timing: Workflow submitted → Succeeded in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    t.equal(wf.status?.phase, 'Succeeded', 'the controller marks the Workflow Succeeded');
    const pods = Object.values(wf.status?.nodes ?? {}).filter((n) => n.type === 'Pod');
    t.equal(pods.length, 1, 'one pod node: the template’s step');
    t.equal(pods[0]?.phase, 'Succeeded', 'its node Succeeded');
    t.equal(pods[0]?.outputs?.exitCode, '0', 'with the exit code KWOK gave the main container');
    t.match(await podOf('promotion-pre-prod-1'), /^Succeeded .*main=0/, 'the pod KWOK ended: Succeeded, main exited 0');
  });

  await t.test(
    'after the template is changed to fail, the next Workflow is Failed with the step’s message',
    async (t) => {
      const current = (await objects.getNamespacedCustomObject({
        ...ref,
        plural: 'workflowtemplates',
        name: 'smoke-tests',
      })) as { metadata: { resourceVersion: string } };
      const failing = template({ exitCode: 3, message: 'smoke tests failed: 2 of 14 checks' });
      await objects.replaceNamespacedCustomObject({
        ...ref,
        plural: 'workflowtemplates',
        name: 'smoke-tests',
        body: { ...failing, metadata: { ...failing.metadata, resourceVersion: current.metadata.resourceVersion } },
      });
      // The controller reads WorkflowTemplates from its informer's cache, which sees the change a
      // moment after the API server has it: a Workflow submitted within that moment runs the old
      // template (the one it stores in status.storedWorkflowTemplateSpec). Submit again until one
      // ran the changed template; that one must fail.
      let name = 'promotion-pre-prod-2';
      let wf: Workflow | undefined;
      for (let attempt = 1; ; attempt++) {
        await submit(name);
        wf = await finished(name);
        if (JSON.stringify(wf.status?.storedWorkflowTemplateSpec ?? {}).includes('smoke tests failed')) break;
        t.comment(`${name} ran the template as it was before the change (the controller's cache); submitting again`);
        t.ok(attempt < 10, 'the controller runs the changed template within ten Workflows');
        if (attempt >= 10) return;
        name = `promotion-pre-prod-2-${attempt}`;
      }
      t.equal(wf.status?.phase, 'Failed', 'the controller marks the Workflow Failed');
      const pods = Object.values(wf.status?.nodes ?? {}).filter((n) => n.type === 'Pod');
      t.equal(pods[0]?.phase, 'Failed', 'its pod node Failed');
      t.equal(
        pods[0]?.message,
        'main: Error (exit code 3): smoke tests failed: 2 of 14 checks',
        'the node’s message is the main container’s exit code and message',
      );
      t.match(wf.status?.message, /smoke tests failed: 2 of 14 checks/, 'the Workflow’s message carries it');
      t.comment(`Workflow message: ${wf.status?.message}`);
      t.match(await podOf(name), /^Failed .*main=3/, 'the pod KWOK ended: Failed, main exited 3');
      const first = (await objects.getNamespacedCustomObject({
        ...ref,
        plural: 'workflows',
        name: 'promotion-pre-prod-1',
      })) as Workflow;
      t.equal(first.status?.phase, 'Succeeded', 'the earlier Workflow stays Succeeded');
    },
  );

  t.comment(`workflow controller ${ARGO_WORKFLOWS_VERSION}: ${controller.logFile}`);
}
