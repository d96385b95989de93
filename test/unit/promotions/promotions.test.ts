/**
 * The pure parts of promotions (runtime/protocol/promotions.ts, runtime/agents/gitops-operator):
 * a flow's steps in dependency order (a cycle, an unknown environment or the trigger as a step
 * refused, naming it); the JSON paths templates use; a field set in a YAML file with its comments
 * and layout kept; the policies that apply to a step; Promotion names that are DNS labels; the
 * CRDs valid and refusing what the operator cannot run; the operator's configuration; the reason a
 * step fails on a Degraded Application, naming the Rollout (test/e2e/argo-rollouts.test.ts has it
 * from a real Argo CD and Rollouts controller).
 */
import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CustomResourceDefinition } from 'kubernetes-models/apiextensions.k8s.io/v1';
import {
  orderSteps,
  parseJsonPath,
  policiesFor,
  sourceEnvironment,
  type Promotion,
  type PromotionPolicy,
} from '../../../runtime/protocol/promotions.ts';
import {
  degradedAt,
  degradedReason,
  getField,
  promotionName,
  proposalBranch,
  releaseText,
  setField,
} from '../../../runtime/agents/gitops-operator/engine.ts';
import { repoPath } from '../../../runtime/agents/gitops-operator/git.ts';
import { gitopsOperatorRbac, promotionCrds } from '../../../runtime/component/promotion-crds.ts';
import { loadOperatorConfig } from '../../../runtime/agents/gitops-operator/config.ts';
import { ConfigError } from '../../../runtime/agents/common/config.ts';

t.test('a flow’s steps in dependency order', async (t) => {
  const flow = {
    triggerEnvironment: 'dev',
    steps: [
      { environment: 'prod-eu', dependsOn: ['staging'] },
      { environment: 'staging' },
      { environment: 'prod-us', dependsOn: ['staging', 'prod-eu'] },
    ],
  };
  t.same(
    orderSteps(flow).map((s) => s.environment),
    ['staging', 'prod-eu', 'prod-us'],
    'each after every environment it depends on',
  );
  t.equal(sourceEnvironment(flow, flow.steps[1]!), 'dev', 'a step without dependsOn copies from the trigger');
  t.equal(sourceEnvironment(flow, flow.steps[2]!), 'staging', 'else from the first it depends on');
  t.throws(
    () =>
      orderSteps({
        triggerEnvironment: 'dev',
        steps: [
          { environment: 'a', dependsOn: ['b'] },
          { environment: 'b', dependsOn: ['a'] },
        ],
      }),
    /cycle/,
    'a cycle is refused',
  );
  t.throws(
    () => orderSteps({ triggerEnvironment: 'dev', steps: [{ environment: 'a', dependsOn: ['qa'] }] }),
    /depends on 'qa', which is neither a step nor the trigger/,
    'an unknown environment is named',
  );
  t.throws(
    () => orderSteps({ triggerEnvironment: 'dev', steps: [{ environment: 'dev' }] }),
    /trigger environment 'dev' cannot also be a step/,
  );
});

t.test('JSON paths and YAML fields', async (t) => {
  t.same(parseJsonPath('$.image.tag'), ['image', 'tag']);
  t.same(parseJsonPath("$.containers[0]['app.kubernetes.io/name']"), ['containers', 0, 'app.kubernetes.io/name']);
  t.throws(() => parseJsonPath('image.tag'), /does not start with \$/);
  t.throws(() => parseJsonPath('$..tag'), /unsupported part/);
  const text = '# the release\nimage:\n  repository: nginx # upstream\n  tag: "1.25.0"\nreplicas: 2\n';
  const out = setField(text, '$.image.tag', '1.27.1');
  t.equal(
    out,
    '# the release\nimage:\n  repository: nginx # upstream\n  tag: "1.27.1"\nreplicas: 2\n',
    'the one field changes; comments, quotes and the other fields stay',
  );
  t.equal(getField(out, '$.image.tag'), '1.27.1');
  t.same(getField(out, '$.image'), { repository: 'nginx', tag: '1.27.1' });
  t.equal(getField(out, '$.image.digest'), undefined);
  t.equal(releaseText(getField('v: 3\n', '$.v')), '3', 'a number is a release');
  t.equal(releaseText({ a: 1 }), undefined, 'a mapping is not');
  t.throws(() => setField('a: [\n', '$.a', 1), /not YAML/);
});

t.test('paths inside the repository only', async (t) => {
  t.equal(repoPath('shop/dev', 'release.yaml'), 'shop/dev/release.yaml');
  t.equal(repoPath('./shop/dev/', 'values/a.yaml'), 'shop/dev/values/a.yaml');
  for (const bad of [
    ['../etc', 'passwd'],
    ['/etc', 'passwd'],
    ['shop', '../../x'],
    ['.git', 'config'],
  ])
    t.throws(() => repoPath(...bad), /not a path inside the repository/, `${bad.join('/')} refused`);
});

t.test('the policies of a step', async (t) => {
  const policy = (name: string, selector: PromotionPolicy['spec']['selector']): PromotionPolicy => ({
    apiVersion: 'x',
    kind: 'PromotionPolicy',
    metadata: { name },
    spec: { action: 'commit', ...(selector ? { selector } : {}) },
  });
  const all = [
    policy('b-prod', { environments: ['prod'] }),
    policy('a-everything', undefined),
    policy('c-other-product', { products: ['cart'] }),
  ];
  t.same(
    policiesFor(all, 'shop', 'prod').map((p) => p.metadata.name),
    ['a-everything', 'b-prod'],
    'by selector, in name order',
  );
  t.same(
    policiesFor(all, 'shop', 'staging').map((p) => p.metadata.name),
    ['a-everything'],
  );
});

t.test('Promotion names', async (t) => {
  const n = promotionName('shop', 'v1.27.1+build.5');
  t.match(n, /^shop-v1-27-1-build-5-[0-9a-f]{8}$/);
  t.not(promotionName('shop', '1.0'), promotionName('shop', '1-0'), 'distinct releases, distinct names');
  t.ok(promotionName('a'.repeat(60), 'x'.repeat(100)).length <= 63, 'at most 63 characters');
  t.equal(
    proposalBranch({ metadata: { name: n } } as Promotion, 'prod'),
    `promotions/${n}/prod`,
    "a pull request's branch: the operator's own, one per promotion and environment",
  );
});

t.test('the CRDs and the operator’s Role', async (t) => {
  const crds = promotionCrds();
  t.equal(crds.length, 7, 'seven kinds');
  for (const crd of crds) {
    t.doesNotThrow(
      () => new CustomResourceDefinition(crd as never).validate(),
      `${(crd.metadata as { name: string }).name} is valid`,
    );
  }
  const policy = crds.find((c) => (c.metadata as { name: string }).name.startsWith('promotionpolicies.')) as {
    spec: {
      versions: Array<{
        schema: { openAPIV3Schema: { properties: { spec: { properties: { action: { enum: string[] } } } } } };
      }>;
    };
  };
  t.same(
    policy.spec.versions[0]!.schema.openAPIV3Schema.properties.spec.properties.action.enum,
    ['commit', 'pr', 'no-commit'],
    'a policy commits, proposes a pull request, or only gates',
  );
  const spec = (plural: string) =>
    (
      crds.find((c) => (c.metadata as { name: string }).name.startsWith(`${plural}.`)) as {
        spec: {
          names: { kind: string };
          versions: Array<{
            subresources: object;
            schema: { openAPIV3Schema: { properties: { spec: Record<string, unknown> } } };
          }>;
        };
      }
    ).spec;
  const preview = spec('promotionpreviews');
  t.equal(preview.names.kind, 'PromotionPreview', 'a dry run is a kind of its own');
  t.same(preview.versions[0]!.subresources, { status: {} }, 'with a status the operator writes');
  t.same(
    Object.keys(preview.versions[0]!.schema.openAPIV3Schema.properties.spec.properties as object).sort(),
    ['abort', 'product', 'release', 'requestedBy'],
    'a product, a release, who asked, abort: nothing of a real promotion',
  );
  const promotion = spec('promotions').versions[0]!.schema.openAPIV3Schema.properties.spec as {
    properties: Record<string, unknown>;
    'x-kubernetes-validations': Array<{ rule: string; message: string }>;
  };
  t.ok(promotion.properties.dryRun, "a Promotion's dryRun stays in the schema (an unknown field would be pruned)");
  t.match(
    promotion['x-kubernetes-validations'],
    [{ rule: '!has(self.dryRun) || !self.dryRun', message: /create a PromotionPreview/ }],
    'and is refused at create, naming the kind to use',
  );
  const [, role] = gitopsOperatorRbac('argocd', 'hosted-runtime') as [
    unknown,
    { rules: Array<{ resources: string[]; verbs: string[] }> },
  ];
  const secrets = role.rules.find((r) => r.resources.includes('secrets'))!;
  t.same(secrets.verbs, ['list'], 'Secrets: list only (Argo CD’s repository credentials), never written');
  t.same(
    role.rules.filter((r) => r.verbs.includes('delete')).map((r) => r.resources),
    [['promotionpreviews']],
    'it deletes finished previews beyond the kept ones, nothing else',
  );
  t.ok(
    role.rules.some((r) => r.resources.includes('promotionpreviews/status') && r.verbs.includes('update')),
    "it writes a preview's status",
  );
});

t.test('configuration', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'operator-config-'));
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(kubeconfig, 'apiVersion: v1\nkind: Config\n');
  const c = loadOperatorConfig({ KUBECONFIG: kubeconfig });
  t.equal(c.namespace, 'argocd');
  t.equal(c.author.name, 'GitOps Operator');
  const refused = (env: Record<string, string>) => {
    try {
      loadOperatorConfig({ KUBECONFIG: kubeconfig, ...env });
    } catch (err) {
      return err instanceof ConfigError ? err.variable : 'other';
    }
    return 'accepted';
  };
  t.equal(refused({ PROMOTIONS_NAMESPACE: 'Not_A_NS' }), 'PROMOTIONS_NAMESPACE');
  t.equal(refused({ COMMIT_AUTHOR_EMAIL: 'nobody' }), 'COMMIT_AUTHOR_EMAIL');
  t.equal(refused({ COMMIT_AUTHOR_NAME: 'x <y>' }), 'COMMIT_AUTHOR_NAME');
  t.equal(refused({ GIT_WORK_DIR: 'relative' }), 'GIT_WORK_DIR');
});

t.test('a Degraded Application fails the step naming what is degraded', async (t) => {
  const rollout = { group: 'argoproj.io', kind: 'Rollout', namespace: 'shop-prod', name: 'web' };
  const service = { group: '', kind: 'Service', namespace: 'shop-prod', name: 'web' };
  const aborted =
    'Rollout aborted update to revision 2: Metric "smoke" assessed Failed due to failed (1) > failureLimit (0)';
  t.equal(
    degradedReason('shop-prod', {
      metadata: { name: 'shop-prod' },
      status: {
        health: { status: 'Degraded' },
        resources: [
          { ...service, health: { status: 'Healthy' } },
          { ...rollout, health: { status: 'Degraded', message: aborted } },
        ],
      },
    }),
    `shop-prod is Degraded at the promoted revision: Rollout shop-prod/web: ${aborted}`,
    'with resource health in the Application: each Degraded resource and Argo CD’s message for it',
  );
  t.equal(
    degradedReason('shop-prod', {
      metadata: { name: 'shop-prod' },
      status: { health: { status: 'Degraded' }, resources: [service, rollout] },
    }),
    'shop-prod is Degraded at the promoted revision: check its Rollout shop-prod/web (a failed canary analysis aborts a Rollout and degrades it)',
    'without it (Argo CD 3’s default): the Application’s Rollouts',
  );
  t.equal(
    degradedReason('shop-prod', {
      metadata: { name: 'shop-prod' },
      status: { health: { status: 'Degraded', message: 'a hook failed' }, resources: [service] },
    }),
    'shop-prod is Degraded at the promoted revision: a hook failed',
    'no Rollout: the Application’s own message',
  );
});

t.test('Degraded fails a step only once Argo CD has applied the promoted revision', async (t) => {
  const app = (sync: string, health: string) => ({
    metadata: { name: 'shop-prod' },
    status: { sync: { status: sync, revision: 'c0ffee' }, health: { status: health } },
  });
  t.equal(degradedAt(app('Synced', 'Degraded'), true), true, 'Synced at the promoted revision and Degraded: fails');
  t.equal(
    degradedAt(app('OutOfSync', 'Degraded'), true),
    false,
    'OutOfSync at it: the health is still the old live state’s (the previous release’s aborted Rollout), it waits',
  );
  t.equal(degradedAt(app('Synced', 'Degraded'), false), false, 'Degraded at an older revision: it waits');
  t.equal(degradedAt(app('Synced', 'Progressing'), true), false, 'Progressing: it waits');
});
