/**
 * Builds the ops console (console/src, Preact) into console/dist with esbuild: one JavaScript and
 * one CSS file named by their content hash, and index.html naming them. Skipped when the sources
 * (and this script, and the lockfile) are what the last build was made from: `npm start` and
 * `npm test` call it every time, and an unchanged console costs one hash of a few files.
 *
 *   node scripts/build-console.ts [--force]
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';

const root = join(import.meta.dirname, '..');
const src = join(root, 'console', 'src');
const dist = join(root, 'console', 'dist');
const stampFile = join(dist, '.build-stamp');

const inputs = [
  join(root, 'console', 'index.html'),
  join(root, 'package-lock.json'),
  import.meta.filename,
  ...readdirSync(src, { recursive: true, encoding: 'utf8' })
    .map((f) => join(src, f))
    .sort(),
];
const hash = createHash('sha256');
for (const f of inputs) {
  hash.update(f.slice(root.length));
  try {
    hash.update(readFileSync(f));
  } catch {
    // a directory
  }
}
const stamp = hash.digest('hex');
let previous = '';
try {
  previous = readFileSync(stampFile, 'utf8');
} catch {
  // never built
}
if (previous === stamp && !process.argv.includes('--force')) process.exit(0);

const started = performance.now();
const { build } = await import('esbuild');
rmSync(dist, { recursive: true, force: true });
mkdirSync(join(dist, 'assets'), { recursive: true });
const result = await build({
  entryPoints: [join(src, 'main.tsx')],
  bundle: true,
  minify: true,
  format: 'esm',
  target: 'es2022',
  jsx: 'automatic',
  jsxImportSource: 'preact',
  outdir: join(dist, 'assets'),
  entryNames: '[name]-[hash]',
  metafile: true,
  legalComments: 'none',
  logLevel: 'warning',
});
const outputs = Object.keys(result.metafile.outputs).map((f) => basename(f));
const js = outputs.find((f) => f.endsWith('.js'));
const css = outputs.find((f) => f.endsWith('.css'));
if (!js || !css) throw new Error(`build-console: expected one .js and one .css output, got ${outputs.join(', ')}`);
const html = readFileSync(join(root, 'console', 'index.html'), 'utf8')
  .replace('__JS__', js)
  .replace('__CSS__', css);
writeFileSync(join(dist, 'index.html'), html);
writeFileSync(stampFile, stamp);
const bytes = Object.values(result.metafile.outputs).reduce((n, o) => n + o.bytes, 0);
console.error(
  `build-console: console/dist built in ${Math.round(performance.now() - started)} ms (${js} and ${css}, ${(bytes / 1024).toFixed(1)} KiB)`,
);
