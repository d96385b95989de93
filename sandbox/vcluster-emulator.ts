/**
 * vcluster emulation. A real vcluster runs its own API server in a pod of the tenant namespace
 * and exports a kubeconfig into Secret `vc-<release>` (key `config`). Pods cannot run here, so a
 * watcher stands in for what the provisioner relies on:
 *
 *  - it polls the root cluster for the real vcluster chart's StatefulSet (label `app=vcluster`) in
 *    any namespace; when one appears it reads the release's config (Secret `vc-config-<release>`,
 *    the chart's values as the vcluster binary reads them) and starts a separate, real control
 *    plane for that tenant (kube-apiserver on the shared etcd with its own `--etcd-prefix
 *    /vcluster/<namespace>` and its own CA, plus controller-manager, scheduler and KWOK with fake
 *    nodes, so the runtime's Deployments become Available as they would with vcluster's syncer);
 *  - `policies.podSecurityStandard` of that config is enforced as vcluster enforces it: every
 *    namespace of the tenant API server is labelled `pod-security.kubernetes.io/enforce` and
 *    `warn` = the standard (`enforce-version`/`warn-version` latest), as vcluster's pod security
 *    controller does, and the API server's PodSecurity admission enforces the same standard by
 *    default, standing in for vcluster's pod syncer, which refuses to sync a pod that violates it
 *    (so a namespace is never open before its labels are written);
 *  - once that API server is ready it writes the admin kubeconfig, pointing at the loopback
 *    address, into Secret `vc-<release>` key `config` in the tenant namespace;
 *  - suspension (replicas 0) leaves the emulated API server running (see docs/e2e.md);
 *  - when the StatefulSet or the namespace is gone (tenant deleted) it stops that control plane.
 */
import { AppsV1Api, CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import { join } from 'node:path';
import { parse } from 'yaml';
import { startKubeControlPlane, type EtcdEndpoint, type KubeControlPlane, type Toolchain } from './control-plane.ts';
import { sleep, until } from './processes.ts';

type PodSecurityStandard = 'privileged' | 'baseline' | 'restricted';

/** The Pod Security labels vcluster's pod security controller writes on every namespace. */
export function podSecurityLabels(standard: PodSecurityStandard): Record<string, string> {
  return {
    'pod-security.kubernetes.io/enforce': standard,
    'pod-security.kubernetes.io/enforce-version': 'latest',
    'pod-security.kubernetes.io/warn': standard,
    'pod-security.kubernetes.io/warn-version': 'latest',
  };
}

export interface EmulatedVcluster {
  namespace: string;
  release: string;
  plane: KubeControlPlane;
  /** `policies.podSecurityStandard` of the release's config ('' for none). */
  podSecurityStandard: PodSecurityStandard | '';
  /** When the StatefulSet was first seen and when the kubeconfig Secret was written (ms epoch). */
  seenAt: number;
  exportedAt: number;
}

export interface VclusterEmulatorOptions {
  toolchain: Toolchain;
  /** The root cluster's admin kubeconfig. */
  root: KubeConfig;
  /** The shared etcd (each emulated API server under its own prefix). */
  etcd: EtcdEndpoint;
  /** Where each emulated control plane keeps its files. */
  dir: string;
  pollMs?: number;
  /** Fake nodes per emulated cluster. */
  nodes?: number;
  log?: (msg: string) => void;
}

export class VclusterEmulator {
  readonly #options: VclusterEmulatorOptions;
  readonly #apps: AppsV1Api;
  readonly #core: CoreV1Api;
  readonly #clusters = new Map<string, EmulatedVcluster>();
  readonly #starting = new Map<string, Promise<void>>();
  readonly errors: string[] = [];
  #stopped = false;
  #loop: Promise<void> | undefined;

  constructor(o: VclusterEmulatorOptions) {
    this.#options = o;
    this.#apps = o.root.makeApiClient(AppsV1Api);
    this.#core = o.root.makeApiClient(CoreV1Api);
  }

  start(): void {
    this.#loop = this.#run();
  }

  /** The emulated vcluster of a tenant namespace, when running. */
  get(namespace: string): EmulatedVcluster | undefined {
    return this.#clusters.get(namespace);
  }

  namespaces(): string[] {
    return [...this.#clusters.keys()];
  }

  async #run(): Promise<void> {
    while (!this.#stopped) {
      try {
        await this.#tick();
      } catch (err) {
        this.#options.log?.(`vcluster emulator: ${err instanceof Error ? err.message : String(err)}`);
      }
      await sleep(this.#options.pollMs ?? 500);
    }
  }

  async #tick(): Promise<void> {
    const sets = await this.#apps.listStatefulSetForAllNamespaces({ labelSelector: 'app=vcluster' });
    const present = new Set<string>();
    for (const s of sets.items) {
      const ns = s.metadata?.namespace;
      const release = s.metadata?.labels?.release ?? s.metadata?.name;
      if (!ns || !release || s.metadata?.deletionTimestamp) continue;
      present.add(ns);
      if (!this.#clusters.has(ns) && !this.#starting.has(ns)) {
        const p = this.#emulate(ns, release)
          .catch((err: unknown) => {
            const msg = `emulating the vcluster of ${ns} failed: ${err instanceof Error ? err.message : String(err)}`;
            this.errors.push(msg);
            this.#options.log?.(msg);
          })
          .finally(() => this.#starting.delete(ns));
        this.#starting.set(ns, p);
      }
    }
    for (const vc of this.#clusters.values()) {
      if (present.has(vc.namespace) && vc.podSecurityStandard) await this.#labelNamespaces(vc);
    }
    for (const [ns, vc] of this.#clusters) {
      if (present.has(ns)) continue;
      this.#clusters.delete(ns);
      this.#options.log?.(`vcluster ${ns}/${vc.release} is gone: stopping its emulated control plane`);
      await vc.plane.stop();
    }
  }

  /** Labels every namespace of the tenant API server that lacks the standard, as vcluster does. */
  async #labelNamespaces(vc: EmulatedVcluster): Promise<void> {
    const standard = vc.podSecurityStandard;
    if (!standard) return;
    const core = vc.plane.kc.makeApiClient(CoreV1Api);
    for (const ns of (await core.listNamespace()).items) {
      if (ns.metadata?.labels?.['pod-security.kubernetes.io/enforce'] === standard) continue;
      ns.metadata = { ...ns.metadata, labels: { ...ns.metadata?.labels, ...podSecurityLabels(standard) } };
      try {
        await core.replaceNamespace({ name: ns.metadata.name!, body: ns });
      } catch (err) {
        if ((err as { code?: number }).code !== 409) throw err; // changed meanwhile: the next tick retries
      }
    }
  }

  /** `policies.podSecurityStandard` from the release's config Secret (`vc-config-<release>`, key `config.yaml`). */
  async #podSecurityStandard(namespace: string, release: string): Promise<PodSecurityStandard | ''> {
    const name = `vc-config-${release}`;
    const secret = await until(`Secret ${namespace}/${name} (the vcluster's config)`, 60_000, async () =>
      this.#core.readNamespacedSecret({ name, namespace }).catch((err: unknown) => {
        if ((err as { code?: number }).code === 404) return undefined;
        throw err;
      }),
    );
    const text = Buffer.from(secret.data?.['config.yaml'] ?? '', 'base64').toString('utf8');
    const config = (parse(text) ?? {}) as { policies?: { podSecurityStandard?: string } };
    const standard = config.policies?.podSecurityStandard ?? '';
    if (standard !== '' && standard !== 'privileged' && standard !== 'baseline' && standard !== 'restricted')
      throw new Error(`${namespace}/${name}: policies.podSecurityStandard '${standard}' is not one vcluster accepts`);
    return standard;
  }

  async #emulate(namespace: string, release: string): Promise<void> {
    const seenAt = Date.now();
    const podSecurityStandard = await this.#podSecurityStandard(namespace, release);
    this.#options.log?.(
      `vcluster release ${namespace}/${release} appeared: starting its API server (policies.podSecurityStandard: ${podSecurityStandard || 'none'})`,
    );
    const plane = await startKubeControlPlane(this.#options.toolchain, {
      name: `vc-${namespace}`,
      dir: join(this.#options.dir, namespace),
      etcd: this.#options.etcd,
      etcdPrefix: `/vcluster/${namespace}`,
      nodes: this.#options.nodes ?? 2,
      ...(podSecurityStandard ? { podSecurityDefault: podSecurityStandard } : {}),
    });
    if (this.#stopped) {
      await plane.stop();
      return;
    }
    const name = `vc-${release}`;
    const body = {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name, namespace, labels: { 'vcluster.loft.sh/exported-by': 'e2e-emulator' } },
      type: 'Opaque',
      data: { config: Buffer.from(plane.kubeconfig, 'utf8').toString('base64') },
    };
    try {
      await this.#core.createNamespacedSecret({ namespace, body });
    } catch (err) {
      if ((err as { code?: number }).code !== 409) {
        await plane.stop();
        throw err;
      }
      await this.#core.replaceNamespacedSecret({ name, namespace, body });
    }
    const vc: EmulatedVcluster = { namespace, release, plane, podSecurityStandard, seenAt, exportedAt: Date.now() };
    await this.#labelNamespaces(vc);
    this.#clusters.set(namespace, vc);
    this.#options.log?.(
      `vcluster ${namespace}/${release}: API server ${plane.server} ready in ${plane.startSeconds.toFixed(1)} s, kubeconfig exported to Secret ${name}`,
    );
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#loop;
    await Promise.allSettled([...this.#starting.values()]);
    await Promise.allSettled([...this.#clusters.values()].map((vc) => vc.plane.stop()));
    this.#clusters.clear();
  }
}
