/** `provisioner versions …`: the runtime version catalog, one version's paths, its availability. */
import type { Command } from 'commander';
import { commandContext, UsageError, type Io } from './command-context.ts';
import { keyValues, table } from './format.ts';
import type { PathInfo, RuntimeVersionInfo } from '../api/types.ts';
import type { Availability } from '../store/states.ts';

/** The Argo applications a version runs, by the names users know them, with their chart's key. */
const APPS: ReadonlyArray<readonly [key: string, name: string]> = [
  ['argoCd', 'Argo CD'],
  ['argoWorkflows', 'Argo Workflows'],
  ['argoRollouts', 'Argo Rollouts'],
  ['argoEvents', 'Argo Events'],
];

/** `versions get`: a runtime version, what it runs, and where a tenant can go from it and come to it. */
function describeVersion(v: RuntimeVersionInfo, from: PathInfo[], to: PathInfo[]): string {
  const move = (p: PathInfo, other: string) =>
    p.allowed
      ? `  ${other}: direct`
      : p.path.length > 0
        ? `  ${other}: through ${p.path.join(' -> ')} (${p.reason ?? 'not directly'})`
        : `  ${other}: no way (${p.reason ?? 'refused'})`;
  return [
    ...keyValues([
      ['version', `${v.version}${v.default ? ' (the default for signups)' : ''}`],
      ['channel', v.channel],
      ['availability', v.availability],
      ['released', v.releaseDate],
      ...APPS.map(([key, name]) => [name, `${v.appVersions[key] ?? '-'} (chart ${v.components[key] ?? '-'})`] as const),
      ['vcluster', `${v.components.vcluster ?? '-'} (Kubernetes ${v.components.kubernetes ?? '-'})`],
      ['agents', v.components.agents ?? '-'],
      [
        'upgrade',
        [
          v.upgrade.minFrom ? `from ${v.upgrade.minFrom} or newer` : 'from any older version',
          ...(v.upgrade.steppingStone ? ['a stepping stone: no upgrade jumps over it'] : []),
        ].join('; '),
      ],
      [
        'rollback',
        v.rollback.allowed ? 'allowed (catalog rules)' : `refused${v.rollback.reason ? `: ${v.rollback.reason}` : ''}`,
      ],
      ...(v.notes ? [['notes', v.notes] as const] : []),
    ]),
    'from this version to:',
    ...from.map((p) => move(p, p.to)),
    'to this version from:',
    ...to.map((p) => move(p, p.from)),
  ].join('\n');
}

export function addVersionCommands(program: Command, io: Io): void {
  const { client, print } = commandContext(program, io);

  const versions = program.command('versions').description('runtime versions');
  versions
    .command('list')
    .description("the catalog: each version's availability and the Argo CD and vcluster it runs")
    .action(async () => {
      const v = await client().call('GET /v1/runtime-versions');
      print(v, () =>
        table(
          ['VERSION', 'CHANNEL', 'AVAILABILITY', 'DEFAULT', 'RELEASED', 'ARGO CD', 'ARGO CD CHART', 'VCLUSTER'],
          v.items.map((x) => [
            x.version,
            x.channel,
            x.availability,
            x.default ? '*' : '',
            x.releaseDate,
            x.appVersions.argoCd,
            x.components.argoCd,
            x.components.vcluster,
          ]),
        ),
      );
    });
  versions
    .command('get <version>')
    .description(
      'one version: availability, the applications it runs and their chart versions, release notes, and the upgrade and rollback paths to and from it',
    )
    .action(async (version: string) => {
      const [list, paths] = await Promise.all([
        client().call('GET /v1/runtime-versions'),
        client().call('GET /v1/runtime-versions/paths'),
      ]);
      const v = list.items.find((x) => x.version === version);
      if (!v)
        throw new UsageError(
          `versions get: no runtime version '${version}' in the catalog (it has ${list.items.map((x) => x.version).join(', ')})`,
        );
      const from = paths.items.filter((p) => p.from === version);
      const to = paths.items.filter((p) => p.to === version);
      print({ ...v, pathsFrom: from, pathsTo: to }, () => describeVersion(v, from, to));
    });
  versions
    .command('set <version> <availability>')
    .description('mark a version available, deprecated or withdrawn')
    .action(async (version: string, availability: string) => {
      const v = await client().call('PUT /v1/runtime-versions/:version/availability', {
        params: { version },
        body: { availability: availability as Availability }, // as given: the API checks it
      });
      print(v, () => `runtime version ${v.version} is now ${v.availability}`);
    });
}
