/**
 * The layers of provisioner/ hold (docs/architecture.md "Layers"): SQL is written only in
 * provisioner/store/ (one module per aggregate) and provisioner/db/ (migrations, transactions,
 * the LISTEN connection); a module of store/ imports only store/, db/, the wire protocol's
 * constants (runtime/protocol/) and packages, never a module above it; a service module (every
 * module of provisioner/ but http/, cli/ and server.ts) imports nothing of http/, types included
 * (the API's shapes and types are below it, in api/); no module of http/ (routes, app.ts and its hooks,
 * the other http/ modules) calls a store/ function with the pool; and no import cycle,
 * type-only ones included, runs through provisioner/, runtime/ or tenants/. The tenants program
 * (tenants/) and the kubeconfig policy it shares with the provisioner (kubeconfig-policy/) import
 * nothing of provisioner/: the program does not reach into its runner.
 */
import { readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import t from 'tap';
import ts from 'typescript';
import { ROOT, sources, sqlIn } from '../helpers/sql-scan.ts';

const PROVISIONER = sources('provisioner');
const SQL_HOME = /^provisioner\/(store|db)\//;

/** The relative imports of a file (static, type-only and re-exports), resolved to repository paths. */
function importsOf(path: string): Array<{ spec: string; target: string }> {
  const info = ts.preProcessFile(readFileSync(join(ROOT, path), 'utf8'), true, true);
  return info.importedFiles.map((i) => ({
    spec: i.fileName,
    target: i.fileName.startsWith('.')
      ? relative(ROOT, resolve(ROOT, dirname(path), i.fileName))
          .split(sep)
          .join('/')
      : i.fileName,
  }));
}

/**
 * The imports of a file's text with whether each is type-only (`import type`, `export type … from`,
 * or every name of it marked `type`), resolved to repository paths as importsOf does.
 */
function importsWithKind(path: string, text: string): Array<{ spec: string; target: string; typeOnly: boolean }> {
  const file = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true);
  const out: Array<{ spec: string; target: string; typeOnly: boolean }> = [];
  const add = (spec: string, typeOnly: boolean): void => {
    const target = spec.startsWith('.')
      ? relative(ROOT, resolve(ROOT, dirname(path), spec))
          .split(sep)
          .join('/')
      : spec;
    out.push({ spec, target, typeOnly });
  };
  for (const node of file.statements) {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
      const clause = node.importClause;
      const bindings = clause?.namedBindings;
      const allTyped =
        clause !== undefined &&
        clause.name === undefined &&
        bindings !== undefined &&
        ts.isNamedImports(bindings) &&
        bindings.elements.length > 0 &&
        bindings.elements.every((e) => e.isTypeOnly);
      add(node.moduleSpecifier.text, clause?.isTypeOnly === true || allTyped);
    } else if (ts.isExportDeclaration(node) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) {
      const named = node.exportClause;
      const allTyped =
        named !== undefined &&
        ts.isNamedExports(named) &&
        named.elements.length > 0 &&
        named.elements.every((e) => e.isTypeOnly);
      add(node.moduleSpecifier.text, node.isTypeOnly || allTyped);
    }
  }
  // Dynamic imports and import('…') types: never type-only here (a dynamic import runs).
  const visit = (node: ts.Node): void => {
    if (
      ts.isCallExpression(node) &&
      node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments[0] &&
      ts.isStringLiteralLike(node.arguments[0])
    )
      add(node.arguments[0].text, false);
    ts.forEachChild(node, visit);
  };
  visit(file);
  return out;
}

/**
 * A service module: every module of provisioner/ but the HTTP layer (http/: routes, app.ts and
 * its hooks, the HTTP helpers), the CLI (cli/, a client of the API) and server.ts (the process's
 * entry point, which builds the services and the app). services.ts, which builds the services,
 * is one: buildApp takes its result, never the reverse.
 */
const isServiceModule = (path: string): boolean =>
  path.startsWith('provisioner/') && !/^provisioner\/(http|cli)\//.test(path) && path !== 'provisioner/server.ts';

/**
 * What a service module may import of provisioner/http/: nothing, not even a type. The shapes a
 * service answers with (the API's schemas and types) are below http/, in api/.
 */
function serviceMayImport(target: string): boolean {
  return !target.startsWith('provisioner/http/');
}

/**
 * Where an http/ module calls a store/ function with the pool (`ctx.pool`, `services.pool`,
 * `pool`) as an argument, as `line: call`: a route or an app hook reaches the database only
 * through a service. db/ functions (the health of the database itself) are not store/ ones.
 */
function storeCallsWithPool(path: string, text: string): string[] {
  const file = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true);
  const fromStore = new Set<string>();
  const namespaces = new Set<string>();
  for (const node of file.statements) {
    if (!ts.isImportDeclaration(node) || !ts.isStringLiteral(node.moduleSpecifier)) continue;
    const spec = node.moduleSpecifier.text;
    const target = relative(ROOT, resolve(ROOT, dirname(path), spec))
      .split(sep)
      .join('/');
    if (!spec.startsWith('.') || !target.startsWith('provisioner/store/')) continue;
    const clause = node.importClause;
    if (!clause || clause.isTypeOnly) continue;
    if (clause.name) fromStore.add(clause.name.text);
    const bindings = clause.namedBindings;
    if (bindings && ts.isNamespaceImport(bindings)) namespaces.add(bindings.name.text);
    if (bindings && ts.isNamedImports(bindings))
      for (const e of bindings.elements) if (!e.isTypeOnly) fromStore.add(e.name.text);
  }
  const isPool = (arg: ts.Expression): boolean =>
    (ts.isIdentifier(arg) && arg.text === 'pool') || (ts.isPropertyAccessExpression(arg) && arg.name.text === 'pool');
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isCallExpression(node)) {
      const callee = node.expression;
      const storeFn =
        (ts.isIdentifier(callee) && fromStore.has(callee.text)) ||
        (ts.isPropertyAccessExpression(callee) &&
          ts.isIdentifier(callee.expression) &&
          namespaces.has(callee.expression.text));
      if (storeFn && node.arguments.some(isPool))
        found.push(
          `${path}:${file.getLineAndCharacterOfPosition(node.getStart()).line + 1}: ${node.getText().slice(0, 80)}`,
        );
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

/** What a module of store/ may import: the store, db/, the wire protocol's constants, Node.js and packages. */
function storeMayImport(target: string, spec: string): boolean {
  if (!spec.startsWith('.')) return true; // node:… and packages
  return /^provisioner\/(store|db)\//.test(target) || target.startsWith('runtime/protocol/');
}

t.test('SQL is written only in provisioner/store/ and provisioner/db/', async (t) => {
  const outside = PROVISIONER.filter((p) => !SQL_HOME.test(p)).flatMap((p) =>
    sqlIn(p, readFileSync(join(ROOT, p), 'utf8')),
  );
  t.same(outside, [], 'no .query( call and no SQL statement outside store/ and db/');
  // The check sees SQL where it is: the store's own modules are full of it.
  const inStore = PROVISIONER.filter((p) => p.startsWith('provisioner/store/')).flatMap((p) =>
    sqlIn(p, readFileSync(join(ROOT, p), 'utf8')),
  );
  t.ok(inStore.length > 100, `the check finds the store's statements (${inStore.length} found, more than 100)`);
});

t.test('routes reach the database only through their services', async (t) => {
  const routes = PROVISIONER.filter((p) => p.startsWith('provisioner/http/routes/'));
  t.ok(routes.length > 10, `the route modules were found (${routes.length}, more than 10)`);
  // /readyz asks db/ itself whether the database answers and is migrated: that is the database's health, no resource's.
  const withPool = routes
    .filter((p) => p !== 'provisioner/http/routes/health.ts')
    .filter((p) => /\bctx\.pool\b/.test(readFileSync(join(ROOT, p), 'utf8')));
  t.same(withPool, [], 'no route module but health.ts touches ctx.pool');
});

t.test('the check names a query and a statement written outside the store', async (t) => {
  const found = sqlIn(
    'provisioner/fleet/example.ts',
    [
      'export async function f(db) {',
      "  await db.query<{ n: number }>('SELECT count(*) FROM tenants');",
      "  const text = `UPDATE tenants SET phase = 'Ready' WHERE id = ${1}`;",
      "  return 'select a tenant from the list';",
      '}',
    ].join('\n'),
  );
  t.same(
    found.map((f) => f.split(': ')[0]),
    ['provisioner/fleet/example.ts:2', 'provisioner/fleet/example.ts:2', 'provisioner/fleet/example.ts:3'],
    'the call and its statement on line 2 and the statement on line 3, not the sentence on line 4',
  );
});

t.test('provisioner/store/ imports nothing above it', async (t) => {
  const store = PROVISIONER.filter((p) => p.startsWith('provisioner/store/'));
  t.ok(store.length > 10, `the store's modules were found (${store.length}, more than 10)`);
  const upward = store.flatMap((p) =>
    importsOf(p)
      .filter((i) => !storeMayImport(i.target, i.spec))
      .map((i) => `${p} imports ${i.spec}`),
  );
  t.same(upward, [], 'every import of store/ is of store/, db/, runtime/protocol/ or a package');
  t.notOk(storeMayImport('provisioner/fleet/windows.ts', '../fleet/windows.ts'), 'an import of fleet/ is refused');
  t.notOk(storeMayImport('provisioner/crypto.ts', '../crypto.ts'), 'an import of provisioner/crypto.ts is refused');
});

t.test('service modules import nothing of provisioner/http/, types included', async (t) => {
  const services = PROVISIONER.filter(isServiceModule);
  t.ok(
    services.includes('provisioner/runtime-registry/service.ts') &&
      services.includes('provisioner/services.ts') &&
      !services.some((p) => p.startsWith('provisioner/http/') || p.startsWith('provisioner/cli/')) &&
      !services.includes('provisioner/server.ts'),
    `the service modules were told apart (${services.length}: not http/, cli/ or server.ts)`,
  );
  const upward = services.flatMap((p) =>
    importsWithKind(p, readFileSync(join(ROOT, p), 'utf8'))
      .filter((i) => !serviceMayImport(i.target))
      .map((i) => `${p} imports ${i.spec}${i.typeOnly ? ' (types)' : ''}`),
  );
  t.same(upward, [], 'no service module imports http/');
  // The check refuses what it must: a value or a type of http/, a re-export, a dynamic import.
  const made = (text: string) =>
    importsWithKind('provisioner/runtime-registry/example.ts', text)
      .filter((i) => !serviceMayImport(i.target))
      .map((i) => i.spec);
  t.same(
    made(
      [
        "import { conditionsWithRuntime } from '../http/tenant-view.ts';",
        "import type { Runtime } from '../api/types.ts';",
        "import { Runtime as RuntimeSchema } from '../api/schemas.ts';",
        "import type { ApiRoutes } from '../http/api-routes.ts';",
        "import { type RouteKey as K } from '../http/api-routes.ts';",
        "import type { EventStream } from '../http/streams.ts';",
        "export { quoted } from '../http/error-handler.ts';",
        "const m = await import('../http/app.ts');",
        "import { errors } from '../errors.ts';",
      ].join('\n'),
    ),
    [
      '../http/tenant-view.ts',
      '../http/api-routes.ts',
      '../http/api-routes.ts',
      '../http/streams.ts',
      '../http/error-handler.ts',
      '../http/app.ts',
    ],
    'a value or a type of http/, a re-export and a dynamic import are refused; the API types and schemas (api/) and errors.ts are not',
  );
  t.notOk(isServiceModule('provisioner/http/routes/runtimes.ts'), 'a route is not a service module');
  t.ok(isServiceModule('provisioner/services.ts'), 'services.ts is one');
});

t.test('no route or app hook calls a store/ function with the pool', async (t) => {
  const http = PROVISIONER.filter((p) => p.startsWith('provisioner/http/'));
  t.ok(
    http.includes('provisioner/http/app.ts') &&
      http.filter((p) => p.startsWith('provisioner/http/routes/')).length > 10,
    `the http/ modules were found (${http.length}, with app.ts and the routes)`,
  );
  const calls = http.flatMap((p) => storeCallsWithPool(p, readFileSync(join(ROOT, p), 'utf8')));
  t.same(calls, [], 'every route and hook reaches the store through a service');
  // The check finds what it must, and not a db/ call, a service's call or a store function without the pool.
  const found = storeCallsWithPool(
    'provisioner/http/app.ts',
    [
      "import { getRuntimeByName } from '../store/runtimes.ts';",
      "import * as audit from '../store/audit.ts';",
      "import { toTenant } from '../store/tenants.ts';",
      "import { healthOf } from '../db/availability.ts';",
      'export async function hook(services, ctx, pool) {',
      "  await getRuntimeByName(services.pool, 't', 'n');",
      '  await audit.beginRuntimeActionAudit(ctx.pool, actor, {});',
      "  await getRuntimeByName(pool, 't', 'n');",
      '  healthOf(services.pool);',
      "  await services.runtimes.proxied('t', 'n');",
      '  toTenant(row);',
      '}',
    ].join('\n'),
  );
  t.same(
    found.map((f) => f.split(': ')[0]),
    ['provisioner/http/app.ts:6', 'provisioner/http/app.ts:7', 'provisioner/http/app.ts:8'],
    'the store calls with services.pool, ctx.pool and pool are found; healthOf (db/), a service call and toTenant are not',
  );
});

t.test('the tenants program and the kubeconfig policy import nothing of provisioner/', async (t) => {
  const program = sources('tenants');
  const policy = sources('kubeconfig-policy');
  t.ok(program.length > 5 && policy.length >= 3, `the modules were found (${program.length} and ${policy.length})`);
  const intoRunner = [...program, ...policy].flatMap((p) =>
    importsOf(p)
      .filter((i) => i.target.startsWith('provisioner/'))
      .map((i) => `${p} imports ${i.spec}`),
  );
  t.same(intoRunner, [], 'no import of tenants/ or kubeconfig-policy/ is of provisioner/');
  const intoProgram = policy.flatMap((p) =>
    importsOf(p)
      .filter((i) => i.target.startsWith('tenants/'))
      .map((i) => `${p} imports ${i.spec}`),
  );
  t.same(intoProgram, [], 'kubeconfig-policy/ imports nothing of tenants/ either');
  t.ok(
    program.some((p) => importsOf(p).some((i) => i.target.startsWith('kubeconfig-policy/'))),
    'the program takes the policy from kubeconfig-policy/',
  );
});

/** Groups of modules that import each other, directly or around a loop (Tarjan's strongly connected components). */
function cycles(files: string[]): string[][] {
  const known = new Set(files);
  const edges = new Map(files.map((f) => [f, importsOf(f).flatMap((i) => (known.has(i.target) ? [i.target] : []))]));
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const connect = (v: string): void => {
    index.set(v, next);
    low.set(v, next);
    next += 1;
    stack.push(v);
    onStack.add(v);
    for (const w of edges.get(v)!) {
      if (!index.has(w)) {
        connect(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const group: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      group.push(w);
    } while (w !== v);
    if (group.length > 1 || edges.get(v)!.includes(v)) out.push(group.sort());
  };
  for (const f of files) if (!index.has(f)) connect(f);
  return out;
}

t.test(
  'no import cycle (type-only ones included) in provisioner/, runtime/, tenants/ or kubeconfig-policy/',
  async (t) => {
    const files = [...PROVISIONER, ...sources('runtime'), ...sources('tenants'), ...sources('kubeconfig-policy')];
    t.same(cycles(files), [], 'no group of modules imports each other');
  },
);
