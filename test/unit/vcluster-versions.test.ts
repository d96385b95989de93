/**
 * Every vcluster the runtime catalog pins is one the end-to-end tier builds and runs
 * (scripts/vcluster.sh, from the module pinned in tools/vcluster-<version>), so no catalog version
 * reaches production with a vcluster that was never started here; and the tier builds nothing the
 * catalog does not pin (each version costs a cold CI run several CPU-minutes). A pin of another
 * version fails here, naming the catalog version and the pin.
 */
import { readdir, readFile } from 'node:fs/promises';
import t from 'tap';
import { VERSIONS } from '../../runtime/versions.ts';

const root = new URL('../../', import.meta.url);

t.test('the catalog pins exactly the vclusters that scripts/vcluster.sh builds', async (t) => {
  const script = await readFile(new URL('scripts/vcluster.sh', root), 'utf8');
  const built = /^VCLUSTER_VERSIONS="([^"]+)"$/m.exec(script)?.[1]?.split(/\s+/) ?? [];
  t.ok(built.length > 0, 'scripts/vcluster.sh names the vcluster versions it builds (VCLUSTER_VERSIONS="…")');

  const folders = (await readdir(new URL('tools/', root))).filter((f) => f.startsWith('vcluster-')).sort();
  t.same(
    folders,
    built.map((v) => `vcluster-${v}`).sort(),
    'tools/ holds one module folder per version the script builds, and no other',
  );
  for (const v of built) {
    const goMod = await readFile(new URL(`tools/vcluster-${v}/go.mod`, root), 'utf8').catch(() => '');
    const required = /github\.com\/loft-sh\/vcluster v(\S+)/.exec(goMod)?.[1];
    t.equal(required, v, `tools/vcluster-${v}/go.mod requires the vcluster module at ${v}`);
  }

  const unbuildable = VERSIONS.filter((v) => !built.includes(v.components.vcluster)).map(
    (v) =>
      `${v.version} pins vcluster ${v.components.vcluster}, which scripts/vcluster.sh does not build (it builds ${built.join(', ')})`,
  );
  t.same(unbuildable, [], 'no catalog version pins a vcluster the end-to-end tier cannot run');
  const pinned = new Set(VERSIONS.map((v) => v.components.vcluster));
  t.same(
    built.filter((v) => !pinned.has(v)),
    [],
    'scripts/vcluster.sh builds no vcluster that no catalog version pins',
  );
});

t.test('the catalog moves vcluster between two of the versions the tier runs', async (t) => {
  // The e2e tier's upgrade across vcluster versions (test/e2e/crash.test.ts upgrades 1.5.0 → 1.6.0)
  // needs the catalog to hold such a move at all.
  const moves = VERSIONS.slice(1).filter((v, i) => v.components.vcluster !== VERSIONS[i]!.components.vcluster);
  t.ok(moves.length > 0, 'at least one catalog version runs another vcluster than the version before it');
});
