/**
 * The Pulumi engine: runs the tenants program inline through the Automation API (LocalWorkspace),
 * project `tenants`, stack `tenant-<id>`, one work directory per tenant. What it does is planned
 * in pulumi-plan.ts (testable without the CLI); this file only carries the plans out.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { delimiter, join } from 'node:path';
import { promisify } from 'node:util';
import {
  CommandError,
  ConcurrentUpdateError,
  LocalWorkspace,
  PulumiCommand,
  Stack,
  type EngineEvent,
  type OpMap,
  type OutputMap,
  type PulumiFn,
  type StepEventMetadata,
  type StepEventStateMetadata,
} from '@pulumi/pulumi/automation/index.js';
import {
  EngineError,
  type ChangeSummary,
  type Engine,
  type EngineAvailability,
  type EngineCheck,
  type EngineEventSummary,
  type EngineResult,
  type InterruptedResource,
  type ResourceStep,
  type RefreshOptions,
  type RunOptions,
  type StackInput,
} from './engine.ts';
import { interruptedResources, virtualClusterUrns } from './helm-recovery.ts';
import { ROOT_PROVIDER } from '../../tenants/names.ts';
import { purgeRemovedStack } from './state-purge.ts';
import {
  INSTALL_HINT,
  MINIMUM_CLI_VERSION,
  cliRootFor,
  cliVersionProblem,
  planStack,
  redactUrl,
  requiredPlugins,
  type ConfigMap,
  type PulumiPlanOptions,
  type StackPlan,
} from './pulumi-plan.ts';

export interface PulumiEngineOptions extends PulumiPlanOptions {
  /** The inline program (the tenants/ program). */
  program: PulumiFn;
  /** Folder with the CLI; undefined: PATH. */
  cliDir: string | undefined;
  /** Version of the kubernetes provider plugin to install at start-up. */
  kubernetesPluginVersion: string;
  /** Resource operations in parallel per stack (bounded: engine memory grows with it). */
  parallel?: number;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
  /** A configuration problem that keeps the engine unavailable (shown to tenants as EngineUnavailable). */
  configProblem?: string;
}

/**
 * One readable line for an engine event, or undefined for events not worth a log line. The
 * engine's own text (onOutput) already has a line for every resource step when it ends, its
 * failure and its diagnostics: those events would repeat it (the operation log showed each step
 * three times). Only the change summary is added, in one line where the text spreads it over
 * several.
 */
export function summarizeEvent(e: EngineEvent): EngineEventSummary | undefined {
  if (e.summaryEvent) {
    return {
      type: 'summaryEvent',
      message: `summary: ${formatChanges(e.summaryEvent.resourceChanges)} in ${e.summaryEvent.durationSeconds}s`,
    };
  }
  return undefined;
}

export function formatChanges(changes: OpMap | ChangeSummary | undefined): string {
  const entries = Object.entries(changes ?? {}).filter(([, n]) => typeof n === 'number' && n > 0);
  return entries.length ? entries.map(([k, n]) => `${k} ${String(n)}`).join(', ') : 'no changes';
}

/**
 * The finished resource step of an event (resOutputsEvent), or undefined for any other event and
 * for `same` steps. The engine sends `external` on a state (a resource the program only reads)
 * although the SDK's type does not declare it.
 */
export function stepOf(e: EngineEvent): ResourceStep | undefined {
  const m: StepEventMetadata | undefined = e.resOutputsEvent?.metadata;
  if (!m || m.op === 'same') return undefined;
  const state = (s: StepEventStateMetadata | undefined): ResourceStep['old'] =>
    s ? { id: s.id, inputs: s.inputs ?? {}, outputs: s.outputs ?? {} } : undefined;
  const external = (s: StepEventStateMetadata | undefined): boolean =>
    (s as { external?: boolean } | undefined)?.external === true;
  const detailed = Object.keys(m.detailedDiff ?? {});
  const old = state(m.old);
  const neu = state(m.new);
  return {
    op: m.op,
    urn: m.urn,
    type: m.type,
    custom: (m.old ?? m.new)?.custom === true,
    external: m.op === 'read' || external(m.old) || external(m.new),
    diffs: detailed.length > 0 ? detailed : (m.diffs ?? []),
    ...(old ? { old } : {}),
    ...(neu ? { new: neu } : {}),
  };
}

function toChanges(map: OpMap | undefined): ChangeSummary {
  const out: ChangeSummary = {};
  for (const [k, v] of Object.entries(map ?? {})) if (typeof v === 'number') out[k] = v;
  return out;
}

function plainOutputs(outputs: OutputMap): Record<string, unknown> {
  // Secret outputs stay out of tenant status: only plain values are kept.
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(outputs)) if (!v.secret) out[k] = v.value as unknown;
  return out;
}

const execFileAsync = promisify(execFile);

/**
 * The Automation API's reading of a stack's outputs, with one CLI run instead of two. The SDK runs
 * `pulumi stack output --json` twice, masked and then with `--show-secrets`, to flag the secret
 * outputs; the engine keeps only the plain ones (plainOutputs), which the masked run gives in full
 * (a secret one reads "[secret]"). Only the run with `--show-secrets` decrypts: with the passphrase
 * provider that derives the stack's key (PBKDF2, a million rounds) in that CLI process, about half
 * a CPU-second (docs/reconciler.md, "What one operation costs").
 */
export function readOutputsMasked(ws: LocalWorkspace): void {
  ws.stackOutputs = async (stackName: string): Promise<OutputMap> => {
    // The environment the SDK gives each CLI run (LocalWorkspace's): PULUMI_HOME and the workspace's variables.
    const { stdout } = await execFileAsync(
      ws.pulumiCommand.command,
      ['stack', 'output', '--json', '--stack', stackName],
      {
        cwd: ws.workDir,
        env: { ...process.env, ...(ws.pulumiHome ? { PULUMI_HOME: ws.pulumiHome } : {}), ...ws.envVars },
        maxBuffer: 64 * 1024 * 1024,
      },
    );
    return maskedOutputMap(JSON.parse(stdout) as Record<string, unknown>);
  };
}

/** `pulumi stack output --json` (masked) as the SDK's OutputMap: "[secret]" marks a secret output. */
function maskedOutputMap(masked: Record<string, unknown>): OutputMap {
  const out: OutputMap = {};
  for (const [k, value] of Object.entries(masked)) out[k] = { value, secret: value === '[secret]' };
  return out;
}

/** A digest of a stack's config, kept in memory only (it covers secret values). */
function configDigest(config: ConfigMap): string {
  const h = createHash('sha256');
  for (const k of Object.keys(config).sort()) h.update(JSON.stringify([k, config[k]!.value, config[k]!.secret]));
  return h.digest('hex');
}

function mapError(err: unknown, signal: AbortSignal | undefined): EngineError {
  if (err instanceof EngineError) return err;
  if (signal?.aborted) return new EngineError('Cancelled', 'the engine was cancelled', { cause: err });
  if (err instanceof ConcurrentUpdateError) {
    return new EngineError(
      'ConcurrentUpdate',
      'the stack is locked by another update (a stale lock is cleared by crash recovery)',
      { cause: err },
    );
  }
  if (err instanceof CommandError) {
    // The CLI's message ends with its stderr; keep the tail, where the cause is. The CLI masks secrets.
    const text = err.message.length > 4000 ? '…' + err.message.slice(-4000) : err.message;
    return new EngineError('ProgramFailed', text, { cause: err });
  }
  return new EngineError('EngineFailed', err instanceof Error ? err.message : String(err), { cause: err });
}

/**
 * True for the error of a CREATE TABLE IF NOT EXISTS that lost a race with another session's
 * (another provisioner replica on a fresh state database): the table exists by now.
 */
export function isStateTableRace(err: unknown): boolean {
  const text = err instanceof Error ? `${err.message}\n${(err as { stderr?: string }).stderr ?? ''}` : String(err);
  return /pg_type_typname_nsp_index|relation "[^"]+" already exists/.test(text);
}

async function retryStateTableRace<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (!isStateTableRace(err)) throw err;
    return fn();
  }
}

/** The first executable `name` in the PATH folders, or undefined. */
export function onPath(
  name: string,
  path: string | undefined,
  exists: (p: string) => boolean = existsSync,
): string | undefined {
  for (const dir of (path ?? '').split(delimiter)) {
    if (dir && exists(join(dir, name))) return join(dir, name);
  }
  return undefined;
}

/** The steps that give the engine a Pulumi CLI, for `provisioner doctor`. */
export function cliFixSteps(cliDir: string | undefined): string[] {
  if (cliDir !== undefined) {
    return [
      `curl -fsSL https://get.pulumi.com | sh -s -- --version ${MINIMUM_CLI_VERSION} --install-root ${cliDir} --no-edit-path   # the CLI into ${cliDir}/bin (PROVISIONER_PULUMI_CLI_DIR)`,
      'or build it from source: bash scripts/toolchain.sh, and copy pulumi from the bin folder it prints',
      'the engine re-checks by itself every minute: no restart needed',
    ];
  }
  return [
    `curl -fsSL https://get.pulumi.com | sh -s -- --version ${MINIMUM_CLI_VERSION}   # installs into ~/.pulumi/bin`,
    'PROVISIONER_PULUMI_CLI_DIR=$HOME/.pulumi/bin npm start   # restart the provisioner pointing at it (or put pulumi on its PATH)',
    'or build it from source: bash scripts/toolchain.sh, and set PROVISIONER_PULUMI_CLI_DIR to the bin folder it prints',
  ];
}

/** Where start() stopped: what report() tells about. */
type Stage =
  | { at: 'not-started' }
  | { at: 'config'; message: string }
  | { at: 'cli-missing'; where: string }
  | { at: 'cli-unusable'; path: string; version: string | null; message: string }
  | { at: 'plugins'; path: string; version: string; message: string }
  | { at: 'ready'; path: string; version: string };

function sdkVersion(): string {
  try {
    const require = createRequire(import.meta.url);
    return (require('@pulumi/pulumi/package.json') as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

export class PulumiEngine implements Engine {
  readonly name = 'pulumi';
  readonly #options: PulumiEngineOptions;
  #command: PulumiCommand | undefined;
  #availability: EngineAvailability = { available: false, message: `the Pulumi engine has not started yet` };
  #stage: Stage = { at: 'not-started' };
  #starting: Promise<void> | undefined;
  /**
   * Settles once one stack has been selected against the state backend. The CLI creates a
   * postgres:// backend's table on first use with CREATE TABLE IF NOT EXISTS, which two sessions
   * racing on a fresh database can both attempt (one fails on pg_type's unique index): the first
   * selection runs alone, the rest wait for it.
   */
  #backendReady: Promise<void> | undefined;

  constructor(opts: PulumiEngineOptions) {
    this.#options = opts;
  }

  availability(): EngineAvailability {
    return this.#availability;
  }

  /**
   * Marks the engine unavailable with `message` (the condition tenants get carries it). The log
   * gets one line when the engine becomes unavailable or the reason changes, not one per re-check.
   */
  #unavailable(message: string, line: string, fields: Record<string, unknown> = {}): void {
    const same = !this.#availability.available && this.#availability.message === message;
    this.#availability = { available: false, message };
    if (!same) this.#options.log?.(line, { ...fields, message });
  }

  /** Finds the CLI and installs plugins; concurrent calls share one attempt (serialised). */
  start(): Promise<void> {
    this.#starting ??= this.#start().finally(() => {
      this.#starting = undefined;
    });
    return this.#starting;
  }

  async #start(): Promise<void> {
    try {
      this.#env();
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      this.#stage = { at: 'config', message };
      this.#unavailable(message, 'pulumi engine not configured');
      return;
    }
    const root = cliRootFor(this.#options.cliDir, existsSync);
    let command: PulumiCommand;
    try {
      command = await PulumiCommand.get({ ...(root ? { root } : {}), skipVersionCheck: true });
    } catch {
      // The SDK's error is several lines of what it tried; where it looked and the fix say it all.
      const where = root ? `in ${root}/bin` : 'on PATH';
      this.#stage = { at: 'cli-missing', where };
      this.#unavailable(`the Pulumi CLI was not found ${where}: ${INSTALL_HINT}`, 'pulumi CLI not found', { where });
      return;
    }
    const path = root ? join(root, 'bin', 'pulumi') : (onPath('pulumi', process.env.PATH) ?? 'pulumi');
    const version = command.version?.version ?? null;
    const versionProblem = cliVersionProblem(version);
    const problem = versionProblem ?? this.#options.configProblem;
    if (problem) {
      this.#stage = versionProblem
        ? { at: 'cli-unusable', path, version, message: problem }
        : { at: 'config', message: problem };
      this.#unavailable(problem, 'pulumi CLI not usable');
      return;
    }
    try {
      await mkdir(this.#options.pulumiHome, { recursive: true });
      const ws = await LocalWorkspace.create({
        pulumiCommand: command,
        pulumiHome: this.#options.pulumiHome,
        envVars: this.#env(),
      });
      for (const p of requiredPlugins(this.#options.kubernetesPluginVersion)) {
        this.#options.log?.('installing engine plugin', { plugin: p.name, version: p.version });
        await ws.installPlugin(p.name, p.version, p.kind);
      }
    } catch (err) {
      const reason = err instanceof Error ? err.message.slice(0, 500) : String(err);
      const message = `the Pulumi CLI could not install its plugins (${reason}); check network access or pre-install them into ${this.#options.pulumiHome}`;
      this.#stage = { at: 'plugins', path, version: version!, message };
      this.#unavailable(message, 'pulumi engine plugins not installed');
      return;
    }
    this.#command = command;
    this.#stage = { at: 'ready', path, version: version! };
    this.#availability = { available: true };
    this.#options.log?.('pulumi engine ready', {
      version: command.version?.version,
      backend: redactUrl(this.#options.backendUrl),
    });
  }

  report(): EngineCheck[] {
    const stage = this.#stage;
    const checks: EngineCheck[] = [];
    if (stage.at === 'not-started' || stage.at === 'config') {
      checks.push({
        name: 'engine.config',
        status: 'problem',
        message:
          stage.at === 'config' ? stage.message : 'the Pulumi engine has not started yet (the reconciler starts it)',
        fix:
          stage.at === 'config'
            ? ["set what the message names in the provisioner's environment and restart it (docs/reconciler.md)"]
            : ['wait a few seconds and run provisioner doctor again'],
        detail: {},
      });
    }
    const cliFound = stage.at === 'cli-unusable' || stage.at === 'plugins' || stage.at === 'ready';
    if (stage.at === 'cli-missing') {
      checks.push({
        name: 'engine.cli',
        status: 'problem',
        message: `the Pulumi CLI (${MINIMUM_CLI_VERSION} or newer) was not found ${stage.where}; the engine re-checks every minute`,
        fix: cliFixSteps(this.#options.cliDir),
        detail: { minimumVersion: MINIMUM_CLI_VERSION },
      });
    } else if (cliFound) {
      const unusable = stage.at === 'cli-unusable';
      checks.push({
        name: 'engine.cli',
        status: unusable ? 'problem' : 'ok',
        message: unusable
          ? stage.message
          : `Pulumi CLI ${stage.version} at ${stage.path} (${MINIMUM_CLI_VERSION}+ needed)`,
        fix: unusable ? cliFixSteps(this.#options.cliDir) : [],
        detail: { path: stage.path, version: stage.version ?? 'unknown', minimumVersion: MINIMUM_CLI_VERSION },
      });
    }
    checks.push({
      name: 'engine.languageHost',
      status: 'ok',
      message: `the tenants program runs inline in the provisioner's own Node.js ${process.version} (@pulumi/pulumi ${sdkVersion()}); no pulumi-language-nodejs is needed`,
      fix: [],
      detail: { node: process.version, sdk: sdkVersion(), mode: 'inline' },
    });
    const version = `v${this.#options.kubernetesPluginVersion.replace(/^v/, '')}`;
    const cached = join(
      this.#options.pulumiHome,
      'plugins',
      `resource-kubernetes-${version}`,
      'pulumi-resource-kubernetes',
    );
    const where = existsSync(cached) ? cached : onPath('pulumi-resource-kubernetes', process.env.PATH);
    const install = `PULUMI_HOME=${this.#options.pulumiHome} pulumi plugin install resource kubernetes ${version}`;
    if (where && stage.at !== 'plugins') {
      checks.push({
        name: 'engine.kubernetesPlugin',
        status: 'ok',
        message: `Kubernetes provider plugin ${version} at ${where}`,
        fix: [],
        detail: { version, path: where },
      });
    } else if (stage.at === 'plugins' || stage.at === 'ready') {
      checks.push({
        name: 'engine.kubernetesPlugin',
        status: 'problem',
        message: stage.at === 'plugins' ? stage.message : `the Kubernetes provider plugin ${version} is not installed`,
        fix: [install, 'the engine re-checks by itself every minute: no restart needed'],
        detail: { version, pulumiHome: this.#options.pulumiHome },
      });
    } else {
      checks.push({
        name: 'engine.kubernetesPlugin',
        status: 'skipped',
        message: `the Kubernetes provider plugin ${version} is installed by the engine once the Pulumi CLI is found`,
        fix: [],
        detail: { version, pulumiHome: this.#options.pulumiHome },
      });
    }
    return checks;
  }

  #env(): Record<string, string> {
    return planStack(
      {
        tenantId: 'probe',
        organization: '',
        plan: '',
        runtimeVersion: '',
        suspended: false,
        clusterName: '',
        rootKubeconfig: '',
        runtimeToken: '',
      },
      { ...this.#options, stackConfig: () => ({}) },
    ).envVars;
  }

  #require(): PulumiCommand {
    if (!this.#command || !this.#availability.available) {
      throw new EngineError(
        'EngineUnavailable',
        this.#availability.available ? 'the Pulumi engine has not started' : this.#availability.message,
      );
    }
    return this.#command;
  }

  async #stack(input: StackInput, withConfig: boolean): Promise<{ stack: Stack; plan: StackPlan }> {
    const pulumiCommand = this.#require();
    const plan = planStack(input, this.#options);
    await mkdir(plan.workDir, { recursive: true });
    const select = async (): Promise<Stack> => {
      const ws = await LocalWorkspace.create({
        program: this.#options.program,
        workDir: plan.workDir,
        pulumiHome: this.#options.pulumiHome,
        pulumiCommand,
        envVars: plan.envVars,
        secretsProvider: plan.secretsProvider,
        projectSettings: {
          name: plan.projectName,
          runtime: 'nodejs',
          backend: { url: plan.envVars.PULUMI_BACKEND_URL! },
        },
      });
      readOutputsMasked(ws);
      return Stack.createOrSelect(plan.stackName, ws);
    };
    let stack: Stack;
    if (this.#backendReady) {
      await this.#backendReady;
      stack = await retryStateTableRace(select);
    } else {
      const first = retryStateTableRace(select);
      this.#backendReady = first.then(
        () => undefined,
        () => {
          this.#backendReady = undefined;
        },
      );
      stack = await first;
    }
    if (withConfig) await this.#setConfig(stack, plan);
    return { stack, plan };
  }

  /**
   * Per stack, the config this process last set (its digest) and the stack settings file as that
   * left it: an operation whose config and file are both unchanged skips `pulumi config set-all`,
   * a CLI run that, with secret values, derives the stack's key (readOutputsMasked). In memory
   * only: a restarted provisioner sets the config again once.
   */
  readonly #configSet = new Map<string, { config: string; file: string }>();

  async #setConfig(stack: Stack, plan: StackPlan): Promise<void> {
    const settingsFile = join(plan.workDir, `Pulumi.${plan.stackName}.yaml`);
    const fileDigest = async (): Promise<string | undefined> => {
      try {
        return createHash('sha256')
          .update(await readFile(settingsFile))
          .digest('hex');
      } catch {
        return undefined;
      }
    };
    const config = configDigest(plan.config);
    const set = this.#configSet.get(plan.stackName);
    if (set && set.config === config && set.file === (await fileDigest())) return;
    this.#configSet.delete(plan.stackName);
    await stack.setAllConfig(plan.config);
    const file = await fileDigest();
    if (file) this.#configSet.set(plan.stackName, { config, file });
  }

  /** The Automation API's handlers for one command; the finished resource steps go to `steps`. */
  #handlers(
    opts: RunOptions | undefined,
    steps?: ResourceStep[],
  ): { onOutput?: (s: string) => void; onEvent?: (e: EngineEvent) => void; signal?: AbortSignal } {
    const onEvent = opts?.onEvent;
    return {
      ...(opts?.onOutput ? { onOutput: opts.onOutput } : {}),
      onEvent: (e: EngineEvent) => {
        if (steps) {
          const step = stepOf(e);
          if (step) steps.push(step);
        }
        if (onEvent) {
          const s = summarizeEvent(e);
          if (s) onEvent(s);
        }
      },
      ...(opts?.signal ? { signal: opts.signal } : {}),
    };
  }

  async up(input: StackInput, opts?: RunOptions): Promise<EngineResult> {
    try {
      const { stack } = await this.#stack(input, true);
      const steps: ResourceStep[] = [];
      const res = await stack.up({
        ...this.#handlers(opts, steps),
        parallel: this.#options.parallel ?? 16,
        // The update's summary is read without the config's secrets (no key derivation; readOutputsMasked).
        showSecrets: false,
      });
      return { outputs: plainOutputs(res.outputs), changes: toChanges(res.summary.resourceChanges), steps };
    } catch (err) {
      throw mapError(err, opts?.signal);
    }
  }

  async preview(input: StackInput, opts?: RunOptions & { refresh?: boolean }): Promise<EngineResult> {
    try {
      const { stack } = await this.#stack(input, true);
      const res = await stack.preview({ ...this.#handlers(opts), ...(opts?.refresh ? { refresh: true } : {}) });
      return { outputs: {}, changes: toChanges(res.changeSummary), steps: [] };
    } catch (err) {
      throw mapError(err, opts?.signal);
    }
  }

  async refresh(input: StackInput, opts?: RefreshOptions): Promise<EngineResult> {
    try {
      const { stack } = await this.#stack(input, true);
      const steps: ResourceStep[] = [];
      // Excluded by URN, each one listed: what is left out does not depend on how the CLI walks
      // provider references for --exclude-dependents.
      const exclude = opts?.rootClusterOnly ? virtualClusterUrns(await stack.exportStack(), ROOT_PROVIDER) : [];
      const res = await stack.refresh({
        ...this.#handlers(opts, steps),
        showSecrets: false,
        ...(opts?.clearPendingCreates ? { clearPendingCreates: true } : {}),
        ...(exclude.length > 0 ? { exclude } : {}),
      });
      return { outputs: plainOutputs(await stack.outputs()), changes: toChanges(res.summary.resourceChanges), steps };
    } catch (err) {
      throw mapError(err, opts?.signal);
    }
  }

  async destroy(input: StackInput, opts?: RunOptions): Promise<EngineResult> {
    try {
      const { stack, plan } = await this.#stack(input, true);
      const res = await stack.destroy({ ...this.#handlers(opts), remove: true, showSecrets: false });
      await rm(plan.workDir, { recursive: true, force: true });
      this.#configSet.delete(plan.stackName);
      try {
        const purged = await purgeRemovedStack(plan.envVars.PULUMI_BACKEND_URL!, plan.projectName, plan.stackName);
        if (purged > 0)
          opts?.onOutput?.(`removed ${purged} backup/history object(s) of the stack from the state backend\n`);
      } catch (err) {
        // The tenant is gone either way; the leftovers only take space.
        opts?.onOutput?.(
          `could not remove the stack's backup/history objects from the state backend: ${err instanceof Error ? err.message : String(err)}\n`,
        );
      }
      return { outputs: {}, changes: toChanges(res.summary.resourceChanges), steps: [] };
    } catch (err) {
      throw mapError(err, opts?.signal);
    }
  }

  async outputs(input: StackInput): Promise<Record<string, unknown>> {
    try {
      const { stack } = await this.#stack(input, false);
      return plainOutputs(await stack.outputs());
    } catch (err) {
      throw mapError(err, undefined);
    }
  }

  async cancel(input: StackInput): Promise<void> {
    try {
      const { stack } = await this.#stack(input, false);
      await stack.cancel();
    } catch (err) {
      throw mapError(err, undefined);
    }
  }

  async interrupted(input: StackInput): Promise<InterruptedResource[]> {
    try {
      const { stack } = await this.#stack(input, false);
      // The Automation API exports with --show-secrets: the provider kubeconfigs come back readable.
      return interruptedResources(await stack.exportStack());
    } catch (err) {
      throw mapError(err, undefined);
    }
  }

  async close(): Promise<void> {
    // Nothing long-lived: each command is a child process the Automation API waits for.
  }
}
