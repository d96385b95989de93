/**
 * The engine drives one tenant's stack: it brings the tenant's namespace, vcluster and runtime to
 * the spec (up), reads drift (refresh), tears everything down (destroy), reads outputs, and
 * clears a stale lock (cancel). The reconciler owns the when and the bookkeeping; the engine
 * only runs the program. Implementations: PulumiEngine (pulumi.ts) and, for tests only,
 * ScriptedEngine (test/helpers/scripted-engine.ts: a test double for the tests and benchmarks; no
 * configuration of the process selects it).
 */

import type { DeploymentSetting, TenantInput } from '../../tenants/config.ts';
import type { InterruptedResource } from './helm-recovery.ts';

export type { InterruptedResource };

/**
 * What the engine needs to run one tenant's program: the tenant's settings (the program's
 * TenantInput without those the provisioner's configuration supplies, see create.ts) and the
 * root cluster it is placed on. Secret fields are never logged.
 */
export type StackInput = Omit<TenantInput, DeploymentSetting> & {
  /** Root cluster the tenant is placed on (rootKubeconfig is its kubeconfig). */
  clusterName: string;
};

/** A structured engine event, reduced to what the operation log shows. */
export interface EngineEventSummary {
  /** e.g. resourcePreEvent, resOutputsEvent, diagnosticEvent, summaryEvent. */
  type: string;
  /** One readable line (no secrets: the engine masks them). */
  message: string;
}

export interface RunOptions {
  /** Engine output as it arrives (may hold several lines). */
  onOutput?: (text: string) => void;
  onEvent?: (event: EngineEventSummary) => void;
  /** Aborts the running engine command. */
  signal?: AbortSignal;
}

export interface RefreshOptions extends RunOptions {
  clearPendingCreates?: boolean;
  rootClusterOnly?: boolean;
}

/** Resource changes by kind (create, update, delete, same, …) as the engine counted them. */
export type ChangeSummary = Record<string, number>;

/** Operations of a change summary that leave the resources as they are. */
const NO_CHANGE_OPS = new Set(['same', 'read', 'refresh']);

/** The changes an update would make (`update 2`, `create 1`), without those that change nothing. */
export function pendingChanges(changes: ChangeSummary): string[] {
  return Object.entries(changes)
    .filter(([op, n]) => n > 0 && !NO_CHANGE_OPS.has(op))
    .map(([op, n]) => `${op} ${n}`);
}

/**
 * One resource step of an `up` or `refresh` as the engine reported it when the step finished
 * (secret values masked by the engine). What the drift rule (reconciler/drift.ts) reads.
 */
export interface ResourceStep {
  /** create, update, delete, replace, read, same, … (a refresh reports update, delete or same). */
  op: string;
  urn: string;
  /** e.g. kubernetes:core/v1:ResourceQuota */
  type: string;
  /** A provider's resource (an object, a Helm release), not a component. */
  custom: boolean;
  /** The resource is only read by the program (`.get` of an existing object), not managed by it. */
  external: boolean;
  /** Property paths the provider's diff named (detailed diff, else changed keys). */
  diffs: string[];
  /** Inputs and outputs before and after the step (absent when there is no such state). */
  old?: { id: string; inputs: Record<string, unknown>; outputs: Record<string, unknown> };
  new?: { id: string; inputs: Record<string, unknown>; outputs: Record<string, unknown> };
}

export interface EngineResult {
  outputs: Record<string, unknown>;
  changes: ChangeSummary;
  /** The finished resource steps other than `same` (up and refresh; empty for destroy). */
  steps: ResourceStep[];
}

export type EngineErrorCode =
  | 'EngineUnavailable' // CLI missing or too old; nothing ran
  | 'Cancelled' // aborted through the AbortSignal
  | 'ConcurrentUpdate' // the stack is locked by another update
  | 'ProgramFailed' // the program or a resource failed
  | 'EngineFailed'; // anything else

export class EngineError extends Error {
  override name = 'EngineError';
  readonly code: EngineErrorCode;
  constructor(code: EngineErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

export type EngineAvailability = { available: true } | { available: false; message: string };

/**
 * One part of the engine as `provisioner doctor` shows it (GET /v1/doctor): what the last start
 * or re-check found, with what to do when it is a problem. `skipped`: not checkable until an
 * earlier part is fixed (the plugin is installed by the CLI).
 */
export interface EngineCheck {
  /** engine.cli, engine.languageHost, engine.kubernetesPlugin, engine.config */
  name: string;
  status: 'ok' | 'problem' | 'skipped';
  message: string;
  /** Commands or steps that fix a problem, in order. */
  fix: string[];
  /** What was found (path, version), for machine readers. */
  detail: Record<string, string>;
}

export interface Engine {
  /** Short name for logs (pulumi, scripted). */
  readonly name: string;
  /**
   * Finds the engine's tools and installs plugins, once; may be called again to re-check after it
   * reported unavailability. Never throws for a missing CLI: that shows in availability().
   */
  start(): Promise<void>;
  availability(): EngineAvailability;
  /** The engine's parts as the last start or re-check found them (no I/O beyond a file check). */
  report(): EngineCheck[];
  /** Creates or updates the stack to match the input. */
  up(input: StackInput, opts?: RunOptions): Promise<EngineResult>;
  /**
   * What an update would change, without changing anything (no state written); with `refresh`,
   * against the live objects read first (drift included) instead of the stored state. Only
   * `changes` is filled in.
   */
  preview(input: StackInput, opts?: RunOptions & { refresh?: boolean }): Promise<EngineResult>;
  /**
   * Reads the real state into the stack; `clearPendingCreates` drops creates a crash interrupted;
   * `rootClusterOnly` reads only the resources on the root cluster (those in the tenant's vcluster
   * keep their stored state): for a recovery while the vcluster's API server does not answer.
   */
  refresh(input: StackInput, opts?: RefreshOptions): Promise<EngineResult>;
  /** Destroys every resource of the stack and removes the stack. */
  destroy(input: StackInput, opts?: RunOptions): Promise<EngineResult>;
  outputs(input: StackInput): Promise<Record<string, unknown>>;
  /** Clears the stack's lock (after a crash: only call when the old owner is proven gone). */
  cancel(input: StackInput): Promise<void>;
  /**
   * The resources an interrupted operation left pending in the stack's state, with their
   * provider's inputs (secrets revealed: never log them). Empty for a stack without any.
   */
  interrupted(input: StackInput): Promise<InterruptedResource[]>;
  /** Releases anything held (child processes, temporary files). */
  close(): Promise<void>;
}

/** Collapses an error thrown by an engine into the operation's stored error. */
export function engineErrorOf(err: unknown): { code: string; message: string } {
  if (err instanceof EngineError) return { code: err.code, message: err.message };
  const message = err instanceof Error ? err.message : String(err);
  return { code: 'EngineFailed', message };
}
