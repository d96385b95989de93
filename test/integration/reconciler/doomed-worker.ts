/**
 * A reconciler in a process of its own, for tests that kill it (harness.ts `doomedWorker`): the
 * way a provisioner crashes, with no outcome written and no lease handed back. Its engine is a
 * test double whose operations never finish; it prints `started <tenant id>` as each one starts.
 *
 *   node doomed-worker.ts <database url> <box key, hex> <owner> <lease TTL ms>
 */
import { SecretBox } from '../../../provisioner/crypto.ts';
import { createPool } from '../../../provisioner/db/database.ts';
import { Notifications } from '../../../provisioner/db/notifications.ts';
import { ScriptedEngine } from '../../helpers/scripted-engine.ts';
import { Reconciler } from '../../../provisioner/reconciler/reconciler.ts';

const [url, keyHex, owner, leaseTtlMs] = process.argv.slice(2);
if (!url || !keyHex || !owner || !leaseTtlMs)
  throw new Error('usage: doomed-worker.ts <database url> <box key hex> <owner> <lease TTL ms>');
const pool = createPool(url, 4);
const engine = new ScriptedEngine({
  script: () => ({ gate: new Promise<void>(() => {}) }), // never finishes: the process is killed
  onStart: (call) => process.stdout.write(`started ${call.tenantId}\n`),
});
const notifications = new Notifications({ pool });
const reconciler = new Reconciler({
  pool,
  notifications,
  engine,
  box: new SecretBox(Buffer.from(keyHex, 'hex')),
  owner,
  leaseTtlMs: Number(leaseTtlMs),
  pollMs: 200,
  logFlushMs: 20,
});
await reconciler.start();
await notifications.start();
process.stdout.write('ready\n');
