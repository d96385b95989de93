/**
 * vcluster emulation. A real vcluster runs its own API server in a pod of the tenant namespace
 * and exports a kubeconfig into Secret `vc-<release>` (key `config`). Pods cannot run here, so a
 * watcher stands in for what the provisioner relies on:
 *
 *  - it polls the root cluster for the vcluster chart's StatefulSet (label `app=vcluster`) in
 *    any namespace; when one appears it starts a separate, real control plane for that tenant
 *    (kube-apiserver on the shared etcd with its own `--etcd-prefix /vcluster/<namespace>` and its
 *    own CA, plus controller-manager, scheduler and KWOK with fake nodes, so the runtime's
 *    Deployments become Available as they would with vcluster's syncer);
 *  - once that API server is ready it writes the admin kubeconfig, pointing at the loopback
 *    address, into Secret `vc-<release>` key `config` in the tenant namespace;
 *  - suspension (replicas 0) leaves the emulated API server running (see docs/e2e.md);
 *  - when the StatefulSet or the namespace is gone (tenant deleted) it stops that control plane.
 */
import { AppsV1Api, CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import { join } from 'node:path';
import { startKubeControlPlane, type KubeControlPlane, type Toolchain } from './control-plane.ts';
import { sleep } from './processes.ts';

export interface EmulatedVcluster {
  namespace: string;
  release: string;
  plane: KubeControlPlane;
  /** When the StatefulSet was first seen and when the kubeconfig Secret was written (ms epoch). */
  seenAt: number;
  exportedAt: number;
}

export interface VclusterEmulatorOptions {
  toolchain: Toolchain;
  /** The root cluster's admin kubeconfig. */
  root: KubeConfig;
  etcdUrl: string;
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
    for (const [ns, vc] of this.#clusters) {
      if (present.has(ns)) continue;
      this.#clusters.delete(ns);
      this.#options.log?.(`vcluster ${ns}/${vc.release} is gone: stopping its emulated control plane`);
      await vc.plane.stop();
    }
  }

  async #emulate(namespace: string, release: string): Promise<void> {
    const seenAt = Date.now();
    this.#options.log?.(`vcluster release ${namespace}/${release} appeared: starting its API server`);
    const plane = await startKubeControlPlane(this.#options.toolchain, {
      name: `vc-${namespace}`,
      dir: join(this.#options.dir, namespace),
      etcdUrl: this.#options.etcdUrl,
      etcdPrefix: `/vcluster/${namespace}`,
      nodes: this.#options.nodes ?? 2,
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
    this.#clusters.set(namespace, { namespace, release, plane, seenAt, exportedAt: Date.now() });
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
