/**
 * An engine failure whose text carries what a cluster's address answered (an upstream body) and a
 * URL with a token: the tenant reads the operation log, the operation and its conditions through
 * the API and finds the error's class and resource but not the body or the credentials; the
 * operator's server log has the whole text with the secrets masked.
 */
import { Writable } from 'node:stream';
import pino from 'pino';
import t from 'tap';
import { EngineError } from '../../../provisioner/engine/engine.ts';
import { ScriptedEngine } from '../../helpers/scripted-engine.ts';
import { Reconciler } from '../../../provisioner/reconciler/reconciler.ts';
import { createTestApi } from '../../helpers/api.ts';
import { until } from '../../../sandbox/until.ts';

const ROOT_TOKEN = 'root-cluster-token-0123456789abcdef';
const KUBECONFIG =
  'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://203.0.113.10:6443"}}]\n' +
  `users: [{name: u, user: {token: ${ROOT_TOKEN}}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n`;
/** What an instance-metadata endpoint (or any server at the cluster's address) answered. */
const BODY =
  '{\\"Code\\":\\"Success\\",\\"AccessKeyId\\":\\"ASIAUPSTREAMKEY\\",\\"SecretAccessKey\\":\\"upstream-secret-key\\"}';
const ERROR =
  'Diagnostics:\n  kubernetes:core/v1:Namespace (tenant-ns):\n    error: failed to create resource: ' +
  `an error on the server ("${BODY}") has prevented the request from succeeding (post namespaces)\n` +
  `  kubernetes:helm.sh/v3:Release (vcluster):\n    error: Get "https://203.0.113.10:6443/version?access_token=${ROOT_TOKEN}x&timeout=32s": EOF`;
const OUTPUT = [
  'Updating (tenant):',
  ' +  kubernetes:core/v1:Namespace tenant-ns creating (0s) error: the server returned:',
  '<html><head><title>500 Internal Server Error</title></head><body>upstream-page-text</body></html>',
];

t.test(
  'an engine failure with an upstream body: the tenant sees the class and the resource, not the body',
  async (t) => {
    const api = await createTestApi();
    t.teardown(() => api.close());
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, cb) {
        lines.push(chunk.toString());
        cb();
      },
    });
    t.equal(
      (
        await api.as(api.operatorKey).request('POST /v1/clusters', {
          body: { name: 'root-upstream', region: 'eu', capacity: 10, kubeconfig: KUBECONFIG, force: true },
        })
      ).status,
      201,
      'the root cluster is registered',
    );
    // TEST DOUBLE engine: every up fails with the text the real provider prints for such an answer.
    const engine = new ScriptedEngine({
      script: (c) => (c.kind === 'up' ? { lines: OUTPUT, fail: new EngineError('ProgramFailed', ERROR) } : undefined),
    });
    const reconciler = new Reconciler({
      pool: api.db.pool,
      engine,
      box: api.services.box,
      pollMs: 100,
      logFlushMs: 10,
      logger: pino({ level: 'info' }, sink),
    });
    await reconciler.start();
    t.teardown(() => reconciler.stop({ graceMs: 0 }));
    const tenant = await api.signup();
    const asTenant = api.as(tenant.apiKey);

    const op = await until(
      'the operation to fail',
      30_000,
      async () => {
        const o = await asTenant.call('GET /v1/operations/:id', { params: { id: tenant.operationId } });
        return o.state === 'failed' && o;
      },
      50,
    );
    t.equal(op.state, 'failed', 'the operation failed');

    const log = await asTenant.call('GET /v1/operations/:id/log', { params: { id: tenant.operationId } });
    const text = log.items.map((l) => l.line).join('\n');
    const tenantView = JSON.stringify(await asTenant.call('GET /v1/tenants/:id', { params: { id: tenant.tenantId } }));
    const opView = JSON.stringify(op);
    for (const [where, seen] of [
      ['the operation log', text],
      ['the operation', opView],
      ['the tenant (conditions)', tenantView],
    ] as const) {
      t.notMatch(
        seen,
        /ASIAUPSTREAMKEY|upstream-secret-key|upstream-page-text|Internal Server Error/,
        `${where}: no upstream body`,
      );
      t.notMatch(seen, new RegExp(ROOT_TOKEN), `${where}: no root-cluster token`);
    }
    t.match(
      text,
      /operation failed: ProgramFailed: .*kubernetes:core\/v1:Namespace \(tenant-ns\):\n\s+error: failed to create resource: an error on the server \(\[upstream response withheld\]\) has prevented the request from succeeding \(post namespaces\)/s,
      'the operation log keeps the resource, the class and the request of the error',
    );
    t.match(
      text,
      /Get "https:\/\/203\.0\.113\.10:6443\/version\?\[query withheld\]": EOF/,
      'the URL keeps its host and path',
    );
    t.match(
      text,
      /creating \(0s\) error: the server returned:\n\[upstream response withheld\]/,
      "the engine's HTML output line is withheld",
    );
    t.match(
      opView,
      /an error on the server \(\[upstream response withheld\]\)/,
      "the operation's error is the sanitised text",
    );
    t.match(
      tenantView,
      /an error on the server \(\[upstream response withheld\]\)/,
      "the tenant's condition is the sanitised text",
    );

    const failed = lines
      .map((l) => JSON.parse(l) as { msg: string; err?: string })
      .find((l) => l.msg === 'operation failed');
    t.ok(failed, 'the server log has an "operation failed" line');
    t.match(failed?.err ?? '', /ASIAUPSTREAMKEY/, 'the server log keeps the whole text for the operator');
    t.notMatch(failed?.err ?? '', new RegExp(ROOT_TOKEN), 'the server log masks the root-cluster token');
  },
);
