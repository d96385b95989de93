/**
 * End-to-end: fleet upgrades on the real engine (the provisioner child process, the real Pulumi
 * CLI, the real Kubernetes provider plugin,
 * a kube-apiserver per tenant standing in for the vcluster). Three tenants on 1.4.1:
 *
 *  1. a fleet upgrade to 1.5.0 in two waves (the canary, then the other two) completes: the
 *     progress stream shows the canary's wave settled before the second wave started, and every
 *     tenant is Ready on 1.5.0 with its generation observed;
 *  2. a fleet upgrade to 1.5.1, a STAND-IN version of the test catalog whose Argo CD chart is the
 *     real 1.5.0 chart with one change, built by the test: its argocd-server Deployment never
 *     becomes Available (test/e2e/fixtures/test-versions.ts, sandbox/charts.ts): the canary's upgrade
 *     fails when the engine stops waiting for the release, its gate fails, it is rolled back to
 *     1.5.0 automatically and the fleet upgrade halts after the canary; the other two tenants get
 *     no operation at all.
 *
 * The gate checks the operation, the observed generation, the running version and Ready; its
 * tunnel and Applications checks are off here: the runtime's agents run on KWOK's fake nodes, so
 * no tunnel connects and no event reporter reports (the integration tests cover those checks).
 * The Argo releases wait PROVISIONER_RUNTIME_RELEASE_TIMEOUT_SECONDS (90 s here, 600 by default)
 * for their workloads, which bounds how long the derived chart takes to fail.
 */
import { fileURLToPath } from 'node:url';
import t from 'tap';
import type { Tenant } from './harness/api-client.ts';
import type {
  FleetEvent,
  FleetUpgrade,
  FleetUpgradeEvents,
  FleetUpgradeTenant,
  StreamEventOf,
} from '../../provisioner/api/types.ts';
import { PROVISION_TIMEOUT, provisioningSuite } from './harness/suite.ts';
import {
  availableDeployments,
  describeInstalledCharts,
  helmHistory,
  installedChartVersions,
  kube,
} from './harness/kube.ts';
import { NEVER_AVAILABLE_CHANGES, NEVER_SCHEDULED_SELECTOR } from '../../sandbox/charts.ts';
import { ARGO_RELEASES } from '../../runtime/component/argo-releases.ts';
import { NEVER_AVAILABLE_CHARTS, NEVER_HEALTHY_VERSION, testCatalog } from './fixtures/test-catalog.ts';

const FROM = '1.4.1';
const TO = '1.5.0';
const BROKEN = NEVER_HEALTHY_VERSION;
const RELEASE_TIMEOUT_SECONDS = 90;
const HOOKS = fileURLToPath(new URL('./fixtures/test-catalog-hooks.ts', import.meta.url));

/** A fleet upgrade's tenants: GET /v1/fleet-upgrades/:id answers with every selected tenant (a list omits them). */
function tenantsOf(f: FleetUpgrade): FleetUpgradeTenant[] {
  if (!f.tenants) throw new Error(`fleet upgrade ${f.id} answered without its tenants`);
  return f.tenants;
}

await provisioningSuite(
  t,
  async (e2e, root) => {
    const seconds = (since: number) => (Date.now() - since) / 1000;
    const api = e2e.api;

    /**
     * Follows GET /v1/fleet-upgrades/:id/events (Server-Sent Events) from the first event until
     * the `end` event or an event `stop` accepts; reconnects after the last seq if the stream
     * closes early. Returns every decision seen, in order.
     */
    async function follow(id: string, stop: (e: FleetEvent) => boolean, timeoutMs: number): Promise<FleetEvent[]> {
      const events: FleetEvent[] = [];
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const left = deadline - Date.now();
        if (left <= 0)
          throw new Error(
            `fleet upgrade ${id}: no end within ${timeoutMs / 1000} s; events so far: ${events.map((e) => e.action).join(', ')}`,
          );
        const after = events.at(-1)?.seq ?? 0;
        const res = await fetch(`${api.url}/v1/fleet-upgrades/${id}/events?after=${after}`, {
          headers: { authorization: `Bearer ${api.token}`, accept: 'text/event-stream' },
          signal: AbortSignal.timeout(left),
        }).catch((err: unknown) => {
          throw new Error(`fleet upgrade ${id}: the event stream failed: ${String(err)}`);
        });
        if (res.status !== 200 || !res.body) throw new Error(`fleet upgrade ${id}: events answered ${res.status}`);
        const decoder = new TextDecoder();
        let buffer = '';
        try {
          for await (const chunk of res.body) {
            buffer += decoder.decode(chunk as Uint8Array, { stream: true });
            let cut: number;
            while ((cut = buffer.indexOf('\n\n')) >= 0) {
              const block = buffer.slice(0, cut);
              buffer = buffer.slice(cut + 2);
              const field = (name: string) =>
                block
                  .split('\n')
                  .filter((l) => l.startsWith(`${name}:`))
                  .map((l) => l.slice(name.length + 1).trimStart())
                  .join('\n');
              const kind = field('event');
              if (kind === 'end') return events;
              const raw = field('data');
              // Only `event` blocks are followed; a keep-alive is a comment line with no data.
              if (kind !== 'event' || raw === '') continue;
              const ev = { event: kind, data: JSON.parse(raw) as unknown } as StreamEventOf<FleetUpgradeEvents>;
              if (ev.event !== 'event') continue;
              events.push(ev.data);
              if (stop(ev.data)) return events;
            }
          }
        } catch (err) {
          if (Date.now() >= deadline) continue; // reported above
          throw err;
        } finally {
          await res.body.cancel().catch(() => {});
        }
      }
    }

    const fleet = (id: string) => api.expectStatus('GET /v1/fleet-upgrades/:id', { params: { id } }, 200);

    /** Starts a fleet upgrade of `ids` to `version`: the canary, then a wave of the other two. */
    function start(version: string, ids: string[]) {
      return api.expectStatus(
        'POST /v1/fleet-upgrades',
        {
          body: {
            targetVersion: version,
            selector: { tenantIds: ids },
            waves: [{ count: 1 }, { count: 2 }],
            maxConcurrency: 2,
            soakSeconds: 0,
            gateTimeoutSeconds: 600,
            failureBudget: { maxFailures: 0 },
            gate: { tunnel: false, applications: false },
          },
        },
        201,
      );
    }

    const names = ['alpha', 'bravo', 'charlie'];
    const tenants: Tenant[] = [];

    t.test(`three tenants on ${FROM}`, async (t) => {
      const started = Date.now();
      const signups = await Promise.all(names.map((n) => e2e.signup(n, FROM)));
      const ready = await Promise.all(signups.map((s) => api.waitForPhase(s.tenant.id, 'Ready', PROVISION_TIMEOUT)));
      e2e.timing('signup → Ready (three tenants at once, all)', seconds(started));
      for (const r of ready) {
        t.equal(r.status.runtimeVersion, FROM, `${r.organization} runs ${FROM}`);
        tenants.push(r);
      }
    });

    t.test(`a fleet upgrade ${FROM} → ${TO} completes in waves: the canary, then the other two`, async (t) => {
      if (tenants.length !== 3) return t.fail('needs the three tenants of the first test');
      const ids = tenants.map((x) => x.id);
      const started = Date.now();
      const created = await start(TO, ids);
      const id = created.fleetUpgrade.id;
      const [canaryWave, secondWave] = created.plan.waves;
      t.equal(canaryWave?.tenants.length, 1, 'the plan has a canary of one tenant');
      t.equal(secondWave?.tenants.length, 2, 'and a second wave of the other two');
      const canary = canaryWave!.tenants[0]!;
      const others = secondWave!.tenants;
      t.same([canary, ...others].sort(), [...ids].sort(), 'the two waves hold the three tenants');

      const events = await follow(id, () => false, PROVISION_TIMEOUT);
      e2e.timing(`fleet upgrade ${FROM} → ${TO}, three tenants (canary 1, then 2)`, seconds(started));
      const actions = events.map((e) => (e.tenantId ? `${e.action}:${e.tenantId}` : e.action));
      const at = (action: string, tenantId?: string) =>
        events.findIndex((e) => e.action === action && (tenantId === undefined || e.tenantId === tenantId));
      const waveEvent = (action: string, wave: number) =>
        events.findIndex((e) => e.action === action && e.data.wave === wave);
      t.ok(waveEvent('wave_start', 0) >= 0, 'the canary wave started');
      t.ok(at('tenant_upgrade', canary) > waveEvent('wave_start', 0), 'the canary was upgraded in its wave');
      t.ok(
        at('tenant_succeeded', canary) > at('tenant_upgrade', canary),
        'the canary passed its gate after its upgrade',
      );
      t.ok(waveEvent('wave_complete', 0) > at('tenant_succeeded', canary), 'the canary wave completed after that');
      t.ok(
        waveEvent('wave_start', 1) > waveEvent('wave_complete', 0),
        'the second wave started only after the canary wave completed',
      );
      for (const other of others) {
        t.ok(
          at('tenant_upgrade', other) > waveEvent('wave_start', 1),
          `tenant ${other} was upgraded in the second wave, after the canary wave (events: ${actions.join(', ')})`,
        );
        t.ok(at('tenant_succeeded', other) > at('tenant_upgrade', other), `tenant ${other} passed its gate`);
      }
      t.equal(events.filter((e) => e.action === 'tenant_upgrade').length, 3, 'exactly three upgrades were started');
      t.ok(at('complete') > waveEvent('wave_complete', 1), 'the fleet upgrade completed after the second wave');

      const done = await fleet(id);
      t.equal(done.state, 'completed', 'GET says completed');
      t.same(
        done.waves.map((w) => [w.wave, w.size, w.state]),
        [
          [0, 1, 'completed'],
          [1, 2, 'completed'],
        ],
        'GET: both waves completed, sizes 1 and 2',
      );
      t.ok(
        Date.parse(done.waves[1]!.startedAt!) >= Date.parse(done.waves[0]!.completedAt!),
        'GET: the second wave started at or after the canary wave completed',
      );
      for (const ft of tenantsOf(done))
        t.match(ft, { state: 'succeeded', fromVersion: FROM, path: [TO] }, `GET: tenant ${ft.tenantId} succeeded`);

      for (const x of tenants) {
        const now = await api.tenant(x.id);
        t.equal(now.status.phase, 'Ready', `${x.organization} is Ready`);
        t.equal(now.status.runtimeVersion, TO, `${x.organization} runs ${TO}`);
        t.equal(now.spec.runtimeVersion, TO, `${x.organization}'s spec says ${TO}`);
        t.equal(
          now.status.observedGeneration,
          now.generation,
          `${x.organization}'s status is of its latest generation (${now.generation})`,
        );
        const vc = kube(await e2e.tenantKubeconfig(x.id));
        t.equal(
          (await installedChartVersions(vc))['argo-cd'],
          testCatalog.get(TO)!.components.argoCd,
          `${x.organization}'s API server has the Argo CD chart of ${TO}`,
        );
      }
    });

    t.test(
      `a fleet upgrade to ${BROKEN}, whose runtime never becomes healthy, halts after the canary and rolls it back`,
      async (t) => {
        if (tenants.length !== 3) return t.fail('needs the three tenants of the first test');
        const before = new Map<string, Tenant>();
        for (const x of tenants) before.set(x.id, await api.tenant(x.id));
        const started = Date.now();
        const created = await start(
          BROKEN,
          tenants.map((x) => x.id),
        );
        const id = created.fleetUpgrade.id;
        const canary = created.plan.waves[0]!.tenants[0]!;
        const others = created.plan.waves[1]!.tenants;

        const events = await follow(id, (e) => e.action === 'halt', PROVISION_TIMEOUT);
        e2e.timing(`fleet upgrade to ${BROKEN} (never healthy): canary failed, rolled back, halted`, seconds(started));
        t.same(
          events.filter((e) => e.tenantId !== null).map((e) => [e.action, e.tenantId]),
          [
            ['tenant_upgrade', canary],
            ['tenant_rollback', canary],
            ['tenant_quarantined', canary],
          ],
          'only the canary was touched: upgraded, rolled back automatically, quarantined',
        );
        const upgrade = events.find((e) => e.action === 'tenant_upgrade')!;
        t.match(upgrade.data, { from: TO, to: BROKEN }, `the canary went ${TO} → ${BROKEN}`);
        const rollback = events.find((e) => e.action === 'tenant_rollback')!;
        t.match(rollback.data, { from: BROKEN, to: TO }, `and was rolled back ${BROKEN} → ${TO}`);
        t.match(
          events.find((e) => e.action === 'tenant_quarantined')!.data,
          { rolledBack: true },
          'the rollback succeeded',
        );
        t.match(events.at(-1), { action: 'halt', data: { wave: 0 } }, 'the fleet upgrade halted in the canary wave');

        const halted = await fleet(id);
        t.equal(halted.state, 'halted', 'GET says halted');
        t.match(halted.stateReason, /canary/, `the reason names the canary (${halted.stateReason})`);
        t.same(
          halted.waves.map((w) => [w.wave, w.state]),
          [
            [0, 'running'],
            [1, 'pending'],
          ],
          'the second wave never started',
        );
        const canaryRow = tenantsOf(halted).find((x) => x.tenantId === canary)!;
        t.match(
          canaryRow,
          { state: 'quarantined', rolledBack: true, reason: /gate failed on 1\.5\.0 -> 1\.5\.1.*operation failed/ },
          `the canary is quarantined, rolled back, with the gate's reason (${canaryRow.reason})`,
        );
        for (const other of others)
          t.match(
            tenantsOf(halted).find((x) => x.tenantId === other),
            { state: 'pending' },
            `tenant ${other} is still pending`,
          );

        // The canary: its upgrade failed (the release's timeout), the rollback ran, it is healthy on 1.5.0 again.
        const upgradeOp = await api.operation(String(upgrade.data.operationId));
        t.match(
          upgradeOp,
          { kind: 'upgrade', state: 'failed', toVersion: BROKEN },
          `the upgrade to ${BROKEN} failed (${upgradeOp.error?.code ?? ''}: ${(upgradeOp.error?.message ?? '').slice(0, 300)})`,
        );
        const rollbackOp = await api.operation(String(rollback.data.operationId));
        t.match(rollbackOp, { state: 'succeeded', toVersion: TO }, `the rollback to ${TO} succeeded`);
        const c = await api.tenant(canary);
        t.equal(c.status.phase, 'Ready', 'the canary is Ready');
        t.equal(c.spec.runtimeVersion, TO, `the canary's spec is back on ${TO}`);
        t.equal(c.status.runtimeVersion, TO, `the canary runs ${TO}`);
        t.equal(c.status.observedGeneration, c.generation, "the canary's status is of its latest generation");
        t.equal(c.generation, before.get(canary)!.generation + 2, 'two spec changes: the upgrade and its rollback');
        const vc = kube(await e2e.tenantKubeconfig(canary));
        const versions = await vc.core.readNamespacedConfigMap({
          name: 'runtime-versions',
          namespace: 'hosted-runtime',
        });
        t.equal(
          versions.data?.runtimeVersion,
          TO,
          `the rollback's engine run wrote ${TO} back into the canary's runtime-versions ConfigMap`,
        );
        // The Argo CD release: Helm rolled the failed upgrade back itself (the runtime's releases are
        // atomic), so the rollback's engine run found it where Pulumi's state has it. The derived
        // chart's nodeSelector, which only the failed revision had, is gone from the live Deployment.
        const argoCd = ARGO_RELEASES.find((r) => r.chart === 'argo-cd')!;
        const history = await helmHistory(vc, argoCd.releaseName, argoCd.namespace);
        const last = history.at(-1)!;
        t.match(
          last,
          { status: 'deployed', chartVersion: testCatalog.get(TO)!.components.argoCd },
          `the Argo CD release's latest revision is deployed on ${TO}'s chart (revision ${last.revision}: ${last.description})`,
        );
        t.ok(
          history.some((r) => r.status === 'failed' && r.chartVersion === NEVER_AVAILABLE_CHARTS[0]!.version),
          `the derived chart ${NEVER_AVAILABLE_CHARTS[0]!.version}'s revision is kept in the history as failed (${history.map((r) => `${r.revision}:${r.chartVersion}:${r.status}`).join(', ')})`,
        );
        t.equal(
          (await installedChartVersions(vc))['argo-cd'],
          testCatalog.get(TO)!.components.argoCd,
          `the canary's Argo CD objects are ${TO}'s chart again, not the derived ${NEVER_AVAILABLE_CHARTS[0]!.version}`,
        );
        const changed = NEVER_AVAILABLE_CHANGES['argo-cd']!.deployment;
        const server = await vc.apps.readNamespacedDeployment({ name: changed, namespace: argoCd.namespace });
        t.notMatch(
          server.spec?.template.spec?.nodeSelector ?? {},
          NEVER_SCHEDULED_SELECTOR,
          `the derived chart's nodeSelector is gone from the ${changed} Deployment`,
        );
        t.ok(
          (await availableDeployments(vc, argoCd.namespace)).includes(changed),
          `the ${changed} Deployment is Available (Helm waited for it before ending its rollback)`,
        );
        t.comment(await describeInstalledCharts(root, vc, `tenant-${canary}`));

        // The other two: untouched.
        for (const other of others) {
          const was = before.get(other)!;
          const now = await api.tenant(other);
          t.equal(now.generation, was.generation, `${now.organization}: no spec change (generation ${was.generation})`);
          t.equal(now.status.lastOperationId, was.status.lastOperationId, `${now.organization}: no operation ran`);
          t.equal(now.status.runtimeVersion, TO, `${now.organization} still runs ${TO}`);
          t.equal(now.status.phase, 'Ready', `${now.organization} is Ready`);
          t.equal(
            (await api.operations(other)).filter((op) => op.toVersion === BROKEN).length,
            0,
            `${now.organization} has no operation to ${BROKEN}`,
          );
        }

        // Ops end it: an abort without rollback cancels the tenants that never started.
        await api.expectStatus('POST /v1/fleet-upgrades/:id/abort', { params: { id }, body: {} }, 200);
        const aborted = await fleet(id);
        t.equal(aborted.state, 'aborted', 'the halted fleet upgrade is aborted at once (nothing under way)');
        for (const other of others)
          t.match(
            tenantsOf(aborted).find((x) => x.tenantId === other),
            { state: 'cancelled' },
            `tenant ${other} cancelled`,
          );
      },
    );
  },
  {
    testCatalog: {
      catalog: testCatalog,
      nodeArgs: ['--import', HOOKS],
      derivedCharts: NEVER_AVAILABLE_CHARTS,
    },
    extraEnv: { PROVISIONER_RUNTIME_RELEASE_TIMEOUT_SECONDS: String(RELEASE_TIMEOUT_SECONDS) },
  },
);
