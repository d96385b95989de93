/**
 * Finds where a TypeScript file runs SQL: `.query(` calls and string literals that start like a
 * statement. The layers check (test/unit/layers.test.ts: SQL only in provisioner/store/ and
 * provisioner/db/) and the test-data check (test/unit/test-data.test.ts: SQL in tests only in
 * test/helpers/ and the database's own tests) both use it.
 */
import { readdirSync, statSync } from 'node:fs';
import { dirname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

/** The repository's root. */
export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** The `.ts` files under `dir` (relative to the repository's root), as `/`-separated relative paths. */
export function sources(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(ROOT, dir))) {
    const path = join(dir, name);
    if (statSync(join(ROOT, path)).isDirectory()) out.push(...sources(path));
    else if (name.endsWith('.ts')) out.push(path.split(sep).join('/'));
  }
  return out;
}

/**
 * A string that starts like a statement (keywords in capitals, as every statement here is
 * written). LISTEN and NOTIFY count with a channel name (`tenant_due`) or alone (a template's
 * head), not as the first word of a sentence ("NOTIFY wakes an idle reconciler").
 */
const STATEMENT =
  /^\s*(SELECT|INSERT INTO|UPDATE \w+ (\w+ )?SET|DELETE FROM|WITH \w+ AS \(|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE SAVEPOINT|(LISTEN|NOTIFY)( [a-z]+_\w*|\s*$)|CREATE (TABLE|FUNCTION|TRIGGER|DATABASE|SCHEMA)|DROP (TABLE|FUNCTION|TRIGGER|DATABASE|SCHEMA)|TRUNCATE|ALTER TABLE)\b/;

/** Where a file runs SQL: `.query(` calls and statement literals, as `path:line: text`. */
export function sqlIn(path: string, text: string): string[] {
  const file = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const at = (node: ts.Node, what: string) =>
    found.push(`${path}:${file.getLineAndCharacterOfPosition(node.getStart()).line + 1}: ${what}`);
  const visit = (node: ts.Node): void => {
    if (ts.isCallExpression(node) && ts.isPropertyAccessExpression(node.expression)) {
      if (node.expression.name.text === 'query') at(node, `${node.expression.getText().slice(0, 60)}(…)`);
    }
    if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node) || ts.isTemplateHead(node)) {
      if (STATEMENT.test(node.text)) at(node, `statement '${node.text.trim().slice(0, 60)}'`);
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}
