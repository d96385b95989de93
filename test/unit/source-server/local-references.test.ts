/**
 * The folders and files outside an application's source path that its kustomization or
 * Chart.yaml builds on (runtime/agents/source-server/local-references.ts), read from a
 * repository's tree at one commit: bases of overlays, bases of bases, components, patches and
 * generators' files, local chart dependencies; never a remote base, a path leaving the
 * repository, a name the tree does not have, or what a followed path already covers.
 * The tree here is a map of files (the integration tier reads a real Git server's).
 */
import { createHash } from 'node:crypto';
import t from 'tap';
import {
  chartReferences,
  kustomizationReferences,
  localReferences,
  MAX_FOLDERS,
  type RepositoryTree,
} from '../../../runtime/agents/source-server/local-references.ts';

/** A repository at one commit, from its files' paths and texts; folders are implied. */
function treeOf(files: Record<string, string>): RepositoryTree {
  const oid = (s: string) => createHash('sha1').update(s).digest('hex');
  const blobs = new Map<string, string>();
  const entries = new Map<string, { type: 'blob' | 'tree'; oid: string }>();
  for (const [path, text] of Object.entries(files)) {
    blobs.set(oid(text), text);
    entries.set(path, { type: 'blob', oid: oid(text) });
    const parts = path.split('/');
    for (let i = 1; i < parts.length; i++) {
      const folder = parts.slice(0, i).join('/');
      entries.set(folder, { type: 'tree', oid: oid(`tree:${folder}`) });
    }
  }
  return {
    entries: async (paths) => new Map(paths.flatMap((p) => (entries.has(p) ? [[p, entries.get(p)!] as const] : []))),
    text: async (id) => {
      const text = blobs.get(id);
      if (text === undefined) throw new Error(`no blob ${id}`);
      return text;
    },
  };
}

t.test("an overlay's base outside the path, and the base's own base", async (t) => {
  const tree = treeOf({
    'apps/web/overlays/prod/kustomization.yaml': 'resources:\n  - ../../base\n  - ingress.yaml\n',
    'apps/web/overlays/prod/ingress.yaml': 'kind: Ingress\n',
    'apps/web/base/kustomization.yaml': 'resources:\n  - deploy.yaml\n  - ../../../bases/common\n',
    'apps/web/base/deploy.yaml': 'kind: Deployment\n',
    'bases/common/kustomization.yaml': 'resources: [ns.yaml]\n',
    'bases/common/ns.yaml': 'kind: Namespace\n',
    'bases/other/kustomization.yaml': 'resources: [x.yaml]\n',
  });
  const found = await localReferences(tree, ['apps/web/overlays/prod'], ['apps/web/overlays/prod']);
  t.same(found, { paths: ['apps/web/base', 'bases/common'], truncated: false }, 'the base and its base, nothing else');
});

t.test('what a kustomization names by path, in every field Kustomize reads one', async (t) => {
  const refs = kustomizationReferences({
    resources: ['../base', 'https://github.com/org/repo//deploy?ref=v1', 'local.yaml'],
    bases: ['../old-base'],
    components: ['../../components/tls'],
    crds: ['crds/x.yaml'],
    patchesStrategicMerge: ['../../patches/sm.yaml', 'kind: ConfigMap\nmetadata:\n  name: inline\n'],
    patches: [{ path: '../../patches/p.yaml' }, { patch: 'inline: true' }],
    patchesJson6902: [{ path: 'json.yaml', target: {} }],
    replacements: [{ path: '../../replacements.yaml' }],
    configMapGenerator: [
      { name: 'c', files: ['app.conf', 'key=../../shared/app.properties'], envs: ['../../env/prod.env'] },
    ],
    secretGenerator: [{ name: 's', env: 'secret.env' }],
    generators: ['../../generators/g.yaml'],
    transformers: ['../../transformers/t.yaml'],
    configurations: ['../../config/c.yaml'],
    helmGlobals: { chartHome: '../../charts' },
    openapi: { path: '../../schema.json' },
  });
  for (const expected of [
    '../base',
    '../old-base',
    '../../components/tls',
    'crds/x.yaml',
    '../../patches/sm.yaml',
    '../../patches/p.yaml',
    'json.yaml',
    '../../replacements.yaml',
    'app.conf',
    '../../shared/app.properties',
    '../../env/prod.env',
    'secret.env',
    '../../generators/g.yaml',
    '../../transformers/t.yaml',
    '../../config/c.yaml',
    '../../charts',
    '../../schema.json',
  ])
    t.ok(refs.includes(expected), `names ${expected}`);
  t.notOk(
    refs.some((r) => r.includes('\n')),
    'an inline patch is not a path',
  );
  t.same(kustomizationReferences('resources: [a]'), [], 'a text that is not a mapping names nothing');
  t.same(
    kustomizationReferences({ resources: 'not-a-list', patches: 'x' }),
    ['not-a-list'],
    'a single string is read as Kustomize reads it',
  );
});

t.test('a component, a patch file and a generator file outside the path are followed as files', async (t) => {
  const tree = treeOf({
    'apps/api/kustomization.yaml': [
      'resources: [deploy.yaml]',
      'components: [../../components/tls]',
      'patches:',
      '  - path: ../../patches/replicas.yaml',
      'configMapGenerator:',
      '  - name: cfg',
      '    files: [app.conf=../../shared/app.conf]',
      '',
    ].join('\n'),
    'apps/api/deploy.yaml': 'kind: Deployment\n',
    'components/tls/kustomization.yaml': 'kind: Component\nresources: [cert.yaml]\n',
    'components/tls/cert.yaml': 'kind: Certificate\n',
    'patches/replicas.yaml': 'spec: {replicas: 3}\n',
    'shared/app.conf': 'x=1\n',
  });
  const found = await localReferences(tree, ['apps/api'], ['apps/api']);
  t.same(found.paths, ['components/tls', 'patches/replicas.yaml', 'shared/app.conf']);
});

t.test('a Helm chart with a local dependency', async (t) => {
  t.same(
    chartReferences({
      dependencies: [
        { name: 'common', repository: 'file://../../charts/common' },
        { name: 'redis', repository: 'https://charts.example.test' },
        { name: 'no-repo' },
      ],
    }),
    ['../../charts/common'],
    'only file:// repositories',
  );
  const tree = treeOf({
    'apps/chart/Chart.yaml':
      'apiVersion: v2\nname: web\ndependencies:\n  - name: common\n    repository: file://../../charts/common\n',
    'charts/common/Chart.yaml': 'apiVersion: v2\nname: common\n',
    'charts/common/templates/_helpers.tpl': '{{/* */}}\n',
  });
  t.same((await localReferences(tree, ['apps/chart'], ['apps/chart'])).paths, ['charts/common']);
});

t.test('never a remote base, a path leaving the repository, a missing name, or what is covered', async (t) => {
  const tree = treeOf({
    'apps/a/kustomization.yaml': [
      'resources:',
      '  - github.com/org/repo//deploy?ref=v1',
      '  - https://example.test/manifest.yaml',
      '  - ../../../../outside',
      '  - ../missing',
      '  - sub',
      '  - ../../values/a.yaml',
      '',
    ].join('\n'),
    'apps/a/sub/kustomization.yaml': 'resources: [../../../shared/x]\n',
    'shared/x/cm.yaml': 'kind: ConfigMap\n',
    'values/a.yaml': 'a: 1\n',
  });
  const found = await localReferences(tree, ['apps/a'], ['apps/a', 'values/a.yaml']);
  t.same(
    found.paths,
    ['shared/x'],
    'a folder inside the path is read (its own base is outside); covered paths and missing names are not added',
  );
  const root = treeOf({ 'kustomization.yaml': 'resources: [apps/a]\n', 'apps/a/cm.yaml': 'kind: ConfigMap\n' });
  t.same((await localReferences(root, [''], [''])).paths, [], 'at the repository root everything is covered');
});

t.test('a folder found replaces the files found inside it; cycles end', async (t) => {
  const tree = treeOf({
    'apps/a/kustomization.yaml': 'resources: [../../shared/one.yaml, ../../shared]\n',
    'shared/kustomization.yaml': 'resources: [one.yaml, ../apps/b]\n',
    'shared/one.yaml': 'kind: ConfigMap\n',
    'apps/b/kustomization.yaml': 'resources: [../../shared]\n',
  });
  const found = await localReferences(tree, ['apps/a'], ['apps/a']);
  t.same(found, { paths: ['apps/b', 'shared'], truncated: false });
});

t.test('a large or broken file is not followed, and the folders read are bounded', async (t) => {
  const same = 'resources: [../../shared]\n';
  const tree = treeOf({
    'apps/a/kustomization.yaml': 'resources: [../b]\n',
    'apps/b/kustomization.yaml': same,
    'shared/kustomization.yaml': `resources: [x.yaml]\n# ${'x'.repeat(300 * 1024)}\n`,
    'apps/c/kustomization.yaml': 'resources: [../../shared\n',
  });
  const found = await localReferences(tree, ['apps/a'], ['apps/a']);
  t.same(
    found.paths,
    ['apps/b', 'shared'],
    'the large file names a folder that is still followed, its own content is not read',
  );
  const broken = await localReferences(tree, ['apps/c'], ['apps/c']);
  t.same(broken.paths, [], 'YAML that does not parse names nothing');

  const chain: Record<string, string> = {};
  for (let i = 0; i < MAX_FOLDERS + 5; i++) chain[`f${i}/kustomization.yaml`] = `resources: [../f${i + 1}]\n`;
  chain[`f${MAX_FOLDERS + 5}/cm.yaml`] = 'kind: ConfigMap\n';
  const long = await localReferences(treeOf(chain), ['f0'], ['f0']);
  t.equal(long.truncated, true, 'more folders than MAX_FOLDERS: said');
  t.equal(long.paths.length, MAX_FOLDERS, `the ${MAX_FOLDERS} folders read named one each`);
});
