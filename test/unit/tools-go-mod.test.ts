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

/**
 * module path → the version a build uses, from a go.mod's require directives (block or single
 * line), with its replace directives applied where they name a version (`mod => mod vX`).
 */
async function requires(dir: string): Promise<Map<string, string>> {
  const text = await readFile(new URL(`tools/${dir}/go.mod`, root), 'utf8');
  const out = new Map<string, string>();
  const replaced = new Map<string, string>();
  let block = '';
  for (const raw of text.split('\n')) {
    const line = raw.replace(/\/\/.*$/, '').trim();
    if (line === 'require (' || line === 'replace (') block = line.split(' ')[0]!;
    else if (block && line === ')') block = '';
    else {
      const directive = block || line.split(/\s+/)[0]!;
      const rest = block ? line : line.slice(directive.length).trim();
      const req = /^(\S+)\s+(v\S+)$/.exec(rest);
      const rep = /^(\S+)(?:\s+v\S+)?\s+=>\s+\S+\s+(v\S+)$/.exec(rest);
      if (directive === 'require' && req) out.set(req[1]!, req[2]!);
      if (directive === 'replace' && rep) replaced.set(rep[1]!, rep[2]!);
    }
  }
  for (const [mod, version] of replaced) if (out.has(mod)) out.set(mod, version);
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

t.test('Argo CD builds every module it shares with the provider plugin and helm at their version', async (t) => {
  const argocd = await requires('argocd');
  const provider = await requires('pulumi-kubernetes');
  const helm = await requires('chart-tools/helm');
  t.equal(argocd.get('github.com/argoproj/argo-cd/v3'), 'v3.1.5', 'tools/argocd builds Argo CD v3.1.5');
  t.equal(
    argocd.get('k8s.io/client-go'),
    provider.get('k8s.io/client-go'),
    'one client-go: Argo CD’s (replaced to a version) is the plugin’s',
  );
  t.same(differences(argocd, provider), [], 'no module Argo CD and the plugin require is at two versions');
  t.same(differences(argocd, helm), [], 'no module Argo CD and helm require is at two versions');
});

t.test(
  'the Argo Workflows controller builds the Kubernetes client and gRPC modules at Argo CD’s versions',
  async (t) => {
    const workflows = await requires('argo-workflows');
    const argocd = await requires('argocd');
    t.equal(
      workflows.get('github.com/argoproj/argo-workflows/v3'),
      'v3.7.2',
      'tools/argo-workflows builds Argo Workflows v3.7.2',
    );
    // The modules whose packages most of the controller's build is: equal, so that a cold run
    // compiles them once (for Argo CD, before it) and the controller's build reuses them.
    const shared = [
      'k8s.io/api',
      'k8s.io/apimachinery',
      'k8s.io/client-go',
      'k8s.io/kube-openapi',
      'k8s.io/utils',
      'sigs.k8s.io/yaml',
      'golang.org/x/net',
      'golang.org/x/sys',
      'golang.org/x/text',
      'google.golang.org/grpc',
      'google.golang.org/protobuf',
      'google.golang.org/genproto/googleapis/rpc',
    ];
    t.same(
      shared
        .filter((m) => workflows.get(m) !== argocd.get(m))
        .map((m) => `${m}: ${workflows.get(m)} and ${argocd.get(m)}`),
      [],
      'each at one version in both',
    );
  },
);

t.test('the Argo Rollouts controller builds every module it shares with Argo CD at Argo CD’s version', async (t) => {
  const rollouts = await requires('argo-rollouts');
  const argocd = await requires('argocd');
  t.equal(
    rollouts.get('github.com/argoproj/argo-rollouts'),
    'v1.8.3',
    'tools/argo-rollouts builds Argo Rollouts v1.8.3',
  );
  t.equal(
    rollouts.get('k8s.io/kubernetes'),
    argocd.get('k8s.io/kubernetes'),
    'one k8s.io/kubernetes: the controller imports some of its packages, as Argo CD does',
  );
  t.equal(rollouts.get('k8s.io/client-go'), argocd.get('k8s.io/client-go'), 'one client-go');
  // Every shared module, not a list: the controller's build is Kubernetes, gRPC, the cloud SDKs
  // and the notifications engine, nearly all of which Argo CD's build compiled before it.
  t.same(differences(rollouts, argocd), [], 'no module the controller and Argo CD require is at two versions');
});

t.test(
  'the API servers build every module they share with vcluster at vcluster’s version, and etcd at theirs',
  async (t) => {
    const kubernetes = await requires('kubernetes');
    const vcluster = await requires('vcluster-0.34.0');
    const etcd = await requires('etcd');
    t.equal(kubernetes.get('k8s.io/kubernetes'), 'v1.35.0', 'tools/kubernetes builds Kubernetes v1.35.0');
    t.equal(
      kubernetes.get('k8s.io/kubernetes'),
      vcluster.get('k8s.io/kubernetes'),
      'one k8s.io/kubernetes: vcluster links its packages, the API servers are built from it',
    );
    // k8s.io/kube-proxy: the API servers map it, as every staging module, to v0.35.0; vcluster's
    // module graph resolves v0.33.0. One package of it is in both builds.
    t.same(
      differences(kubernetes, vcluster, 'k8s.io/kube-proxy'),
      [],
      'no other module the API servers and vcluster require is at two versions',
    );
    t.equal(etcd.get('go.etcd.io/etcd/server/v3'), 'v3.6.7', 'tools/etcd builds etcd v3.6.7');
    t.same(differences(etcd, kubernetes), [], 'no module etcd and the API servers require is at two versions');
  },
);

t.test(
  'pod-security (chart tools) builds the API servers’ Kubernetes, every shared module at their version',
  async (t) => {
    const podSecurity = await requires('chart-tools/pod-security');
    const kubernetes = await requires('kubernetes');
    t.equal(
      podSecurity.get('k8s.io/pod-security-admission'),
      kubernetes.get('k8s.io/pod-security-admission'),
      'the evaluator is the PodSecurity admission of the API servers the e2e tier runs',
    );
    t.same(
      differences(podSecurity, kubernetes),
      [],
      'no module pod-security and the API servers require is at two versions',
    );
  },
);
