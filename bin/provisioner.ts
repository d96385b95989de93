#!/usr/bin/env node
// The `provisioner` command: `serve` runs the control plane; the other commands talk to its API.
import { main } from '../provisioner/cli/main.ts';
import { exitAfterOutput, stopWhenOutputCloses } from '../provisioner/cli/exit.ts';

stopWhenOutputCloses();
// Everything printed reaches the reader (a pipe takes it at its own pace) before the exit.
await exitAfterOutput(await main(process.argv.slice(2)));
