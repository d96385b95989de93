import t from 'tap';
import { catalog, createCatalog, validateCatalog, CatalogError } from '../../runtime/catalog.ts';
import type { RuntimeVersion } from '../../runtime/versions.ts';
import { VERSIONS } from '../../runtime/versions.ts';

const pins = (vcluster: string, kubernetes = 'v1.32.1') => ({
  vcluster,
  kubernetes,
  argoCd: '7.8.2',
  argoWorkflows: '0.45.4',
  argoRollouts: '2.39.0',
  argoEvents: '2.4.13',
  agents: '1.0.0',
});
const v = (
  version: string,
  vcluster: string,
  upgrade: RuntimeVersion['upgrade'] = {},
  extra: Partial<RuntimeVersion> = {},
): RuntimeVersion => ({
  version,
  releaseDate: '2025-01-01',
  channel: 'stable',
  components: pins(vcluster),
  upgrade,
  ...extra,
});

t.test('the built-in catalog is valid and has at least three versions', async (t) => {
  t.doesNotThrow(() => validateCatalog(VERSIONS));
  t.ok(catalog.versions.length >= 3);
  t.equal(catalog.defaultVersion('stable'), catalog.versions.filter((x) => x.channel === 'stable').at(-1)!.version);
});

t.test('an upgrade the constraints allow is answered with a one-step path', async (t) => {
  t.same(catalog.upgradePath('1.3.0', '1.4.0'), { allowed: true, path: ['1.4.0'] });
  t.same(catalog.upgradePath('1.4.0', '1.4.1'), { allowed: true, path: ['1.4.1'] });
});

t.test('a skip over a minimum version is refused with the path to follow', async (t) => {
  const answer = catalog.upgradePath('1.4.0', '1.6.0');
  t.equal(answer.allowed, false);
  t.same(answer.path, ['1.5.0', '1.6.0']);
  if (!answer.allowed)
    t.match(answer.reason, /^runtime version 1\.6\.0 cannot be reached from 1\.4\.0: upgrade to 1\.5\.x first/);
  const longer = catalog.upgradePath('1.3.0', '1.6.0');
  t.same(longer.path, ['1.4.1', '1.5.0', '1.6.0'], 'prefers the newest version of each line');
});

t.test('following the returned path hop by hop is allowed at every hop', async (t) => {
  for (const from of catalog.versions) {
    for (const to of catalog.versions) {
      if (from.version >= to.version) continue;
      const answer = catalog.upgradePath(from.version, to.version);
      t.ok(answer.path.length > 0, `${from.version} -> ${to.version} has a path`);
      let cur = from.version;
      for (const hop of answer.path) {
        t.equal(catalog.upgradePath(cur, hop).allowed, true, `${cur} -> ${hop}`);
        cur = hop;
      }
    }
  }
});

t.test('a mandatory stepping stone cannot be jumped over', async (t) => {
  const c = createCatalog([v('1.0.0', '0.24.0'), v('1.1.0', '0.24.1', { steppingStone: true }), v('1.2.0', '0.25.0')]);
  const answer = c.upgradePath('1.0.0', '1.2.0');
  t.equal(answer.allowed, false);
  t.same(answer.path, ['1.1.0', '1.2.0']);
});

t.test('vcluster moving two minors in one hop is refused even without a minimum', async (t) => {
  const c = createCatalog([v('1.0.0', '0.24.0'), v('1.1.0', '0.25.0'), v('1.2.0', '0.26.0')]);
  const answer = c.upgradePath('1.0.0', '1.2.0');
  t.equal(answer.allowed, false);
  t.same(answer.path, ['1.1.0', '1.2.0']);
  if (!answer.allowed) t.match(answer.reason, /upgrade to 1\.1\.x first/);
});

t.test('an unknown target is refused with no path', async (t) => {
  const answer = catalog.upgradePath('1.3.0', '9.9.9');
  t.same(answer, { allowed: false, reason: 'runtime version 9.9.9 is not in the catalog', path: [] });
});

t.test('rollback: a patch on the same vcluster and Kubernetes can go back', async (t) => {
  t.equal(catalog.canRollback('1.4.1', '1.4.0'), true);
  t.same(catalog.upgradePath('1.4.1', '1.4.0'), { allowed: true, path: ['1.4.0'] });
});

t.test('rollback: refused across a version marked irreversible, with its reason', async (t) => {
  t.equal(catalog.canRollback('1.5.0', '1.4.1'), false);
  const answer = catalog.rollbackAnswer('1.5.0', '1.4.1');
  if (!answer.allowed) t.match(answer.reason, /1\.5\.0 cannot be undone \(Argo CD 3\.0/);
  else t.fail('should be refused');
});

t.test('rollback: refused when vcluster would be downgraded a minor', async (t) => {
  // The shipped catalog: 1.6.0 moved vcluster 0.33.1 → 0.34.0.
  const shipped = catalog.rollbackAnswer('1.6.0', '1.5.0');
  t.equal(shipped.allowed, false, '1.6.0 cannot be rolled back to 1.5.0');
  if (!shipped.allowed) t.match(shipped.reason, /vcluster 0\.34\.0 cannot be downgraded to 0\.33\.1/);
  // The rule on its own.
  const c = createCatalog([v('1.0.0', '0.26.0'), v('1.1.0', '0.27.0', { minFrom: '1.0.0' })]);
  const answer = c.rollbackAnswer('1.1.0', '1.0.0');
  t.equal(answer.allowed, false, 'a rollback that would take vcluster back a minor is refused');
  if (!answer.allowed) t.match(answer.reason, /vcluster 0\.27\.0 cannot be downgraded to 0\.26\.0/);
  t.equal(c.canRollback('1.0.0', '1.1.0'), false, 'a newer version is not a rollback');
});

t.test('validation names every problem', async (t) => {
  const bad: RuntimeVersion[] = [
    v('1.0.0', '0.24.0'),
    v('1.0.0', '0.24.0'),
    { ...v('1.1.0', '0.26.0', { minFrom: '0.9.0' }), components: { ...pins('0.26.0'), argoCd: '' } },
    v('1.2.0', 'latest', { minFrom: '1.3.0' }),
    { ...v('1.3.0', '0.27.0'), components: { ...pins('0.27.0'), kubernetes: '1.33' } },
  ];
  const err = t.throws(() => validateCatalog(bad)) as unknown as Error;
  t.ok(err instanceof CatalogError);
  t.match(err.message, /version 1\.0\.0 is listed twice/);
  t.match(err.message, /pin 'argoCd' is missing/);
  t.match(err.message, /upgrade\.minFrom 0\.9\.0 is not in the catalog/);
  t.match(err.message, /pin 'vcluster' = 'latest' is not X\.Y\.Z/);
  t.match(err.message, /upgrade\.minFrom 1\.3\.0 is not older than the version/);
  t.match(err.message, /pin 'kubernetes' = '1\.33' is not vX\.Y\.Z/);
  t.match(err.message, /vcluster moves from 0\.24\.0 \(in 1\.0\.0\) to 0\.26\.0, more than one minor/);
});

t.test('consecutive catalog versions move vcluster at most one minor', async (t) => {
  for (let i = 1; i < catalog.versions.length; i++) {
    const [a, b] = [catalog.versions[i - 1]!, catalog.versions[i]!];
    const minor = (s: string) => Number(s.split('.')[1]);
    t.ok(minor(b.components.vcluster) - minor(a.components.vcluster) <= 1, `${a.version} -> ${b.version}`);
  }
});
