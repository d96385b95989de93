/**
 * Ending the process without losing output. Writes to a pipe are asynchronous: `process.exit`
 * right after a large `stdout.write` drops whatever the reader has not taken yet (a `--json`
 * answer piped into a slow `jq` was cut at the pipe's 64 KiB). These wait until stdout and stderr
 * have handed everything to the operating system, then exit with the code.
 */

/** Resolves once everything written to `stream` so far is flushed, or the stream failed (its reader is gone). */
export function flushed(stream: NodeJS.WritableStream & { writableLength?: number }): Promise<void> {
  if (stream.writableLength === 0) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      stream.off('error', done);
      resolve();
    };
    stream.once('error', done);
    // Writes complete in order: the callback of an empty write runs after every earlier one.
    stream.write('', done);
  });
}

/**
 * Exits with `code` once stdout and stderr are flushed. The exit stays explicit: the embedded
 * PostgreSQL package's exit hook would otherwise end a failing command with 0 when the event loop
 * empties.
 */
export async function exitAfterOutput(code: number): Promise<never> {
  process.exitCode = code;
  await Promise.all([flushed(process.stdout), flushed(process.stderr)]);
  process.exit(code);
}

/**
 * A reader that goes away (`provisioner … | head -1`) makes the next write fail with EPIPE: the
 * command stops there, quietly, instead of crashing with an unhandled stream error.
 */
export function stopWhenOutputCloses(): void {
  for (const stream of [process.stdout, process.stderr])
    stream.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EPIPE') process.exit(process.exitCode ?? 1);
      throw err;
    });
}
