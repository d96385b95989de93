/**
 * The conformance check, no cluster: for every catalog version and plan, each release rendered
 * from the chart mirror (../shared/charts, or HRT_CHART_MIRROR / PROVISIONER_CHARTS_DIR) with the program's values by the
 * Helm the Kubernetes provider embeds, every pod template evaluated by the upstream Pod Security
 * evaluator at restricted:latest, every object and Role rule of the root-cluster releases checked
 * against the provisioner's grants from infra/, and the resources summed against the plan's
 * quota (runtime/render/conformance.ts). And that it fails, naming what, when a value that fixes
 * each of those is removed, and when a pinned chart is not in the mirror.
 *
 * The chart tools come from scripts/chart-tools.sh (scripts/test.sh builds them before this tier
 * and exports HRT_CHART_TOOLS_BIN). Without them the file is a named skip; with CI=true a failure.
 */
import t from 'tap';
import { PROVISIONER_TENANT_RULES } from '../../infra/provisioner-rbac.ts';
import { catalog, createCatalog } from '../../runtime/catalog.ts';
import { ChartToolMissingError, defaultChartsDir, findChartTool } from '../../runtime/render/chart-tools.ts';
import {
  conformanceProblems,
  podSecurityProblems,
  rbacProblems,
  resourceProblems,
} from '../../runtime/render/conformance.ts';
import { ChartMissingError, renderRuntime, type Values } from '../../runtime/render/render.ts';
import { VERSIONS } from '../../runtime/versions.ts';
import { PLAN_NAMES } from '../../tenants/plans.ts';
import { NEWEST_ROOT_KUBERNETES, type PolicyRule } from '../../tenants/root-permissions.ts';

/**
 * The chart mirror: HRT_CHART_MIRROR (the e2e tier's variable), else PROVISIONER_CHARTS_DIR, else
 * `<repository root>/../shared/charts`.
 */
const CHARTS = process.env.HRT_CHART_MIRROR ?? defaultChartsDir();

function tools(): { helm: string; podSecurity: string } | string {
  try {
    return { helm: findChartTool('helm'), podSecurity: findChartTool('pod-security') };
  } catch (err) {
    if (err instanceof ChartToolMissingError) return err.message;
    throw err;
  }
}

const found = tools();
if (typeof found === 'string') {
  if (process.env.CI === 'true') t.fail(`the chart tools are required in CI: ${found}`);
  else t.plan(0, `skipped: the chart conformance check needs the chart tools: ${found}`);
} else {
  // 15 renders of five charts each: seconds on an idle machine, more on a busy one.
  t.setTimeout(600_000);
  const { helm, podSecurity } = found;
  const render = (version: string, plan: string, transformValues?: (chart: string, v: Values) => Values) =>
    renderRuntime({
      version,
      plan,
      chartsDir: CHARTS,
      helm,
      rootKubeVersion: NEWEST_ROOT_KUBERNETES,
      ...(transformValues ? { transformValues } : {}),
    });

  for (const version of catalog.versions) {
    for (const plan of PLAN_NAMES) {
      void t.test(`runtime ${version.version} on plan ${plan} conforms`, async (t) => {
        const rendered = await render(version.version, plan);
        t.same(
          await conformanceProblems(rendered, podSecurity),
          [],
          `every pod passes Pod Security restricted, every Role rule is held by the provisioner, resources fit plan ${plan}`,
        );
      });
    }
  }

  const newest = catalog.versions.at(-1)!.version;

  void t.test('without the seccomp profile, the workflow controller is refused, named', async (t) => {
    const stripped = await render(newest, 'free', (chart, v) => {
      if (chart !== 'argo-workflows') return v;
      const c = structuredClone(v) as { controller: { podSecurityContext: Values; securityContext: Values } };
      delete c.controller.podSecurityContext.seccompProfile;
      delete c.controller.securityContext.seccompProfile;
      return c;
    });
    const problems = await podSecurityProblems(stripped, podSecurity);
    t.equal(problems.length, 1, `one problem: ${problems.join(' | ')}`);
    t.match(
      problems[0],
      new RegExp(
        `^runtime ${newest.replaceAll('.', '\\.')}, plan free, release argo-workflows: Deployment argo-workflows-workflow-controller: Pod Security restricted refuses it: seccompProfile \\(.*"controller".*seccompProfile`,
      ),
      'the problem names the version, plan, release, object and the seccompProfile field',
    );
  });

  void t.test("without the ephemeral-containers grant, the vcluster's Role is refused, named", async (t) => {
    const rendered = await render(newest, 'free');
    const grants = (PROVISIONER_TENANT_RULES as PolicyRule[]).filter(
      (r) => !r.resources?.includes('pods/ephemeralcontainers'),
    );
    t.ok(grants.length < PROVISIONER_TENANT_RULES.length, 'the grant was taken out');
    const problems = rbacProblems(rendered, grants);
    t.equal(problems.length, 1, `one problem: ${problems.join(' | ')}`);
    t.match(
      problems[0],
      /^runtime [\d.]+, plan free, release vcluster: Role vc-vcluster: rules\[\d+\] grants patch pods\/ephemeralcontainers, update pods\/ephemeralcontainers, which the provisioner does not hold/,
      'the problem names the Role, its rule and the verbs the provisioner lacks',
    );
  });

  void t.test("on the newest root Kubernetes, without the resize grant, the vcluster's Role is refused", async (t) => {
    // The chart's Role grants pods/resize on a root of Kubernetes 1.35 or newer only: a provisioner
    // without it could not install a vcluster there (RBAC refuses a Role granting more than its creator).
    const rendered = await render(newest, 'free');
    const grants = (PROVISIONER_TENANT_RULES as PolicyRule[]).filter((r) => !r.resources?.includes('pods/resize'));
    t.ok(grants.length < PROVISIONER_TENANT_RULES.length, 'the grant was taken out');
    t.match(
      rbacProblems(rendered, grants),
      [
        /Role vc-vcluster: rules\[\d+\] grants patch pods\/resize, update pods\/resize, which the provisioner does not hold/,
      ],
      'the Role and the resize verbs are named',
    );
    const older = await renderRuntime({
      version: newest,
      plan: 'free',
      chartsDir: CHARTS,
      helm,
      rootKubeVersion: 'v1.34.0',
    });
    t.same(rbacProblems(older, grants), [], 'on a 1.34 root the chart does not grant it');
  });

  void t.test(
    "without Argo Events' resources, its controller is named and the sums no longer fit the table",
    async (t) => {
      const stripped = await render(newest, 'free', (chart, v) => {
        if (chart !== 'argo-events') return v;
        const c = structuredClone(v) as { controller: Values };
        delete c.controller.resources;
        return c;
      });
      const problems = resourceProblems(stripped);
      t.match(
        problems,
        [
          /release argo-events: Deployment argo-events-controller-manager: spec\.template\.spec\.containers\[controller-manager\]\.resources\.requests\.cpu is not set/,
        ],
        'the container and field are named',
      );
      t.ok(
        problems.some((p) => /the rendered runtime's requests\.cpu is .*, the plan's budget table .* says/.test(p)),
        'the sum differs from the plan table',
      );
    },
  );

  void t.test('a catalog version whose chart is not in the mirror fails with the fix', async (t) => {
    const last = VERSIONS.at(-1)!;
    const withNew = createCatalog([
      ...VERSIONS,
      {
        ...last,
        version: '99.0.0',
        releaseDate: '2099-01-01',
        components: { ...last.components, argoCd: '99.9.9' },
        upgrade: {},
      },
    ]);
    await t.rejects(
      renderRuntime({ version: '99.0.0', plan: 'free', chartsDir: CHARTS, helm, catalog: withNew }),
      {
        name: ChartMissingError.name,
        message: new RegExp(
          `runtime version 99\\.0\\.0 pins argo-cd 99\\.9\\.9, which is not in the chart mirror .*: add argo-cd-99\\.9\\.9\\.tgz there`,
        ),
      },
      'the error names the version, the chart and the file to add',
    );
  });
}
