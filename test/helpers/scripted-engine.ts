/**
 * TEST DOUBLE. ScriptedEngine stands in for the Pulumi engine in integration tests and the
 * benchmark: it runs no program and touches no cluster. Each call follows a script (delay,
 * failure, output lines, outputs), honours the AbortSignal, records every call, and detects two
 * calls running at once for one tenant (`violations`). The real engine runs in the end-to-end tier.
 */
import {
  EngineError,
  type Engine,
  type EngineAvailability,
  type EngineCheck,
  type EngineResult,
  type InterruptedResource,
  type RefreshOptions,
  type ResourceStep,
  type RunOptions,
  type StackInput,
} from '../../provisioner/engine/engine.ts';

export type EngineCallKind = 'up' | 'preview' | 'refresh' | 'destroy' | 'outputs' | 'cancel' | 'interrupted';

export interface EngineCall {
  kind: EngineCallKind;
  tenantId: string;
  input: StackInput;
  clearPendingCreates: boolean;
  /** A refresh of the root cluster's resources only. */
  rootClusterOnly: boolean;
  startedAt: number;
  endedAt?: number;
  outcome?: 'ok' | 'failed' | 'cancelled';
}

/** What one call does; every field is optional. */
export interface CallScript {
  /** Milliseconds before it returns (aborts stop it early). */
  delayMs?: number;
  /** Waits for this promise before returning (aborts stop it early). */
  gate?: Promise<void>;
  /** Throws this error (after the delay). */
  fail?: EngineError;
  lines?: string[];
  outputs?: Record<string, unknown>;
  changes?: Record<string, number>;
  /** The resource steps an up or refresh reports (default: none, nothing changed). */
  steps?: ResourceStep[];
  /** What an `interrupted` call reports (default: nothing pending). */
  interrupted?: InterruptedResource[];
}

export interface ScriptedEngineOptions {
  /** Decides each call; default: succeed at once. */
  script?: (call: EngineCall) => CallScript | undefined;
  /** Starts unavailable with this message (see setAvailability()). */
  unavailable?: string;
  /** Called when a call starts (after the concurrency check). */
  onStart?: (call: EngineCall) => void;
}

export class ScriptedEngine implements Engine {
  readonly name = 'scripted';
  readonly calls: EngineCall[] = [];
  /** Tenants on which two calls overlapped (must stay empty). */
  readonly violations: string[] = [];
  readonly #running = new Map<string, number>();
  #script: (call: EngineCall) => CallScript | undefined;
  #availability: EngineAvailability;
  readonly #onStart: ((call: EngineCall) => void) | undefined;
  startCalls = 0;
  #peak = 0;

  constructor(opts: ScriptedEngineOptions = {}) {
    this.#script = opts.script ?? (() => undefined);
    this.#availability = opts.unavailable ? { available: false, message: opts.unavailable } : { available: true };
    this.#onStart = opts.onStart;
  }

  setScript(script: (call: EngineCall) => CallScript | undefined): void {
    this.#script = script;
  }

  setAvailability(a: EngineAvailability): void {
    this.#availability = a;
  }

  /** Most calls running at once (across tenants). */
  get peakConcurrency(): number {
    return this.#peak;
  }

  get running(): number {
    let n = 0;
    for (const v of this.#running.values()) n += v;
    return n;
  }

  async start(): Promise<void> {
    this.startCalls += 1;
  }

  availability(): EngineAvailability {
    return this.#availability;
  }

  /** One check: the double runs no CLI, language host or plugin. */
  report(): EngineCheck[] {
    const a = this.#availability;
    return [
      {
        name: 'engine.scripted',
        status: a.available ? 'ok' : 'problem',
        message: a.available
          ? 'the scripted engine (a test double) runs every operation'
          : `the scripted engine (a test double) is unavailable: ${a.message}`,
        fix: [],
        detail: {},
      },
    ];
  }

  callsFor(tenantId: string): EngineCall[] {
    return this.calls.filter((c) => c.tenantId === tenantId);
  }

  async #run(
    kind: EngineCallKind,
    input: StackInput,
    opts: RefreshOptions = {},
    onScript?: (s: CallScript) => void,
  ): Promise<EngineResult> {
    if (!this.#availability.available) throw new EngineError('EngineUnavailable', this.#availability.message);
    const call: EngineCall = {
      kind,
      tenantId: input.tenantId,
      input,
      clearPendingCreates: opts.clearPendingCreates === true,
      rootClusterOnly: opts.rootClusterOnly === true,
      startedAt: Date.now(),
    };
    this.calls.push(call);
    const active = (this.#running.get(input.tenantId) ?? 0) + 1;
    this.#running.set(input.tenantId, active);
    if (active > 1) this.violations.push(input.tenantId);
    this.#peak = Math.max(this.#peak, this.running);
    try {
      this.#onStart?.(call);
      const s = this.#script(call) ?? {};
      onScript?.(s);
      for (const line of s.lines ?? []) opts.onOutput?.(line + '\n');
      await waitFor(s, opts.signal);
      if (s.fail) throw s.fail;
      opts.onEvent?.({ type: 'summaryEvent', message: `summary: ${kind} done` });
      call.outcome = 'ok';
      return {
        outputs:
          s.outputs ??
          (kind === 'destroy'
            ? {}
            : {
                runtimeVersion: input.runtimeVersion,
                vclusterEndpoint: `https://vc-${input.tenantId}.example.test`,
                argoCdUrl: `https://argocd-${input.tenantId}.example.test`,
              }),
        changes: s.changes ?? {},
        steps: s.steps ?? [],
      };
    } catch (err) {
      call.outcome = err instanceof EngineError && err.code === 'Cancelled' ? 'cancelled' : 'failed';
      throw err;
    } finally {
      call.endedAt = Date.now();
      const left = (this.#running.get(input.tenantId) ?? 1) - 1;
      if (left === 0) this.#running.delete(input.tenantId);
      else this.#running.set(input.tenantId, left);
    }
  }

  up(input: StackInput, opts?: RunOptions): Promise<EngineResult> {
    return this.#run('up', input, opts);
  }

  /** A preview changes nothing unless the script says what it would change (`changes`). */
  async preview(input: StackInput, opts?: RunOptions & { refresh?: boolean }): Promise<EngineResult> {
    const r = await this.#run('preview', input, opts);
    return { outputs: {}, changes: r.changes, steps: [] };
  }

  refresh(input: StackInput, opts?: RefreshOptions): Promise<EngineResult> {
    return this.#run('refresh', input, opts);
  }

  destroy(input: StackInput, opts?: RunOptions): Promise<EngineResult> {
    return this.#run('destroy', input, opts);
  }

  async outputs(input: StackInput): Promise<Record<string, unknown>> {
    return (await this.#run('outputs', input)).outputs;
  }

  async cancel(input: StackInput): Promise<void> {
    await this.#run('cancel', input);
  }

  async interrupted(input: StackInput): Promise<InterruptedResource[]> {
    let pending: InterruptedResource[] = [];
    await this.#run('interrupted', input, {}, (s) => {
      pending = s.interrupted ?? [];
    });
    return pending;
  }

  async close(): Promise<void> {}
}

function waitFor(s: CallScript, signal: AbortSignal | undefined): Promise<void> {
  if (!s.delayMs && !s.gate) {
    if (signal?.aborted) return Promise.reject(new EngineError('Cancelled', 'the engine was cancelled'));
    return Promise.resolve();
  }
  return new Promise<void>((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const onAbort = () => {
      if (timer) clearTimeout(timer);
      reject(new EngineError('Cancelled', 'the engine was cancelled'));
    };
    if (signal?.aborted) return onAbort();
    signal?.addEventListener('abort', onAbort, { once: true });
    const done = () => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    };
    const gated = s.gate ?? Promise.resolve();
    gated.then(() => {
      if (s.delayMs) timer = setTimeout(done, s.delayMs);
      else done();
    }, reject);
  });
}
