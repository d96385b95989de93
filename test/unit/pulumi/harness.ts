/**
 * Test harness for the Pulumi programs: runs a program under `pulumi.runtime.setMocks` and
 * records every registered resource (type, name, inputs, provider, parent). Pulumi's runtime
 * state is per process; `runProgram` resets the mocks and config on every call, so several
 * programs can run one after the other in one test file.
 */
import * as pulumi from '@pulumi/pulumi';

export interface Registered {
  type: string;
  name: string;
  /** Inputs as the mock monitor received them (secrets unwrapped). Read them with `inputsOf`. */
  inputs: Record<string, unknown>;
  custom: boolean;
  /** `urn::id` of the provider, for custom resources. */
  provider?: string;
  /** Set when the resource is a read (`.get`). */
  id?: string;
  /** Name of the parent resource ('' for the stack). */
  parent: string;
  /** Name of the explicit provider from options (after inheritance), when known. */
  providerName?: string;
}

export interface RunResult {
  resources: Registered[];
  outputs: Record<string, unknown>;
  /** Resources by logical name. */
  byName(name: string): Registered;
  ofType(type: string): Registered[];
}

export const FAKE_KUBECONFIG = `apiVersion: v1
kind: Config
clusters: [{name: vc, cluster: {server: 'https://vcluster.example.svc:443'}}]
contexts: [{name: vc, context: {cluster: vc, user: vc}}]
current-context: vc
users: [{name: vc, user: {token: fake}}]
`;

/** The inputs of a registered resource, typed as the caller expects them to be. */
export function inputsOf<T>(resource: Registered): T {
  return resource.inputs as T;
}

function metadataOf(inputs: Record<string, unknown>): Record<string, unknown> | undefined {
  const m = inputs.metadata;
  return typeof m === 'object' && m !== null ? (m as Record<string, unknown>) : undefined;
}

/** Extra outputs a mock returns, per type, on top of echoing the inputs. */
function computed(type: string, inputs: Record<string, unknown>, id: string | undefined): Record<string, unknown> {
  if (type === 'kubernetes:core/v1:Secret' && id?.endsWith('/provisioner-token')) {
    // A read of the provisioner's ServiceAccount token Secret (root infra), once filled in.
    const [namespace, name] = id.split('/');
    return {
      metadata: { name, namespace },
      data: { token: Buffer.from('sa-token').toString('base64'), 'ca.crt': Buffer.from('CA').toString('base64') },
    };
  }
  if (type === 'kubernetes:core/v1:Secret' && id) {
    // A read of the vcluster's exported kubeconfig Secret.
    const [namespace, name] = id.split('/');
    return { metadata: { name, namespace }, data: { config: Buffer.from(FAKE_KUBECONFIG).toString('base64') } };
  }
  if (type === 'kubernetes:helm.sh/v3:Release') {
    return {
      status: { name: inputs.name, namespace: inputs.namespace, status: 'deployed', version: inputs.version ?? '' },
    };
  }
  const metadata = metadataOf(inputs);
  if (type.startsWith('kubernetes:') && metadata && !metadata.name) {
    return { metadata: { ...metadata, name: `${type.split(':').pop()!.toLowerCase()}-generated` } };
  }
  return {};
}

/** Replaces serialized secrets ({<sig>: <secret sig>, value}) by their values. */
function unwrapSecrets(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(unwrapSecrets);
  if (value && typeof value === 'object') {
    const record = value as Record<string, unknown>;
    if (record['4dabf18193072939515e22adb298388d'] === '1b47061264138c4ac30d75fd1eb44270')
      return unwrapSecrets(record.value);
    return Object.fromEntries(Object.entries(record).map(([k, v]) => [k, unwrapSecrets(v)]));
  }
  return value;
}

async function settle<T>(value: T): Promise<unknown> {
  return new Promise((resolve) => {
    pulumi.output(value).apply((v) => {
      resolve(v);
      return v;
    });
  });
}

export async function runProgram(
  program: () => Promise<Record<string, unknown>>,
  config: Record<string, { value: string; secret: boolean }>,
  opts: { project?: string; stack?: string } = {},
): Promise<RunResult> {
  const resources: Registered[] = [];
  const meta = new Map<string, { parent: string; providerName?: string }>();
  pulumi.runtime.setMocks(
    {
      newResource(args) {
        const inputs = unwrapSecrets(args.inputs) as Record<string, unknown>;
        const info = meta.get(`${args.type}::${args.name}`);
        resources.push({
          type: args.type,
          name: args.name,
          inputs,
          custom: args.custom ?? true,
          provider: args.provider,
          id: args.id || undefined,
          parent: info?.parent ?? '',
          providerName: info?.providerName,
        });
        const state = { ...inputs, ...computed(args.type, inputs, args.id) };
        return { id: args.id || `${args.name}-id`, state };
      },
      call(args) {
        return args.inputs;
      },
    },
    opts.project ?? 'tenant-test',
    opts.stack ?? 'test',
    false,
  );
  const plainConfig: Record<string, string> = {};
  const secretKeys: string[] = [];
  for (const [k, v] of Object.entries(config)) {
    plainConfig[k] = v.value;
    if (v.secret) secretKeys.push(k);
  }
  pulumi.runtime.setAllConfig(plainConfig, secretKeys);
  const outputs = await pulumi.runtime.runInPulumiStack(async () => {
    pulumi.runtime.registerStackTransformation((args) => {
      const parent = args.opts.parent;
      const provider = args.opts.provider;
      meta.set(`${args.type}::${args.name}`, {
        parent: parent ? (pulumi.Resource.isInstance(parent) ? nameOf(parent) : '') : '',
        providerName: provider ? nameOf(provider) : undefined,
      });
      return undefined;
    });
    return program();
  });
  const resolved = (await settle(outputs ?? {})) as Record<string, unknown>;
  // Let every pending registration reach the mock monitor (drains the RPC queue).
  await pulumi.runtime.disconnect();
  return {
    resources,
    outputs: resolved,
    byName(name) {
      const found = resources.find((r) => r.name === name);
      if (!found) throw new Error(`no resource named ${name}; have: ${resources.map((r) => r.name).join(', ')}`);
      return found;
    },
    ofType: (type) => resources.filter((r) => r.type === type),
  };
}

/** Logical name of a resource (from its URN's last segment). */
function nameOf(resource: pulumi.Resource): string {
  const urn = (resource as unknown as { __name?: string }).__name;
  return urn ?? '';
}

export interface ObjectMeta {
  name?: string;
  namespace?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/** Metadata of a registered Kubernetes object (empty when it has none). */
export function metaOf(resource: Registered): ObjectMeta {
  const m = resource.inputs.metadata;
  return typeof m === 'object' && m !== null ? m : {};
}

/** Inputs of a helm.v3.Release as the tests read them. */
export interface ReleaseInputs<V = Record<string, unknown>> {
  name?: string;
  namespace?: string;
  chart: string;
  version?: string;
  repositoryOpts?: { repo?: string };
  skipAwait?: boolean;
  /** Helm undoes a failed install or upgrade itself (uninstall, or rollback to the last deployed revision). */
  atomic?: boolean;
  cleanupOnFail?: boolean;
  /** Helm's client-side OpenAPI check of an install (docs/decisions.md). */
  disableOpenapiValidation?: boolean;
  /** Seconds Helm waits for the release's workloads. */
  timeout?: number;
  values: V;
}

export function releaseOf<V = Record<string, unknown>>(resource: Registered): ReleaseInputs<V> {
  return resource.inputs as unknown as ReleaseInputs<V>;
}
