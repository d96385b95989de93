/**
 * How the Source Server compares manifests (runtime/agents/source-server/diff.ts): fields named by
 * path (list items by name), images before → after, Secret values never returned, what the API
 * server writes ignored, and a change kept within the report limits.
 */
import t from 'tap';
import {
  boundChange,
  boundDiff,
  changedFields,
  compareResources,
  manifestsByKey,
  SECRET_MASK,
} from '../../../runtime/agents/source-server/diff.ts';
import {
  type ApplicationChange,
  MAX_CHANGE_BYTES,
  MAX_CHANGED_FIELDS,
  MAX_CHANGED_RESOURCES,
  MAX_IMAGE_CHANGES,
  type ResourceChange,
} from '../../../runtime/protocol/sources.ts';

type Obj = Record<string, unknown>;

function deployment(image: string, extra: Obj = {}): Obj {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'web', namespace: 'shop', labels: { 'app.kubernetes.io/name': 'web' } },
    spec: {
      replicas: 2,
      template: {
        spec: {
          initContainers: [{ name: 'migrate', image: 'registry.example/migrate:1' }],
          containers: [
            { name: 'web', image, env: [{ name: 'LOG_LEVEL', value: 'info' }] },
            { name: 'sidecar', image: 'registry.example/proxy:3' },
          ],
        },
      },
    },
    ...extra,
  };
}

const texts = (...objs: Obj[]): string[] => objs.map((o) => JSON.stringify(o));

t.test('an image tag change: one field, named by container, and the image before → after', async (t) => {
  const before = manifestsByKey(texts(deployment('registry.example/web:1.0')));
  const after = manifestsByKey(texts(deployment('registry.example/web:1.1')));
  const { resources, images } = compareResources(before, after);
  t.equal(resources.length, 1, 'one resource differs');
  t.match(
    resources[0],
    { group: 'apps', kind: 'Deployment', namespace: 'shop', name: 'web', action: 'modified' },
    'the Deployment, modified',
  );
  t.same(resources[0]!.fields, ['spec.template.spec.containers[name=web].image'], 'exactly the image field');
  t.same(
    images,
    [
      {
        resource: 'Deployment/shop/web',
        container: 'web',
        before: 'registry.example/web:1.0',
        after: 'registry.example/web:1.1',
      },
    ],
    'the image moved from 1.0 to 1.1',
  );
});

t.test('field paths: nested keys, keys with dots, list items by name or by index', async (t) => {
  const a = deployment('x', { data: { list: [1, 2] } });
  const b = structuredClone(a) as Obj & { spec: Obj; metadata: Obj; data: Obj };
  b.spec.replicas = 3;
  (b.metadata as { labels: Obj }).labels['app.kubernetes.io/name'] = 'shop';
  (b.spec as { template: { spec: { containers: Obj[] } } }).template.spec.containers[0]!.env = [
    { name: 'LOG_LEVEL', value: 'debug' },
    { name: 'NEW', value: '1' },
  ];
  b.data = { list: [1, 3, 4] };
  t.same(
    changedFields(a, b),
    [
      'metadata.labels["app.kubernetes.io/name"]',
      'spec.replicas',
      'spec.template.spec.containers[name=web].env[name=LOG_LEVEL].value',
      'spec.template.spec.containers[name=web].env[name=NEW]',
      'data.list[1]',
      'data.list[2]',
    ],
    'each differing leaf by path; a new list item by its name; lists without names by index',
  );
  t.same(changedFields(a, structuredClone(a)), [], 'identical objects: no field');
  t.same(changedFields({ a: { b: 1 } }, { a: 'x' }), ['a'], 'an object replaced by a value is named once');
});

t.test('what the API server writes is ignored', async (t) => {
  const git = deployment('x');
  const live = deployment('x', {
    status: { readyReplicas: 2 },
    metadata: {
      name: 'web',
      namespace: 'shop',
      labels: { 'app.kubernetes.io/name': 'web' },
      uid: 'u-1',
      resourceVersion: '77',
      generation: 4,
      creationTimestamp: '2026-01-01T00:00:00Z',
      managedFields: [{ manager: 'kubectl' }],
      annotations: { 'kubectl.kubernetes.io/last-applied-configuration': '{}' },
    },
  });
  const { resources } = compareResources(manifestsByKey(texts(git)), manifestsByKey(texts(live)));
  t.same(
    resources,
    [],
    'status, uid, resourceVersion, generation, creationTimestamp, managedFields, last-applied: no difference',
  );
  const annotated = deployment('x', {
    metadata: {
      name: 'web',
      namespace: 'shop',
      labels: { 'app.kubernetes.io/name': 'web' },
      annotations: { 'kubectl.kubernetes.io/last-applied-configuration': '{}', team: 'a' },
    },
  });
  const other = compareResources(manifestsByKey(texts(git)), manifestsByKey(texts(annotated)));
  t.same(other.resources[0]?.fields, ['metadata.annotations'], 'another annotation is still a difference');
});

t.test('Secret values never come back; the keys that changed are named', async (t) => {
  const secret = (password: string): Obj => ({
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: 'db', namespace: 'shop' },
    data: { PASSWORD: Buffer.from(password).toString('base64'), USER: 'YWRtaW4=' },
    stringData: { TOKEN: `token-${password}` },
  });
  const { resources } = compareResources(
    manifestsByKey(texts(secret('hunter2'))),
    manifestsByKey(texts(secret('correct-horse'))),
  );
  t.same(resources[0]?.fields, ['data.PASSWORD', 'stringData.TOKEN'], 'the differing keys are named');
  const answer = JSON.stringify(resources);
  for (const leaked of ['hunter2', 'correct-horse', 'aHVudGVyMg', 'Y29ycmVjdC1ob3JzZQ', 'YWRtaW4='])
    t.notOk(answer.includes(leaked), `no value (${leaked.slice(0, 4)}…) in the answer`);
  t.same(resources[0]?.after?.data, { PASSWORD: SECRET_MASK, USER: SECRET_MASK }, 'every data value is the mask');
  const added = compareResources(new Map(), manifestsByKey(texts(secret('hunter2'))));
  t.notOk(JSON.stringify(added).includes('aHVudGVyMg'), 'an added Secret is masked as well');
});

t.test('added and removed resources, images of every workload kind', async (t) => {
  const cron: Obj = {
    apiVersion: 'batch/v1',
    kind: 'CronJob',
    metadata: { name: 'nightly', namespace: 'shop' },
    spec: { jobTemplate: { spec: { template: { spec: { containers: [{ name: 'job', image: 'job:1' }] } } } } },
  };
  const cm: Obj = {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: 'cfg', namespace: 'shop' },
    data: { a: '1' },
  };
  const { resources, images } = compareResources(manifestsByKey(texts(cm)), manifestsByKey(texts(cron)));
  t.same(
    resources.map((r) => [r.kind, r.action, r.fields.length]),
    [
      ['ConfigMap', 'removed', 0],
      ['CronJob', 'added', 0],
    ],
    'the ConfigMap removed, the CronJob added, no fields for either',
  );
  t.same(
    images,
    [{ resource: 'CronJob/shop/nightly', container: 'job', after: 'job:1' }],
    'the CronJob’s image, added',
  );
});

t.test('field paths per resource are capped', async (t) => {
  const many = (v: number): Obj => ({
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: 'big', namespace: 'shop' },
    data: Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`k${i}`, String(v)])),
  });
  const { resources } = compareResources(manifestsByKey(texts(many(1))), manifestsByKey(texts(many(2))));
  t.equal(resources[0]?.fields.length, MAX_CHANGED_FIELDS, `at most ${MAX_CHANGED_FIELDS} fields`);
  t.equal(resources[0]?.fieldsTruncated, true, 'and says more were left out');
});

t.test('a change stays within the report limits', async (t) => {
  const resource = (i: number): ResourceChange => ({
    group: 'apps',
    kind: 'Deployment',
    namespace: 'shop',
    name: `web-${i}`,
    action: 'modified',
    fields: Array.from({ length: 30 }, (_, j) => `spec.template.spec.containers[name=c${j}].image`),
  });
  const change: ApplicationChange = {
    revision: 'a'.repeat(40),
    changeRevision: 'a'.repeat(40),
    resources: Array.from({ length: 150 }, (_, i) => resource(i)),
    images: Array.from({ length: 80 }, (_, i) => ({
      resource: `Deployment/shop/web-${i}`,
      container: 'c',
      before: 'a',
      after: 'b',
    })),
    truncated: false,
  };
  const bounded = boundChange(change);
  const size = Buffer.byteLength(JSON.stringify(bounded));
  t.ok(size <= MAX_CHANGE_BYTES, `the serialized change is within ${MAX_CHANGE_BYTES} bytes (${size})`);
  t.equal(bounded.truncated, true, 'truncated is set');
  t.ok(bounded.resources.length <= MAX_CHANGED_RESOURCES, `at most ${MAX_CHANGED_RESOURCES} resources`);
  t.ok(bounded.images.length <= MAX_IMAGE_CHANGES, `at most ${MAX_IMAGE_CHANGES} images`);
  t.ok(
    bounded.resources.every((r) => r.fields.length <= MAX_CHANGED_FIELDS),
    `at most ${MAX_CHANGED_FIELDS} fields each`,
  );
  t.equal(bounded.resources[0]?.name, change.resources[0]!.name, 'the first resources are the ones kept');
  t.ok(
    bounded.resources[0]!.fields.length > 0,
    'the first resources keep their fields: the last ones lose theirs first',
  );
  t.same(change.resources[0]!.fields.length, 30, 'the input is not changed');

  const small = boundChange({
    ...change,
    resources: [resource(1)].map((r) => ({ ...r, fields: ['spec.replicas'] })),
    images: [],
  });
  t.equal(small.truncated, false, 'a change within the limits is not truncated');
});

t.test('a diff answer past its budget leaves out the objects of the last resources', async (t) => {
  const big = (i: number) => ({
    group: '',
    kind: 'ConfigMap',
    namespace: 'shop',
    name: `cm-${i}`,
    action: 'added' as const,
    fields: [],
    before: null,
    after: { data: { blob: 'x'.repeat(1000) } },
  });
  const { resources, truncated } = boundDiff([big(1), big(2), big(3)], 2500);
  t.equal(truncated, true, 'truncated is set');
  t.same(
    resources.map((r) => r.after !== null),
    [true, true, false],
    'the first two keep their objects, the last one is named without them',
  );
});
