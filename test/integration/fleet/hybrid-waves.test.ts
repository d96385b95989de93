/**
 * Hybrid runtimes in a fleet upgrade (the reconciler and the ScriptedEngine TEST DOUBLE for the
 * hosted runtimes, real Postgres, the real RuntimeService): once a tenant's hosted runtime reached
 * the target in its wave, its hybrid runtimes that opted in to the in-cluster upgrader are asked
 * for it (their upgraders apply it: test/e2e/hybrid-upgrader.test.ts), audited with the driver as
 * actor and recorded as a fleet event; the fleet upgrade lists them as moved by their upgraders
 * (with the upgrader's phase) and every other hybrid runtime as customer action needed, saying why.
 */
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { SecretBox } from '../../../provisioner/crypto.ts';
import { RuntimeService } from '../../../provisioner/runtime-registry/service.ts';
import {
  hashRuntimeBootstrapToken,
  newRuntimeBootstrapToken,
} from '../../../provisioner/runtime-registry/bootstrap.ts';
import {
  claimRuntimeBootstrap,
  getRuntimeByName,
  insertHybridRuntime,
  recordUpgraderReport,
} from '../../../provisioner/store/runtimes.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { createFleetHarness, type FleetHarness } from './fleet-harness.ts';
import { auditRows } from '../../helpers/audit.ts';
import { fleetEventsOf } from '../../helpers/fleet.ts';

let f: FleetHarness;
t.before(async () => {
  f = await createFleetHarness();
  await f.h.addCluster('root-a');
});
t.teardown(() => f.close());

t.test('opted-in hybrid runtimes follow their tenant in its wave; the others need their customer', async (t) => {
  const pool = f.h.db.pool;
  const runtimes = new RuntimeService({
    pool,
    box: new SecretBox(randomBytes(32)),
    catalog,
    publicUrl: 'https://cp.example.test',
    publicKeyPem: '-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n',
    bootstrapTtlSeconds: 3600,
    perTenant: 10,
    tunnelStatus: () => ({ connected: false }),
    runtimeTunnelStatus: () => ({ connected: false }),
    replicaId: 'test-replica',
    onKeyRevoked: () => {},
    ingressPolicy: { allowedCidrs: [], ownUrl: 'https://cp.example.test' },
  });
  const [a, b] = await f.readyTenants(2, '1.4.1', 'root-a');
  /** An installed hybrid runtime of `tenant` at 1.4.1. */
  const hybrid = async (tenant: string, name: string, upgrades: 'agent' | 'customer', argo: 'new' | 'existing') => {
    const { token } = newRuntimeBootstrapToken();
    await insertHybridRuntime(pool, {
      tenantId: tenant,
      name,
      access: 'tunnel',
      ingressUrl: undefined,
      argo,
      argoNamespace: argo === 'existing' ? 'argocd' : undefined,
      upgrades,
      version: '1.4.1',
      tokenHash: hashRuntimeBootstrapToken(token),
      ttlSeconds: 3600,
      createdBy: 'test',
    });
    await claimRuntimeBootstrap(pool, hashRuntimeBootstrapToken(token));
  };
  await hybrid(a!, 'edge', 'agent', 'existing');
  await hybrid(a!, 'lab', 'agent', 'new');
  await hybrid(a!, 'plant', 'customer', 'existing');
  await hybrid(b!, 'edge', 'agent', 'existing');

  const engine = f.engine({ delayMs: 100 });
  await f.h.reconciler(engine, { workers: 4 });
  const id = await f.start({ targetVersion: '1.5.0', waves: [{ count: 1 }, { percent: 100 }] }, [a!, b!]);
  f.driver({
    askHybridUpgrades: (tx, tenantId, target, by, fleetUpgradeId) =>
      runtimes.askUpgradesByAgent(tx, tenantId, target, by, fleetUpgradeId),
  });
  t.equal(await f.waitState(id, ['completed', 'halted']), 'completed', 'the fleet upgrade completes');

  const of = (tenant: string, name: string) => getRuntimeByName(pool, tenant, name);
  t.match(await of(a!, 'edge'), { version: '1.5.0', upgrade_phase: 'pending' }, "tenant A's opted-in runtime is asked");
  t.match(await of(b!, 'edge'), { version: '1.5.0', upgrade_phase: 'pending' }, "tenant B's too, in its own wave");
  t.match(await of(a!, 'lab'), { version: '1.4.1', upgrade_phase: null }, 'argo=new (Argo charts change): not asked');
  t.match(await of(a!, 'plant'), { version: '1.4.1', upgrade_phase: null }, 'upgrades: customer: not asked');

  const events = await fleetEventsOf(pool, id, { action: 'hybrid_upgrades_asked' });
  t.same(
    events.map((e) => [e.tenantId, e.data.runtimes]),
    [
      [a!, ['edge']],
      [b!, ['edge']],
    ],
    'a fleet event per tenant whose runtimes were asked, in wave order',
  );
  const audit = await auditRows(pool, { action: 'runtime.upgrade' });
  t.equal(audit.length, 2, 'one audit row per runtime asked');
  t.match(audit[0], {
    actor: /^fleet-driver:/,
    after: { version: '1.5.0', appliedBy: 'agent', fleetUpgradeId: id },
  });

  // Tenant B's upgrader reports success; tenant A's rolls back.
  const runtimeId = async (tenant: string, name: string) => (await of(tenant, name))!.id;
  await recordUpgraderReport(pool, await runtimeId(b!, 'edge'), '1.5.0', 'succeeded', 'runs 1.5.0');
  await recordUpgraderReport(pool, await runtimeId(a!, 'edge'), '1.5.0', 'rolled-back', 'app-proxy did not roll out');

  const view = await f.service.get(id);
  const agents = Object.fromEntries((view?.upgradedByAgent ?? []).map((x) => [`${x.tenantId}/${x.runtime}`, x]));
  const customers = Object.fromEntries(
    (view?.customerActionNeeded ?? []).map((x) => [`${x.tenantId}/${x.runtime}`, x]),
  );
  t.same(Object.keys(agents), [`${b}/edge`], 'moved by its upgrader: B/edge');
  t.equal(agents[`${b}/edge`]?.phase, 'succeeded');
  t.same(
    Object.keys(customers).sort(),
    [`${a}/edge`, `${a}/lab`, `${a}/plant`].sort(),
    'every other hybrid runtime needs its customer',
  );
  t.match(customers[`${a}/edge`]?.message, /its in-cluster upgrader rolled it back: app-proxy did not roll out/);
  t.match(customers[`${a}/lab`]?.message, /its in-cluster upgrader was not asked/);
  t.notMatch(customers[`${a}/plant`]?.message, /upgrader/, 'upgrades: customer: nothing about an upgrader');
});
