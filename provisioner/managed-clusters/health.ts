/**
 * The managed clusters' health probe: every registration is asked `GET /version` with its own
 * credentials every `intervalMs` (30 s by default), and its `Reachable` condition records the
 * answer: True (reason Responding) or False (Unreachable with the network error, Unauthorized,
 * Refused when the policy no longer accepts the stored credentials). A False shows within one
 * interval, the poll step and the 10 s request bound of the server going away (under 60 s with
 * the defaults), and True again at the first probe after it is back.
 *
 * A registration reached through the runtime (`reach: runtime`) is probed the same way from inside
 * the runtime (via-runtime.ts, with the credentials the control plane holds), with the same
 * reasons, plus RuntimeUnreachable when the runtime's tunnel is not connected (or the runtime
 * could not make the check): then nothing is known of the cluster itself. Such a registration is
 * claimed by the replica holding the tunnel, or by any replica when none holds it.
 *
 * Every replica runs the probe; a probe is claimed in the database (`claimDueProbes`: the row's
 * next probe time moves ahead in the claiming statement, SKIP LOCKED), so each registration is
 * probed by one replica per interval. A database outage only skips rounds.
 */
import type pg from 'pg';
import type { Logger } from 'pino';
import type { SecretBox } from '../crypto.ts';
import { isAppError } from '../errors.ts';
import { KubeconfigPolicyError, type KubeconfigPolicy } from '../../kubeconfig-policy/policy.ts';
import { claimDueProbes, credentialsAad, recordProbe, type DueProbe } from '../store/managed-clusters.ts';
import { condition, mergeConditions } from '../store/tenants.ts';
import type { Condition } from '../store/states.ts';
import { connectionFor, type StoredCredentials } from './kube-api.ts';
import { checkError, serverVersion } from './validate.ts';
import type { TunnelServer } from '../tunnel/server.ts';
import { checkThroughRuntime, RuntimeCheckError } from './via-runtime.ts';
import { PeriodicLoop } from '../../runtime/loops/periodic.ts';

export interface ProberOptions {
  pool: pg.Pool;
  box: SecretBox;
  policy: KubeconfigPolicy;
  /** Time between two probes of one registration. */
  intervalMs: number;
  logger?: Logger | undefined;
  /** Registrations claimed per round (default 32). */
  batch?: number;
  /** Probes in flight at once (default 8). */
  concurrency?: number;
  /** The tunnels, for registrations reached through the runtime (without it they are RuntimeUnreachable). */
  tunnel?: Pick<TunnelServer, 'forward'> | undefined;
  /** This replica's id in runtime_tunnels: it claims the runtime-reached registrations whose tunnel it holds. */
  replicaId?: string | undefined;
}

/** Longest wait for one probe's answer. */
const PROBE_TIMEOUT_MS = 10_000;

export class ManagedClusterProber {
  readonly #options: Required<Omit<ProberOptions, 'logger' | 'tunnel' | 'replicaId'>> &
    Pick<ProberOptions, 'logger' | 'tunnel' | 'replicaId'>;
  /** The background loop (runtime/loops/periodic.ts): a round every stepMs, off when intervalMs is 0. */
  readonly loop: PeriodicLoop;

  constructor(o: ProberOptions) {
    this.#options = { batch: 32, concurrency: 8, ...o };
    this.loop = new PeriodicLoop({
      name: 'managed-cluster-prober',
      enabled: o.intervalMs > 0,
      round: () => this.round(),
      intervalMs: () => this.stepMs,
      retryMs: () => this.stepMs,
      onFailure: (err) => o.logger?.warn({ err }, 'managed cluster probe round failed; next round soon'),
    });
  }

  /** How often the prober looks for due probes: a third of the interval, at most every 5 s. */
  get stepMs(): number {
    return Math.max(100, Math.min(5_000, Math.floor(this.#options.intervalMs / 3)));
  }

  /** One round: claims the due registrations, probes them, records the answers. */
  async round(): Promise<void> {
    for (;;) {
      const due = await claimDueProbes(
        this.#options.pool,
        this.#options.batch,
        this.#options.intervalMs,
        this.#options.replicaId,
      );
      if (due.length === 0) return;
      let next = 0;
      const worker = async (): Promise<void> => {
        while (next < due.length && !this.loop.stopping) await this.#probe(due[next++]!);
      };
      await Promise.all(Array.from({ length: Math.min(this.#options.concurrency, due.length) }, worker));
      if (due.length < this.#options.batch || this.loop.stopping) return;
    }
  }

  async #probe(p: DueProbe): Promise<void> {
    let answer;
    try {
      answer = await this.check(p);
    } catch (err) {
      this.#options.logger?.warn({ err, tenantId: p.tenantId, managedCluster: p.name }, 'managed cluster probe failed');
      return;
    }
    const { reachable, version } = answer;
    const previous = p.conditions.find((c) => c.type === 'Reachable');
    if (previous?.status !== reachable.status)
      this.#options.logger?.info(
        { tenantId: p.tenantId, managedCluster: p.name, reachable: reachable.status, reason: reachable.reason },
        'managed cluster reachability changed',
      );
    await recordProbe(this.#options.pool, p.id, mergeConditions(p.conditions, [reachable]), version);
  }

  /** Probes one registration: its Reachable condition, and the version when it answered. */
  async check(p: Pick<DueProbe, 'tenantId' | 'name' | 'credentialsEnc'> & Partial<Pick<DueProbe, 'reach'>>): Promise<{
    reachable: Condition;
    version?: string;
  }> {
    const stored = JSON.parse(
      this.#options.box.decrypt(p.credentialsEnc, credentialsAad(p.tenantId, p.name)).toString('utf8'),
    ) as StoredCredentials;
    if (p.reach === 'runtime') return this.#checkThroughRuntime(p.tenantId, stored);
    const started = performance.now();
    try {
      const conn = await connectionFor(stored, this.#options.policy);
      const version = await serverVersion(conn, stored.server, AbortSignal.timeout(PROBE_TIMEOUT_MS));
      const ms = Math.round(performance.now() - started);
      return {
        reachable: condition('Reachable', 'True', 'Responding', `Kubernetes ${version} answered in ${ms} ms`),
        version,
      };
    } catch (err) {
      if (err instanceof KubeconfigPolicyError)
        return {
          reachable: condition(
            'Reachable',
            'False',
            'Refused',
            `the stored credentials are refused by the current settings: ${err.message}; register the cluster again`,
          ),
        };
      if (isAppError(err) && err.code === 'MANAGED_CLUSTER_UNAUTHORIZED')
        return { reachable: condition('Reachable', 'False', 'Unauthorized', err.message) };
      if (isAppError(err) && err.code === 'MANAGED_CLUSTER_UNREACHABLE')
        return { reachable: condition('Reachable', 'False', 'Unreachable', err.message) };
      throw err;
    }
  }

  async #checkThroughRuntime(
    tenantId: string,
    stored: StoredCredentials,
  ): Promise<{ reachable: Condition; version?: string }> {
    const runtimeUnreachable = (message: string) => ({
      reachable: condition('Reachable', 'False', 'RuntimeUnreachable', message),
    });
    if (!this.#options.tunnel) return runtimeUnreachable("the runtime's tunnel is not connected");
    let checked;
    try {
      // The app-proxy bounds the check to 10 s; a little more here so that its own answer (a
      // cluster that did not answer) arrives before this bound (a runtime that did not).
      checked = await checkThroughRuntime(
        this.#options.tunnel,
        tenantId,
        { server: stored.server, config: stored.config },
        AbortSignal.timeout(PROBE_TIMEOUT_MS + 5_000),
      );
    } catch (err) {
      if (err instanceof RuntimeCheckError) return runtimeUnreachable(err.message);
      throw err;
    }
    if (checked.ok)
      return {
        reachable: condition(
          'Reachable',
          'True',
          'Responding',
          `Kubernetes ${checked.version} answered the runtime in ${checked.ms} ms`,
        ),
        version: checked.version,
      };
    const err = checkError(stored.server, checked);
    return {
      reachable: condition(
        'Reachable',
        'False',
        err.code === 'MANAGED_CLUSTER_UNAUTHORIZED' ? 'Unauthorized' : 'Unreachable',
        `${err.message} (from the runtime)`,
      ),
    };
  }
}
