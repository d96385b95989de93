/**
 * Go builds that share dependencies build them at one version, so that the second of a cold run's
 * builds reuses the packages the first compiled (Go's build cache keys a package by its sources and
 * those of everything it imports: one module at another version, golang.org/x/sys say, compiles
 * again every package above it). docs/toolchain.md ("Shared dependency versions") has the
 * measured saving of each pair. A bump of one side of a pair alone fails here, naming each module
 * and its two versions.
 */
import { readFile } from 'node:fs/promises';
import t from 'tap';

const root = new URL('../../', import.meta.url);

/** module path → version, from a go.mod's require directives (block or single line). */
async function requires(dir: string): Promise<Map<string, string>> {
  const text = await readFile(new URL(`tools/${dir}/go.mod`, root), 'utf8');
  const out = new Map<string, string>();
  let inBlock = false;
  for (const raw of text.split('\n')) {
    const line = raw.replace(/\/\/.*$/, '').trim();
    if (line === 'require (') inBlock = true;
    else if (inBlock && line === ')') inBlock = false;
    else {
      const m = (inBlock ? /^(\S+)\s+(v\S+)$/ : /^require\s+(\S+)\s+(v\S+)$/).exec(line);
      if (m) out.set(m[1]!, m[2]!);
    }
  }
  return out;
}

/** Each module both require at two versions, but `except`: "module: version-in-a and version-in-b". */
function differences(a: Map<string, string>, b: Map<string, string>, except?: string): string[] {
  return [...a]
    .filter(([mod, va]) => mod !== except && b.has(mod) && b.get(mod) !== va)
    .map(([mod, va]) => `${mod}: ${va} and ${b.get(mod)}`)
    .sort();
}

t.test('the two vcluster modules build every module but vcluster at the same version', async (t) => {
  const a = await requires('vcluster-0.33.1');
  const b = await requires('vcluster-0.34.0');
  t.equal(a.get('github.com/loft-sh/vcluster'), 'v0.33.1', 'tools/vcluster-0.33.1 builds vcluster v0.33.1');
  t.equal(b.get('github.com/loft-sh/vcluster'), 'v0.34.0', 'tools/vcluster-0.34.0 builds vcluster v0.34.0');
  t.same(differences(a, b, 'github.com/loft-sh/vcluster'), [], 'no module both require is at two versions');
  const onlyIn = (x: Map<string, string>, y: Map<string, string>) => [...x.keys()].filter((m) => !y.has(m)).sort();
  t.same(onlyIn(a, b), [], 'tools/vcluster-0.33.1 requires no module that tools/vcluster-0.34.0 does not');
  t.same(onlyIn(b, a), [], 'tools/vcluster-0.34.0 requires no module that tools/vcluster-0.33.1 does not');
});

t.test(
  'helm (chart tools) builds every module it shares with the provider plugin at the plugin’s version',
  async (t) => {
    const helm = await requires('chart-tools/helm');
    const provider = await requires('pulumi-kubernetes');
    t.equal(
      helm.get('helm.sh/helm/v3'),
      provider.get('helm.sh/helm/v3'),
      'one helm version: the chart tools’ is the one the plugin links',
    );
    t.ok(helm.size > 0 && provider.size > 0, 'both go.mod files list their requirements');
    t.same(differences(helm, provider), [], 'no module both require is at two versions');
  },
);
