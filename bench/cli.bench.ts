/**
 * `npm run bench -- cli`: wall time of one `provisioner tenants list` call against a running API
 * (10 tenants), median of 10 calls, three ways: through the installed command (bin/provisioner,
 * which goes through scripts/run.sh), `node bin/provisioner.ts` directly, and, as the baseline
 * in the same run, `node -e ''` (the Node.js start-up every call pays).
 * CLI_BENCH_ROOT=<checkout> measures another checkout's CLI against the same API (before/after).
 */
import { execFile } from 'node:child_process';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { createTestApi } from '../test/helpers/api.ts';

const run = promisify(execFile);
const ROOT = process.env.CLI_BENCH_ROOT ?? fileURLToPath(new URL('../', import.meta.url));
const CALLS = 10;

const api = await createTestApi();
try {
  const url = await api.app.listen({ port: 0, host: '127.0.0.1' });
  for (let i = 0; i < 10; i++) await api.signup();
  const env = { ...process.env, PROVISIONER_URL: url, PROVISIONER_TOKEN: api.adminKey };

  async function median(label: string, file: string, args: string[]): Promise<number> {
    const times: number[] = [];
    for (let i = 0; i < CALLS; i++) {
      const start = performance.now();
      await run(file, args, { env, cwd: ROOT });
      times.push(performance.now() - start);
    }
    times.sort((a, b) => a - b);
    const m = (times[CALLS / 2 - 1]! + times[CALLS / 2]!) / 2;
    console.log(`${label}: median ${m.toFixed(0)} ms (min ${times[0]!.toFixed(0)}, max ${times.at(-1)!.toFixed(0)})`);
    return m;
  }

  console.log(
    `load average before: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')} (${ROOT})`,
  );
  const base = await median("node -e ''", process.execPath, ['-e', '']);
  const direct = await median('node bin/provisioner.ts tenants list', process.execPath, [
    `${ROOT}/bin/provisioner.ts`,
    'tenants',
    'list',
  ]);
  const shim = await median('bin/provisioner tenants list', `${ROOT}/bin/provisioner`, ['tenants', 'list']).catch(
    () => NaN, // a checkout from before the launcher existed
  );
  console.log(
    `ratios to node start-up: direct ${(direct / base).toFixed(1)}x, launcher ${(shim / base).toFixed(1)}x; ` +
      `load average after: ${loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')}`,
  );
} finally {
  await api.close();
}
