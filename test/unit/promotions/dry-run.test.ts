/**
 * A promotion's dry run, the parts without a cluster: the Source Server's preview classification
 * (runtime/agents/source-server/diff.ts appliedFields, previewResources: what an apply of the
 * manifests at a revision changes in what runs, and which of it the Git change does not cause),
 * the policy's check (protocol changesOutsideTemplate), the preview bounded into the Promotion's
 * status (gitops-operator/dry-run.ts), the template's change (engine.ts templateChanges) and the
 * event reporter's summary of it within its budget.
 */
import t from 'tap';
import { appliedFields, manifestsByKey, previewResources } from '../../../runtime/agents/source-server/diff.ts';
import { boundPreview, scratchBranch } from '../../../runtime/agents/gitops-operator/dry-run.ts';
import { templateChanges } from '../../../runtime/agents/gitops-operator/engine.ts';
import { summarize, MAX_DRY_RUN_SUMMARY_BYTES } from '../../../runtime/agents/event-reporter/items.ts';
import {
  changesOutsideTemplate,
  MAX_DRY_RUN_FIELDS,
  MAX_DRY_RUN_RESOURCES,
  type Promotion,
  type PromotionTemplate,
  type StepDryRun,
} from '../../../runtime/protocol/promotions.ts';
import type { ApplicationPreview } from '../../../runtime/protocol/sources.ts';

type Obj = Record<string, unknown>;

const deployment = (image: string, replicas = 2): Obj => ({
  apiVersion: 'apps/v1',
  kind: 'Deployment',
  metadata: { name: 'web', namespace: 'shop-prod' },
  spec: { replicas, template: { spec: { containers: [{ name: 'web', image }] } } },
});
const configMap = (data: Obj): Obj => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name: 'settings', namespace: 'shop-prod' },
  data,
});
const live = (obj: Obj, extra: (o: Obj) => void = () => undefined): Obj => {
  const copy = structuredClone(obj);
  // What the API server and controllers add: never a change.
  (copy.metadata as Obj).uid = 'u-1';
  (copy.metadata as Obj).annotations = { 'deployment.kubernetes.io/revision': '3' };
  copy.status = { readyReplicas: 2 };
  if (copy.kind === 'Deployment') {
    const c = ((copy.spec as Obj).template as { spec: { containers: Obj[] } }).spec.containers[0]!;
    c.imagePullPolicy = 'IfNotPresent';
    c.terminationMessagePath = '/dev/termination-log';
    (copy.spec as Obj).progressDeadlineSeconds = 600;
  }
  extra(copy);
  return copy;
};
const byKey = (...objs: Obj[]) => manifestsByKey(objs.map((o) => JSON.stringify(o)));

void t.test('appliedFields: only the fields the manifests set, list items by name', async (t) => {
  t.same(appliedFields(live(deployment('nginx:1.25')), deployment('nginx:1.25')), [], 'defaults are not changes');
  t.same(
    appliedFields(live(deployment('nginx:1.25')), deployment('nginx:1.27')),
    ['spec.template.spec.containers[name=web].image'],
    'the image, by container name',
  );
  const two = deployment('nginx:1.27');
  ((two.spec as Obj).template as { spec: { containers: Obj[] } }).spec.containers.push({ name: 'sidecar', image: 'x' });
  t.same(
    appliedFields(live(deployment('nginx:1.27')), two),
    ['spec.template.spec.containers[name=sidecar]'],
    'a container added is named once',
  );
  t.same(appliedFields({ data: { a: '1' } }, { data: { a: '1', b: '2' } }), ['data.b'], 'a field missing live');
});

void t.test('previewResources: each change marked when the Git change does not cause it', async (t) => {
  const current = byKey(deployment('nginx:1.25'), configMap({ color: 'blue' }));
  const after = byKey(deployment('nginx:1.27'), configMap({ color: 'blue' }));
  const running = byKey(live(deployment('nginx:1.25')), live(configMap({ color: 'blue' })));
  t.same(
    previewResources(running, current, after).map((r) => [r.kind, r.action, r.fields, r.notFromChange]),
    [['Deployment', 'modified', ['spec.template.spec.containers[name=web].image'], undefined]],
    'in sync: only the image, from the change',
  );

  const drifted = byKey(
    live(deployment('nginx:1.25', 5)),
    live(configMap({ color: 'red' })),
    live({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'extra', namespace: 'shop-prod' } }),
  );
  const found = previewResources(drifted, current, after);
  t.same(
    found.map((r) => [r.kind, r.name, r.action, r.fields, r.notFromChange]),
    [
      ['ConfigMap', 'settings', 'modified', ['data.color'], ['data.color']],
      ['Secret', 'extra', 'removed', [], ['.']],
      [
        'Deployment',
        'web',
        'modified',
        ['spec.replicas', 'spec.template.spec.containers[name=web].image'],
        ['spec.replicas'],
      ],
    ],
    'drift: the hand-edited fields and a resource only live are not from the change; the image is',
  );

  const added = byKey(deployment('nginx:1.27'), configMap({ color: 'blue' }), {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: 'web', namespace: 'shop-prod' },
    spec: { ports: [{ name: 'http', port: 80 }] },
  });
  t.same(
    previewResources(running, current, added)
      .filter((r) => r.kind === 'Service')
      .map((r) => [r.action, r.notFromChange]),
    [['added', undefined]],
    'a resource the change adds',
  );
  t.same(
    previewResources(byKey(live(deployment('nginx:1.25'))), current, after)
      .filter((r) => r.kind === 'ConfigMap')
      .map((r) => [r.action, r.notFromChange]),
    [['added', ['.']]],
    'a resource deleted live but in Git already: not from the change',
  );
});

void t.test('the policy check names each resource and field outside the template', async (t) => {
  const d: StepDryRun = {
    at: '2026-11-30T07:00:00Z',
    commit: 'a'.repeat(40),
    files: ['shop/prod/release.yaml'],
    applications: [
      {
        application: 'shop-prod-web',
        resources: [
          {
            kind: 'ConfigMap',
            namespace: 'shop-prod',
            name: 'shop-release',
            action: 'modified',
            fields: ['data.image'],
          },
        ],
      },
      {
        application: 'shop-prod-api',
        resources: [
          {
            kind: 'ConfigMap',
            namespace: 'shop-prod',
            name: 'shop-api',
            action: 'modified',
            fields: ['data.environment'],
            notFromChange: ['data.environment'],
          },
          {
            kind: 'Secret',
            namespace: 'shop-prod',
            name: 'extra',
            action: 'removed',
            fields: [],
            notFromChange: ['.'],
          },
        ],
      },
    ],
  };
  t.same(changesOutsideTemplate(d), [
    'shop-prod-api: ConfigMap shop-prod/shop-api data.environment',
    'shop-prod-api: Secret shop-prod/extra only in the cluster',
  ]);
  t.same(changesOutsideTemplate({ ...d, applications: [d.applications[0]!] }), [], 'the template’s change only');
});

void t.test('a preview bounded into the status; the scratch branch is the promotion’s own', async (t) => {
  const preview: ApplicationPreview = {
    application: { namespace: 'argocd', name: 'shop-prod-web' },
    revision: 'b'.repeat(40),
    current: 'c'.repeat(40),
    truncated: false,
    resources: Array.from({ length: MAX_DRY_RUN_RESOURCES + 5 }, (_, i) => ({
      group: '',
      kind: 'ConfigMap',
      namespace: 'shop-prod',
      name: `cm-${i}`,
      action: 'modified' as const,
      fields: Array.from({ length: MAX_DRY_RUN_FIELDS + 3 }, (_, k) => `data.k${k}`),
    })),
  };
  const b = boundPreview('shop-prod-web', preview);
  t.equal(b.resources.length, MAX_DRY_RUN_RESOURCES);
  t.equal(b.moreResources, 5, 'the resources left out are counted');
  t.equal(b.resources[0]!.fields.length, MAX_DRY_RUN_FIELDS);
  t.equal(b.resources[0]!.moreFields, 3, 'and the fields');
  t.equal(b.current, 'c'.repeat(40));
  t.equal(
    scratchBranch({ kind: 'PromotionPreview', metadata: { name: 'shop-abc' } } as Promotion, 'prod'),
    'promotions/shop-abc/dry-run/prod',
    "a preview's scratch branch: its own, one per environment",
  );
});

void t.test('templateChanges: the template’s fields copied, only the files that change', async (t) => {
  const template = {
    spec: {
      version: { file: 'release.yaml', jsonPath: '$.data.version' },
      files: [{ path: 'release.yaml', jsonPaths: ['$.data.version', '$.data.image'] }],
    },
  } as PromotionTemplate;
  const files: Record<string, string> = {
    'shop/dev/release.yaml': 'data:\n  version: "1.5.0"\n  image: nginx:1.27.5\n',
    'shop/prod/release.yaml': '# prod\ndata:\n  version: "1.2.0"\n  image: nginx:1.27.2\n',
  };
  const read = (p: string) => files[p];
  t.same(templateChanges(template, 'shop/dev', 'shop/prod', read, read), [
    { path: 'shop/prod/release.yaml', content: '# prod\ndata:\n  version: "1.5.0"\n  image: nginx:1.27.5\n' },
  ]);
  t.same(templateChanges(template, 'shop/dev', 'shop/dev', read, read), [], 'nothing when it holds them');
  t.throws(
    () => templateChanges(template, 'shop/dev', 'shop/qa', read, read),
    /shop\/qa\/release\.yaml does not exist/,
  );
});

void t.test('the event reporter reports a preview (kind PromotionPreview) within its budget', async (t) => {
  const resource = (i: number) => ({
    kind: 'ConfigMap',
    namespace: 'shop-prod',
    name: `cm-${i}`,
    action: 'modified',
    fields: Array.from({ length: 10 }, (_, k) => `data.${'k'.repeat(15)}${k}`),
  });
  const step = (environment: string) => ({
    environment,
    phase: 'Succeeded',
    dryRun: {
      at: '2026-11-30T07:00:00Z',
      files: [`shop/${environment}/release.yaml`],
      applications: Array.from({ length: 5 }, (_, a) => ({
        application: `app-${a}`,
        resources: Array.from({ length: 40 }, (_, i) => resource(i)),
      })),
    },
  });
  const s = summarize('PromotionPreview', {
    kind: 'PromotionPreview',
    metadata: { name: 'p' },
    spec: { product: 'shop', requestedBy: 'key-9' },
    status: { phase: 'Succeeded', release: '1.5.0', steps: [step('staging'), step('prod')] },
  }) as { product?: string; release?: string; requestedBy?: string; steps: Array<{ dryRun: StepDryRun }> };
  t.match(s, { product: 'shop', release: '1.5.0', requestedBy: 'key-9' }, 'what it previews and who asked');
  t.notOk('dryRun' in s || 'rollback' in s, 'nothing of a real promotion');
  const results = s.steps.map((x) => x.dryRun);
  t.ok(Buffer.byteLength(JSON.stringify(results)) <= MAX_DRY_RUN_SUMMARY_BYTES, 'within the budget');
  t.equal(results[0]!.applications[0]!.resources.length, MAX_DRY_RUN_RESOURCES, 'the first step keeps its resources');
  const last = results[1]!.applications.at(-1)!;
  t.equal(last.resources.length, 0, 'the last step’s last application gives them up first');
  t.equal(last.moreResources, 40, 'counted');
  const refused = summarize('Promotion', {
    metadata: { name: 'q' },
    spec: { product: 'shop', dryRun: true },
    status: { phase: 'Failed', message: 'spec.dryRun is not supported on a Promotion' },
  }) as { dryRun?: boolean; phase?: string };
  t.match(refused, { dryRun: true, phase: 'Failed' }, 'a Promotion of the refused former form says so');
});
