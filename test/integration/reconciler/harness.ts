/**
 * Reconciler test harness: a fresh migrated database, a SecretBox, root clusters with encrypted
 * kubeconfigs, tenants created the way the API creates them (row + queued operation + NOTIFY),
 * reconcilers with short timings, and bounded waits on database state.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { SecretBox } from '../../../provisioner/crypto.ts';
import { Notifications } from '../../../provisioner/db/notifications.ts';
import { withTx } from '../../../provisioner/db/tx.ts';
import { ScriptedEngine, type ScriptedEngineOptions } from '../../helpers/scripted-engine.ts';
import { Reconciler, type ReconcilerOptions } from '../../../provisioner/reconciler/reconciler.ts';
import { insertCluster, setCordoned } from '../../../provisioner/store/clusters.ts';
import {
  changeSpec,
  getTenantRow,
  insertOperation,
  insertTenant,
  requestRetry,
  type TenantRow,
  type SpecChange,
} from '../../../provisioner/store/tenants.ts';
import type { OperationKind } from '../../../provisioner/store/states.ts';
import { createTestDatabase, type TestDatabase } from '../../helpers/postgres.ts';
import { notifyTenantDue } from '../../../provisioner/store/leases.ts';
import { logLinesOf, operationRecords } from '../../helpers/operations.ts';
import { tenantRecord } from '../../helpers/tenants.ts';

export const KUBECONFIG = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://203.0.113.10:6443", certificate-authority-data: Q0VSVElGSUNBVEVEQVRBLXRlc3Q=}}]
users: [{name: u, user: {token: root-cluster-secret-token-0123456789}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`;

export interface Harness {
  db: TestDatabase;
  box: SecretBox;
  reconcilers: Reconciler[];
  addCluster(
    name: string,
    o?: { capacity?: number; plans?: string[]; cordoned?: boolean; region?: string },
  ): Promise<string>;
  createTenant(o?: {
    plan?: string;
    runtimeVersion?: string;
    region?: string;
  }): Promise<{ id: string; operationId: string }>;
  change(id: string, change: SpecChange, kind: OperationKind): Promise<string>;
  retry(id: string): Promise<string>;
  tenant(id: string): Promise<
    TenantRow & {
      stalled: boolean;
      consecutive_failures: number;
      next_attempt_at: Date | null;
      lease_owner: string | null;
      lease_expires_at: Date | null;
    }
  >;
  operations(id: string): Promise<
    Array<{
      id: string;
      kind: string;
      state: string;
      attempt: number;
      owner: string | null;
      generation: number;
      error: { code: string; message: string } | null;
    }>
  >;
  logLines(operationId: string): Promise<string[]>;
  /**
   * A reconciler as one process runs it, with a notifications hub of its own (none with
   * `listen: false`: polling only).
   */
  reconciler(engine: ScriptedEngine, o?: Partial<ReconcilerOptions> & { listen?: boolean }): Promise<Reconciler>;
  /** The notifications hub of a reconciler made by `reconciler()`. */
  notificationsOf(r: Reconciler): Notifications | undefined;
  /**
   * A reconciler in a child process (doomed-worker.ts) whose operations never finish, to be
   * killed with SIGKILL as a crashed provisioner would be.
   */
  doomedWorker(o: {
    owner: string;
    leaseTtlMs: number;
    /** Another worker script taking the same arguments and printing the same lines, and arguments after them. */
    script?: URL;
    args?: string[];
  }): Promise<DoomedWorker>;
  close(): Promise<void>;
}

export interface DoomedWorker {
  /** Resolves once the worker's engine started an operation for the tenant. */
  started(tenantId: string): Promise<void>;
  /** SIGKILL; resolves once the process is gone. */
  kill(): Promise<void>;
}

let orgs = 0;

export async function createHarness(): Promise<Harness> {
  const db = await createTestDatabase();
  const boxKey = randomBytes(32);
  const box = new SecretBox(boxKey);
  const workers: Array<() => Promise<void>> = [];
  const reconcilers: Reconciler[] = [];
  const hubs = new Map<Reconciler, Notifications>();
  const h: Harness = {
    db,
    box,
    reconcilers,
    async addCluster(name, o = {}) {
      const c = await insertCluster(db.pool, {
        name,
        region: o.region ?? 'eu-1',
        labels: {},
        capacity: o.capacity ?? 100,
        plans: o.plans ?? [],
        kubeconfigEnc: box.encrypt(KUBECONFIG, `cluster/${name}`),
      });
      if (o.cordoned) await setCordoned(db.pool, name, true);
      return c.id;
    },
    async createTenant(o = {}) {
      return withTx(db.pool, async (tx) => {
        orgs += 1;
        const version = o.runtimeVersion ?? '1.0.0';
        const id = await insertTenant(tx, {
          organization: `org-${orgs}-${randomBytes(3).toString('hex')}`,
          email: 'a@example.com',
          plan: o.plan ?? 'free',
          runtimeVersion: version,
          region: o.region ?? null,
        });
        const operationId = await insertOperation(tx, id, 'create', 1, null, version);
        await notifyTenantDue(tx, id);
        return { id, operationId };
      });
    },
    async change(id, change, kind) {
      return withTx(db.pool, async (tx) => {
        const row = (await getTenantRow(tx, id, true))!;
        return (await changeSpec(tx, row, change, kind, `test ${kind}`)).id;
      });
    },
    async retry(id) {
      return withTx(db.pool, async (tx) => (await requestRetry(tx, (await getTenantRow(tx, id, true))!)).id);
    },
    async tenant(id) {
      return (await tenantRecord(db.pool, id)) as unknown as Awaited<ReturnType<Harness['tenant']>>;
    },
    async operations(id) {
      return operationRecords(db.pool, id);
    },
    async logLines(operationId) {
      return logLinesOf(db.pool, operationId);
    },
    async reconciler(engine, { listen = true, ...o } = {}) {
      const notifications = listen ? new Notifications({ pool: o.pool ?? db.pool }) : undefined;
      const r = new Reconciler({
        pool: db.pool,
        engine,
        box,
        workers: 4,
        leaseTtlMs: 3000,
        pollMs: 200,
        logFlushMs: 20,
        backoff: { baseMs: 100, capMs: 2000, jitter: 0 },
        noCapacityRetryMs: 200,
        engineRetryMs: 200,
        ...(notifications ? { notifications } : {}),
        ...o,
      });
      reconcilers.push(r);
      if (notifications) hubs.set(r, notifications);
      await r.start();
      await notifications?.start();
      return r;
    },
    notificationsOf(r) {
      return hubs.get(r);
    },
    async doomedWorker({ owner, leaseTtlMs, script: given, args = [] }) {
      const script = (given ?? new URL('./doomed-worker.ts', import.meta.url)).pathname;
      const proc = spawn(
        process.execPath,
        [script, db.url, boxKey.toString('hex'), owner, String(leaseTtlMs), ...args],
        {
          stdio: ['ignore', 'pipe', 'inherit'],
        },
      );
      const exited = once(proc, 'exit');
      const kill = async () => {
        if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
        await exited;
      };
      workers.push(kill);
      const started = new Set<string>();
      const waiting = new Map<string, () => void>();
      const ready = new Promise<void>((resolve, reject) => {
        void exited.then(() => reject(new Error(`the doomed worker ${owner} exited before it was ready`)));
        createInterface({ input: proc.stdout }).on('line', (line) => {
          if (line === 'ready') resolve();
          if (!line.startsWith('started ')) return;
          const id = line.slice('started '.length);
          started.add(id);
          waiting.get(id)?.();
        });
      });
      await ready;
      return {
        started: (id) =>
          started.has(id)
            ? Promise.resolve()
            : new Promise<void>((resolve, reject) => {
                const timer = setTimeout(
                  () => reject(new Error(`the doomed worker ${owner} did not start ${id} within 10 s`)),
                  10_000,
                );
                waiting.set(id, () => {
                  clearTimeout(timer);
                  resolve();
                });
              }),
        kill,
      };
    },
    async close() {
      for (const kill of workers) await kill();
      for (const r of reconcilers) await r.stop({ graceMs: 0 }).catch(() => {});
      for (const hub of hubs.values()) await hub.stop();
      await db.drop();
    },
  };
  return h;
}

export function scripted(o?: ScriptedEngineOptions): ScriptedEngine {
  return new ScriptedEngine(o);
}

/** A promise with its resolve function (gates for the scripted engine). */
export function gate(): { promise: Promise<void>; open: () => void } {
  let open: () => void = () => {};
  const promise = new Promise<void>((r) => {
    open = r;
  });
  return { promise, open };
}
