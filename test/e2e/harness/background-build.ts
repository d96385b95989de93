/**
 * Builds the end-to-end tier's late phase does not wait for (scripts/test.sh): the Argo Workflows
 * and Argo Rollouts controllers and Gitea are used by five files only, so on a cold machine the late
 * phase starts its other files once Argo CD, vcluster and the provider plugin are built, and these
 * three keep compiling in the background beside them. scripts/test.sh names them in
 * HRT_E2E_DEFERRED_BUILDS and the background builds' folder in HRT_E2E_BUILDS_DIR
 * (scripts/background-builds.sh writes STEP.rc there when a step has ended, STEP.out with the built
 * folder as its last line); a file that uses one calls {@link backgroundBuild} first and waits here.
 *
 * Outside scripts/test.sh (a file run alone, or a run without background builds) nothing is
 * deferred and this returns at once: test/e2e/prepare.sh has built the binary, or the harness finds
 * it in the build script's cache folder.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Test } from 'tap';
import { TimeoutError, until } from '../../../sandbox/until.ts';

const run = promisify(execFile);
const ROOT = join(import.meta.dirname, '..', '..', '..');

/** Each deferred step: the script that builds it and the variable the harness reads its folder from. */
const STEPS = {
  'argo-workflows': { script: 'scripts/argo-workflows.sh', env: 'HRT_ARGO_WORKFLOWS_BIN' },
  'argo-rollouts': { script: 'scripts/argo-rollouts.sh', env: 'HRT_ARGO_ROLLOUTS_BIN' },
  gitea: { script: 'scripts/gitea.sh', env: 'HRT_GITEA_BIN' },
} as const;
export type DeferredStep = keyof typeof STEPS;

/** The longest a file waits for a background build (a cold Go build on 2 shared cores). */
const WAIT_MS = 60 * 60_000;

/** Whether scripts/test.sh left STEP to the files that use it. */
export function deferred(step: DeferredStep): boolean {
  return (
    !!process.env.HRT_E2E_BUILDS_DIR &&
    (process.env.HRT_E2E_DEFERRED_BUILDS ?? '').split(/\s+/).includes(step) &&
    !process.env[STEPS[step].env]
  );
}

/**
 * Waits until the background build of STEP has ended, then exports the folder it built in the
 * variable the harness reads (HRT_ARGO_WORKFLOWS_BIN, HRT_ARGO_ROLLOUTS_BIN, HRT_GITEA_BIN). A
 * background build that failed is tried once more here, in the foreground, as test/e2e/prepare.sh
 * does for the builds it waits for; when that fails too the variable stays unset and the harness's
 * `…Unavailable()` names the missing binary (a failure with CI=true). The file's timeout covers the
 * wait; call the file's own `t.setTimeout` after this.
 */
export async function backgroundBuild(t: Test, step: DeferredStep): Promise<void> {
  if (!deferred(step)) return;
  const dir = process.env.HRT_E2E_BUILDS_DIR!;
  const rcFile = join(dir, `${step}.rc`);
  t.setTimeout(WAIT_MS + 60_000);
  const started = Date.now();
  if (!existsSync(rcFile)) t.comment(`waiting for the background build of ${step} (scripts/test.sh, ${dir})`);
  try {
    await until(`the background build of ${step}`, WAIT_MS, () => existsSync(rcFile), 2000);
  } catch (err) {
    if (!(err instanceof TimeoutError)) throw err;
    t.comment(err.message);
    return;
  }
  const waited = Math.round((Date.now() - started) / 1000);
  const rc = readFileSync(rcFile, 'utf8').trim();
  let folder: string | undefined;
  if (rc === '0') {
    folder = readFileSync(join(dir, `${step}.out`), 'utf8')
      .trim()
      .split('\n')
      .pop();
  } else {
    t.comment(`the background build of ${step} failed (exit ${rc}); building it here (${STEPS[step].script})`);
    try {
      const { stdout } = await run('bash', [join(ROOT, STEPS[step].script)], { maxBuffer: 16 << 20 });
      folder = stdout.trim().split('\n').pop();
      // scripts/test.sh then counts the failed background build as made good.
      writeFileSync(join(dir, `${step}.used`), '');
    } catch (err) {
      t.comment(`${STEPS[step].script} failed: ${String((err as Error).message).slice(-600)}`);
    }
  }
  if (folder) process.env[STEPS[step].env] = folder;
  if (waited > 0) t.comment(`${step}: built after ${waited} s of waiting (${folder ?? 'no folder'})`);
}
