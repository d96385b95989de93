/**
 * A hybrid runtime's in-cluster upgrader (`upgrades: agent`). Every POLL_SECONDS it asks the
 * control plane, with the runtime key, for the upgrade it is to apply (runtime/protocol/upgrade.ts).
 * When there is one it reports `applying`, server-side applies the plan's objects with its own
 * ServiceAccount (the install granted it get and patch of the agents' Deployments and the versions
 * ConfigMap, by name, nothing else), and waits for every patched Deployment to roll out. Then:
 *
 *  - rolled out: it reports `succeeded`, then patches its own Deployment when the plan changes it
 *    (last: that restarts it);
 *  - a Deployment reports a failure (ReplicaFailure, ProgressDeadlineExceeded), an apply is
 *    refused, or ROLLOUT_TIMEOUT_SECONDS pass: it applies the plan's rollback (the same objects as
 *    the version before had them), waits for that rollout, and reports `rolled-back` with what
 *    failed; if the rollback fails too, `failed` with both reasons.
 *
 * Restarted in the middle (the pod moved), it finds the upgrade `applying` and applies it again:
 * a server-side apply of the same objects changes nothing. It only ever patches objects of the
 * kinds it is granted, in its own namespace: anything else in a plan fails the upgrade unapplied.
 *
 * Before it applies anything (and before it reports `applying`) it reads every object of the plan
 * and of its rollback from the API server and accepts only the changes a version upgrade makes
 * (runtime/protocol/upgrade-check.ts: images within the repository each container runs from, the
 * version variables, resources, the versions ConfigMap's data). Any other difference, such as
 * another ServiceAccount, volume or Secret mount, fails the upgrade unapplied, and the report
 * names the object and the field.
 */
import type { Server } from 'node:http';
import type { Logger } from 'pino';
import type { KubeTransport } from '../../kube/transport.ts';
import {
  UPGRADER,
  UPGRADER_PATH,
  type PlannedObject,
  type UpgraderAssignment,
  type UpgraderReport,
  type UpgraderReportBody,
  VERSIONS_CONFIGMAP,
} from '../../protocol/upgrade.ts';
import { planRefusal } from '../../protocol/upgrade-check.ts';
import { AgentHealth, healthServer } from '../common/health.ts';
import { closeServer, listen } from '../common/service.ts';
import { PeriodicLoop } from '../../loops/periodic.ts';
import { wait as sleep } from '../../loops/wait.ts';
import type { UpgraderConfig } from './config.ts';

/** The field manager of the upgrader's server-side applies. */
export const FIELD_MANAGER = 'hosted-runtimes-upgrader';

export interface UpgraderDeps {
  config: UpgraderConfig;
  kube: KubeTransport;
  log: Logger;
  /** Milliseconds between rollout checks (default 2,000). */
  rolloutPollMs?: number;
}

/** The outcome of one cycle. */
export type CycleResult = 'idle' | UpgraderReport | 'superseded';

class UpgradeFailure extends Error {}
/** The control plane says the upgrade is no longer the one asked (409): stop, pick up the new one next cycle. */
class Superseded extends Error {}

const PATHS: Record<string, (ns: string, name: string) => string> = {
  'apps/v1/Deployment': (ns, name) => `/apis/apps/v1/namespaces/${ns}/deployments/${encodeURIComponent(name)}`,
  'v1/ConfigMap': (ns, name) => `/api/v1/namespaces/${ns}/configmaps/${encodeURIComponent(name)}`,
};

const describe = (o: PlannedObject) => `${o.kind} ${o.metadata.namespace ?? ''}/${o.metadata.name}`;
const objectKey = (o: PlannedObject) => `${o.apiVersion}/${o.kind}/${o.metadata.name}`;

export class Upgrader {
  readonly #config: UpgraderConfig;
  readonly #kube: KubeTransport;
  readonly #log: Logger;
  readonly #rolloutPollMs: number;
  #server: Server | undefined;
  /** A cycle every POLL_SECONDS (runtime/loops/periodic.ts): one at a time, and close() waits for the one in flight. */
  readonly loop: PeriodicLoop;
  /** /readyz: ready while the last cycle reached the control plane and cycles keep ending. */
  readonly health: AgentHealth;

  constructor(deps: UpgraderDeps) {
    this.#config = deps.config;
    this.#kube = deps.kube;
    this.#log = deps.log;
    this.#rolloutPollMs = deps.rolloutPollMs ?? 2_000;
    // Jitter: runtimes started together do not ask together.
    const poll = () => this.#config.pollSeconds * 1000 * (0.8 + Math.random() * 0.4);
    this.loop = new PeriodicLoop({
      name: 'upgrader',
      round: async () => {
        await this.cycle();
      },
      intervalMs: poll,
      retryMs: poll,
      onFailure: (err) => {
        this.#log.warn({ err: (err as Error).message }, 'upgrade check failed; trying again');
      },
    });
    // A cycle may apply an upgrade and its rollback, each waiting for a rollout, and make a few calls.
    const longestCycleSeconds = () => 2 * this.#config.rolloutTimeoutSeconds + 6 * this.#config.requestTimeoutSeconds;
    this.health = new AgentHealth({
      loops: [{ loop: this.loop, staleAfterMs: () => 1000 * (1.2 * this.#config.pollSeconds + longestCycleSeconds()) }],
    });
  }

  /**
   * Serves /healthz and /readyz (ready once a cycle reached the control plane, until one fails or
   * none ends for longer than a poll and the longest cycle: runtime/agents/common/health.ts) and
   * starts the loop; resolves with the port.
   */
  async start(): Promise<number> {
    this.#server = healthServer(this.health);
    const port = await listen(this.#server, this.#config.port, this.#config.host);
    await this.loop.start();
    return port;
  }

  async close(): Promise<void> {
    await this.loop.stop();
    if (this.#server) await closeServer(this.#server);
  }

  /** One check: applies the upgrade the control plane asks for, if any. Throws when the control plane cannot be asked. */
  async cycle(): Promise<CycleResult> {
    const assignment = await this.#controlPlane<UpgraderAssignment>('GET');
    const up = assignment.upgrade;
    if (!up) return 'idle';
    const log = this.#log.child({ from: up.from, to: up.to });
    try {
      return await this.#apply(up, log);
    } catch (err) {
      if (err instanceof Superseded) {
        log.info({ answer: err.message }, 'the upgrade was replaced at the control plane; checking again later');
        return 'superseded';
      }
      throw err;
    }
  }

  async #apply(up: NonNullable<UpgraderAssignment['upgrade']>, log: Logger): Promise<CycleResult> {
    const invalid = [...up.apply, ...up.rollback].find(
      (o) => typeof o?.metadata !== 'object' || o.metadata === null || this.#pathOf(o) === undefined,
    );
    if (invalid) {
      const message = `the plan holds ${typeof invalid?.metadata === 'object' && invalid.metadata !== null ? describe(invalid) : 'an object without metadata'}, which the upgrader may not patch (only the agents' Deployments and the versions ConfigMap in namespace ${this.#config.namespace}); nothing was applied`;
      log.error(message);
      await this.#report(up.to, 'failed', message);
      return 'failed';
    }
    const refused = await this.#refusal([...up.apply, ...up.rollback]);
    if (refused) {
      const message = `${refused}; nothing was applied`;
      log.error(message);
      await this.#report(up.to, 'failed', message);
      return 'failed';
    }
    if (up.phase === 'pending') await this.#report(up.to, 'applying', `applying ${up.apply.length} objects`);
    log.info({ objects: up.apply.map(describe) }, 'applying the upgrade');
    const self = (o: PlannedObject) => o.kind === 'Deployment' && o.metadata.name === UPGRADER;
    const apply = up.apply.filter((o) => !self(o));
    let failure: string;
    try {
      for (const o of apply) await this.#serverSideApply(o);
      await this.#rollout(apply, true);
      await this.#report(
        up.to,
        'succeeded',
        `runs ${up.to}: ${apply.length} objects applied, every Deployment rolled out`,
      );
      log.info('upgrade applied and rolled out');
      const own = up.apply.find(self);
      if (own) {
        log.info('patching the upgrader itself (it restarts on the new version)');
        await this.#serverSideApply(own).catch((err: unknown) =>
          log.warn(
            { err: (err as Error).message },
            'could not patch the upgrader itself; it keeps running the version before',
          ),
        );
      }
      return 'succeeded';
    } catch (err) {
      if (!(err instanceof UpgradeFailure)) throw err;
      failure = err.message;
    }
    log.warn({ reason: failure }, 'the upgrade failed; rolling back');
    const rollback = up.rollback.filter((o) => !self(o));
    try {
      for (const o of rollback) await this.#serverSideApply(o);
      await this.#rollout(rollback, false);
    } catch (err) {
      if (!(err instanceof UpgradeFailure)) throw err;
      const message = `${failure}; the rollback to ${up.from} failed too: ${err.message}`;
      log.error(message);
      await this.#report(up.to, 'failed', message);
      return 'failed';
    }
    const message = `${failure}; rolled back to ${up.from}`;
    log.info('rolled back');
    await this.#report(up.to, 'rolled-back', message);
    return 'rolled-back';
  }

  /**
   * Why the plan is refused (upgrade-check.ts), from the objects as the API server has them now;
   * undefined when every object changes only what a version upgrade changes. Throws when the API
   * server cannot be read (the next cycle tries again).
   */
  async #refusal(objects: PlannedObject[]): Promise<string | undefined> {
    const running = new Map<string, unknown>();
    const unreadable: string[] = [];
    for (const o of objects) {
      const key = objectKey(o);
      if (running.has(key)) continue;
      const res = await this.#kube.request(this.#pathOf(o)!, {
        signal: AbortSignal.timeout(this.#config.requestTimeoutSeconds * 1000),
      });
      if (res.status === 200) running.set(key, res.body);
      else if (res.status === 404) running.set(key, undefined);
      else if (res.status === 403) {
        running.set(key, undefined);
        unreadable.push(`${describe(o)}: the upgrader may not read it (HTTP 403), so it may not patch it`);
      } else throw new Error(`could not read ${describe(o)}: HTTP ${res.status}`);
    }
    if (unreadable.length > 0) return `the plan names objects outside the upgrader's rights: ${unreadable.join('; ')}`;
    return planRefusal(objects, (o) => running.get(objectKey(o)), VERSIONS_CONFIGMAP);
  }

  #pathOf(o: PlannedObject): string | undefined {
    const ns = o.metadata.namespace;
    if (ns !== this.#config.namespace) return undefined;
    return PATHS[`${o.apiVersion}/${o.kind}`]?.(ns, o.metadata.name);
  }

  async #serverSideApply(o: PlannedObject): Promise<void> {
    const res = await this.#kube.request(this.#pathOf(o)!, {
      method: 'PATCH',
      query: { fieldManager: FIELD_MANAGER, force: 'true' },
      contentType: 'application/apply-patch+yaml',
      body: o,
      signal: AbortSignal.timeout(this.#config.requestTimeoutSeconds * 1000),
    });
    if (res.status >= 200 && res.status < 300) return;
    const reason = (res.body as { message?: string } | undefined)?.message ?? `HTTP ${res.status}`;
    throw new UpgradeFailure(`the API server refused ${describe(o)}: ${reason.slice(0, 500)}`);
  }

  /**
   * Waits until every Deployment among `objects` rolled out; throws UpgradeFailure at the deadline
   * or, with `failFast`, on a failure the deployment controller reports for the spec it has seen.
   * A rollback waits for the deadline only: the failed ReplicaSet's ReplicaFailure stays on the
   * Deployment until the controllers have scaled it down.
   */
  async #rollout(objects: PlannedObject[], failFast: boolean): Promise<void> {
    const deployments = objects.filter((o) => o.kind === 'Deployment');
    const deadline = Date.now() + this.#config.rolloutTimeoutSeconds * 1000;
    const waiting = new Map(deployments.map((d) => [d.metadata.name, 'not checked yet']));
    while (waiting.size > 0) {
      for (const name of [...waiting.keys()]) {
        const state = await this.#deploymentState(name);
        if (state.done) waiting.delete(name);
        else if (state.failed && failFast)
          throw new UpgradeFailure(`Deployment ${name} did not roll out: ${state.failed}`);
        else waiting.set(name, state.failed ?? state.waiting);
      }
      if (waiting.size === 0) return;
      if (Date.now() >= deadline)
        throw new UpgradeFailure(
          `the rollout did not finish within ${this.#config.rolloutTimeoutSeconds} s: ${[...waiting]
            .map(([name, why]) => `Deployment ${name} ${why}`)
            .join('; ')}`,
        );
      await sleep(this.#rolloutPollMs);
    }
  }

  async #deploymentState(name: string): Promise<{ done: boolean; failed?: string; waiting: string }> {
    const path = PATHS['apps/v1/Deployment']!(this.#config.namespace, name);
    const res = await this.#kube.request(path, {
      signal: AbortSignal.timeout(this.#config.requestTimeoutSeconds * 1000),
    });
    if (res.status !== 200) return { done: false, waiting: `could not be read (HTTP ${res.status})` };
    const d = res.body as {
      metadata: { generation?: number };
      spec: { replicas?: number };
      status?: {
        observedGeneration?: number;
        replicas?: number;
        updatedReplicas?: number;
        availableReplicas?: number;
        conditions?: Array<{ type: string; status: string; reason?: string; message?: string }>;
      };
    };
    const s = d.status ?? {};
    const want = d.spec.replicas ?? 1;
    // Conditions speak of the spec the controller has seen: none before it saw this one.
    if ((s.observedGeneration ?? 0) < (d.metadata.generation ?? 0))
      return { done: false, waiting: 'is not yet seen by the deployment controller' };
    const updated = s.updatedReplicas ?? 0;
    const available = s.availableReplicas ?? 0;
    const total = s.replicas ?? 0;
    if (updated >= want && available >= want && total === want) return { done: true, waiting: '' };
    const condition = (type: string) => s.conditions?.find((c) => c.type === type);
    const replicaFailure = condition('ReplicaFailure');
    if (replicaFailure?.status === 'True')
      return {
        done: false,
        failed: `${replicaFailure.reason ?? 'ReplicaFailure'}: ${replicaFailure.message ?? ''}`.trim(),
        waiting: '',
      };
    const progressing = condition('Progressing');
    if (progressing?.status === 'False' && progressing.reason === 'ProgressDeadlineExceeded')
      return { done: false, failed: `ProgressDeadlineExceeded: ${progressing.message ?? ''}`.trim(), waiting: '' };
    return { done: false, waiting: `has ${updated}/${want} updated, ${available}/${want} available, ${total} in all` };
  }

  async #report(to: string, phase: UpgraderReport, message: string): Promise<void> {
    const body: UpgraderReportBody = { to, phase, message: message.slice(0, 2000) };
    // A report that cannot be delivered is tried again: the outcome is what the control plane shows.
    for (let attempt = 1; ; attempt++) {
      try {
        await this.#controlPlane('POST', body);
        return;
      } catch (err) {
        if (err instanceof Superseded || attempt >= 5) throw err;
        this.#log.warn({ err: (err as Error).message, phase, attempt }, 'could not report; trying again');
        await sleep(Math.min(30_000, 1000 * 2 ** attempt));
      }
    }
  }

  async #controlPlane<T>(method: 'GET' | 'POST', body?: UpgraderReportBody): Promise<T> {
    const res = await fetch(this.#config.controlPlaneUrl + UPGRADER_PATH, {
      method,
      headers: {
        authorization: `Bearer ${this.#config.token}`,
        ...(body ? { 'content-type': 'application/json' } : {}),
      },
      ...(body ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(this.#config.requestTimeoutSeconds * 1000),
    });
    const text = await res.text();
    if (res.status === 409) throw new Superseded(text.slice(0, 300));
    if (!res.ok) throw new Error(`${method} ${UPGRADER_PATH}: HTTP ${res.status}: ${text.slice(0, 300)}`);
    return (text ? JSON.parse(text) : undefined) as T;
  }
}
