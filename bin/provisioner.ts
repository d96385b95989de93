#!/usr/bin/env node
// The `provisioner` command: `serve` runs the control plane; the other commands talk to its API.
import { main } from '../provisioner/cli/main.ts';

process.exitCode = await main(process.argv.slice(2));
