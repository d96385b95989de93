/**
 * Characters that act on a terminal instead of showing: C0 controls (ESC starts every escape
 * sequence: colours, cursor moves, the window title, OSC 52 clipboard writes), DEL, the C1
 * controls (U+0080–U+009F, CSI and OSC among them) and the bidirectional overrides and isolates
 * that reorder what a line shows. Newline and tab are listed separately: a printed text's own
 * lines are kept, a value's are not.
 */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const TERMINAL_CONTROLS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
// eslint-disable-next-line no-control-regex -- as above; with the Unicode line and paragraph separators
const ALL_CONTROLS = /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

const asEscape = (c: string): string => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;

/**
 * Text made safe for a terminal: every terminal control shown as its JSON escape (`\u001b` for
 * ESC), so nothing a tenant or runtime reported can recolour, move, retitle or write the clipboard
 * of the terminal that prints it. Newlines and tabs stay (the printed text's own layout). The
 * escapes are JSON's: `--json` output stays exact JSON (JSON.stringify leaves DEL, C1 and the
 * bidirectional controls raw; escaped, they are the same JSON value).
 */
export function terminalSafe(text: string): string {
  return text.replace(TERMINAL_CONTROLS, asEscape);
}

/** One value for a table cell or a line: every control escaped, newline, tab and the Unicode line separators too. */
export function cellText(value: string): string {
  return value.replace(ALL_CONTROLS, asEscape);
}

/**
 * The CLI's output with every line it writes passed through terminalSafe: the one place every
 * printer (tables, plain text, `--json`, errors on stderr) goes through.
 */
export function terminalSafeOutput<T extends { out: (s: string) => void; err: (s: string) => void }>(io: T): T {
  return { ...io, out: (s: string) => io.out(terminalSafe(s)), err: (s: string) => io.err(terminalSafe(s)) };
}

/** Plain-text tables for the CLI: a header row and left-aligned columns; values with controls escaped (cellText). */
export function table(headers: string[], rows: Array<Array<string | number | boolean | null | undefined>>): string {
  const cells = rows.map((r) => r.map((c) => (c === null || c === undefined ? '-' : cellText(String(c)))));
  const widths = headers.map((h, i) => Math.max(h.length, ...cells.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]) =>
    r
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return [line(headers), ...cells.map(line)].join('\n');
}

/** "3m12s ago" style age of an ISO timestamp. */
export function age(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '-';
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d`;
}

/**
 * `key: value` lines with the values in one column: as wide as the longest key, so that a long key
 * (an endpoint's name) neither runs into its value nor shifts the others. Values print through
 * cellText.
 */
export function keyValues(pairs: ReadonlyArray<readonly [string, string]>): string[] {
  const width = Math.max(0, ...pairs.map(([k]) => k.length)) + 2;
  return pairs.map(([k, v]) => `${`${k}:`.padEnd(width)}${cellText(v)}`.trimEnd());
}
