/**
 * The console's side-by-side manifest diff (console/src/manifest-diff.ts): its YAML reads back as
 * the same object (checked with the `yaml` library the CLI prints with), and the rows mark exactly
 * the lines that changed, fold what did not, and pair a replaced line with its replacement.
 */
import t from 'tap';
import { parse } from 'yaml';
import { sideBySide, yamlLines, type Row } from '../../../console/src/manifest-diff.ts';

const tricky = {
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name: 'cfg', labels: { 'app.kubernetes.io/name': 'web', 'a:b': 'x' }, annotations: {} },
  data: {
    number: '0123',
    float: '1.5',
    bool: 'true',
    yes: 'yes',
    nul: 'null',
    empty: '',
    colon: 'a: b',
    hash: 'x #y',
    hashNoSpace: 'x#y',
    infinity: '.inf',
    merge: '<<',
    exponent: '1e3',
    tab: 'a\tb',
    dash: '-x',
    star: '*ref',
    spaces: ' padded ',
    script: 'set -e\necho "hi"\n',
    noNewline: 'line1\nline2',
    trailing: 'a\n\n',
    quote: `it's "quoted"`,
    control: 'bell\u0007',
    unicode: 'héllo → wörld',
  },
  spec: {
    replicas: 3,
    ratio: 0.25,
    enabled: false,
    nothing: null,
    list: [],
    nested: [[1, [2, 3]], { a: 1, b: [{ c: 'd' }] }, 'plain', ''],
  },
};

t.test('the YAML of a manifest reads back as the same object', async (t) => {
  const text = yamlLines(tricky).join('\n');
  t.same(parse(text), tricky, `the YAML parses back to the object:\n${text}`);
  t.same(yamlLines(null), [], 'an absent side has no line');
  t.same(yamlLines({ b: 1, a: { d: 2, c: 3 } }), ['a:', '  c: 3', '  d: 2', 'b: 1'], 'keys are sorted at every level');
});

const changedCells = (rows: Row[]) =>
  rows
    .flatMap((r) =>
      'fold' in r ? [] : [[r.left?.changed ? r.left.text : null, r.right?.changed ? r.right.text : null]],
    )
    .filter(([l, r]) => l !== null || r !== null);

t.test('one changed line in a long manifest: paired, the rest folded around three lines of context', async (t) => {
  const before = Array.from({ length: 40 }, (_, i) => `line ${i}`);
  const after = before.map((l, i) => (i === 20 ? 'line 20 changed' : l));
  const rows = sideBySide(before, after);
  t.same(changedCells(rows), [['line 20', 'line 20 changed']], 'the one changed line, before beside after');
  t.same(
    rows.map((r) => ('fold' in r ? `fold ${r.fold}` : `${r.left?.n}`)),
    ['fold 17', '18', '19', '20', '21', '22', '23', '24', 'fold 16'],
    'three lines on each side of the change, the unchanged runs folded with their length',
  );
});

t.test('lines added and removed are on their own side; line numbers are each side’s', async (t) => {
  const rows = sideBySide(['a', 'b', 'c'], ['a', 'x', 'c', 'd'], 3);
  t.same(
    rows.map((r) =>
      'fold' in r
        ? 'fold'
        : [r.left && `${r.left.n}${r.left.changed ? '-' : ''}`, r.right && `${r.right.n}${r.right.changed ? '+' : ''}`],
    ),
    [
      ['1', '1'],
      ['2-', '2+'],
      ['3', '3'],
      [null, '4+'],
    ],
    'b replaced by x side by side, d added on the right only',
  );
  const added = sideBySide([], yamlLines({ kind: 'Service', metadata: { name: 's' } }));
  t.ok(
    added.every((r) => !('fold' in r) && r.left === null && r.right?.changed === true),
    'a resource that is new: every line added on the right, none on the left',
  );
  t.same(sideBySide(['a', 'b', 'c', 'd'], ['a', 'b', 'c', 'd'], 0), [{ fold: 4 }], 'no change: one fold');
});

t.test('a change too large for the line-by-line comparison is shown as replaced whole, still right', async (t) => {
  const before = Array.from({ length: 3000 }, (_, i) => `old ${i}`);
  const after = Array.from({ length: 3000 }, (_, i) => `new ${i}`);
  const rows = sideBySide(['head', ...before, 'tail'], ['head', ...after, 'tail']);
  const cells = changedCells(rows);
  t.equal(cells.length, 3000, 'every replaced line is shown');
  t.same(cells[0], ['old 0', 'new 0'], 'paired in order');
  t.ok(
    rows.some((r) => !('fold' in r) && r.left?.text === 'head') &&
      rows.some((r) => !('fold' in r) && r.left?.text === 'tail'),
    'the unchanged lines around it are kept as context',
  );
});
