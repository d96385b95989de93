/**
 * The end-to-end tier's phases (scripts/test.sh, docs/e2e.md): a file that names none of the
 * functions needing vcluster, the provider plugin or Argo CD runs in the early phase, before those
 * are built; one that provisions but names neither Argo CD function runs in the provisioning phase,
 * while Argo CD may still be compiling. In those phases the functions a file should not reach
 * refuse (a failure naming the cause) instead of reporting "unavailable", which would make the file
 * skip.
 */
import { readdir, readFile } from 'node:fs/promises';
import t from 'tap';
import { argoCdUnavailable } from '../e2e/harness/argocd.ts';
import { provisioningUnavailable } from '../e2e/harness/environment.ts';
import { refuseBeforeArgoCdPhase, refuseInEarlyPhase } from '../e2e/harness/phase.ts';

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
  t.doesNotThrow(
    () => withPhase(undefined, () => refuseInEarlyPhase('anything')),
    'outside the early phase nothing is refused',
  );
  t.doesNotThrow(() => withPhase('late', () => refuseInEarlyPhase('anything')), 'nor in any other phase');
});

t.test('in the provisioning phase only the Argo CD checks fail', async (t) => {
  t.throws(
    () => withPhase('provisioning', () => argoCdUnavailable()),
    /Argo CD was asked for in the end-to-end tier's provisioning phase \(HRT_E2E_PHASE=provisioning\)/,
    'argoCdUnavailable() throws in the provisioning phase, naming it',
  );
  t.doesNotThrow(
    () => withPhase('provisioning', () => refuseInEarlyPhase('a provisioning environment')),
    'a provisioning environment is not refused there',
  );
  t.doesNotThrow(
    () => withPhase(undefined, () => refuseBeforeArgoCdPhase('Argo CD')),
    'Argo CD is not refused outside those two phases',
  );
});

/** The value of `NAME='…'` in scripts/test.sh. */
function assigned(script: string, name: string): string | undefined {
  return new RegExp(`^${name}='([^']+)'$`, 'm').exec(script)?.[1];
}

t.test("scripts/test.sh splits the files on the names the guards' messages list", async (t) => {
  const script = await readFile(new URL('scripts/test.sh', root), 'utf8');
  const provisioning = assigned(script, 'E2E_PROVISIONING_NAMES');
  const argocd = assigned(script, 'E2E_ARGOCD_NAMES');
  t.ok(provisioning && argocd, 'scripts/test.sh names the provisioning and the Argo CD functions');
  t.match(script, /grep -qE "\$E2E_ARGOCD_NAMES" "\$f"/, 'and greps each file for the Argo CD names');
  t.match(script, /grep -qE "\$E2E_PROVISIONING_NAMES" "\$f"/, 'and for the provisioning names');
  const guard = await readFile(new URL('test/e2e/harness/phase.ts', root), 'utf8');
  const names = `${provisioning}|${argocd}`.split('|').sort();
  t.same(
    names.filter((n) => guard.includes(n)),
    names,
    "every name test.sh's greps look for is one the guards' messages tell the author to call",
  );
  const phases: Record<string, string[]> = { early: [], provisioning: [], argocd: [] };
  const dir = new URL('test/e2e/', root);
  for (const f of (await readdir(dir)).filter((f) => f.endsWith('.test.ts')).sort()) {
    const text = await readFile(new URL(f, dir), 'utf8');
    if (new RegExp(argocd!).test(text)) phases.argocd!.push(f);
    else if (new RegExp(provisioning!).test(text)) phases.provisioning!.push(f);
    else phases.early!.push(f);
  }
  t.ok(
    phases.early!.includes('argo-crds.test.ts'),
    'argo-crds.test.ts (no tenant, no Argo CD) runs in the early phase',
  );
  t.ok(
    phases.provisioning!.includes('lifecycle.test.ts'),
    'lifecycle.test.ts (provisions tenants) runs in the provisioning phase',
  );
  t.ok(phases.argocd!.includes('argocd.test.ts'), 'argocd.test.ts (a real Argo CD) runs in the Argo CD phase');
  t.ok(
    phases.argocd!.includes('argocd-reporting.test.ts'),
    'argocd-reporting.test.ts (a tenant and a real Argo CD) runs in the Argo CD phase',
  );
  for (const f of phases.argocd!) {
    const text = await readFile(new URL(f, dir), 'utf8');
    t.match(
      text,
      /acquireRunLock\(|provisioningSuite|startE2E/,
      `${f} takes a slot of the run lock (its phase runs beside the provisioning phase)`,
    );
  }
});
