/**
 * The side-by-side diff of two manifests for the application page: each side written as YAML
 * (keys sorted, so that two sides in a different key order differ only where their values do),
 * then compared line by line. Written here rather than bundling a YAML and a diff library: the
 * console bundles nothing but Preact (test/unit/console/api-types.test.ts), and a manifest needs
 * only the part of YAML that JSON values use.
 */

/** A string that must be quoted to read back as the same string in YAML (JSON's quoting is valid YAML). */
const NEEDS_QUOTES =
  /^$|^[\s\-?:,[\]{}#&*!|>'"%@`~]|:\s|\s#|\s$|:$|^(true|false|yes|no|y|n|on|off|null|~|<<|[-+]?\.(inf|nan)|[-+.]?\d.*)$/i;

// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROLS = /[\u0000-\u001f\u007f]/;
// eslint-disable-next-line no-control-regex -- as above, without tab and newline (a literal block holds them)
const BLOCK_CONTROLS = /[\u0000-\u0008\u000b-\u001f\u007f]/;

function scalar(v: unknown): string {
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'string') return NEEDS_QUOTES.test(v) || CONTROLS.test(v) ? JSON.stringify(v) : v;
  return typeof v === 'number' || typeof v === 'boolean' ? String(v) : JSON.stringify(v);
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isEmpty = (v: unknown) => (Array.isArray(v) ? v.length === 0 : isObject(v) && Object.keys(v).length === 0);

/** A multi-line string as a literal block (`|`), one YAML line per line of the value. */
function block(v: string, indent: string): string[] | null {
  if (!v.includes('\n') || BLOCK_CONTROLS.test(v) || /^\s/.test(v)) return null;
  const chomp = v.endsWith('\n') ? (v.endsWith('\n\n') ? '+' : '') : '-';
  const body = (chomp === '' ? v.slice(0, -1) : chomp === '+' ? v.slice(0, -1) : v).split('\n');
  return [`|${chomp}`, ...body.map((l) => (l === '' ? '' : indent + l))];
}

function entry(k: string, v: unknown, indent: string, out: string[]): void {
  const key = scalar(k);
  if (typeof v === 'string') {
    const b = block(v, indent + '  ');
    if (b) return void out.push(`${indent}${key}: ${b[0]}`, ...b.slice(1));
  }
  if ((Array.isArray(v) || isObject(v)) && !isEmpty(v)) {
    out.push(`${indent}${key}:`);
    if (Array.isArray(v)) for (const item of v) item_(item, indent, out);
    else for (const c of Object.keys(v).sort()) entry(c, v[c], indent + '  ', out);
    return;
  }
  out.push(`${indent}${key}: ${Array.isArray(v) ? '[]' : isObject(v) ? '{}' : scalar(v)}`);
}

/** One `- ` item of a list at `indent`: a mapping's first key (or a list's first item) on the dash line. */
function item_(v: unknown, indent: string, out: string[]): void {
  const inner: string[] = [];
  if (isObject(v) && !isEmpty(v)) for (const k of Object.keys(v).sort()) entry(k, v[k], indent + '  ', inner);
  else if (Array.isArray(v) && v.length > 0) for (const x of v) item_(x, indent + '  ', inner);
  else if (typeof v === 'string' && v.includes('\n')) {
    const b = block(v, indent + '  ');
    if (b) return void out.push(`${indent}- ${b[0]}`, ...b.slice(1));
  }
  if (inner.length > 0) out.push(`${indent}- ${inner[0]!.slice(indent.length + 2)}`, ...inner.slice(1));
  else out.push(`${indent}- ${Array.isArray(v) ? '[]' : isObject(v) ? '{}' : scalar(v)}`);
}

/** A manifest as YAML lines, keys sorted; none for an absent side. */
export function yamlLines(o: Record<string, unknown> | null): string[] {
  if (o === null) return [];
  const out: string[] = [];
  for (const k of Object.keys(o).sort()) entry(k, o[k], '', out);
  return out;
}

/** One side of a row: its line number and text, `changed` when it is not on the other side. */
export interface Cell {
  n: number;
  text: string;
  changed: boolean;
}

/** A row of the side-by-side view: both sides, one side (added, removed), or a fold of unchanged lines. */
export type Row = { left: Cell | null; right: Cell | null } | { fold: number };

/** Above this many cells (lines × lines) of the changed middle, it is shown as replaced whole. */
const MAX_LCS_CELLS = 4_000_000;

type Op = ['=', number, number] | ['-', number] | ['+', number];

/** The edit script from `a` to `b`: common prefix and suffix, then a longest common subsequence of the middle. */
function editScript(a: string[], b: string[]): Op[] {
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const ops: Op[] = [];
  for (let i = 0; i < start; i++) ops.push(['=', i, i]);
  const n = endA - start;
  const m = endB - start;
  if (n * m > MAX_LCS_CELLS) {
    for (let i = start; i < endA; i++) ops.push(['-', i]);
    for (let j = start; j < endB; j++) ops.push(['+', j]);
  } else {
    // lcs[i][j]: the longest common subsequence of a[start+i..endA) and b[start+j..endB).
    const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i--)
      for (let j = m - 1; j >= 0; j--)
        lcs[i]![j] =
          a[start + i] === b[start + j] ? lcs[i + 1]![j + 1]! + 1 : Math.max(lcs[i + 1]![j]!, lcs[i]![j + 1]!);
    let i = 0;
    let j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && a[start + i] === b[start + j]) ops.push(['=', start + i++, start + j++]);
      else if (j < m && (i === n || lcs[i]![j + 1]! >= lcs[i + 1]![j]!)) ops.push(['+', start + j++]);
      else ops.push(['-', start + i++]);
    }
  }
  for (let k = 0; endA + k < a.length; k++) ops.push(['=', endA + k, endB + k]);
  return ops;
}

/**
 * Side-by-side rows of `before` and `after`: the lines removed and added next to each other,
 * changed ones marked, and the unchanged lines further than `context` from a change folded (runs
 * of three or more).
 */
export function sideBySide(before: string[], after: string[], context = 3): Row[] {
  const rows: { left: Cell | null; right: Cell | null }[] = [];
  const ops = editScript(before, after);
  for (let k = 0; k < ops.length;) {
    const op = ops[k]!;
    if (op[0] === '=') {
      rows.push({
        left: { n: op[1] + 1, text: before[op[1]]!, changed: false },
        right: { n: op[2] + 1, text: after[op[2]]!, changed: false },
      });
      k++;
      continue;
    }
    // A run of removals and additions: paired line by line, the longer side's rest alone.
    const removed: number[] = [];
    const added: number[] = [];
    for (; k < ops.length && ops[k]![0] !== '='; k++) {
      const o = ops[k]!;
      if (o[0] === '-') removed.push(o[1]);
      else added.push(o[1]);
    }
    for (let r = 0; r < Math.max(removed.length, added.length); r++) {
      const i = removed[r];
      const j = added[r];
      rows.push({
        left: i === undefined ? null : { n: i + 1, text: before[i]!, changed: true },
        right: j === undefined ? null : { n: j + 1, text: after[j]!, changed: true },
      });
    }
  }
  const changed = rows.map((r) => r.left?.changed === true || r.right?.changed === true);
  const near = changed.map((_, i) =>
    changed.slice(Math.max(0, i - context), Math.min(changed.length, i + context + 1)).some(Boolean),
  );
  const out: Row[] = [];
  for (let i = 0; i < rows.length;) {
    if (near[i]) {
      out.push(rows[i++]!);
      continue;
    }
    let j = i;
    while (j < rows.length && !near[j]) j++;
    // A fold of one or two lines hides nothing worth a row of its own.
    if (j - i > 2) out.push({ fold: j - i });
    else out.push(...rows.slice(i, j));
    i = j;
  }
  return out;
}
