/**
 * YAML text of what a customer applies, written by the YAML library from the objects: no value
 * is ever placed into the text by hand, so no value can end a scalar, open a key or start a
 * document. The text must read the same to YAML 1.1 readers (kubectl's among them) as to YAML 1.2
 * ones, so it is written with the library's YAML 1.1 rules: a string that YAML 1.1 would read as
 * another type (`no`, `on`, `y` as booleans, `1_000` as a number, `2001-12-14` as a time; the
 * Argo CD chart's Redis Deployment has the argument `"no"`) is quoted, which both versions read as
 * the string (no `%YAML` directive is written). One thing more: YAML 1.1 readers take NEL, LS and
 * PS (U+0085, U+2028, U+2029) for line breaks, which YAML 1.2 and the library do not, so a string
 * holding one is written double-quoted with the character escaped (`\N`, `\L`, `\P`, escapes of
 * both versions): every reader sees the same one-line value.
 */
import { Document, isScalar, visit } from 'yaml';

const BREAKS_OF_YAML_1_1 = /[\u0085\u2028\u2029]/;
const ESCAPES: Record<string, string> = { '\u0085': '\\N', '\u2028': '\\L', '\u2029': '\\P' };

/** One YAML document of `value` (no `---`), lines unwrapped. */
export function yamlText(value: unknown): string {
  const doc = new Document(value, { version: '1.1' });
  let quoted = false;
  visit(doc, {
    Scalar(_key, node) {
      if (isScalar(node) && typeof node.value === 'string' && BREAKS_OF_YAML_1_1.test(node.value)) {
        node.type = 'QUOTE_DOUBLE';
        quoted = true;
      }
    },
  });
  const text = doc.toString({ lineWidth: 0 });
  // Only double-quoted scalars hold these characters now, where the escapes mean them.
  return quoted ? text.replace(/[\u0085\u2028\u2029]/g, (c) => ESCAPES[c]!) : text;
}
