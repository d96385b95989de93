/**
 * The CLI's API commands: each command group has its own module (tenant-commands.ts,
 * operation-commands.ts, cluster-commands.ts, region-commands.ts, version-commands.ts,
 * key-commands.ts), what they share is command-context.ts (re-exported here); `addApiCommands`
 * adds them all.
 */
import type { Command } from 'commander';
import type { Io } from './command-context.ts';
import { addClusterCommands } from './cluster-commands.ts';
import { addKeyCommands } from './key-commands.ts';
import { addOperationCommands } from './operation-commands.ts';
import { addRegionCommands } from './region-commands.ts';
import { addTenantCommands } from './tenant-commands.ts';
import { addVersionCommands } from './version-commands.ts';

export {
  apiClientOf,
  commandContext,
  NOTHING_TO_DO_CODES,
  NOTHING_TO_DO_EXIT,
  NothingToDo,
  readKubeconfig,
  readStdin,
  UsageError,
  type Io,
} from './command-context.ts';

/** The commands of the API's resources: tenants, operations, clusters, regions, versions and keys. */
export function addApiCommands(program: Command, io: Io): void {
  addTenantCommands(program, io);
  addOperationCommands(program, io);
  addClusterCommands(program, io);
  addRegionCommands(program, io);
  addVersionCommands(program, io);
  addKeyCommands(program, io);
}
