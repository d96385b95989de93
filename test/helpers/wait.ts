/**
 * Waiting in tests (docs/testing.md, "Wait for events, not for time").
 *
 * `until` polls a check until it gives a value other than undefined/false and returns it; past the
 * bound it throws, naming what it waited for and the bound. The bound is a wait, not a claim about
 * speed: make it large enough for a loaded machine.
 */
export async function until<T>(
  what: string,
  check: () => T | undefined | false | Promise<T | undefined | false>,
  timeoutMs = 10_000,
  everyMs = 20,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
