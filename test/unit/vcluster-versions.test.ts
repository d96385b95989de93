/**
 * Every vcluster the runtime catalog pins is the one the end-to-end tier builds and runs
 * (scripts/vcluster.sh, from the module pinned in tools/vcluster), so no catalog version reaches
 * production with a vcluster that was never started here. A pin of another version fails here,
 * naming the catalog version and the pin.
 */
import { readFile } from 'node:fs/promises';
import t from 'tap';
import { VERSIONS } from '../../runtime/versions.ts';

const root = new URL('../../', import.meta.url);

t.test('every catalog version pins the vcluster that scripts/vcluster.sh builds', async (t) => {
  const script = await readFile(new URL('scripts/vcluster.sh', root), 'utf8');
  const built = /^VCLUSTER_VERSION=(\S+)$/m.exec(script)?.[1];
  t.ok(built, 'scripts/vcluster.sh names the vcluster version it builds (VCLUSTER_VERSION=…)');
  const goMod = await readFile(new URL('tools/vcluster/go.mod', root), 'utf8');
  const required = /github\.com\/loft-sh\/vcluster v(\S+)/.exec(goMod)?.[1];
  t.equal(required, built, 'tools/vcluster/go.mod requires the vcluster module at the version the script labels');
  const unbuildable = VERSIONS.filter((v) => v.components.vcluster !== built).map(
    (v) =>
      `${v.version} pins vcluster ${v.components.vcluster}, which scripts/vcluster.sh does not build (it builds ${built})`,
  );
  t.same(unbuildable, [], 'no catalog version pins a vcluster the end-to-end tier cannot run');
});
