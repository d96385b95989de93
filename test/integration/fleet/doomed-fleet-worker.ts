/**
 * A provisioner's reconciler and fleet upgrade driver in a process of their own, for tests that
 * kill it with SIGKILL mid-wave (crash.test.ts): no outcome written, no lease handed back. Its
 * engine is a test double: the first `finish` up calls succeed, every later one never finishes.
 * It prints `started <tenant id>` as each up call starts.
 *
 *   node doomed-fleet-worker.ts <database url> <box key, hex> <owner> <lease TTL ms> <finish>
 */
import { SecretBox } from '../../../provisioner/crypto.ts';
import { createPool } from '../../../provisioner/db/database.ts';
import { Notifications } from '../../../provisioner/db/notifications.ts';
import { ScriptedEngine } from '../../helpers/scripted-engine.ts';
import { FleetDriver } from '../../../provisioner/fleet/driver.ts';
import { Reconciler } from '../../../provisioner/reconciler/reconciler.ts';
import { catalog } from '../../../runtime/catalog.ts';

const [url, keyHex, owner, leaseTtlMs, finish] = process.argv.slice(2);
if (!url || !keyHex || !owner || !leaseTtlMs || !finish)
  throw new Error('usage: doomed-fleet-worker.ts <database url> <box key hex> <owner> <lease TTL ms> <finish>');
const pool = createPool(url, 6);
let ups = 0;
const engine = new ScriptedEngine({
  script: (call) => {
    if (call.kind !== 'up') return undefined;
    ups += 1;
    return ups <= Number(finish) ? undefined : { gate: new Promise<void>(() => {}) };
  },
  onStart: (call) => {
    if (call.kind === 'up') process.stdout.write(`started ${call.tenantId}\n`);
  },
});
const notifications = new Notifications({ pool });
const reconciler = new Reconciler({
  pool,
  notifications,
  engine,
  box: new SecretBox(Buffer.from(keyHex, 'hex')),
  owner,
  workers: 8,
  leaseTtlMs: Number(leaseTtlMs),
  pollMs: 100,
  logFlushMs: 20,
});
const driver = new FleetDriver({ pool, catalog, owner, notifications, leaseTtlMs: Number(leaseTtlMs), pollMs: 50 });
await reconciler.start();
await notifications.start();
driver.start();
process.stdout.write('ready\n');
