/**
 * The end-to-end tier's two phases (scripts/test.sh, docs/e2e.md): a file that names none of the
 * functions needing Argo CD, vcluster or the provider plugin runs in the early phase, before those
 * are built; in that phase the functions refuse (a failure naming the cause) instead of reporting
 * "unavailable", which would make the file skip.
 */
import { readdir, readFile } from 'node:fs/promises';
import t from 'tap';
import { argoCdUnavailable } from '../e2e/harness/argocd.ts';
import { argoWorkflowsUnavailable } from '../e2e/harness/argo-workflows.ts';
import { provisioningUnavailable } from '../e2e/harness/environment.ts';
import { refuseInEarlyPhase } from '../e2e/harness/phase.ts';

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
