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
  refFiles,
} from '../../../runtime/agents/source-server/manifest-paths.ts';
import { gitSources, isMultiSource } from '../../../runtime/agents/source-server/change.ts';

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

t.test('a multi-source Application: each Git source its paths, a ref its value files', async (t) => {
  const application: ArgoApplication = {
    metadata: { name: 'm' },
    spec: {
      sources: [
        {
          repoURL: 'https://charts.example.test',
          chart: 'web',
          targetRevision: '1.2.0',
          helm: { valueFiles: ['$values/envs/prod/web.yaml', '$values/../outside.yaml', '$other/x.yaml'] },
        },
        { repoURL: 'https://git.example.test/config.git', targetRevision: 'main', ref: 'values' },
        { repoURL: 'https://git.example.test/apps.git', path: 'apps/extra', targetRevision: 'main' },
        { repoURL: 'https://git.example.test/unused.git', targetRevision: 'main', ref: 'unused' },
        { repoURL: 'git@git.example.test:org/ssh.git', path: 'apps/ssh' },
      ],
    },
  };
  t.same(refFiles(application.spec!.sources!, 'values'), ['/envs/prod/web.yaml', '/../outside.yaml'], '$values/ files');
  const followed = gitSources(application);
  t.same(
    followed.map((s) => [s.index, s.repoURL, s.paths]),
    [
      [1, 'https://git.example.test/config.git', ['envs/prod/web.yaml']],
      [2, 'https://git.example.test/apps.git', ['apps/extra']],
    ],
    'the ref source follows the value file read through it (not one climbing out), the path source its path; a chart, a ref no source reads and an ssh source are not followed',
  );
  t.equal(followed[0]!.discover, true, 'kustomizations are read for each');
  const sources = application.spec!.sources!;
  const moved = gitSources({
    ...application,
    spec: {
      sources: sources.map((src, i) =>
        i === 0
          ? {
              ...src,
              helm: { valueFiles: ['$values/envs/prod/web.yaml'], parameters: [{ name: 'replicas', value: '3' }] },
            }
          : src,
      ),
    },
  });
  t.not(
    moved[0]!.specHash,
    followed[0]!.specHash,
    'what a source generates depends on the other sources’ specs: a chart parameter changes every hash',
  );
  t.equal(isMultiSource(application), true);
  t.equal(isMultiSource({ spec: { source: { repoURL: 'https://git.example.test/a.git' } } }), false);
});

t.test('the annotation applies to each source with a path, relative to it', async (t) => {
  const followed = gitSources({
    metadata: { name: 'm', annotations: { [MANIFEST_PATHS_ANNOTATION]: '.;../shared' } },
    spec: {
      sources: [
        { repoURL: 'https://git.example.test/a.git', path: 'apps/one' },
        { repoURL: 'https://git.example.test/b.git', path: 'apps/two' },
      ],
    },
  });
  t.same(
    followed.map((s) => [s.paths, s.discover]),
    [
      [['apps/one', 'apps/shared'], false],
      [['apps/shared', 'apps/two'], false],
    ],
  );
});
