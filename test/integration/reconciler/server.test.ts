import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { loadConfig } from '../../../provisioner/config.ts';
import { SecretBox } from '../../../provisioner/crypto.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';
import { startServer } from '../../../provisioner/server.ts';
import { insertCluster } from '../../../provisioner/store/clusters.ts';
import { createTestDatabase } from '../../helpers/postgres.ts';
import { KUBECONFIG } from './harness.ts';
import { until } from '../../../sandbox/until.ts';
import { tenantRecord } from '../../helpers/tenants.ts';

t.test(
  'the server runs the reconciler; without a Pulumi CLI tenants get EngineUnavailable and the API keeps serving',
  async (t) => {
    const db = await createTestDatabase();
    const dataDir = await mkdtemp(join(tmpdir(), 'hrt-server-'));
    t.teardown(async () => {
      await db.drop();
      await rm(dataDir, { recursive: true, force: true });
    });
    const key = randomBytes(32);
    const config = loadConfig({
      DATABASE_URL: db.url,
      PORT: '0',
      LOG_LEVEL: 'silent',
      PROVISIONER_DATA_DIR: dataDir,
      PROVISIONER_ENCRYPTION_KEY: key.toString('hex'),
      PROVISIONER_ADMIN_TOKEN: 'admin-token-for-the-server-test-0123',
      PULUMI_CONFIG_PASSPHRASE: 'test-passphrase',
      PROVISIONER_PULUMI_CLI_DIR: join(dataDir, 'no-cli-here'),
      PROVISIONER_POLL_MS: '100',
    });
    await insertCluster(db.pool, {
      name: 'root-a',
      region: 'eu-1',
      labels: {},
      capacity: 10,
      plans: [],
      kubeconfigEnc: new SecretBox(key).encrypt(KUBECONFIG, 'cluster/root-a'),
    });
    const running = await startServer(config, { out: () => {} });
    t.ok(running.reconciler, 'a reconciler runs');
    const body = await new ApiClient({ baseUrl: running.url }).call('POST /v1/signup', {
      body: { organization: `org-${randomBytes(3).toString('hex')}`, email: 'a@example.com' },
    });
    t.ok(body.operationId, 'the signup is accepted');
    const conditions = await until('EngineUnavailable', 10_000, async () => {
      const { conditions } = await tenantRecord(db.pool, body.tenant.id);
      const ready = conditions.find((c) => c.type === 'Ready');
      return ready?.reason === 'EngineUnavailable' && ready;
    });
    t.match(conditions.message, /Pulumi CLI was not found .*no-cli-here.*install the Pulumi CLI 3\.181\.0 or newer/);
    const health = await fetch(`${running.url}/healthz`);
    t.equal(health.status, 200, 'the API keeps serving');
    await running.close();
    await t.rejects(fetch(`${running.url}/healthz`), 'after close the server no longer accepts connections');
  },
);
