#!/usr/bin/env node
// The `provisioner` command: `serve` runs the control plane; the other commands talk to its API.
import module from 'node:module';
import { homedir } from 'node:os';
import { join } from 'node:path';

// Node.js keeps what it compiled of the program (the type-stripped TypeScript and V8's code for
// each module, one entry per file) in a cache folder, so that a command after the first starts in
// about a third of the CPU time (docs/benchmarks.md, "Start-up"): NODE_COMPILE_CACHE, or the
// project's cache folder; NODE_DISABLE_COMPILE_CACHE=1 turns it off. Enabled before the program
// is loaded: what this file imported statically would be compiled before any of it runs.
module.enableCompileCache(
  process.env.NODE_COMPILE_CACHE ||
    join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'hosted-runtimes', 'node-compile-cache'),
);
const { main } = await import('../provisioner/cli/main.ts');
const { exitAfterOutput, stopWhenOutputCloses } = await import('../provisioner/cli/exit.ts');

stopWhenOutputCloses();
// Everything printed reaches the reader (a pipe takes it at its own pace) before the exit.
await exitAfterOutput(await main(process.argv.slice(2)));
