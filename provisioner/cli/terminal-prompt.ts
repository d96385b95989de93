/**
 * One question asked on the terminal, for the commands that confirm before something that cannot
 * be undone (`runtimes remove`). Asked only when both standard input and standard error are
 * terminals: a script's pipe or a CI job has nobody to answer, and such a command must then be
 * told to go ahead (`--yes`) rather than read an answer from whatever its input happens to be.
 */
import { createInterface } from 'node:readline/promises';

/** Asks `question` and answers the line typed; undefined when there is no terminal to ask on. */
export type Ask = (question: string) => Promise<string | undefined>;

export const askOnTerminal: Ask = async (question) => {
  if (process.stdin.isTTY !== true || process.stderr.isTTY !== true) return undefined;
  const rl = createInterface({ input: process.stdin, output: process.stderr, terminal: true });
  // Ctrl-C or Ctrl-D at the prompt ends the question with nothing answered (without a listener,
  // readline would only pause on Ctrl-C and the question would wait for ever).
  const stop = new AbortController();
  rl.on('SIGINT', () => stop.abort());
  rl.on('close', () => stop.abort());
  try {
    return await rl.question(question, { signal: stop.signal });
  } catch {
    return '';
  } finally {
    rl.close();
  }
};
