/**
 * A provisioner for the browser tests, in a process of its own so that a test can kill it
 * (SIGKILL: no shutdown, as a crash) and start it again on the same port. It is built the way
 * `provisioner serve` builds one (buildServices, buildApp, the reconciler, the fleet upgrade
 * driver), on the given database, listening on loopback, with the ScriptedEngine TEST DOUBLE in
 * place of Pulumi (the real engine runs in the e2e tier): every call takes
 * CONSOLE_ENGINE_DELAY_MS and logs two lines.
 * CONSOLE_ENGINE=none runs no reconciler. Prints `listening <url>` when it serves; exits when its
 * stdin closes (the test process ended or died).
 *
 *   DATABASE_URL=… PORT=… PROVISIONER_ENCRYPTION_KEY=… node console-server.ts
 */
import { loadConfig } from '../../../provisioner/config.ts';
import { createPool } from '../../../provisioner/db/database.ts';
import { ScriptedEngine } from '../../helpers/scripted-engine.ts';
import { startReplica } from '../../helpers/api.ts';

const url = process.env.DATABASE_URL;
if (!url) throw new Error('console-server: DATABASE_URL is required');
const delayMs = Number(process.env.CONSOLE_ENGINE_DELAY_MS ?? 300);
const scripted = process.env.CONSOLE_ENGINE !== 'none';
const config = loadConfig({
  ...process.env,
  HOST: '127.0.0.1',
  PROVISIONER_ENGINE: scripted ? 'pulumi' : 'none',
  PROVISIONER_SIGNUP_RATE_LIMIT: '100000',
  PROVISIONER_POLL_MS: '200',
  LOG_LEVEL: 'silent',
});
const pool = createPool(url, 10);
const engine = scripted
  ? new ScriptedEngine({
      script: (call) => ({
        delayMs,
        lines: [`scripted ${call.kind} of ${call.tenantId}`, `scripted ${call.kind} done`],
      }),
    })
  : undefined;
const replica = await startReplica(config, { pool, url }, engine ? { engine } : {});
await replica.services.reconciler?.start();
replica.services.fleetDriver?.start();
const address = await replica.app.listen({ host: '127.0.0.1', port: config.port });
process.stdout.write(`listening ${address}\n`);
// The test that started this process holds stdin: when it ends (or dies), so does this server.
process.stdin.resume();
process.stdin.on('close', () => process.exit(0));
