/**
 * The Argo applications' versions the catalog shows (`appVersions`, what `versions list` prints as
 * ARGO CD) are the `appVersion` of the very chart each runtime version pins, read from the chart
 * mirror's Chart.yaml.
 */
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { VERSIONS } from '../../runtime/versions.ts';
import { defaultChartsDir } from '../../runtime/render/chart-tools.ts';

const charts = defaultChartsDir(process.env);
const CHARTS = {
  argoCd: 'argo-cd',
  argoWorkflows: 'argo-workflows',
  argoRollouts: 'argo-rollouts',
  argoEvents: 'argo-events',
} as const;

t.test('every shipped version records the appVersion of each Argo chart it pins', async (t) => {
  for (const v of VERSIONS) {
    t.ok(v.appVersions, `${v.version} records its app versions`);
    for (const [key, chart] of Object.entries(CHARTS) as Array<[keyof typeof CHARTS, string]>) {
      const file = join(charts, `${chart}-${v.components[key]}.tgz`);
      if (!existsSync(file)) throw new Error(`precondition: the chart mirror ${charts} holds ${file}`);
      const meta = parse(execFileSync('tar', ['xzOf', file, `${chart}/Chart.yaml`], { encoding: 'utf8' })) as {
        appVersion: string;
      };
      t.equal(
        v.appVersions?.[key],
        meta.appVersion,
        `${v.version}: ${chart} ${v.components[key]} runs ${meta.appVersion}`,
      );
    }
  }
});
