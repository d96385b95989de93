import { readFileSync } from 'node:fs';
import t from 'tap';
import { AppError, ERROR_CODES, errors, type ErrorCode } from '../../provisioner/errors.ts';

/** The codes of docs/api.md's error table, each with the status its row gives. */
function documentedCodes(): Array<{ code: string; status: number }> {
  const doc = readFileSync(new URL('../../docs/api.md', import.meta.url), 'utf8');
  const start = doc.indexOf('\n## Errors\n');
  if (start === -1) throw new Error('docs/api.md has no "## Errors" section');
  const next = doc.indexOf('\n## ', start + 1);
  const section = doc.slice(start, next === -1 ? undefined : next);
  const out: Array<{ code: string; status: number }> = [];
  for (const line of section.split('\n')) {
    const cells = line.split('|').map((c) => c.trim());
    // A table row: '', code cell, status cell, when cell, ''.
    if (cells.length < 4 || !/^\d{3}$/.test(cells[2]!)) continue;
    for (const m of cells[1]!.matchAll(/`([A-Z][A-Z0-9_]*)`/g)) out.push({ code: m[1]!, status: Number(cells[2]) });
  }
  return out;
}

const listed = Object.keys(ERROR_CODES) as ErrorCode[];

t.test('docs/api.md lists every error code of the list, each with its status', async (t) => {
  const documented = documentedCodes();
  const byCode = new Map(documented.map((d) => [d.code, d.status]));
  for (const code of listed) {
    t.ok(byCode.has(code), `docs/api.md lists ${code}`);
    if (byCode.has(code))
      t.equal(
        byCode.get(code),
        ERROR_CODES[code].status,
        `docs/api.md gives ${code} the status ${ERROR_CODES[code].status}`,
      );
  }
});

t.test('docs/api.md lists no code that is not in the list, and none twice', async (t) => {
  const documented = documentedCodes();
  t.ok(documented.length > 0, 'the error table of docs/api.md was found and has codes');
  const unknown = documented.filter((d) => !(d.code in ERROR_CODES)).map((d) => d.code);
  t.same(unknown, [], 'every code in docs/api.md is in ERROR_CODES');
  const seen = new Set<string>();
  const twice = documented.filter((d) => seen.size === seen.add(d.code).size).map((d) => d.code);
  t.same(twice, [], 'no code is listed twice in docs/api.md');
});

t.test('an error takes its status from the list', async (t) => {
  t.equal(
    errors.notFound('API key', 'k1').code,
    'API_KEY_NOT_FOUND',
    'notFound answers with the code of what was not found',
  );
  t.equal(errors.notFound('runtime version', '9.9.9').statusCode, 404, 'a not-found error is a 404');
  t.equal(
    new AppError('RUNTIME_TIMEOUT', 'late').statusCode,
    504,
    'AppError reads the status of its code from ERROR_CODES',
  );
  t.equal(
    errors.badRequest(405, 'method not allowed').statusCode,
    405,
    'BAD_REQUEST keeps the 4xx status the HTTP layer reported',
  );
});
