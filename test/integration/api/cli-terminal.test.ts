/**
 * Nothing a tenant or its runtime controls reaches a terminal raw: a runtime's report with escape
 * sequences (a Degraded application drawn as Healthy, a window title, an OSC 52 clipboard write)
 * prints with every control shown as its JSON escape in tables and plain text, while `--json`
 * stays exact JSON; a runtime's names with control characters are refused at ingest (400 naming
 * the field); a managed cluster's reported version is stored printable.
 */
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';
import { main } from '../../../provisioner/cli/main.ts';
import { createKey } from '../../../provisioner/store/keys.ts';
import { EVENTS_PATH, type EventBatch } from '../../../runtime/protocol/events.ts';
import { application, batch } from '../../helpers/events.ts';
import { storedServerVersion } from '../../../provisioner/store/managed-clusters.ts';
import { insertRawVersionManagedCluster } from '../../helpers/managed-clusters.ts';

const api = await createTestApi();
const url = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

async function cli(args: string[], token: string): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['--url', url, '--token', token, ...args], {
    out: (s) => out.push(s),
    err: (s) => err.push(s),
    env: {},
  });
  return { code, out: out.join('\n'), err: err.join('\n') };
}

/** Any character a terminal acts on: C0 but newline, DEL, C1, bidirectional controls. */
// eslint-disable-next-line no-control-regex
const RAW_CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

// Erase the line, go back to its start, draw "Healthy"; set the title; write the clipboard; an 8-bit CSI; a right-to-left override.
const HEALTH = 'Degraded\u001b[2K\rHealthy\u001b]0;pwned\u0007\u001b]52;c;ZWNobyBoaQ==\u0007\u009b31m\u202e';

const { tenantId, apiKey } = await api.signup();
const runtimeKey = (await createKey(api.db.pool, { role: 'runtime', tenantId, name: 'reporter', createdBy: 'test' }))
  .key;

async function report(items: EventBatch['items'], replica = 'reporter-0') {
  return api.request('POST', EVENTS_PATH, { key: runtimeKey, body: batch(replica, items) });
}

t.test('apps list and get escape what a runtime reported; --json is the exact value', async (t) => {
  const stored = await report([application('guestbook', 10, { health: HEALTH, sync: 'Synced\u001b[8m' })]);
  t.equal(stored.statusCode, 200, `the report is stored (summaries are free text: ${stored.body})`);

  const list = await cli(['apps', 'list', tenantId], apiKey);
  t.equal(list.code, 0, list.err);
  t.notMatch(list.out, RAW_CONTROL, 'the table holds no terminal control');
  t.match(list.out, 'Degraded\\u001b[2K\\u000dHealthy\\u001b]0;pwned\\u0007', 'each control shows as its \\u escape');
  t.match(list.out, '\\u009b31m\\u202e', 'C1 and bidirectional controls too');
  t.equal(list.out.split('\n').length, 2, 'the header and one row: the value cannot start a line of its own');

  const get = await cli(['apps', 'get', tenantId, 'application', 'argocd', 'guestbook'], apiKey);
  t.equal(get.code, 0, get.err);
  t.notMatch(get.out, RAW_CONTROL, 'the plain output of get holds no terminal control');
  t.match(get.out, 'Degraded\\u001b[2K', 'and shows the escapes');

  const asJson = await cli(['--json', 'apps', 'list', tenantId], apiKey);
  t.notMatch(asJson.out, RAW_CONTROL, '--json holds no terminal control');
  const items = (JSON.parse(asJson.out) as { items: Array<{ health: string; sync: string }> }).items;
  t.equal(items[0]!.health, HEALTH, '--json parses to exactly what the runtime reported');
  t.equal(items[0]!.sync, 'Synced\u001b[8m', 'the sync status too');
});

t.test('a runtime name, namespace, uid or replica with a control character is refused, naming the field', async (t) => {
  const cases: Array<[string, EventBatch['items'][number], string | undefined, string]> = [
    ['a name with ESC', application('guest\u001b]0;x\u0007book', 11), undefined, 'items.0.name'],
    [
      'a namespace with a carriage return',
      application('a', 12, { namespace: 'argo\rcd' }),
      undefined,
      'items.0.namespace',
    ],
    ['a uid with a C1 control', application('b', 13, { uid: 'u\u009b1' }), undefined, 'items.0.uid'],
    ['a replica with DEL', application('c', 14), 'reporter\u007f', 'replica'],
  ];
  for (const [what, item, replica, field] of cases) {
    const res = await report([item], replica);
    t.equal(res.statusCode, 400, `${what}: 400`);
    t.equal(res.json<{ error: { field?: string } }>().error.field, field, `${what}: names ${field}`);
    t.match(res.json<{ error: { message: string } }>().error.message, /control characters/, `${what}: says why`);
  }
  const list = await cli(['--json', 'apps', 'list', tenantId], apiKey);
  t.same(
    (JSON.parse(list.out) as { items: Array<{ name: string }> }).items.map((i) => i.name),
    ['guestbook'],
    'nothing of the refused batches was stored',
  );
});

t.test("a managed cluster's reported version is stored printable, and printed escaped", async (t) => {
  t.equal(storedServerVersion('v1.30.2+k3s1'), 'v1.30.2+k3s1', 'a real version is kept as it is');
  t.equal(storedServerVersion('v1.30\u001b]52;c;eA==\u0007'), 'v1.30\ufffd]52;c;eA==\ufffd', 'controls become U+FFFD');
  t.equal(storedServerVersion('v'.repeat(200)).length, 64, 'cut to 64 characters');
  // A row written before the rule: the CLI still prints it escaped.
  await insertRawVersionManagedCluster(api.db.pool, {
    tenantId,
    name: 'edge',
    server: 'https://203.0.113.10:6443',
    credentialsEnc: api.services.box.encrypt('x', 'managed/edge'),
    serverVersion: 'v1.30\u001b]0;pwned\u0007',
  });
  const list = await cli(['managed-clusters', 'list', tenantId], apiKey);
  t.equal(list.code, 0, list.err);
  t.match(list.out, /edge/, 'the cluster is listed');
  t.notMatch(list.out, RAW_CONTROL, 'its version prints without terminal controls');
  t.match(list.out, 'v1.30\\u001b]0;pwned\\u0007', 'escaped');
});

t.test("a reported newline or tab cannot start a line of its own in apps get's plain output", async (t) => {
  const multiline = await report([application('multiline', 11, { health: 'Degraded\nhealth:           Healthy\tok' })]);
  t.equal(multiline.statusCode, 200, `a summary with a newline is stored (free text: ${multiline.body})`);
  const getLines = await cli(['apps', 'get', tenantId, 'application', 'argocd', 'multiline'], apiKey);
  t.equal(getLines.code, 0, getLines.err);
  t.equal(
    getLines.out.split('\n').filter((l) => l.startsWith('health:')).length,
    1,
    "a reported newline cannot start a line of its own in get's plain output (one health: line)",
  );
  t.match(getLines.out, 'Degraded\\u000ahealth:           Healthy\\u0009ok', 'the newline and tab show as escapes');
});
