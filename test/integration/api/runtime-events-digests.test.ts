/**
 * Digests in event batches (POST /v1/runtime/events) cannot hold the control plane: a digest whose
 * replica is not among its members, or with more members or more digests than the contract allows,
 * is a 400 naming the field; a digest within the limits over thousands of stored objects is worked
 * out in the database, so `/healthz` and another tenant's reads keep answering meanwhile (real
 * sockets, real Postgres). The objects it removes are exactly those `ownerOf` gives its replica.
 */
import t from 'tap';
import { createTestApi } from '../../helpers/api.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';
import { application } from '../../helpers/events.ts';
import { createKey } from '../../../provisioner/store/keys.ts';
import {
  EVENTS_PATH,
  MAX_BATCH_ITEMS,
  MAX_DIGEST_MEMBERS,
  ownerOf,
  type EventBatch,
} from '../../../runtime/protocol/events.ts';
import { storedObjects } from '../../helpers/runtime-objects.ts';

const api = await createTestApi();
const base = await api.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(() => api.close());

const reporter = await api.signup();
const other = await api.signup();
/** The other tenant's key on the one client over the socket (its reads race the ingest over real HTTP). */
const asOther = new ApiClient({ baseUrl: base, token: other.apiKey });
const runtimeKey = (
  await createKey(api.db.pool, { role: 'runtime', tenantId: reporter.tenantId, name: 'r', createdBy: 'test' })
).key;

const post = (body: unknown) =>
  fetch(`${base}${EVENTS_PATH}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${runtimeKey}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

/** The stored objects: STORED Applications in 10 namespaces, small ones. */
const STORED = 5000;
const names = Array.from({ length: STORED }, (_, i) => ({ namespace: `team-${i % 10}`, name: `app-${i}` }));
for (let start = 0; start < STORED; start += MAX_BATCH_ITEMS) {
  const items = names.slice(start, start + MAX_BATCH_ITEMS).map((n, i) => {
    const item = application(n.name, 1000 + start + i, { namespace: n.namespace });
    item.object = { metadata: { name: n.name, namespace: n.namespace } };
    return item;
  });
  const res = await post({ replica: 'seed', items });
  if (res.status !== 200) throw new Error(`precondition: seeding answered ${res.status} ${await res.text()}`);
}
// The other tenant has something to read.
const otherKey = (
  await createKey(api.db.pool, { role: 'runtime', tenantId: other.tenantId, name: 'r', createdBy: 'test' })
).key;
await fetch(`${base}${EVENTS_PATH}`, {
  method: 'POST',
  headers: { authorization: `Bearer ${otherKey}`, 'content-type': 'application/json' },
  body: JSON.stringify({ replica: 'r', items: [application('theirs', 5)] }),
});

interface Timings {
  healthz: number[];
  otherTenantRead: number[];
}

/**
 * Sends `body` and, until it answers, asks `/healthz` and reads the other tenant's applications,
 * one request after another (at least one of each; the first is sent once the batch is on its way).
 */
async function whileIngesting(
  body: EventBatch | Record<string, unknown>,
): Promise<{ status: number; json: unknown; timings: Timings }> {
  let done = false;
  const answer = post(body).then(async (res) => {
    const json: unknown = await res.json();
    done = true;
    return { status: res.status, json };
  });
  const timings: Timings = { healthz: [], otherTenantRead: [] };
  do {
    let start = performance.now();
    const h = await fetch(`${base}/healthz`);
    await h.arrayBuffer();
    timings.healthz.push(performance.now() - start);
    if (h.status !== 200) throw new Error(`/healthz answered ${h.status}`);
    start = performance.now();
    // A refusal is thrown (an ApiError naming its status and code).
    const listed = await asOther.call('GET /v1/tenants/:id/applications', { params: { id: other.tenantId } });
    timings.otherTenantRead.push(performance.now() - start);
    if (listed.items[0]?.name !== 'theirs')
      throw new Error(`the other tenant's read answered ${JSON.stringify(listed)}`);
  } while (!done);
  return { ...(await answer), timings };
}

/** A generous bound for one request on a loopback socket while another tenant's batch is worked on. */
const BOUND_MS = 1000;

t.test('a digest whose replica is not among its members is a 400 naming the field, at once', async (t) => {
  // The batch of the report: one digest, 1,000 members, its replica not among them. It used to
  // hold the event loop for as long as 5 million hashes take (25 s measured).
  const members = Array.from({ length: 1000 }, (_, i) => `member-${i}`);
  const { status, json, timings } = await whileIngesting({
    replica: 'reporter-0',
    items: [],
    digests: [{ replica: 'reporter-0', members, kind: 'Application', listResourceVersion: '999999', objects: [] }],
  });
  const slowest = Math.round(Math.max(...timings.healthz));
  t.ok(slowest < BOUND_MS, `/healthz answered within ${BOUND_MS} ms meanwhile (slowest ${slowest} ms)`);
  t.equal(status, 400, 'the batch is refused with 400');
  const error = (json as { error?: { code: string; field?: string } }).error;
  t.equal(error?.field, 'digests.0.members', 'naming digests.0.members (more than the contract allows)');

  const notMember = await post({
    replica: 'reporter-0',
    items: [],
    digests: [
      {
        replica: 'reporter-0',
        members: ['reporter-1', 'reporter-2'],
        kind: 'Application',
        listResourceVersion: '999999',
        objects: [],
      },
    ],
  });
  t.equal(notMember.status, 400, 'a replica missing from its own members is a 400');
  const body = (await notMember.json()) as { error?: { code: string; field?: string; message: string } };
  t.equal(body.error?.code, 'VALIDATION_FAILED', 'VALIDATION_FAILED');
  t.equal(body.error?.field, 'digests.0.replica', `naming digests.0.replica (${body.error?.message})`);

  const twice = await post({
    replica: 'reporter-0',
    items: [],
    digests: [0, 1].map(() => ({
      replica: 'reporter-0',
      members: ['reporter-0'],
      kind: 'Application',
      listResourceVersion: '1',
      objects: [],
    })),
  });
  t.equal(twice.status, 400, 'two digests of one kind in one batch are a 400');
  t.equal(
    ((await twice.json()) as { error?: { field?: string } }).error?.field,
    'digests.1.kind',
    'naming digests.1.kind',
  );

  const listed = await new ApiClient({ baseUrl: base, token: reporter.apiKey }).call(
    'GET /v1/tenants/:id/applications',
    {
      params: { id: reporter.tenantId },
      query: { limit: 1 },
    },
  );
  t.equal(listed.items.length, 1, 'the stored objects are still listed');
});

t.test(
  `a digest with ${MAX_DIGEST_MEMBERS} members over ${STORED} stored objects removes exactly its replica's share while other requests keep answering`,
  async (t) => {
    const members = Array.from({ length: MAX_DIGEST_MEMBERS }, (_, i) => `reporter-${i}`);
    const mine = names.filter((n) => ownerOf({ kind: 'Application', ...n }, members) === 'reporter-0');
    if (mine.length === 0 || mine.length === STORED) throw new Error(`precondition: reporter-0 owns ${mine.length}`);
    // The digest lists none of them: every stored object is a candidate, its replica's are removed.
    const { status, json, timings } = await whileIngesting({
      replica: 'reporter-0',
      items: [],
      digests: [{ replica: 'reporter-0', members, kind: 'Application', listResourceVersion: '999999', objects: [] }],
    });
    t.equal(status, 200, `the batch is stored (${JSON.stringify(json)})`);
    t.equal(
      (json as { removedByDigest: number }).removedByDigest,
      mine.length,
      `it removes the ${mine.length} objects ownerOf gives reporter-0`,
    );
    const slowest = (xs: number[]) => Math.round(Math.max(...xs));
    t.ok(
      slowest(timings.healthz) < BOUND_MS,
      `/healthz answered within ${BOUND_MS} ms meanwhile (${timings.healthz.length} requests, slowest ${slowest(timings.healthz)} ms)`,
    );
    t.ok(
      slowest(timings.otherTenantRead) < BOUND_MS,
      `the other tenant's listing answered within ${BOUND_MS} ms meanwhile (${timings.otherTenantRead.length} requests, slowest ${slowest(timings.otherTenantRead)} ms)`,
    );

    const rows = (await storedObjects(api.db.pool, reporter.tenantId)).filter((o) => o.deleted);
    t.same(
      rows.map((r) => r.name).sort(),
      mine.map((n) => n.name).sort(),
      'the tombstoned objects are exactly reporter-0s share',
    );
  },
);
