/**
 * The console takes the API's types from the provisioner's route schemas
 * (provisioner/api/types.ts) with `import type` only: the browser bundle must hold no server
 * module, and the console's type-check (DOM types, no Node.js types) must not pull in Node.js's
 * types through the schemas' imports.
 */
import { join, relative } from 'node:path';
import t from 'tap';
import { build } from 'esbuild';
import ts from 'typescript';
import type { FleetEvent as StoredFleetEvent } from '../../../provisioner/store/fleet-upgrades.ts';
import type { Operation as StoredOperation } from '../../../provisioner/store/operations.ts';
import type { Tenant as StoredTenant } from '../../../provisioner/store/tenants.ts';
import type { FleetEvent, Operation, Tenant } from '../../../provisioner/api/types.ts';

/**
 * Checked by the type-check (`npm run typecheck` reads test/), not at run time: the store's view of
 * a tenant and an operation (what the routes answer with) and the wire types derived from the
 * schemas are the same type, each assignable to the other. A field added to one and not the other
 * fails the type-check here.
 */
type Same<A extends B, B extends C, C = A> = [A, B];
export type StoredTenantIsTheWireTenant = Same<StoredTenant, Tenant>;
export type StoredOperationIsTheWireOperation = Same<StoredOperation, Operation>;
/** A fleet upgrade's decision as the store reads it is the progress stream's `event` payload. */
export type StoredFleetEventIsTheWireFleetEvent = Same<StoredFleetEvent, FleetEvent>;

const root = join(import.meta.dirname, '..', '..', '..');
const rel = (f: string) => relative(root, f).split('\\').join('/');

/**
 * The only modules of the provisioner the console bundles: the API's one client (it imports the
 * server's modules as types only) and the phases it lists (a module that imports nothing).
 */
const BUNDLED_SERVER_MODULES = ['provisioner/http/api-client.ts', 'provisioner/store/states.ts'];

t.test(
  'the console bundle holds no server module, only the API client and the closed lists of store/states.ts',
  async (t) => {
    const result = await build({
      entryPoints: [join(root, 'console', 'src', 'main.tsx')],
      bundle: true,
      write: false,
      format: 'esm',
      target: 'es2022',
      jsx: 'automatic',
      jsxImportSource: 'preact',
      outdir: join(root, 'console', 'dist-check'),
      metafile: true,
      logLevel: 'silent',
    });
    const inputs = Object.keys(result.metafile.inputs).map((f) => rel(join(root, f)));
    t.ok(inputs.includes('console/src/api.ts'), 'the bundle holds console/src/api.ts (the build read the console)');
    const server = inputs.filter((f) => !f.startsWith('console/') && !/(^|\/)node_modules\/preact\//.test(f));
    t.same(
      server.sort(),
      BUNDLED_SERVER_MODULES,
      'outside console/ and preact the bundle holds only provisioner/http/api-client.ts and provisioner/store/states.ts',
    );
  },
);

t.test("the console's type-check reads the API's types and no Node.js types", async (t) => {
  const configPath = join(root, 'console', 'tsconfig.json');
  const config = ts.readConfigFile(configPath, (p) => ts.sys.readFile(p));
  if (config.error)
    throw new Error(`console/tsconfig.json: ${ts.flattenDiagnosticMessageText(config.error.messageText, '\n')}`);
  const parsed = ts.parseJsonConfigFileContent(config.config, ts.sys, join(root, 'console'));
  const program = ts.createProgram({ rootNames: parsed.fileNames, options: parsed.options });
  const files = program.getSourceFiles().map((f) => rel(f.fileName));
  t.ok(files.includes('provisioner/api/types.ts'), "the console's program reads provisioner/api/types.ts");
  t.ok(files.includes('provisioner/api/schemas.ts'), "the console's program reads provisioner/api/schemas.ts");
  t.same(
    files.filter((f) => f.startsWith('node_modules/@types/node/') || f.startsWith('node_modules/@types/pg/')),
    [],
    "no file of @types/node or @types/pg is in the console's program (schemas.ts imports no module that needs Node.js)",
  );
});
