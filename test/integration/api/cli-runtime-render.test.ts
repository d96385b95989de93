/**
 * `provisioner runtime render` and `runtime diff`, offline, from the real chart mirror
 * (../shared/charts or PROVISIONER_CHARTS_DIR) with the helm of scripts/chart-tools.sh. The
 * refusals (no helm, an unknown version or plan, a chart missing from the mirror) need no helm.
 * Without the chart tools the rendering tests are a named skip; with CI=true a failure.
 */
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { parseAllDocuments } from 'yaml';
import { main } from '../../../provisioner/cli/main.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { agentsAt } from '../../../runtime/component/agents.ts';
import { ChartToolMissingError, findChartTool } from '../../../runtime/render/chart-tools.ts';
import { PLANS } from '../../../tenants/plans.ts';

async function cli(args: string[], env: NodeJS.ProcessEnv = process.env) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(args, { out: (s) => out.push(s), err: (s) => err.push(s), env });
  return { code, out: out.join('\n'), err: err.join('\n') };
}

const dir = await mkdtemp(join(tmpdir(), 'hrt-runtime-render-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));
const newest = catalog.versions.at(-1)!.version;
/** The newest version before it that runs another Kubernetes version (the diff shows that field move). */
const older = [...catalog.versions]
  .reverse()
  .find((v) => v.components.kubernetes !== catalog.get(newest)!.components.kubernetes)!.version;

t.test('without helm the command fails and names the fix', async (t) => {
  const r = await cli(['runtime', 'render', newest, '--out', join(dir, 'none'), '--helm', join(dir, 'no-helm')]);
  t.equal(r.code, 1, 'exit code 1');
  t.match(r.err, /^provisioner: helm '.*no-helm' is not an executable file$/, 'the given path is named');
  const searched = await cli(['runtime', 'render', newest, '--out', join(dir, 'none')], {
    PATH: '',
    CHART_TOOLS_CACHE: join(dir, 'no-cache'),
  });
  t.equal(searched.code, 1, 'exit code 1 when none is found');
  t.match(
    searched.err,
    /no helm found \(looked in .*no-cache\/current\/bin\/helm .*PATH\): build it with `bash scripts\/chart-tools\.sh` or pass --helm/,
  );
});

t.test('an unknown version or plan is refused with what exists', async (t) => {
  const helm = process.execPath; // any executable: the refusal comes before helm runs
  const version = await cli(['runtime', 'render', '0.0.1', '--out', join(dir, 'x'), '--helm', helm]);
  t.equal(version.code, 1);
  t.match(version.err, new RegExp(`runtime version '0\\.0\\.1' is not in the catalog \\(known: .*${newest}`));
  const plan = await cli(['runtime', 'diff', older, newest, '--plan', 'gold', '--helm', helm]);
  t.equal(plan.code, 1);
  t.match(plan.err, /unknown plan 'gold' \(plans: free, team, enterprise\)/);
});

t.test('a chart missing from the mirror is named with the file to add', async (t) => {
  const r = await cli([
    'runtime',
    'render',
    newest,
    '--out',
    join(dir, 'x'),
    '--charts',
    dir,
    '--helm',
    process.execPath,
  ]);
  t.equal(r.code, 1);
  t.match(
    r.err,
    new RegExp(
      `runtime version ${newest.replaceAll('.', '\\.')} pins vcluster .*, which is not in the chart mirror ${dir}: add vcluster-.*\\.tgz there`,
    ),
  );
});

let helm: string | undefined;
let missing: string | undefined;
try {
  helm = findChartTool('helm');
} catch (err) {
  if (!(err instanceof ChartToolMissingError)) throw err;
  missing = err.message;
}

if (missing && process.env.CI === 'true') {
  t.fail(`helm is required in CI: ${missing}`);
} else if (missing) {
  t.test('rendering', { skip: `the rendering tests need helm: ${missing}` }, () => {});
} else {
  t.setTimeout(300_000);

  t.test('render writes one file per release, the root-cluster objects and the agents', async (t) => {
    const out = join(dir, 'render');
    const r = await cli(['runtime', 'render', newest, '--plan', 'team', '--out', out, '--helm', helm!]);
    t.equal(r.code, 0, `exit code 0 (stderr: ${r.err})`);
    const files = (await readdir(out)).sort();
    t.same(
      files.filter((f) => !f.endsWith('.values.yaml')),
      [
        'agents.yaml',
        'argo-events.yaml',
        'argo-rollouts.yaml',
        'argo-workflows.yaml',
        'argocd.yaml',
        'root-cluster.yaml',
        'vcluster.yaml',
      ],
      'a YAML file per release plus root-cluster.yaml and agents.yaml',
    );
    const objects = async (f: string) =>
      parseAllDocuments(await readFile(join(out, f), 'utf8'), { uniqueKeys: false })
        .map((d) => d.toJSON() as { kind: string; metadata: { name: string }; spec?: Record<string, never> })
        .filter(Boolean);
    const team = PLANS.team!;
    const vc = (await objects('vcluster.yaml')).find((o) => o.kind === 'StatefulSet')!;
    const syncer = (
      vc.spec as unknown as { template: { spec: { containers: { resources: { requests: unknown } }[] } } }
    ).template.spec.containers[0]!;
    t.match(
      syncer.resources.requests,
      team.controlPlane.requests,
      "the vcluster's control plane has the team plan's requests",
    );
    const quota = (await objects('root-cluster.yaml')).find((o) => o.kind === 'ResourceQuota')!;
    t.match(
      quota.spec,
      { hard: { 'requests.cpu': team.quota.cpu, pods: String(team.quota.pods) } },
      "the team plan's quota",
    );
    const agents = (await objects('agents.yaml')).filter((o) => o.kind === 'Deployment').map((o) => o.metadata.name);
    t.same(
      agents.sort(),
      agentsAt(newest)
        .map((a) => a.name)
        .sort(),
      `every agent Deployment of ${newest}`,
    );
    t.ok(agents.includes('source-server'), 'the Source Server among them (1.7.0 and later)');
    const wf = await objects('argo-workflows.yaml');
    t.ok(
      wf.some((o) => o.kind === 'Deployment' && o.metadata.name === 'argo-workflows-workflow-controller'),
      'the chart rendered',
    );
    t.match(
      await readFile(join(out, 'argo-workflows.values.yaml'), 'utf8'),
      /seccompProfile:\n\s+type: RuntimeDefault/,
      'and its values',
    );
    t.match(
      r.out,
      new RegExp(`^rendered runtime ${newest.replaceAll('.', '\\.')} on plan team`),
      'the files written are listed',
    );
  });

  t.test('diff names per release the objects added, removed and changed, with the fields', async (t) => {
    const from = catalog.get(older)!.components;
    const to = catalog.get(newest)!.components;
    const r = await cli(['runtime', 'diff', older, newest, '--helm', helm!]);
    t.equal(r.code, 0, `exit code 0 (stderr: ${r.err})`);
    t.match(
      r.out,
      new RegExp(`^runtime ${older.replaceAll('.', '\\.')} -> ${newest.replaceAll('.', '\\.')}, plan free:`),
    );
    t.match(
      r.out,
      new RegExp(
        `\\nargocd \\(argo-cd ${from.argoCd} -> argo-cd ${to.argoCd}\\): \\d+ added, \\d+ removed, \\d+ changed`,
      ),
    );
    t.match(
      r.out,
      new RegExp(
        `\\n {2}~ StatefulSet\\.apps tenant-[^ ]+/vcluster\\n(?: {6}.*\\n)* {6}spec\\.template\\.spec\\.initContainers\\[0\\]\\.image: \\S+:${from.kubernetes.replaceAll('.', '\\.')} -> \\S+:${to.kubernetes.replaceAll('.', '\\.')}`,
      ),
      "the Kubernetes version's change (the k8s distro image of the vcluster's init container) is a field line",
    );
    const json = await cli(['--json', 'runtime', 'diff', older, newest, '--helm', helm!]);
    const doc = JSON.parse(json.out) as {
      releases: { release: string; changed: { object: string; fields: { path: string }[] }[] }[];
    };
    const argo = doc.releases.find((x) => x.release === 'argocd')!;
    t.ok(argo.changed.length > 0, '--json: the argocd release has changed objects');
    const same = await cli(['runtime', 'diff', newest, newest, '--helm', helm!]);
    t.notMatch(same.out, /added|removed|~ /, 'a version compared with itself: no change anywhere');
    t.match(same.out, /vcluster \(vcluster [\d.]+ -> vcluster [\d.]+\): no change/);
  });
}
