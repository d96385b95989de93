/**
 * The kubeconfig policy: the one place that decides whether a kubeconfig a caller gave us may be
 * used. It runs where a kubeconfig enters (cluster registration) and again wherever a stored one
 * is loaded (the reconciler, the tenant program's provider and kubeconfig wait, Helm recovery),
 * always before anything touches the filesystem, starts a process or opens a connection.
 *
 * A kubeconfig here is data, never instructions to the control plane: it is parsed (YAML or
 * JSON) and its raw structure checked field by field. Only inline credentials are accepted
 * (`token`, `client-certificate-data`, `client-key-data`, `certificate-authority-data`,
 * `username`/`password`); every field that reads a file (`token-file`/`tokenFile`,
 * `client-certificate`, `client-key`, `certificate-authority`), runs a command (`exec`,
 * `auth-provider`) or redirects traffic (`proxy-url`) is refused with its path named, as is
 * `insecure-skip-tls-verify` and any field this service does not know. An operator may allow
 * exec for a closed list of commands and skipping TLS verification at start-up
 * (docs/operations.md); callers never can.
 *
 * What comes out is a new, minimal kubeconfig (JSON, which every YAML reader takes) holding only
 * the current context, its cluster and its user: @kubernetes/client-node and the Pulumi provider
 * only ever see that. Never hand a kubeconfig to `KubeConfig.loadFromString` without passing it
 * through here first (loadFromString reads `token-file` synchronously).
 *
 * The server must be https (plain http only when an operator allows it) and its address passes
 * the outbound address policy (address.ts): checked here when it is an IP literal, and by
 * pinKubeconfig, which resolves a name once and pins the sanitised copy to the checked address
 * (`tls-server-name` keeps TLS verification on the name).
 *
 * Shared by the provisioner and the tenants program and owned by neither: this folder imports
 * nothing of either (test/unit/layers.test.ts).
 */
import { isIP } from 'node:net';
import { parse } from 'yaml';
import { addressProblem, AddressRefusedError, hostOf, resolveChecked, type Lookup } from './address.ts';

export interface KubeconfigPolicy {
  /** Commands `users[].user.exec.command` may name (exact match); empty: exec is refused. */
  execCommands: readonly string[];
  /** Whether `insecure-skip-tls-verify: true` is accepted. */
  allowInsecureTls: boolean;
  /** Loopback and private ranges the server may be in (CIDRs); link-local, unspecified and multicast never. */
  allowedCidrs: readonly string[];
  /** The setting that lists allowedCidrs, named in refusals (default PROVISIONER_CLUSTER_ALLOWED_CIDRS). */
  allowedCidrsVariable?: string;
  /** Whether a plain http server is accepted (tests and development only). */
  allowHttp: boolean;
}

/** No exec, TLS always verified: what a tenant-supplied kubeconfig always gets. */
export const STRICT_KUBECONFIG_POLICY: KubeconfigPolicy = Object.freeze({
  execCommands: Object.freeze([]),
  allowInsecureTls: false,
  allowedCidrs: Object.freeze([]),
  allowHttp: false,
});

/** A kubeconfig refused by the policy; `path` names the field (`users[0].user.exec`). */
export class KubeconfigPolicyError extends Error {
  override name = 'KubeconfigPolicyError';
  readonly path: string;
  constructor(path: string, message: string) {
    super(path ? `${path}: ${message}` : message);
    this.path = path;
  }
}

/** The parts of a checked kubeconfig a caller needs, and the sanitised kubeconfig itself. */
export interface CheckedKubeconfig {
  /** The cluster's server URL as given (`https://host:port`). */
  server: URL;
  /** Where the current cluster's server is in the document (`clusters[0].cluster.server`). */
  serverPath: string;
  /** The minimal kubeconfig (JSON) with only the current context, its cluster and user. */
  text: string;
  /** Every secret value it holds (tokens, keys, passwords): masked wherever output is logged. */
  secrets: string[];
}

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

const READS_FILE = 'reads a file on the control plane; put the contents inline';
const REFUSED: Record<string, Record<string, string>> = {
  cluster: {
    'certificate-authority': `${READS_FILE} (certificate-authority-data)`,
    'proxy-url': 'sends the traffic through a proxy; connect to the API server directly',
  },
  user: {
    'token-file': `${READS_FILE} (token)`,
    tokenFile: `${READS_FILE} (token)`,
    'client-certificate': `${READS_FILE} (client-certificate-data)`,
    'client-key': `${READS_FILE} (client-key-data)`,
    'auth-provider': 'runs an authentication plugin on the control plane; use a token or a client certificate',
    exec: 'runs a command on the control plane; use a token or a client certificate (an operator may allow named commands with PROVISIONER_KUBECONFIG_EXEC_COMMANDS)',
  },
};

/** Fields kept as they are (strings unless noted), by section. */
const STRINGS = {
  top: ['apiVersion', 'kind', 'current-context'],
  cluster: ['server', 'certificate-authority-data', 'tls-server-name'],
  user: ['token', 'client-certificate-data', 'client-key-data', 'username', 'password', 'as', 'as-uid'],
  context: ['cluster', 'user', 'namespace'],
} as const;
/** Fields accepted and dropped from the sanitised copy (informational only). */
const IGNORED = new Set(['extensions', 'preferences', 'disable-compression']);
const EXEC_FIELDS = new Set([
  'apiVersion',
  'command',
  'args',
  'env',
  'installHint',
  'provideClusterInfo',
  'interactiveMode',
]);

/** Most entries a kubeconfig may hold per list (a real one has a handful). */
const MAX_ENTRIES = 64;

/**
 * Deepest nesting of JSON/YAML flow collections accepted. The parser recurses per level, so
 * `[[[[…` a few thousand deep would exhaust the stack; it is refused before parsing.
 */
const MAX_NESTING = 32;

/** The deepest nesting of `[`/`{` outside quoted strings (block nesting is bounded by the length). */
export function flowNestingDepth(text: string): number {
  let depth = 0;
  let max = 0;
  let quote: '"' | "'" | undefined;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quote !== undefined) {
      if (c === '\\' && quote === '"') i++;
      else if (c === quote) quote = undefined;
    } else if ((c === '"' || c === "'") && (i === 0 || /[\s[{,:]/.test(text[i - 1]!))) quote = c;
    else if (c === '[' || c === '{') max = Math.max(max, ++depth);
    else if ((c === ']' || c === '}') && depth > 0) depth--;
  }
  return max;
}

/**
 * Parses and checks a kubeconfig (YAML or JSON) against the policy. Synchronous and free of I/O.
 * Throws KubeconfigPolicyError naming the field at fault.
 */
export function checkKubeconfig(text: string, policy: KubeconfigPolicy = STRICT_KUBECONFIG_POLICY): CheckedKubeconfig {
  if (flowNestingDepth(text) > MAX_NESTING)
    throw new KubeconfigPolicyError('', `is nested more than ${MAX_NESTING} levels deep (a kubeconfig needs about 5)`);
  let doc: unknown;
  try {
    doc = parse(text, { maxAliasCount: 16, uniqueKeys: true, prettyErrors: false });
  } catch (err) {
    if (err instanceof RangeError)
      throw new KubeconfigPolicyError(
        '',
        `is nested more than ${MAX_NESTING} levels deep (a kubeconfig needs about 5)`,
      );
    throw new KubeconfigPolicyError(
      '',
      `could not be parsed as YAML or JSON: ${(err as Error).message.split('\n')[0]}`,
    );
  }
  if (!isObject(doc))
    throw new KubeconfigPolicyError(
      '',
      'must be a YAML or JSON object with clusters, users, contexts and current-context',
    );
  const secrets: string[] = [];
  for (const key of Object.keys(doc)) {
    if (!['clusters', 'users', 'contexts', ...STRINGS.top].includes(key) && !IGNORED.has(key)) unknownField(key);
  }
  for (const key of STRINGS.top)
    if (doc[key] !== undefined && typeof doc[key] !== 'string')
      throw new KubeconfigPolicyError(key, 'must be a string');

  const clusters = namedList(doc, 'clusters', 'cluster', (path, body) => checkCluster(path, body, policy));
  const users = namedList(doc, 'users', 'user', (path, body) => checkUser(path, body, policy, secrets));
  const contexts = namedList(doc, 'contexts', 'context', (path, body) => checkSection(path, body, 'context'));

  const current = doc['current-context'];
  if (typeof current !== 'string' || current === '')
    throw new KubeconfigPolicyError('current-context', 'must name one of the contexts');
  const context = contexts.get(current);
  if (!context) throw new KubeconfigPolicyError('current-context', `'${current}' is not one of the contexts`);
  const cluster = typeof context.body.cluster === 'string' ? clusters.get(context.body.cluster) : undefined;
  if (!cluster) throw new KubeconfigPolicyError(`${context.path}.context.cluster`, `must name one of the clusters`);
  const user = typeof context.body.user === 'string' ? users.get(context.body.user) : undefined;
  if (!user) throw new KubeconfigPolicyError(`${context.path}.context.user`, `must name one of the users`);

  const server = new URL(String(cluster.body.server));
  const sanitised = {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: cluster.name, cluster: cluster.body }],
    users: [{ name: user.name, user: user.body }],
    contexts: [{ name: context.name, context: context.body }],
    'current-context': context.name,
  };
  return { server, serverPath: `${cluster.path}.cluster.server`, text: JSON.stringify(sanitised), secrets };
}

/**
 * checkKubeconfig, then the outbound address policy on the current cluster's server: a name is
 * resolved once, every address checked, and the sanitised copy points at the checked address
 * (with `tls-server-name` set to the name, so the certificate is still verified against it).
 * What it returns never makes a client look the name up again.
 */
export async function pinKubeconfig(
  text: string,
  policy: KubeconfigPolicy = STRICT_KUBECONFIG_POLICY,
  lookup?: Lookup,
): Promise<CheckedKubeconfig> {
  const checked = checkKubeconfig(text, policy);
  let address: string;
  try {
    address = await resolveChecked(checked.server, policy, lookup);
  } catch (err) {
    if (err instanceof AddressRefusedError) throw new KubeconfigPolicyError(checked.serverPath, err.message);
    throw err;
  }
  const host = hostOf(checked.server);
  if (address === host) return checked;
  const doc = JSON.parse(checked.text) as { clusters: [{ cluster: Json }] };
  const cluster = doc.clusters[0].cluster;
  const pinned = new URL(checked.server.href);
  pinned.hostname = address.includes(':') ? `[${address}]` : address;
  cluster.server = pinned.href.replace(/\/$/, '');
  if (typeof cluster['tls-server-name'] !== 'string') cluster['tls-server-name'] = host;
  return { ...checked, text: JSON.stringify(doc) };
}

function unknownField(path: string): never {
  throw new KubeconfigPolicyError(path, 'is not a kubeconfig field this service accepts');
}

interface Entry {
  name: string;
  path: string;
  body: Json;
}

function namedList(
  doc: Json,
  list: 'clusters' | 'users' | 'contexts',
  section: string,
  check: (path: string, body: Json) => Json,
): Map<string, Entry> {
  const value = doc[list];
  if (value === undefined || value === null) return new Map();
  if (!Array.isArray(value)) throw new KubeconfigPolicyError(list, 'must be a list');
  if (value.length > MAX_ENTRIES)
    throw new KubeconfigPolicyError(list, `holds ${value.length} entries; at most ${MAX_ENTRIES} are accepted`);
  const out = new Map<string, Entry>();
  value.forEach((item: unknown, i) => {
    const path = `${list}[${i}]`;
    if (!isObject(item)) throw new KubeconfigPolicyError(path, 'must be an object with name and ' + section);
    for (const key of Object.keys(item)) if (key !== 'name' && key !== section) unknownField(`${path}.${key}`);
    if (typeof item.name !== 'string' || item.name === '')
      throw new KubeconfigPolicyError(`${path}.name`, 'must be a non-empty string');
    const body = item[section] ?? {};
    if (!isObject(body)) throw new KubeconfigPolicyError(`${path}.${section}`, 'must be an object');
    out.set(item.name, { name: item.name, path, body: check(`${path}.${section}`, body) });
  });
  return out;
}

/** Checks the fields of one section against the refused and accepted lists; returns what is kept. */
function checkSection(
  path: string,
  body: Json,
  section: 'cluster' | 'user' | 'context',
  extra: Record<string, (value: unknown) => unknown> = {},
): Json {
  const kept: Json = {};
  for (const [key, value] of Object.entries(body)) {
    const here = `${path}.${key}`;
    if (value === undefined || value === null) continue;
    const refused = REFUSED[section]?.[key];
    if (key in extra) {
      const v = extra[key]!(value);
      if (v !== undefined) kept[key] = v;
    } else if (refused) {
      throw new KubeconfigPolicyError(here, refused);
    } else if ((STRINGS[section] as readonly string[]).includes(key)) {
      if (typeof value !== 'string') throw new KubeconfigPolicyError(here, 'must be a string');
      kept[key] = value;
    } else if (!IGNORED.has(key)) {
      unknownField(here);
    }
  }
  return kept;
}

function checkCluster(path: string, body: Json, policy: KubeconfigPolicy): Json {
  const kept = checkSection(path, body, 'cluster', {
    'insecure-skip-tls-verify': (value) => {
      if (value === false) return undefined;
      if (value !== true) throw new KubeconfigPolicyError(`${path}.insecure-skip-tls-verify`, 'must be a boolean');
      if (!policy.allowInsecureTls) {
        throw new KubeconfigPolicyError(
          `${path}.insecure-skip-tls-verify`,
          "turns off TLS verification; give the API server's CA in certificate-authority-data",
        );
      }
      return true;
    },
  });
  const server = kept.server;
  if (typeof server !== 'string' || server === '') throw new KubeconfigPolicyError(`${path}.server`, 'is missing');
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    throw new KubeconfigPolicyError(`${path}.server`, `'${server}' is not a URL`);
  }
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && policy.allowHttp)) {
    throw new KubeconfigPolicyError(
      `${path}.server`,
      `'${server}' is not an https URL (the control plane only talks TLS to a cluster)`,
    );
  }
  if (url.username || url.password) throw new KubeconfigPolicyError(`${path}.server`, 'must not hold credentials');
  if (url.search || url.hash) throw new KubeconfigPolicyError(`${path}.server`, 'must not hold a query or fragment');
  const host = hostOf(url);
  const problem = isIP(host) !== 0 ? addressProblem(host, policy) : undefined;
  if (problem) throw new KubeconfigPolicyError(`${path}.server`, problem);
  return kept;
}

function checkUser(path: string, body: Json, policy: KubeconfigPolicy, secrets: string[]): Json {
  const kept = checkSection(path, body, 'user', {
    exec: (value) => checkExec(`${path}.exec`, value, policy),
    'as-groups': (value) => {
      if (!Array.isArray(value) || !value.every((g) => typeof g === 'string'))
        throw new KubeconfigPolicyError(`${path}.as-groups`, 'must be a list of strings');
      return value;
    },
    'as-user-extra': (value) => {
      if (
        !isObject(value) ||
        !Object.values(value).every((v) => Array.isArray(v) && v.every((x) => typeof x === 'string'))
      ) {
        throw new KubeconfigPolicyError(`${path}.as-user-extra`, 'must map names to lists of strings');
      }
      return value;
    },
  });
  for (const key of ['token', 'client-key-data', 'client-certificate-data', 'password'] as const) {
    const v = kept[key];
    if (typeof v === 'string' && v !== '') secrets.push(v);
  }
  return kept;
}

function checkExec(path: string, value: unknown, policy: KubeconfigPolicy): Json {
  if (policy.execCommands.length === 0) throw new KubeconfigPolicyError(path, REFUSED.user!.exec!);
  if (!isObject(value)) throw new KubeconfigPolicyError(path, 'must be an object');
  for (const key of Object.keys(value)) if (!EXEC_FIELDS.has(key)) unknownField(`${path}.${key}`);
  if (typeof value.command !== 'string' || !policy.execCommands.includes(value.command)) {
    throw new KubeconfigPolicyError(
      `${path}.command`,
      `'${String(value.command)}' is not one of the commands allowed by PROVISIONER_KUBECONFIG_EXEC_COMMANDS`,
    );
  }
  if (value.args !== undefined && (!Array.isArray(value.args) || !value.args.every((a) => typeof a === 'string'))) {
    throw new KubeconfigPolicyError(`${path}.args`, 'must be a list of strings');
  }
  if (value.env !== undefined && value.env !== null) {
    if (
      !Array.isArray(value.env) ||
      !value.env.every((e) => isObject(e) && typeof e.name === 'string' && typeof e.value === 'string')
    ) {
      throw new KubeconfigPolicyError(`${path}.env`, 'must be a list of {name, value} strings');
    }
  }
  return { ...value, interactiveMode: 'Never' };
}

/** A refusal as one line for an operation log or an error message. */
export function describeRefusal(err: unknown): string {
  return err instanceof KubeconfigPolicyError ? `kubeconfig refused: ${err.message}` : String(err);
}
