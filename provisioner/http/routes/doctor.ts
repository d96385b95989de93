/**
 * GET /v1/doctor: what stands between a signup and a provisioned tenant, as checks with what to do
 * about each (`provisioner doctor` prints them). The engine's parts as its last start or re-check
 * found them (Pulumi CLI and version, language host, Kubernetes plugin), and every registered
 * root cluster probed now (reachable, credentials accepted, the tenants program's permissions).
 * The database needs no check here: answering this route (a key lookup) proves it; the CLI reads
 * /readyz for it. Operators and admins only: the answer names paths and servers. Nothing in the
 * request is run or read: it has no parameters. Each background loop of this replica is a check
 * too (loop/<name>), with its last error. So is each provisioned (Ready) tenant whose runtime is
 * not connected (tenant/<organization>): provisioned is not running, and the on-call reads here
 * which tenants are dark and what to check.
 */
import { readFileSync } from 'node:fs';
import { type Static } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { DoctorCheck } from '../../api/schemas.ts';
import { endpoint } from '../api-routes.ts';
import type { AppContext } from '../context.ts';
import type { ClusterProbe } from '../../clusters/service.ts';
import type { LoopStatus } from '../../../runtime/loops/health.ts';
import { describeMissing } from '../../../tenants/root-permissions.ts';
import { toTenant } from '../../store/tenants.ts';
import { RUNTIME_NOT_CONNECTED_REASONS, runtimeConnected, tunnelView } from '../../tenant-api/tenant-view.ts';

type Check = Static<typeof DoctorCheck>;

const VERSION = (
  JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

/** The engine's checks, or the one problem that there is no engine. */
function engineChecks(ctx: AppContext): Check[] {
  if (!ctx.engine) {
    return [
      {
        name: 'engine',
        status: 'problem',
        message: 'PROVISIONER_ENGINE=none: no reconciler runs here, so no tenant is provisioned by this provisioner',
        fix: ['unset PROVISIONER_ENGINE (or set it to pulumi) and restart the provisioner'],
        detail: { kind: 'none' },
      },
    ];
  }
  return ctx.engine.report();
}

const CLUSTER_ADD =
  'provisioner clusters add <name> --region <region> --capacity <tenants> --kubeconfig <file>   # a kubeconfig with inline credentials (docs/operations.md, Root clusters)';

function clusterChecks(probes: ClusterProbe[]): Check[] {
  if (probes.length === 0) {
    return [
      {
        name: 'clusters',
        status: 'problem',
        message: 'no root cluster is registered: tenants wait (NoCapacity) until one is',
        fix: [CLUSTER_ADD],
        detail: {},
      },
    ];
  }
  const checks = probes.map((p): Check => {
    const r = p.result;
    const name = `cluster/${p.name}`;
    const detail: Record<string, string> = { region: p.region, server: r.server, cordoned: String(p.cordoned) };
    if (r.outcome === 'ok') {
      return {
        name,
        status: p.cordoned ? 'warning' : 'ok',
        message: `${r.server} answers (Kubernetes ${r.version}) and the credentials hold every permission the tenants program needs${p.cordoned ? '; the cluster is cordoned: no new tenant is placed on it' : ''}`,
        fix: p.cordoned ? [`provisioner clusters uncordon ${p.name}`] : [],
        detail: { ...detail, kubernetes: r.version },
      };
    }
    const fix =
      r.outcome === 'unreachable'
        ? [
            `check that the provisioner's machine reaches ${r.server || 'the server'} (firewall, DNS, the kubeconfig's server and certificate-authority-data)`,
          ]
        : r.outcome === 'unauthorized'
          ? [
              'give the cluster a kubeconfig with valid credentials: register it again under a new name, then cordon this one',
            ]
          : r.outcome === 'forbidden'
            ? [
                `use the kubeconfig of the provisioner's ServiceAccount that \`pulumi up\` of the root infrastructure created (docs/operations.md, Installing the control plane), or grant its user: ${describeMissing(r.missing)}`,
                `kubectl auth can-i --list   # with the same kubeconfig, to see what it may do`,
              ]
            : [
                'register the cluster again with a kubeconfig the policy accepts (docs/api.md, What a kubeconfig may contain)',
              ];
    return { name, status: 'problem', message: r.error, fix, detail };
  });
  if (probes.every((p) => p.cordoned)) {
    checks.push({
      name: 'clusters',
      status: 'problem',
      message: 'every root cluster is cordoned: new tenants wait (NoCapacity)',
      fix: probes
        .map((p) => `provisioner clusters uncordon ${p.name}`)
        .slice(0, 1)
        .concat([CLUSTER_ADD]),
      detail: {},
    });
  }
  return checks;
}

/**
 * One check per background loop of this replica (loop/<name>): ok while it runs and its last round
 * succeeded (or it is turned off), a warning while its rounds fail (with the last error, secrets
 * masked) or when it is not running. Never a problem: each loop retries by itself, and what keeps
 * tenants from being provisioned is reported by the checks above.
 */
export function loopChecks(statuses: LoopStatus[]): Check[] {
  return statuses.map((s): Check => {
    const detail: Record<string, string> = {
      state: s.state,
      rounds: String(s.rounds),
      failures: String(s.failures),
      ...(s.lastRoundAt ? { lastRoundAt: s.lastRoundAt.toISOString() } : {}),
      ...(s.lastSuccessAt ? { lastSuccessAt: s.lastSuccessAt.toISOString() } : {}),
      ...(s.lastErrorAt ? { lastErrorAt: s.lastErrorAt.toISOString() } : {}),
      ...(s.lastError ? { lastError: s.lastError } : {}),
    };
    const name = `loop/${s.name}`;
    if (s.state === 'disabled')
      return { name, status: 'ok', message: 'turned off by the configuration', fix: [], detail };
    if (s.state !== 'running')
      return {
        name,
        status: 'warning',
        message: `not running (${s.state})`,
        fix: ["see the provisioner's log; a replica that is stopping ends its loops"],
        detail,
      };
    if (s.consecutiveFailures > 0)
      return {
        name,
        status: 'warning',
        message: `its last ${s.consecutiveFailures} round${s.consecutiveFailures === 1 ? '' : 's'} failed: ${s.lastError ?? 'no message'}`,
        fix: [`see the provisioner's log for loop ${s.name}; it retries by itself`],
        detail,
      };
    return {
      name,
      status: 'ok',
      message: s.lastSuccessAt
        ? `running; last round ${s.lastSuccessAt.toISOString()}`
        : 'running; no round finished yet',
      fix: [],
      detail,
    };
  });
}

/** Ready tenants read per doctor call, oldest first: the answer stays bounded on a large fleet. */
export const RUNTIME_SCAN_LIMIT = 2000;
/** Tenants named one by one; the rest are counted in one check. */
const RUNTIME_NAMED = 20;

/**
 * One warning per Ready tenant whose runtime is not connected (its RuntimeConnected=False,
 * tenant-view.ts), with that condition's message and the commands to look; up to RUNTIME_NAMED,
 * the rest counted. A warning, not a problem: it does not keep tenants from being provisioned.
 */
async function runtimeChecks(ctx: AppContext): Promise<Check[]> {
  const rows = await ctx.tenants.ready(RUNTIME_SCAN_LIMIT);
  const dark: Check[] = [];
  for (const row of rows) {
    const t = toTenant(row);
    const c = runtimeConnected(t, tunnelView(ctx.tunnel.status(t.id), row, ctx.tunnelDirectory.replicaId));
    if (c?.status !== 'False' || !RUNTIME_NOT_CONNECTED_REASONS.has(c.reason)) continue;
    dark.push({
      name: `tenant/${t.organization}`,
      status: 'warning',
      message: `Ready, but its runtime is not connected (${c.reason}, since ${c.lastTransitionTime}): ${c.message}`,
      fix: [
        `provisioner tenants get ${t.id}   # its conditions, cluster and vcluster endpoint`,
        `provisioner operations list ${t.id}   # the last operation that provisioned it`,
      ],
      detail: {
        tenant: t.id,
        reason: c.reason,
        since: c.lastTransitionTime,
        ...(t.status.cluster ? { cluster: t.status.cluster } : {}),
      },
    });
  }
  if (dark.length <= RUNTIME_NAMED) return dark;
  return [
    ...dark.slice(0, RUNTIME_NAMED),
    {
      name: 'tenants',
      status: 'warning',
      message: `${dark.length - RUNTIME_NAMED} more Ready tenants' runtimes are not connected${rows.length === RUNTIME_SCAN_LIMIT ? ` (of the oldest ${RUNTIME_SCAN_LIMIT} Ready tenants read)` : ''}`,
      fix: ['provisioner tenants list --phase Ready --all   # the STATUS column names each one'],
      detail: { notConnected: String(dark.length) },
    },
  ];
}

export const doctorRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    app.route({
      ...endpoint('GET /v1/doctor', {
        summary: 'What a tenant needs to be provisioned here: the engine and the root clusters, each with a fix',
        description:
          'Answers 200 whatever the checks found; a check with status `problem` keeps tenants from being provisioned. The database is checked by `/readyz`. Each cluster is probed now (at most 5 s).',
        tags: ['health'],
      }),
      config: { roles: ['operator'] },
      handler: async () => {
        const [probes, runtimes] = await Promise.all([ctx.clusters.probeAll({ timeoutMs: 5000 }), runtimeChecks(ctx)]);
        return {
          version: VERSION,
          checks: [...engineChecks(ctx), ...clusterChecks(probes), ...runtimes, ...loopChecks(ctx.loops.status())],
        };
      },
    });
  };
