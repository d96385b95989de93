/**
 * The change stream (GET /v1/tenants/:id/changes, Server-Sent Events) across two provisioner
 * replicas on one database, both listening on loopback: a change posted through one replica reaches
 * a stream held by the other, and a client that reconnects with Last-Event-ID (to the other
 * replica) gets exactly the changes it missed.
 */
import t from 'tap';
import { createTestApi, startReplica } from '../../helpers/api.ts';
import { application, batch, deletion } from '../../helpers/events.ts';
import { createPool } from '../../../provisioner/db/database.ts';
import { createKey } from '../../../provisioner/store/keys.ts';
import { ApiClient } from '../../../provisioner/http/api-client.ts';
import { EVENTS_PATH } from '../../../runtime/protocol/events.ts';
import { until } from '../../../sandbox/until.ts';

const a = await createTestApi();
const baseA = await a.app.listen({ port: 0, host: '127.0.0.1' });
const poolB = createPool(a.db.url, 5);
const b = await startReplica(a.config, { pool: poolB, url: a.db.url }, { replicaId: 'replica-b' });
const baseB = await b.app.listen({ port: 0, host: '127.0.0.1' });
t.teardown(async () => {
  await b.close();
  await poolB.end();
  await a.close();
});

const tenant = await a.signup();
const runtimeKey = (
  await createKey(a.db.pool, { role: 'runtime', tenantId: tenant.tenantId, name: 'reporter', createdBy: 'test' })
).key;

const post = async (base: string, body: unknown): Promise<void> => {
  const res = await fetch(base + EVENTS_PATH, {
    method: 'POST',
    headers: { authorization: `Bearer ${runtimeKey}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (res.status !== 200) throw new Error(`POST through ${base}: ${res.status} ${await res.text()}`);
};

interface Change {
  id: string;
  deleted: boolean;
  item: { name: string; resourceVersion: string; health: string | null };
}

/** An open change stream: events arrive in `changes`; next() waits for the n-th one. */
function openStream(base: string, opts: { lastEventId?: string; query?: string; key?: string } = {}) {
  const abort = new AbortController();
  const changes: Change[] = [];
  const ready = fetch(`${base}/v1/tenants/${tenant.tenantId}/changes${opts.query ?? ''}`, {
    headers: {
      authorization: `Bearer ${opts.key ?? tenant.apiKey}`,
      accept: 'text/event-stream',
      ...(opts.lastEventId ? { 'last-event-id': opts.lastEventId } : {}),
    },
    signal: abort.signal,
  }).then(async (res) => {
    if (res.status !== 200) throw new Error(`stream: ${res.status} ${await res.text()}`);
    const started = new Promise<void>((resolve) => {
      void (async () => {
        const decoder = new TextDecoder();
        let buf = '';
        try {
          for await (const chunk of res.body!) {
            buf += decoder.decode(chunk as Uint8Array, { stream: true });
            let i: number;
            while ((i = buf.indexOf('\n\n')) >= 0) {
              const block = buf.slice(0, i);
              buf = buf.slice(i + 2);
              if (block.startsWith(': after')) resolve();
              const id = /^id: (.*)$/m.exec(block)?.[1];
              const data = /^data: (.*)$/m.exec(block)?.[1];
              if (/^event: change$/m.test(block) && id && data) {
                changes.push({ id, ...(JSON.parse(data) as Omit<Change, 'id'>) });
              }
            }
          }
        } catch {
          // aborted
        }
      })();
    });
    await started;
  });
  return {
    ready,
    changes,
    /** Waits until `n` changes arrived (bounded). */
    arrived: (n: number, what: string): Promise<Change[]> =>
      until(`${what} (${n} changes)`, 10_000, () => changes.length >= n && changes.slice(0, n), 50),
    close: () => abort.abort(),
  };
}

t.test('a change posted through one replica reaches a stream on the other; Last-Event-ID resumes', async (t) => {
  const onB = openStream(baseB);
  await onB.ready;
  await post(baseA, batch('reporter-0', [application('guestbook', 10), application('billing', 11)]));
  const first = await onB.arrived(2, 'the first two changes on replica B');
  t.same(
    first.map((c) => c.item.name).sort(),
    ['billing', 'guestbook'],
    "replica B's stream sees both objects posted through replica A",
  );
  t.ok(
    first.every((c) => /^[A-Za-z0-9_-]{40,}$/.test(c.id ?? '')) && first[0]!.id !== first[1]!.id,
    'event ids are opaque cursors (no platform-wide sequence number), one per event',
  );
  const lastSeen = first[1]!.id;
  onB.close();

  // While no stream is open: one update, one stale state (not a change), one deletion, one new object.
  await post(baseB, batch('reporter-1', [application('guestbook', 20, { health: 'Degraded' })]));
  await post(baseA, batch('reporter-0', [application('guestbook', 15, { health: 'Progressing' })]));
  await post(baseA, batch('reporter-0', [deletion('Application', 'argocd', 'billing', 21)]));
  await post(baseB, batch('reporter-1', [application('web', 22)]));

  const resumed = openStream(baseA, { lastEventId: lastSeen });
  await resumed.ready;
  const missed = await resumed.arrived(3, 'the three missed changes');
  t.same(
    missed.map((c) => `${c.item.name}:${c.deleted ? 'deleted' : c.item.health}:${c.item.resourceVersion}`),
    ['guestbook:Degraded:20', 'billing:deleted:21', 'web:Healthy:22'],
    'the resumed stream (on the other replica) gets exactly the missed changes, in order, the stale state not among them',
  );
  await post(baseB, batch('reporter-1', [application('web', 30, { health: 'Degraded' })]));
  const live = await resumed.arrived(4, 'a live change after the replay');
  t.equal(live[3]!.item.resourceVersion, '30', 'and then live changes posted through the other replica');
  t.equal(resumed.changes.length, 4, 'nothing twice');
  resumed.close();
});

t.test('after=0 replays every live object, then changes; kind filters; bad Last-Event-ID is a 400', async (t) => {
  const all = openStream(baseB, { query: '?after=0&kind=application' });
  await all.ready;
  const replay = await all.arrived(2, 'the replay');
  t.same(
    replay.map((c) => `${c.item.name}:${c.item.resourceVersion}`).sort(),
    ['guestbook:20', 'web:30'],
    'one event per live object at its latest state (the object deleted earlier is left out)',
  );
  await post(baseA, batch('reporter-0', [deletion('Application', 'argocd', 'web', 35)]));
  const gone = await all.arrived(3, 'a deletion after the replay');
  t.match(gone[2], { deleted: true, item: { name: 'web' } }, 'a deletion after the stream began is sent');
  all.close();
  const rollouts = openStream(baseA, { query: '?after=0&kind=rollout' });
  await rollouts.ready;
  await post(baseA, batch('reporter-0', [application('another', 40)]));
  const other = openStream(baseA, { query: '?after=0&kind=application' });
  await other.ready;
  await other.arrived(2, 'the application stream catching up');
  t.equal(rollouts.changes.length, 0, 'a rollout stream gets no application changes');
  rollouts.close();
  other.close();

  // The stream's refusals through the typed client (the first event read opens it; a refusal is thrown).
  const client = new ApiClient({ baseUrl: baseA, token: tenant.apiKey });
  const opened = (opts: { lastEventId?: string; after?: string }, key?: string) =>
    (key ? client.withToken(key) : client)
      .events('GET /v1/tenants/:id/changes', {
        params: { id: tenant.tenantId },
        ...(opts.after !== undefined ? { query: { after: opts.after } } : {}),
        lastEventId: opts.lastEventId,
      })
      .next();
  await t.rejects(
    opened({ lastEventId: 'abc' }),
    { name: 'ApiError', status: 400, field: 'Last-Event-ID' },
    'a Last-Event-ID that is not a sequence number is refused, naming it',
  );
  await t.rejects(
    opened({ lastEventId: '5' }),
    { name: 'ApiError', status: 400 },
    'a plain sequence number is not an id of this stream: 400',
  );
  await t.rejects(opened({ after: '5' }), { name: 'ApiError', status: 400 }, 'nor is after=5');
  const other2 = await a.signup();
  await t.rejects(
    opened({}, other2.apiKey),
    { name: 'ApiError', status: 404 },
    "another tenant's key cannot follow this tenant's changes",
  );
});
