/**
 * The end-to-end tier's two phases (scripts/test.sh, docs/e2e.md): a file that names none of the
 * functions needing Argo CD, vcluster or the provider plugin runs in the early phase, before those
 * are built; in that phase the functions refuse (a failure naming the cause) instead of reporting
 * "unavailable", which would make the file skip.
 */
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { argoCdUnavailable } from '../e2e/harness/argocd.ts';
import { argoWorkflowsUnavailable } from '../e2e/harness/argo-workflows.ts';
import { provisioningUnavailable } from '../e2e/harness/environment.ts';
import { refuseInEarlyPhase } from '../e2e/harness/phase.ts';
import { backgroundBuild, deferred } from '../e2e/harness/background-build.ts';

const root = new URL('../../', import.meta.url);

function withPhase<T>(phase: string | undefined, fn: () => T): T {
  const saved = process.env.HRT_E2E_PHASE;
  if (phase === undefined) delete process.env.HRT_E2E_PHASE;
  else process.env.HRT_E2E_PHASE = phase;
  try {
    return fn();
  } finally {
    if (saved === undefined) delete process.env.HRT_E2E_PHASE;
    else process.env.HRT_E2E_PHASE = saved;
  }
}

t.test('in the early phase the provisioning and Argo CD checks fail instead of skipping', async (t) => {
  t.throws(
    () => withPhase('early', () => provisioningUnavailable()),
    /provisioning environment.*early phase.*HRT_E2E_PHASE=early/,
    'provisioningUnavailable() throws in the early phase, naming it',
  );
  t.throws(
    () => withPhase('early', () => argoCdUnavailable()),
    /Argo CD was asked for in the end-to-end tier's early phase/,
    'argoCdUnavailable() throws in the early phase, naming it',
  );
  t.throws(
    () => withPhase('early', () => argoWorkflowsUnavailable()),
    /the Argo Workflows controller was asked for in the end-to-end tier's early phase/,
    'argoWorkflowsUnavailable() throws in the early phase, naming it',
  );
  t.doesNotThrow(
    () => withPhase(undefined, () => refuseInEarlyPhase('anything')),
    'outside the early phase nothing is refused',
  );
  t.doesNotThrow(() => withPhase('late', () => refuseInEarlyPhase('anything')), 'nor in any other phase');
});

t.test("scripts/test.sh splits the files on the names the guard's message lists", async (t) => {
  const script = await readFile(new URL('scripts/test.sh', root), 'utf8');
  const pattern = /grep -qE '([^']+)' "\$f"/.exec(script)?.[1];
  t.ok(pattern, 'scripts/test.sh has the grep that picks the late-phase files');
  const names = pattern!.split('|').sort();
  const guard = await readFile(new URL('test/e2e/harness/phase.ts', root), 'utf8');
  const listed = names.filter((n) => guard.includes(n));
  t.same(listed, names, "every name test.sh's grep looks for is one the guard's message tells the author to call");
  const early: string[] = [];
  const dir = new URL('test/e2e/', root);
  for (const f of (await readdir(dir)).filter((f) => f.endsWith('.test.ts')).sort()) {
    const text = await readFile(new URL(f, dir), 'utf8');
    if (!new RegExp(pattern!).test(text)) early.push(f);
  }
  t.ok(early.includes('argo-crds.test.ts'), 'argo-crds.test.ts (no tenant, no Argo CD) runs in the early phase');
  t.notOk(early.includes('lifecycle.test.ts'), 'lifecycle.test.ts (provisions tenants) runs in the late phase');
  t.notOk(early.includes('argocd.test.ts'), 'argocd.test.ts (a real Argo CD) runs in the late phase');
  t.notOk(
    early.includes('argo-workflows.test.ts'),
    'argo-workflows.test.ts (a real Argo Workflows controller) runs in the late phase',
  );
});

t.test('a late file that uses a build the late phase does not wait for waits for that build itself', async (t) => {
  const script = await readFile(new URL('scripts/test.sh', root), 'utf8');
  const waited = /\n {2}bg_wait (argocd[^\n]*)\n {2}if e2e_prepare; then/.exec(script)?.[1]?.split(' ');
  t.ok(waited, "scripts/test.sh's late phase waits for a list of background builds");
  const dir = new URL('test/e2e/', root);
  const uses: Record<string, string> = {
    argoWorkflowsUnavailable: 'argo-workflows',
    argoRolloutsUnavailable: 'argo-rollouts',
    giteaUnavailable: 'gitea',
  };
  let checked = 0;
  for (const f of (await readdir(dir)).filter((f) => f.endsWith('.test.ts')).sort()) {
    const text = await readFile(new URL(f, dir), 'utf8');
    for (const [fn, step] of Object.entries(uses)) {
      if (!new RegExp(`\\b${fn}\\(`).test(text)) continue;
      t.notOk(waited!.includes(step), `the late phase does not wait for ${step} (${f} does)`);
      const call = text.indexOf(`await backgroundBuild(t, '${step}')`);
      t.ok(
        call >= 0 && call < text.indexOf(`${fn}()`),
        `${f} waits for the background build of ${step} before it calls ${fn}()`,
      );
      checked++;
    }
  }
  t.ok(checked >= 4, `the files that use the deferred builds were found (${checked})`);
});

t.test('backgroundBuild waits for the step, then exports the folder it built', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'hrt-bg-build-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const saved = { ...process.env };
  t.teardown(() => {
    for (const k of ['HRT_E2E_BUILDS_DIR', 'HRT_E2E_DEFERRED_BUILDS', 'HRT_GITEA_BIN', 'HRT_ARGO_ROLLOUTS_BIN'])
      if (saved[k] === undefined) delete process.env[k];
      else process.env[k] = saved[k];
  });
  delete process.env.HRT_GITEA_BIN;
  delete process.env.HRT_ARGO_ROLLOUTS_BIN;
  process.env.HRT_E2E_BUILDS_DIR = dir;
  process.env.HRT_E2E_DEFERRED_BUILDS = 'argo-workflows gitea';

  t.equal(deferred('argo-rollouts'), false, 'a step scripts/test.sh did not defer is not waited for');
  await backgroundBuild(t, 'argo-rollouts');
  t.equal(process.env.HRT_ARGO_ROLLOUTS_BIN, undefined, 'and nothing is exported for it');

  t.equal(deferred('gitea'), true, 'a deferred step is waited for');
  let ended = false;
  const waiting = backgroundBuild(t, 'gitea').then(() => (ended = true));
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
  t.equal(ended, false, 'while the build has not ended (no gitea.rc), the file waits');
  await writeFile(join(dir, 'gitea.out'), 'progress\n/cache/gitea/abc/bin\n');
  await writeFile(join(dir, 'gitea.rc'), '0\n');
  await waiting;
  t.equal(process.env.HRT_GITEA_BIN, '/cache/gitea/abc/bin', 'then the last line of its output is the folder');
  t.equal(deferred('gitea'), false, 'once exported, the step is no longer waited for');
});
