/**
 * Which repository paths move an Application's change revision
 * (runtime/agents/source-server/manifest-paths.ts): its source path and the Helm value files and
 * file parameters it names in the repository, or exactly the paths of Argo CD's
 * manifest-generate-paths annotation; never a remote file, another source's reference or a path
 * leaving the repository.
 */
import t from 'tap';
import type { ArgoApplication } from '../../../runtime/agents/source-server/argocd.ts';
import {
  MANIFEST_PATHS_ANNOTATION,
  MAX_PATHS,
  manifestPaths,
} from '../../../runtime/agents/source-server/manifest-paths.ts';

const app = (source: Record<string, unknown>, annotation?: string): ArgoApplication => ({
  metadata: {
    name: 'a',
    ...(annotation !== undefined ? { annotations: { [MANIFEST_PATHS_ANNOTATION]: annotation } } : {}),
  },
  spec: { source: { repoURL: 'https://git.example.test/r.git', ...source } },
});

t.test('the source path alone, as Argo CD writes it', async (t) => {
  t.same(manifestPaths(app({ path: 'apps/a' })), { paths: ['apps/a'], from: 'source', truncated: false });
  t.same(manifestPaths(app({ path: './apps/a/' })).paths, ['apps/a'], './ and a trailing slash');
  t.equal(manifestPaths(app({ path: '.' })).paths, undefined, "'.': the whole repository");
  t.equal(manifestPaths(app({})).paths, undefined, 'no path: the whole repository');
});

t.test('Helm value files and file parameters in the repository', async (t) => {
  const p = manifestPaths(
    app({
      path: 'apps/web/chart',
      helm: {
        valueFiles: [
          'values.yaml',
          '../../../env/prod/web.yaml',
          '/shared/values-common.yaml',
          'https://values.example.test/web.yaml',
          '$values/env/prod.yaml',
          '../../../../outside.yaml',
        ],
        fileParameters: [{ name: 'config', path: '../../../files/web.conf' }],
      },
    }),
  );
  t.same(
    p.paths,
    [
      'apps/web/chart',
      'apps/web/chart/values.yaml',
      'env/prod/web.yaml',
      'files/web.conf',
      'shared/values-common.yaml',
    ],
    'relative to the path or, with /, to the root; remote, $ref and outside paths left out; sorted',
  );
  t.equal(p.from, 'source');
});

t.test("the annotation's paths, and nothing else", async (t) => {
  t.same(manifestPaths(app({ path: 'apps/k', helm: { valueFiles: ['../../v.yaml'] } }, '.;/bases/web; ../common ')), {
    paths: ['apps/common', 'apps/k', 'bases/web'],
    from: 'annotation',
    truncated: false,
  });
  t.same(
    manifestPaths(app({ path: 'apps/k' }, '/bases/web')).paths,
    ['bases/web'],
    'without "." the path is not followed',
  );
  t.equal(manifestPaths(app({ path: 'apps/k' }, '.;/')).paths, undefined, '"/" is the whole repository');
  t.same(
    manifestPaths(app({ path: 'apps/k' }, '../../../x;https://x.test/y')).paths,
    ['apps/k'],
    'an annotation naming nothing of the repository: the source path',
  );
  t.same(manifestPaths(app({ path: 'apps/k' }, '   ')).from, 'source', 'a blank annotation is no annotation');
});

t.test('bounded', async (t) => {
  const many = Array.from({ length: MAX_PATHS + 10 }, (_, i) => `/p/${String(i).padStart(3, '0')}`).join(';');
  const p = manifestPaths(app({ path: 'apps/k' }, many));
  t.equal(p.paths?.length, MAX_PATHS, `at most ${MAX_PATHS} paths`);
  t.ok(p.truncated, 'said');
  t.same(
    manifestPaths(app({ path: 'apps/k' }, `/${'x'.repeat(2000)}`)).paths,
    ['apps/k'],
    'an absurdly long path is no path',
  );
});
