/**
 * The managed clusters' health probe: every registration is asked `GET /version` with its own
 * credentials every `intervalMs` (30 s by default), and its `Reachable` condition records the
 * answer: True (reason Responding) or False (Unreachable with the network error, Unauthorized,
 * Refused when the policy no longer accepts the stored credentials). A False shows within one
 * interval, the poll step and the 10 s request bound of the server going away (under 60 s with
 * the defaults), and True again at the first probe after it is back.
 *
 * Every replica runs the probe; a probe is claimed in the database (`claimDueProbes`: the row's
 * next probe time moves ahead in the claiming statement, SKIP LOCKED), so each registration is
 * probed by one replica per interval. A database outage only skips rounds.
 */
import type pg from 'pg';
import type { Logger } from 'pino';
import type { SecretBox } from '../crypto.ts';
import { isAppError } from '../errors.ts';
import { KubeconfigPolicyError, type KubeconfigPolicy } from '../kubeconfig/policy.ts';
import { claimDueProbes, credentialsAad, recordProbe, type DueProbe } from '../store/managed-clusters.ts';
import { condition, mergeConditions, type Condition } from '../store/tenants.ts';
import { connectionFor, type StoredCredentials } from './kube-api.ts';
import { serverVersion } from './validate.ts';

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
}

/** Longest wait for one probe's answer. */
const PROBE_TIMEOUT_MS = 10_000;

export class ManagedClusterProber {
  readonly #o: Required<Omit<ProberOptions, 'logger'>> & { logger: Logger | undefined };
  #timer: NodeJS.Timeout | undefined;
  #round: Promise<void> | undefined;
  #stopped = false;

  constructor(o: ProberOptions) {
    this.#o = { batch: 32, concurrency: 8, ...o, logger: o.logger };
  }

  /** How often the prober looks for due probes: a third of the interval, at most every 5 s. */
  get stepMs(): number {
    return Math.max(100, Math.min(5_000, Math.floor(this.#o.intervalMs / 3)));
  }

  start(): void {
    if (this.#o.intervalMs <= 0 || this.#timer || this.#stopped) return;
    const tick = (): void => {
      this.#round = this.round()
        .catch((err: unknown) => this.#o.logger?.warn({ err }, 'managed cluster probe round failed; next round soon'))
        .finally(() => {
          if (!this.#stopped) this.#timer = setTimeout(tick, this.stepMs);
        });
    };
    this.#timer = setTimeout(tick, 0);
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    await this.#round;
  }

  /** One round: claims the due registrations, probes them, records the answers. */
  async round(): Promise<void> {
    for (;;) {
      const due = await claimDueProbes(this.#o.pool, this.#o.batch, this.#o.intervalMs);
      if (due.length === 0) return;
      let next = 0;
      const worker = async (): Promise<void> => {
        while (next < due.length && !this.#stopped) await this.#probe(due[next++]!);
      };
      await Promise.all(Array.from({ length: Math.min(this.#o.concurrency, due.length) }, worker));
      if (due.length < this.#o.batch || this.#stopped) return;
    }
  }

  async #probe(p: DueProbe): Promise<void> {
    let answer;
    try {
      answer = await this.check(p);
    } catch (err) {
      this.#o.logger?.warn({ err, tenantId: p.tenantId, managedCluster: p.name }, 'managed cluster probe failed');
      return;
    }
    const { reachable, version } = answer;
    const previous = p.conditions.find((c) => c.type === 'Reachable');
    if (previous?.status !== reachable.status)
      this.#o.logger?.info(
        { tenantId: p.tenantId, managedCluster: p.name, reachable: reachable.status, reason: reachable.reason },
        'managed cluster reachability changed',
      );
    await recordProbe(this.#o.pool, p.id, mergeConditions(p.conditions, [reachable]), version);
  }

  /** Probes one registration: its Reachable condition, and the version when it answered. */
  async check(p: Pick<DueProbe, 'tenantId' | 'name' | 'credentialsEnc'>): Promise<{
    reachable: Condition;
    version?: string;
  }> {
    const stored = JSON.parse(
      this.#o.box.decrypt(p.credentialsEnc, credentialsAad(p.tenantId, p.name)).toString('utf8'),
    ) as StoredCredentials;
    const started = performance.now();
    try {
      const conn = await connectionFor(stored, this.#o.policy);
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
}
