/**
 * The shell commands the control plane gives a customer to run (a hybrid runtime's install,
 * upgrade and remove commands; the CLI's apply line) are built from argument lists, each argument
 * quoted here: whatever a value holds, it stays one word and cannot end the command, start
 * another, expand a variable or glob. POSIX single quotes, which bash, dash and zsh read alike;
 * the one thing they cannot hold, a single quote, is closed, escaped and reopened.
 */

/** Words that need no quotes: nothing in them means anything to a shell. */
const PLAIN = /^[A-Za-z0-9_.,/-]+$/;

/** `word` as one shell word. */
export function shellQuote(word: string): string {
  return PLAIN.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

/** One command line of the given words, each quoted. */
export function shellCommand(words: readonly string[]): string {
  return words.map(shellQuote).join(' ');
}

/**
 * `command` reading `body` on its standard input from a here-document. The delimiter is quoted, so
 * the shell expands nothing in the body; a body with a line that is the delimiter would end it
 * early and is refused.
 */
export function withHereDocument(command: string, delimiter: string, body: string): string {
  if (!/^[A-Z]+$/.test(delimiter)) throw new Error(`here-document delimiter '${delimiter}' is not a plain word`);
  const text = body.endsWith('\n') ? body : `${body}\n`;
  if (text.split('\n').includes(delimiter))
    throw new Error(`the here-document holds its delimiter '${delimiter}' as a line of its own`);
  return `${command} <<'${delimiter}'\n${text}${delimiter}`;
}
