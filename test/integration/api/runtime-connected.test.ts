/**
 * Ready means provisioned, not running: a Ready hosted tenant whose runtime never connected its
 * tunnel, or whose event reporter never reported or went quiet, is shown as such by the API
 * (RuntimeConnected=False with what to check; a tenant's own key reads a plain line), by
 * `tenants list` / `tenants get`, by `doctor`, and by `runtimes list` (no REPORTED version, no
 * heartbeat). A tenant whose runtime's real tunnel client is connected and whose reporter reports
 * is healthy everywhere. The real app on loopback, the real CLI (main) and the real tunnel client.
 */
import t from 'tap';
import http from 'node:http';
import { once } from 'node:events';
import { createTestApi } from '../../helpers/api.ts';
import { connectRuntime } from '../../helpers/runtime.ts';
import { batch } from '../../helpers/events.ts';
import { main } from '../../../provisioner/cli/main.ts';
import type { Tenant } from '../../../provisioner/api/types.ts';
import { createKey } from '../../../provisioner/store/keys.ts';
import { EVENTS_PATH } from '../../../runtime/protocol/events.ts';
import { catalog } from '../../../runtime/catalog.ts';
import { setTenantStatus } from '../../helpers/tenants.ts';
import { addReachableManagedCluster } from '../../helpers/managed-clusters.ts';
import { setReportersSeenAgo } from '../../helpers/runtimes.ts';

const api = await createTestApi();
const url = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

const version = catalog.versions[0]!.version;

async function cli(args: string[], token = api.operatorKey): Promise<{ code: number; out: string }> {
  const out: string[] = [];
  const code = await main(['--url', url, '--token', token, ...args], {
    out: (s) => out.push(s),
    err: (s) => out.push(s),
    env: {},
  });
  return { code, out: out.join('\n') };
}

/** A signed-up tenant the reconciler provisioned: phase Ready, Ready=True (what the engine leaves). */
async function readyTenant(): Promise<{ tenantId: string; apiKey: string; organization: string }> {
  const s = await api.signup({ runtimeVersion: version });
  await setTenantStatus(api.db.pool, s.tenantId, {
    phase: 'Ready',
    observed: true,
    actualRuntimeVersion: version,
    lastReconciledSecondsAgo: 0,
    conditions: [
      {
        type: 'Ready',
        status: 'True',
        reason: 'Ready',
        message: `runtime ${version} is ready`,
        lastTransitionTime: new Date().toISOString(),
      },
    ],
  });
  return { tenantId: s.tenantId, apiKey: s.apiKey, organization: s.body.tenant.organization };
}

const view = (id: string, key = api.operatorKey) => api.as(key).call('GET /v1/tenants/:id', { params: { id } });
const connectedOf = (v: Tenant) => v.status.conditions.find((c) => c.type === 'RuntimeConnected');
const rowOf = (out: string, id: string) => out.split('\n').find((l) => l.includes(id)) ?? '';

const dark = await readyTenant();

t.test('a Ready tenant whose tunnel never connected is not healthy: API, tenants list/get, doctor', async (t) => {
  const v = await view(dark.tenantId);
  t.equal(v.status.phase, 'Ready', 'the phase still says provisioned');
  const c = connectedOf(v);
  t.match(
    c,
    { status: 'False', reason: 'TunnelNotConnected' },
    'RuntimeConnected=False, reason TunnelNotConnected, for the operator',
  );
  t.match(c?.message, /tunnel-client Deployment in namespace hosted-runtime/, 'the message names what to check first');
  t.match(c?.message, /PROVISIONER_PUBLIC_URL/, "and the control plane's public URL next");

  const own = connectedOf(await view(dark.tenantId, dark.apiKey));
  t.match(own, { status: 'False', reason: 'TunnelNotConnected' }, "the tenant's own key sees the same status");
  t.notMatch(own?.message, /kubectl|PROVISIONER_|Deployment/, 'but no operator step in its message');
  t.match(own?.message, /not connected/, 'only that its runtime is not connected');

  const listed = await cli(['tenants', 'list', '--limit', '200']);
  t.equal(listed.code, 0, 'tenants list succeeds');
  t.match(listed.out.split('\n')[0], /^ID\s+ORGANIZATION\s+PHASE\s+STATUS\s/, 'tenants list has a STATUS column');
  t.match(
    rowOf(listed.out, dark.tenantId),
    /\sReady\s+runtime not connected\s/,
    'the row says Ready, runtime not connected',
  );

  const got = await cli(['tenants', 'get', dark.tenantId]);
  t.match(got.out, /status:?\s+runtime not connected \(TunnelNotConnected\): .*tunnel-client/s, 'tenants get says why');
  t.match(got.out, /RuntimeConnected\s+False\s+TunnelNotConnected/, 'and lists the condition');

  const doctor = await cli(['doctor']);
  const line = doctor.out.split('\n').find((l) => l.includes(`tenant/${dark.organization}`)) ?? '';
  t.match(line, /^warning\s.*runtime is not connected \(TunnelNotConnected/, 'doctor names the tenant as a warning');
  t.match(doctor.out, new RegExp(`fix: provisioner tenants get ${dark.tenantId}`), 'with the command to look at it');
  t.notMatch(doctor.out, /no problem found/, 'doctor does not say "no problem found"');
  t.match(doctor.out, /\d+ warnings? above/, 'its last line counts the warnings');
});

t.test('runtimes list shows no reported version and no heartbeat for a runtime that never reported', async (t) => {
  const out = (await cli(['runtimes', 'list', dark.tenantId])).out;
  t.match(out.split('\n')[0], /\sREPORTED\s+HEARTBEAT\s/, 'a HEARTBEAT column beside REPORTED');
  t.match(
    rowOf(out, 'hosted'),
    new RegExp(`\\s${version.replaceAll('.', '\\.')}\\s+-\\s+never\\s`),
    'REPORTED -, HEARTBEAT never',
  );
});

t.test('a Ready tenant whose real tunnel client is connected and whose reporter reports is healthy', async (t) => {
  const lit = await readyTenant();
  const upstream = http.createServer((_req, res) => res.end('{}')).listen(0, '127.0.0.1');
  await once(upstream, 'listening');
  const { client } = await connectRuntime(api, url, lit.tenantId, upstream);
  t.teardown(async () => {
    await client.close();
    upstream.close();
  });

  // Connected, but its event reporter has not reported yet: still not healthy.
  t.match(
    connectedOf(await view(lit.tenantId)),
    { status: 'False', reason: 'NeverReported' },
    'a connected tunnel without a report is NeverReported',
  );

  const reporterKey = (
    await createKey(api.db.pool, { role: 'runtime', tenantId: lit.tenantId, name: 'event reporter', createdBy: 'test' })
  ).key;
  const heartbeat = batch('reporter-0', [], {
    heartbeat: { replica: 'reporter-0', ownedObjects: 1, queueDepth: 0, oldestPendingSeconds: 0 },
  });
  const posted = await api.request('POST', EVENTS_PATH, { key: reporterKey, body: heartbeat });
  t.equal(posted.statusCode, 200, 'the heartbeat is accepted');

  t.match(connectedOf(await view(lit.tenantId)), { status: 'True', reason: 'Connected' }, 'RuntimeConnected=True');
  const listed = await cli(['tenants', 'list', '--limit', '200']);
  // Without a managed cluster its Argo CD has nowhere to deploy: the status says that, not the runtime.
  t.match(
    rowOf(listed.out, lit.tenantId),
    /\sReady\s+action required: NoManagedCluster\s/,
    'tenants list names no runtime problem, only the managed cluster the tenant still has to connect',
  );
  // A reachable managed cluster as the prober leaves one (not probed again within the test).
  await addReachableManagedCluster(api.db.pool, lit.tenantId, 'prod');
  const healthy = await cli(['tenants', 'list', '--limit', '200']);
  t.match(rowOf(healthy.out, lit.tenantId), /\sReady\s+healthy\s/, 'with a reachable cluster too: healthy');
  const doctor = await cli(['doctor']);
  t.notMatch(doctor.out, new RegExp(`tenant/${lit.organization}`), 'doctor does not name it');
  const runtimes = await cli(['runtimes', 'list', lit.tenantId]);
  t.match(
    rowOf(runtimes.out, 'hosted'),
    new RegExp(`\\s${version.replaceAll('.', '\\.')}\\s+${version.replaceAll('.', '\\.')}\\s+\\d+\\s?s ago\\s`),
    'REPORTED shows the version once a heartbeat came, and HEARTBEAT its age',
  );

  // The reporter falls silent: its last heartbeat is now older than the stale window.
  await setReportersSeenAgo(api.db.pool, lit.tenantId, 61);
  t.match(
    connectedOf(await view(lit.tenantId)),
    { status: 'False', reason: 'ReportingStale' },
    'a reporter silent past the stale window is ReportingStale',
  );
  const stale = await cli(['tenants', 'list', '--limit', '200']);
  t.match(rowOf(stale.out, lit.tenantId), /\sReady\s+runtime stopped reporting\s/, 'tenants list says so');
});

t.test(
  'a suspended or not-yet-Ready tenant has no RuntimeConnected: its other conditions say what goes on',
  async (t) => {
    const pending = await api.signup({ runtimeVersion: version });
    t.equal(connectedOf(await view(pending.tenantId)), undefined, 'a Pending tenant has none');
    const suspending = await readyTenant();
    await setTenantStatus(api.db.pool, suspending.tenantId, { suspended: true });
    t.equal(connectedOf(await view(suspending.tenantId)), undefined, 'a tenant being suspended has none');
  },
);
