#!/usr/bin/env node
// The `provisioner` command: `serve` runs the control plane; the other commands talk to its API.
import { main } from '../provisioner/cli/main.ts';

// Exit explicitly: the embedded Postgres package installs exit hooks that would otherwise turn a
// failing command's exit code into 0.
process.exit(await main(process.argv.slice(2)));
