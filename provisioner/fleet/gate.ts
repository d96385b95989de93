/**
 * The health gate of one tenant's step in a fleet upgrade (a hop, an automatic rollback, or a
 * revert after an abort), as a pure function of what the database says now. It is judged only
 * on state produced after the step's spec change: the observed generation must have reached the
 * step's generation and the running version must be the step's; the tunnel must have connected
 * after the change was made, and the Applications must have been reported after the operation
 * finished. A status left over from before the step never passes (argo-cd #29410).
 *
 * An operator may skip the checks that judge the runtime's agents (tunnel, applications) for one
 * step (store/states.ts SKIPPABLE_GATE_CHECKS): such a check that does not pass counts as passed
 * for the rest of that step's judgment, marked `skipped`, with the reason in its detail.
 */
import type { GateCheck, GateSkip, Snapshot } from '../store/fleet-upgrades.ts';

export interface GateInput {
  kind: 'upgrade' | 'rollback' | 'revert';
  /** The generation the step's spec change made, and the version it moves to. */
  generation: number;
  to: string;
  startedAtMs: number;
  nowMs: number;
  timeoutMs: number;
  checks: { tunnel: boolean; applications: boolean };
  /** The checks an operator skipped for this step, each with the reason (skippedFor). */
  skipped?: ReadonlyMap<string, string>;
  snapshot: Snapshot | null;
  tenant: {
    observedGeneration: number;
    actualVersion: string | null;
    phase: string;
    ready: boolean;
    stalled: boolean;
    deleted: boolean;
    /** Database time of the live tunnel's connection; null: no live tunnel. */
    tunnelConnectedAt: Date | null;
    /** Newest heartbeat of the tenant's event reporter; null: never reported. */
    reporterLastSeen: Date | null;
    applicationsGood: number;
  };
  operation: {
    state: string;
    error: { code: string; message: string } | null;
    createdAt: Date;
    finishedAt: Date | null;
  } | null;
}

export type GateVerdict =
  | { verdict: 'pass'; checks: GateCheck[] }
  | { verdict: 'wait'; checks: GateCheck[] }
  | { verdict: 'fail'; checks: GateCheck[]; reason: string }
  | { verdict: 'gone'; checks: GateCheck[]; reason: string };

/** The checks skipped for the step of `generation`, each with the reason given (the first skip's). */
export function skippedFor(skips: readonly GateSkip[], generation: number | string | null): Map<string, string> {
  const out = new Map<string, string>();
  if (generation === null) return out;
  for (const s of skips)
    if (s.generation === Number(generation)) for (const c of s.checks) if (!out.has(c)) out.set(c, s.reason);
  return out;
}

/** A check of the runtime's agents as judged, or as skipped when it does not pass and the operator skipped it. */
function agentCheck(g: GateInput, check: GateCheck): GateCheck {
  const reason = check.ok ? undefined : g.skipped?.get(check.name);
  if (reason === undefined) return check;
  return { name: check.name, ok: true, detail: `${check.detail}; skipped by an operator: ${reason}`, skipped: true };
}

export function judgeGate(g: GateInput): GateVerdict {
  const t = g.tenant;
  const checks: GateCheck[] = [];
  if (t.deleted) return { verdict: 'gone', checks, reason: 'the tenant was deleted' };
  const op = g.operation;
  const observed = t.observedGeneration >= g.generation;
  if (op?.state === 'failed') {
    checks.push({
      name: 'operation',
      ok: false,
      detail: `failed: ${op.error?.code ?? '?'}: ${op.error?.message ?? ''}`,
    });
    return { verdict: 'fail', checks, reason: `the ${g.kind} operation failed (${op.error?.code ?? 'unknown error'})` };
  }
  // A superseded operation was coalesced into a newer one: the generation says whether it ran.
  checks.push({
    name: 'operation',
    ok: op?.state === 'succeeded' || observed,
    detail: op ? op.state : 'unknown',
  });
  checks.push({
    name: 'observedGeneration',
    ok: observed,
    detail: `observed ${t.observedGeneration}, step generation ${g.generation}`,
  });
  checks.push({
    name: 'version',
    ok: observed && t.actualVersion === g.to,
    detail: `running ${t.actualVersion ?? 'nothing'}, step to ${g.to}`,
  });
  const settled =
    g.kind === 'upgrade' ? t.phase === 'Ready' && t.ready : t.phase === 'Ready' || t.phase === 'Suspended';
  checks.push({
    name: 'ready',
    ok: observed && settled,
    detail: `phase ${t.phase}${t.ready ? ', Ready' : ', not Ready'}`,
  });
  if (g.kind === 'upgrade' && g.checks.tunnel) {
    const after = t.tunnelConnectedAt !== null && op !== null && t.tunnelConnectedAt >= op.createdAt;
    checks.push(
      agentCheck(g, {
        name: 'tunnel',
        ok: after,
        detail:
          t.tunnelConnectedAt === null
            ? 'not connected'
            : after
              ? `connected at ${t.tunnelConnectedAt.toISOString()}`
              : `connected at ${t.tunnelConnectedAt.toISOString()}, before the upgrade: not reconnected yet`,
      }),
    );
  }
  if (g.kind === 'upgrade' && g.checks.applications) {
    const before = g.snapshot?.applications ?? null;
    if (before === null) {
      checks.push({
        name: 'applications',
        ok: true,
        detail: 'no event reporter reported before the upgrade: not judged',
      });
    } else {
      const fresh = t.reporterLastSeen !== null && op?.finishedAt != null && t.reporterLastSeen > op.finishedAt;
      const ok = fresh && t.applicationsGood >= before.good;
      checks.push(
        agentCheck(g, {
          name: 'applications',
          ok,
          detail: fresh
            ? `${t.applicationsGood} Healthy and Synced, ${before.good} before`
            : `no report since the upgrade finished (${before.good} Healthy and Synced before)`,
        }),
      );
    }
  }
  if (checks.every((c) => c.ok)) return { verdict: 'pass', checks };
  if (t.stalled) return { verdict: 'fail', checks, reason: `the tenant stalled during the ${g.kind}` };
  if (g.nowMs - g.startedAtMs >= g.timeoutMs) {
    const failing = checks.filter((c) => !c.ok).map((c) => `${c.name}: ${c.detail}`);
    return {
      verdict: 'fail',
      checks,
      reason: `gate timed out after ${Math.round(g.timeoutMs / 1000)} s (${failing.join('; ')})`,
    };
  }
  return { verdict: 'wait', checks };
}
