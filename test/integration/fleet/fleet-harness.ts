/**
 * Fleet upgrade test harness, over the reconciler's (../reconciler/harness.ts): tenants made
 * Ready on a version with a connected tunnel, the ScriptedEngine TEST DOUBLE scripted so that an
 * upgraded runtime reconnects its tunnel (as the real agents do when their pods are replaced), the
 * fleet upgrade service, drivers with an injectable clock, and bounded waits.
 */
import { EngineError } from '../../../provisioner/engine/engine.ts';
import { ScriptedEngine, type EngineCall } from '../../helpers/scripted-engine.ts';
import { FleetDriver, type FleetDriverOptions } from '../../../provisioner/fleet/driver.ts';
import { FleetUpgradeService, type FleetUpgradeRequest } from '../../../provisioner/fleet/service.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { createHarness, type Harness } from '../reconciler/harness.ts';
import { until } from '../../../sandbox/until.ts';
import { markReconciled } from '../../helpers/tenants.ts';
import { putTunnelRow } from '../../helpers/tunnels.ts';
import { settleTenantOperations, tenantOperations } from '../../helpers/operations.ts';
import { fleetTenantRows, getFleetRow } from '../../../provisioner/store/fleet-upgrades.ts';

export const OPERATOR = { actor: { id: 'test-operator', role: 'operator' }, requestId: 'test' };

export interface FleetHarness {
  h: Harness;
  service: FleetUpgradeService;
  /** The driver clock (ms), the service's too (windows); advance it to pass soak times and gate timeouts. */
  clock: { now: number };
  drivers: FleetDriver[];
  /** Tenants Ready on `version` (generation 1 observed, Ready=True), placed on `cluster`, tunnel connected a minute ago. */
  readyTenants(n: number, version: string, cluster: string): Promise<string[]>;
  /**
   * The engine double: an up reconnects the tenant's tunnel; `fail(call)` makes it fail; `delayMs`
   * each; `hold(call)`, when it answers a promise, keeps that up running until it settles.
   */
  engine(o?: {
    fail?: (call: EngineCall) => boolean;
    delayMs?: number;
    hold?: (call: EngineCall) => Promise<void> | undefined;
  }): ScriptedEngine;
  start(
    body: Partial<FleetUpgradeRequest> & Pick<FleetUpgradeRequest, 'targetVersion'>,
    ids: string[],
  ): Promise<string>;
  driver(o?: Partial<FleetDriverOptions>): FleetDriver;
  fleet(id: string): Promise<{ state: string; current_wave: number; state_reason: string | null }>;
  tenants(
    id: string,
  ): Promise<Map<string, { state: string; wave: number | null; reason: string | null; rolled_back: boolean }>>;
  waitState(id: string, states: string[], timeoutMs?: number): Promise<string>;
  /** Upgrade operations of the tenant to `version`. */
  upgradesTo(tenantId: string, version: string): Promise<number>;
  close(): Promise<void>;
}

export async function createFleetHarness(): Promise<FleetHarness> {
  const h = await createHarness();
  const clock = { now: Date.now() };
  const service = new FleetUpgradeService({ pool: h.db.pool, catalog, now: () => clock.now });
  const drivers: FleetDriver[] = [];
  const pool = h.db.pool;
  const reconnect = (tenantId: string) =>
    putTunnelRow(pool, tenantId, { replicaId: 'test-replica', replicaUrl: 'http://127.0.0.1:1' });
  const self: FleetHarness = {
    h,
    service,
    clock,
    drivers,
    async readyTenants(n, version, cluster) {
      const ids: string[] = [];
      for (let i = 0; i < n; i++) {
        const { id } = await h.createTenant({ runtimeVersion: version });
        await markReconciled(pool, id, { cluster, readyCondition: true, reconciledNow: true });
        await settleTenantOperations(pool, id);
        await putTunnelRow(pool, id, {
          replicaId: 'test-replica',
          replicaUrl: 'http://127.0.0.1:1',
          connectedSecondsAgo: 60,
        });
        ids.push(id);
      }
      return ids;
    },
    engine(o = {}) {
      return new ScriptedEngine({
        script: (call) => {
          if (call.kind !== 'up') return undefined;
          if (o.fail?.(call))
            return {
              delayMs: o.delayMs ?? 0,
              fail: new EngineError('ProgramFailed', 'the runtime never became healthy'),
            };
          return {
            gate: (o.hold?.(call) ?? Promise.resolve()).then(() => reconnect(call.tenantId)),
            delayMs: o.delayMs ?? 0,
          };
        },
      });
    },
    async start(body, ids) {
      const out = await service.create({ selector: { tenantIds: ids }, soakSeconds: 0, ...body }, OPERATOR);
      return out.fleetUpgrade.id;
    },
    driver(o = {}) {
      const d = new FleetDriver({ pool, catalog, pollMs: 50, leaseTtlMs: 3000, now: () => clock.now, ...o });
      drivers.push(d);
      d.start();
      return d;
    },
    async fleet(id) {
      const row = await getFleetRow(pool, id);
      if (!row) throw new Error(`no fleet upgrade ${id}`);
      return row;
    },
    async tenants(id) {
      return new Map((await fleetTenantRows(pool, id)).map((r) => [r.tenant_id, r]));
    },
    async waitState(id, states, timeoutMs = 20_000) {
      return until(
        `fleet upgrade ${id} to be ${states.join(' or ')}`,
        timeoutMs,
        async () => {
          const f = await self.fleet(id);
          return states.includes(f.state) ? f.state : undefined;
        },
        50,
      );
    },
    async upgradesTo(tenantId, version) {
      return (await tenantOperations(pool, tenantId, { kind: 'upgrade', toVersion: version })).length;
    },
    async close() {
      for (const d of drivers) await d.stop().catch(() => {});
      await h.close();
    },
  };
  return self;
}
