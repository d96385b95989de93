/**
 * `provisioner runtime diff`'s comparison (runtime/render/diff.ts): a changed setting inside a
 * Secret's base64 config file or a ConfigMap's YAML shows as its own path with both values, as ops
 * review it before an upgrade, instead of two opaque strings.
 */
import t from 'tap';
import { diffRuntimes, formatDiff } from '../../runtime/render/diff.ts';
import type { KubeObject, RenderedRuntime } from '../../runtime/render/render.ts';

const b64 = (s: string) => Buffer.from(s, 'utf8').toString('base64');

function runtime(version: string, objects: KubeObject[]): RenderedRuntime {
  return {
    version,
    plan: 'free',
    releases: [{ release: 'vcluster', chart: 'vcluster', chartVersion: version, namespace: 'tenant-a', objects }],
    root: [],
    agents: [],
  } as unknown as RenderedRuntime;
}

const secret = (config: string, extra: Record<string, string> = {}): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Secret',
  metadata: { name: 'vc-config-vcluster', namespace: 'tenant-a' },
  data: { 'config.yaml': b64(config), ...extra },
});
const configMap = (yaml: string): KubeObject => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name: 'settings', namespace: 'tenant-a' },
  data: { 'settings.yaml': yaml, plain: 'same' },
});

const before = runtime('0.26.0', [
  secret('controlPlane:\n  distro:\n    k8s:\n      image:\n        tag: v1.32.1\n', { token: b64('abc') }),
  configMap('a: 1\nb:\n  c: true\n'),
]);
const after = runtime('0.27.1', [
  secret('controlPlane:\n  distro:\n    k8s:\n      image:\n        tag: v1.33.4\n', { token: b64('abd') }),
  configMap('a: 1\nb:\n  c: false\n'),
]);

const [vcluster] = diffRuntimes(before, after);
const fields = (object: string) => vcluster!.changed.find((c) => c.object === object)?.fields ?? [];

t.same(
  fields('Secret tenant-a/vc-config-vcluster'),
  [
    { path: 'data.config.yaml.controlPlane.distro.k8s.image.tag', from: 'v1.32.1', to: 'v1.33.4' },
    { path: 'data.token', from: 'abc', to: 'abd' },
  ],
  "a Secret's base64 config file is compared setting by setting, a short text value decoded",
);
t.same(
  fields('ConfigMap tenant-a/settings'),
  [{ path: 'data.settings.yaml.b.c', from: true, to: false }],
  "a ConfigMap's YAML is compared setting by setting; an unchanged plain value is not listed",
);
const text = formatDiff([vcluster!]).join('\n');
t.match(
  text,
  'data.config.yaml.controlPlane.distro.k8s.image.tag: v1.32.1 -> v1.33.4',
  'the text output names the setting with both values',
);

const binary = Buffer.from([0xff, 0xfe, 0x00, 0x01]).toString('base64');
const [bin] = diffRuntimes(
  runtime('1', [secret('x: 1\n', { key: binary })]),
  runtime('2', [secret('x: 1\n', { key: Buffer.from([0xff, 0x00]).toString('base64') })]),
);
t.same(
  bin!.changed[0]?.fields.map((f) => f.path),
  ['data.key'],
  'binary Secret data is compared as it is stored (base64), not decoded into garbage',
);
t.equal(bin!.changed[0]?.fields[0]?.from, binary, 'the base64 value is shown');
