/**
 * `provisioner runtimes list|get|register|upgrade|bundle|remove`: a tenant's runtimes, hosted and
 * hybrid (/v1/tenants/:id/runtimes, /v1/runtimes). `register` prints the one command that installs
 * the runtime (`kubectl apply --server-side -f <install URL>`: the URL holds the single-use
 * bootstrap token, so it is said to be a secret until the install redeems it), and writes the
 * install manifest to a file only the user may read for those who apply files (with the command
 * for that); the token alone is never printed, not even with --json. `upgrade` and `bundle` write
 * a hybrid runtime's upgrade bundle (no secret in it) and print what it changes. Stored settings
 * and reported text (the ingress URL, the Argo CD namespace, messages) print through cellText, one
 * line each with every control escaped; commands are the bundle's, quoted word by word (shell.ts).
 */
import { open } from 'node:fs/promises';
import type { Command } from 'commander';
import { apiClientOf, UsageError, type Io } from './api-commands.ts';
import { age, cellText, table } from './format.ts';
import { askOnTerminal } from './terminal-prompt.ts';
import { manifestFileName } from '../../runtime/hybrid/bundle.ts';
import { agentsAt, SOURCE_SERVER_ARGOCD_SECRET } from '../../runtime/component/agents.ts';
import { shellCommand } from '../../runtime/hybrid/shell.ts';
import type { Runtime, RuntimePage, RuntimeUpgradeBundle } from '../api/types.ts';

/**
 * REPORTED is the version the runtime's own agents stated, so it is shown only once they reported
 * (a heartbeat): before that "-", whatever the deployment wrote. HEARTBEAT is how long ago they
 * last reported, or "never".
 */
const row = (r: Runtime) => [
  r.name,
  r.mode,
  r.state,
  r.version,
  r.lastHeartbeatAt !== null ? (r.reportedVersion ?? '-') : '-',
  r.lastHeartbeatAt !== null ? `${age(r.lastHeartbeatAt)} ago` : 'never',
  r.mode === 'hosted' ? '' : `${r.access}${r.argo === 'existing' ? `, argo in ${r.argoNamespace}` : ''}`,
  r.tunnel.connected ? `connected ${age(r.tunnel.since)}` : 'no',
  `${age(r.createdAt)} ago`,
];
const HEADERS = ['NAME', 'MODE', 'STATE', 'VERSION', 'REPORTED', 'HEARTBEAT', 'ACCESS', 'TUNNEL', 'AGE'];

/** Writes `text` to a new file (or over one) that only its owner may read: it holds a secret. */
async function writePrivate(file: string, text: string): Promise<void> {
  let handle;
  try {
    handle = await open(file, 'w', 0o600);
    // An existing file keeps its mode through open(): make it private before the secret goes in.
    await handle.chmod(0o600);
    await handle.writeFile(text, 'utf8');
  } catch (err) {
    throw new UsageError(`--out: cannot write '${file}': ${(err as Error).message}`, { cause: err });
  } finally {
    await handle?.close();
  }
}

/** What an upgrade bundle changes, one line each, then the diff (when asked) and the command. */
function upgradeText(u: RuntimeUpgradeBundle, file: string, command: string, diff: boolean): string {
  const where = (o: { namespace?: string; name: string }) => (o.namespace ? `${o.namespace}/${o.name}` : o.name);
  const lines = [
    ...u.changes.charts.map(
      (c) => `  ${c.change.padEnd(7)} helm release ${c.namespace}/${c.release}: ${c.from ?? '-'} -> ${c.to ?? '-'}`,
    ),
    ...u.changes.objects.map((o) => `  ${o.change.padEnd(7)} ${o.kind} ${where(o)}`),
  ];
  return [
    `${u.from} -> ${u.to}: ${lines.length === 0 ? 'no changes' : `${lines.length} change${lines.length === 1 ? '' : 's'}`}`,
    ...lines,
    ...(diff && u.diff.split('\n').length > 4 ? [u.diff.trimEnd()] : []),
    `the manifest is in ${file}; apply it in your cluster with:`,
    command,
  ].join('\n');
}

export function addRuntimesCommands(program: Command, io: Io): void {
  const client = () => apiClientOf(program, io);
  /**
   * Removing revokes the runtime's key at once and cannot be undone: the user types the runtime's
   * name, or passes --yes. Without a terminal nobody can type it, and the refusal says so.
   */
  const confirmRemove = async (tenant: string, name: string): Promise<void> => {
    const typed = await (io.ask ?? askOnTerminal)(
      `Removing hybrid runtime ${cellText(name)} of tenant ${cellText(tenant)} revokes its runtime key at once; it cannot be undone.\nType the runtime's name to remove it: `,
    );
    if (typed === undefined)
      throw new UsageError(
        `runtimes remove: no terminal to confirm on; pass --yes to remove runtime '${cellText(name)}' without asking`,
      );
    if (typed.trim() !== name)
      throw new UsageError(
        `runtimes remove: '${cellText(typed.trim())}' is not the runtime's name '${cellText(name)}'; nothing was removed`,
      );
  };
  const json = (): boolean => program.opts<{ json?: boolean }>().json === true;
  const print = (data: unknown, text: () => string) => io.out(json() ? JSON.stringify(data, null, 2) : text());

  const group = program
    .command('runtimes')
    .description('a tenant\'s runtimes: its hosted one and hybrid ones in its own clusters (docs/api.md "Runtimes")');

  group
    .command('list [tenant]')
    .description(
      "one tenant's runtimes (a tenant key without [tenant]: its own), or every tenant's (an operator without [tenant])",
    )
    .option('--tenant <id>', 'the same as [tenant]')
    .action(async (positional: string | undefined, o: { tenant?: string }) => {
      if (positional !== undefined && o.tenant !== undefined && positional !== o.tenant)
        throw new UsageError(
          `runtimes list: the tenant is given twice, as '${positional}' and as --tenant '${o.tenant}': give it once`,
        );
      // A tenant's key lists its own tenant's runtimes without naming it.
      const own = positional ?? o.tenant ?? (await client().call('GET /v1/whoami')).tenantId ?? undefined;
      if (own !== undefined) {
        const { items } = await client().call('GET /v1/tenants/:id/runtimes', { params: { id: own } });
        print({ items }, () => table(HEADERS, items.map(row)));
        return;
      }
      const items: Runtime[] = [];
      let cursor: string | null = null;
      do {
        const page: RuntimePage = await client().call('GET /v1/runtimes', {
          query: { limit: 200, ...(cursor ? { cursor } : {}) },
        });
        items.push(...page.items);
        cursor = page.nextCursor;
      } while (cursor !== null);
      print({ items }, () =>
        table(
          ['TENANT', ...HEADERS],
          items.map((r) => [r.tenantId, ...row(r)]),
        ),
      );
    });

  group.command('get <tenant> <name>').action(async (tenant: string, name: string) => {
    const r = await client().call('GET /v1/tenants/:id/runtimes/:name', { params: { id: tenant, name } });
    print(r, () =>
      [
        table(HEADERS, [row(r)]),
        ...(r.mode === 'hybrid'
          ? [
              `upgrades: ${r.upgrades}${r.ingressUrl ? `, ingress ${cellText(r.ingressUrl)}` : ''}`,
              ...(r.previousVersion
                ? [
                    `version ${r.version} asked ${r.versionChangedAt ? `${age(r.versionChangedAt)} ago` : ''} (was ${r.previousVersion})`,
                  ]
                : []),
              ...(r.upgrade
                ? [
                    `upgrade ${r.upgrade.from} -> ${r.upgrade.to} by the in-cluster upgrader: ${r.upgrade.phase} ${age(r.upgrade.updatedAt)} ago${r.upgrade.message ? ` (${cellText(r.upgrade.message)})` : ''}`,
                  ]
                : []),
              r.installedAt
                ? `installed ${age(r.installedAt)} ago (runtime key issued)`
                : `awaiting install: bootstrap token valid until ${r.bootstrapExpiresAt}`,
            ]
          : []),
        ...r.conditions.map((c) => `${c.type}=${c.status} (${c.reason}): ${cellText(c.message)}`),
      ].join('\n'),
    );
  });

  group
    .command('register <tenant> <name>')
    .description(
      'register a hybrid runtime; prints the one command that installs it (kubectl apply of its install URL, which holds the single-use bootstrap token) and writes its install manifest to --out FILE, readable by you only, with the command that applies that file',
    )
    .requiredOption('--access <mode>', 'tunnel (the runtime dials out) or ingress (your ingress, --ingress-url)')
    .option('--ingress-url <url>', 'with --access ingress: the https URL your ingress serves the runtime at')
    .requiredOption('--argo <mode>', 'new (the install brings Argo CD) or existing (beside yours, --argo-namespace)')
    .option('--argo-namespace <ns>', "with --argo existing: your Argo CD's namespace")
    .option('--upgrader', 'let the in-cluster upgrader agent apply upgrades (default: you apply them)')
    .option('--runtime-version <version>', "runtime version (default: the tenant's)")
    .option('--out <file>', 'where to write the manifest (default: hybrid-runtime-NAME.yaml)')
    .action(
      async (
        tenant: string,
        name: string,
        o: {
          access: string;
          ingressUrl?: string;
          argo: string;
          argoNamespace?: string;
          upgrader?: boolean;
          runtimeVersion?: string;
          out?: string;
        },
      ) => {
        if (o.access !== 'tunnel' && o.access !== 'ingress')
          throw new UsageError(`--access: '${o.access}' is neither tunnel nor ingress`);
        if (o.argo !== 'new' && o.argo !== 'existing')
          throw new UsageError(`--argo: '${o.argo}' is neither new nor existing`);
        const file = o.out ?? `hybrid-runtime-${name}.yaml`;
        const out = await client().call('POST /v1/tenants/:id/runtimes', {
          params: { id: tenant },
          body: {
            name,
            mode: 'hybrid',
            access: o.access,
            ...(o.ingressUrl !== undefined ? { ingressUrl: o.ingressUrl } : {}),
            argo: o.argo,
            ...(o.argoNamespace !== undefined ? { argoNamespace: o.argoNamespace } : {}),
            upgrades: o.upgrader ? 'agent' : 'customer',
            ...(o.runtimeVersion !== undefined ? { version: o.runtimeVersion } : {}),
          },
        });
        await writePrivate(file, out.install.manifests);
        // The files' command applies the manifest by its bundle name: point it at the file written.
        const fileCommand = out.install.fileCommand.replace(
          shellCommand(['kubectl', 'apply', '-f', manifestFileName(name)]),
          shellCommand(['kubectl', 'apply', '-f', file]),
        );
        const shown = {
          runtime: out.runtime,
          bootstrapExpiresAt: out.bootstrapExpiresAt,
          command: out.install.url !== null ? out.install.command : fileCommand,
          installUrl: out.install.url,
          installUrlUnavailable: out.install.urlUnavailable,
          manifestFile: file,
          fileCommand,
          removeCommand: out.install.removeCommand,
          namespace: out.install.namespace,
          unpinnedImages: out.install.unpinnedImages,
        };
        const unpinned =
          out.install.unpinnedImages.length > 0
            ? [`images without a digest in the catalog yet: ${out.install.unpinnedImages.map(cellText).join(', ')}`]
            : [];
        // Beside an existing Argo CD the Source Server needs a token the customer makes (docs/hybrid.md "Source Server").
        if (
          out.runtime.argo === 'existing' &&
          agentsAt(out.runtime.version ?? '0.0.0').some((a) => a.name === 'source-server')
        )
          unpinned.push(
            `its Source Server reads your Argo CD with a read-only account's API token you create: Secret ${SOURCE_SERVER_ARGOCD_SECRET} (key token) in namespace ${out.install.namespace}; the manifest's header says how (until then it answers 503)`,
          );
        print(shown, () =>
          (out.install.url !== null
            ? [
                `registered hybrid runtime ${name} (runtime ${out.runtime.id}, version ${out.runtime.version}, namespace ${out.install.namespace})`,
                `install it in your cluster before ${out.bootstrapExpiresAt} with one command (its URL holds the single-use bootstrap token: keep it to yourself until the install has run):`,
                out.install.command,
                `or apply the files: the manifest is in ${file} (mode 0600: it holds the bootstrap token)${out.install.charts.length > 0 ? ' and the Argo charts install with helm' : ''}:`,
                fileCommand,
              ]
            : [
                `registered hybrid runtime ${name} (runtime ${out.runtime.id}, version ${out.runtime.version}, namespace ${out.install.namespace}); its manifest is in ${file} (mode 0600: it holds the bootstrap token)`,
                `no install URL: ${cellText(out.install.urlUnavailable ?? 'none given')}`,
                `install it in your cluster before ${out.bootstrapExpiresAt}:`,
                fileCommand,
              ]
          )
            .concat(unpinned)
            .join('\n'),
        );
      },
    );

  /** Writes an upgrade bundle's manifest and prints what it changes. */
  const showUpgrade = async (
    name: string,
    u: RuntimeUpgradeBundle,
    o: { out?: string; diff?: boolean },
    head: string,
    data: object,
  ) => {
    const bundled = manifestFileName(name, u.to);
    const file = o.out ?? bundled;
    await writePrivate(file, u.install.manifests);
    const command = u.install.command.replace(
      shellCommand(['kubectl', 'apply', '-f', bundled]),
      shellCommand(['kubectl', 'apply', '-f', file]),
    );
    print({ ...data, manifestFile: file, command }, () =>
      [head, upgradeText(u, file, command, o.diff === true)].filter((l) => l !== '').join('\n'),
    );
  };

  group
    .command('upgrade <tenant> <name>')
    .description(
      'move a hybrid runtime to another runtime version: recorded as the version it should run; writes the upgrade bundle to --out FILE and prints what it changes and the command that applies it in your cluster',
    )
    .requiredOption('--runtime-version <version>', 'the runtime version to run')
    .option('--out <file>', 'where to write the manifest (default: hybrid-runtime-NAME-VERSION.yaml)')
    .option('--diff', 'print the unified diff of the two bundles too')
    .action(async (tenant: string, name: string, o: { runtimeVersion: string; out?: string; diff?: boolean }) => {
      const out = await client().call('POST /v1/tenants/:id/runtimes/:name/upgrade', {
        params: { id: tenant, name },
        body: { version: o.runtimeVersion },
      });
      await showUpgrade(
        name,
        out.upgrade,
        o,
        !out.changed
          ? `hybrid runtime ${name} is already to run version ${out.upgrade.to}: nothing recorded`
          : out.appliedBy === 'agent'
            ? `hybrid runtime ${name} is to run version ${out.upgrade.to} (was ${out.upgrade.from}); its in-cluster upgrader applies it (provisioner runtimes get ${tenant} ${name} shows how it goes; the bundle is for reference)`
            : `hybrid runtime ${name} is to run version ${out.upgrade.to} (was ${out.upgrade.from}); nothing changes in your cluster until you apply the bundle` +
              (out.customerActionReason ? ` (${out.customerActionReason})` : ''),
        {
          runtime: out.runtime,
          changed: out.changed,
          appliedBy: out.appliedBy,
          customerActionReason: out.customerActionReason,
          from: out.upgrade.from,
          to: out.upgrade.to,
          changes: out.upgrade.changes,
          ...(o.diff ? { diff: out.upgrade.diff } : {}),
        },
      );
    });

  group
    .command('bundle <tenant> <name>')
    .description(
      "a hybrid runtime's upgrade bundle at a runtime version (default: the one it should run), written to --out FILE, with what it changes against --from",
    )
    .option('--runtime-version <version>', "the bundle's runtime version")
    .option('--from <version>', 'compare with this version (default: the one before the last change)')
    .option('--out <file>', 'where to write the manifest (default: hybrid-runtime-NAME-VERSION.yaml)')
    .option('--diff', 'print the unified diff of the two bundles too')
    .action(
      async (
        tenant: string,
        name: string,
        o: { runtimeVersion?: string; from?: string; out?: string; diff?: boolean },
      ) => {
        const u = await client().call('GET /v1/tenants/:id/runtimes/:name/bundle', {
          params: { id: tenant, name },
          query: {
            ...(o.runtimeVersion !== undefined ? { version: o.runtimeVersion } : {}),
            ...(o.from !== undefined ? { from: o.from } : {}),
          },
        });
        await showUpgrade(name, u, o, '', {
          from: u.from,
          to: u.to,
          changes: u.changes,
          ...(o.diff ? { diff: u.diff } : {}),
        });
      },
    );

  group
    .command('remove <tenant> <name>')
    .description("revoke a hybrid runtime's key and print the command that deletes its install (asks first)")
    .option('--yes', "remove without asking to type the runtime's name (needed without a terminal)")
    .action(async (tenant: string, name: string, o: { yes?: boolean }) => {
      if (o.yes !== true) await confirmRemove(tenant, name);
      const out = await client().call('DELETE /v1/tenants/:id/runtimes/:name', { params: { id: tenant, name } });
      print(out, () =>
        [
          `removed hybrid runtime ${name}: its runtime key is revoked; delete what the install created in your cluster with:`,
          out.removeCommand,
        ].join('\n'),
      );
    });
}
