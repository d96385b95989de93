/**
 * The two writers of what a customer runs or applies: shell words (runtime/hybrid/shell.ts), run
 * by a real bash, come back as exactly the words given whatever they hold; YAML text
 * (runtime/hybrid/yaml-text.ts) parses back to exactly the value, and writes no character a YAML
 * 1.1 reader (kubectl's) takes for a line break.
 */
import { spawnSync } from 'node:child_process';
import t from 'tap';
import { parse, parseAllDocuments } from 'yaml';
import { shellCommand, shellQuote, withHereDocument } from '../../runtime/hybrid/shell.ts';
import { yamlText } from '../../runtime/hybrid/yaml-text.ts';

const HOSTILE = [
  '',
  'plain-word_1.2/x',
  "it's",
  '"double"',
  '$(touch /tmp/pwned)',
  '`id`',
  '${HOME}',
  'a; rm -rf /',
  'a && b || c',
  'a | b > c < d',
  '*',
  '~',
  '-n',
  'line\nbreak',
  'tab\there',
  '\\',
  "'",
  "''",
  'a\u2028b',
  'ünï',
  '#comment',
  '!history',
  '{a,b}',
];

/**
 * A value as an assertion message: JSON with the characters a TAP reader takes for line breaks
 * (U+0085, U+2028, U+2029) escaped too, cut to 40 characters.
 */
const label = (v: string): string =>
  JSON.stringify(v)
    .replace(/[\u0085\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
    .slice(0, 40);

/** What bash sees as the arguments of `printf '%s\0'`, NUL-separated. */
function wordsBashSees(line: string): string[] {
  const ran = spawnSync('bash', ['--norc', '--noprofile', '-c', line], {
    encoding: 'utf8',
    env: { PATH: process.env.PATH },
  });
  if (ran.status !== 0) throw new Error(`bash failed: ${ran.stderr}`);
  return ran.stdout.split('\0').slice(0, -1);
}

t.test('every word reaches the command as exactly one argument, unexpanded', async (t) => {
  for (const w of HOSTILE)
    t.same(wordsBashSees(`printf '%s\\0' ${shellQuote(w)}`), [w], `${label(w)} is one argument as given`);
  t.same(wordsBashSees(shellCommand(['printf', '%s\\0', ...HOSTILE])), HOSTILE, 'and a whole command of them');
  t.equal(
    shellQuote('hybrid-runtime-plant-a-1.5.0.yaml'),
    'hybrid-runtime-plant-a-1.5.0.yaml',
    'a plain file name stays bare',
  );
});

t.test('a here-document carries its body intact, and refuses a body holding its delimiter', async (t) => {
  const body = "a: '$(id)'\nb: `x`\n${HOME}\n";
  const ran = spawnSync('bash', ['--norc', '--noprofile', '-c', withHereDocument('cat', 'VALUES', body)], {
    encoding: 'utf8',
  });
  t.equal(ran.stdout, body, 'cat reads the body as given, nothing expanded');
  t.throws(
    () => withHereDocument('cat', 'VALUES', 'a: 1\nVALUES\nrm -rf /\n'),
    /holds its delimiter/,
    'the delimiter as a line is refused',
  );
});

t.test('YAML text parses back to the value, with no raw YAML 1.1 line break', async (t) => {
  const values = [
    ...HOSTILE,
    '\n---\nkind: ClusterRoleBinding\n',
    'a\u2029evil: true',
    'a\u0085--- b',
    '\u2028---\u2028kind: X',
    'x'.repeat(3000) + '\u2028y',
  ];
  for (const v of values) {
    const text = yamlText({ value: v, [v || 'empty']: [v], nested: { list: [v, { v }] } });
    t.same(parse(text), { value: v, [v || 'empty']: [v], nested: { list: [v, { v }] } }, `${label(v)} round-trips`);
    t.equal(parseAllDocuments(text).length, 1, `${label(v)}: one document`);
    t.notOk(/[\u0085\u2028\u2029]/.test(text), `${label(v)}: no raw NEL, LS or PS`);
  }
});
