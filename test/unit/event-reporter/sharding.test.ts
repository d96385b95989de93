import t from 'tap';
import { createHash } from 'node:crypto';
import { isOwner, ownerOf, rendezvousWeight, type ObjectKey } from '../../../runtime/protocol/events.ts';
import { MemberTracker } from '../../../runtime/agents/event-reporter/members.ts';

const keys: ObjectKey[] = Array.from({ length: 10_000 }, (_, i) => ({
  kind: i % 3 === 0 ? 'Application' : i % 3 === 1 ? 'Rollout' : 'Workflow',
  namespace: `team-${i % 17}`,
  name: `object-${i}`,
}));

const owners = (members: string[]) => keys.map((k) => ownerOf(k, members));
const moved = (a: (string | undefined)[], b: (string | undefined)[]) => a.filter((o, i) => o !== b[i]).length;

void t.test('10,000 keys spread over 3 replicas within ±10 % of an even share', async (t) => {
  const members = ['event-reporter-7d9f-abcde', 'event-reporter-7d9f-fghij', 'event-reporter-7d9f-klmno'];
  const counts = new Map<string, number>();
  for (const o of owners(members)) counts.set(o!, (counts.get(o!) ?? 0) + 1);
  const even = keys.length / members.length;
  for (const m of members) {
    const n = counts.get(m) ?? 0;
    t.ok(Math.abs(n - even) <= even * 0.1, `${m} owns ${n} keys, within 10 % of ${Math.round(even)}`);
  }
  t.equal(
    [...counts.values()].reduce((a, b) => a + b, 0),
    keys.length,
    'every key has exactly one owner',
  );
});

void t.test('adding or removing a replica moves at most 1/N + 10 % of the keys, and only to or from it', async (t) => {
  const three = ['a-0', 'a-1', 'a-2'];
  const four = [...three, 'a-3'];
  const before = owners(three);
  const afterAdd = owners(four);
  const addMoves = moved(before, afterAdd);
  t.ok(
    addMoves <= keys.length * (1 / 4 + 0.1),
    `adding a 4th replica moved ${addMoves} of ${keys.length} keys (≤ 35 %)`,
  );
  t.ok(addMoves > 0, 'the new replica takes some keys');
  t.ok(
    afterAdd.every((o, i) => o === before[i] || o === 'a-3'),
    'every key that moved on an add moved to the new replica',
  );

  const afterRemove = owners(['a-0', 'a-2']);
  const removeMoves = moved(before, afterRemove);
  t.ok(
    removeMoves <= keys.length * (1 / 3 + 0.1),
    `removing 1 of 3 replicas moved ${removeMoves} of ${keys.length} keys (≤ 43 %)`,
  );
  t.ok(
    before.every((o, i) => o === 'a-1' || afterRemove[i] === o),
    'only the removed replica’s keys moved on a remove',
  );
  t.equal(removeMoves, before.filter((o) => o === 'a-1').length, 'every key of the removed replica has a new owner');
});

void t.test('every replica computes the same owner whatever the order it lists the members in', async (t) => {
  const a = owners(['x', 'y', 'z']);
  const b = owners(['z', 'x', 'y']);
  t.same(a, b, 'ownership does not depend on the order of the member list');
  t.equal(ownerOf(keys[0]!, []), undefined, 'no member: no owner');
});

void t.test(
  'membership: a Lease not renewed for its duration expires; this replica counts while its own renewal is fresh',
  async (t) => {
    let now = 1_000_000;
    const tracker = new MemberTracker('b', 15, () => now);
    const renew = new Date().toISOString();
    tracker.observe([
      { holder: 'a', renewTime: renew },
      { holder: 'b', renewTime: renew },
    ]);
    t.same(tracker.members(), ['a'], 'this replica is not a member before it renewed its own Lease');
    tracker.renewed();
    t.same(tracker.members(), ['a', 'b'], 'both after its renewal');
    now += 10_000;
    tracker.observe([
      { holder: 'a', renewTime: renew },
      { holder: 'b', renewTime: renew },
    ]);
    t.same(tracker.members(), ['a', 'b'], 'a Lease unchanged for 10 s of 15 is still live');
    now += 6_000;
    tracker.observe([
      { holder: 'a', renewTime: renew },
      { holder: 'b', renewTime: renew },
    ]);
    t.same(tracker.members(), [], 'after 16 s without a change, a is expired and so is b, which did not renew');
    tracker.renewed();
    tracker.observe([
      { holder: 'a', renewTime: new Date(Date.now() + 1).toISOString() },
      { holder: 'b', renewTime: renew },
    ]);
    t.same(tracker.members(), ['a', 'b'], 'a renewal seen again makes a live again');
    tracker.observe([{ holder: 'b', renewTime: renew }]);
    t.same(tracker.members(), ['b'], 'a deleted Lease (graceful shutdown) leaves at once');
    tracker.observe([
      { holder: 'b', renewTime: renew },
      { holder: 'c', renewTime: new Date(Date.now() - 10 * 60_000).toISOString() },
    ]);
    t.same(tracker.members(), ['b'], 'a Lease renewed 10 minutes ago by the wall clock is dead when first seen');
    t.same(tracker.abandoned(5 * 60_000), ['c'], 'and may be removed');
  },
);

void t.test('isOwner answers as ownerOf does, and the weights are those of the published hash', async (t) => {
  const members = Array.from({ length: 32 }, (_, i) => `reporter-${i}`);
  let owned = 0;
  for (const k of keys)
    for (const replica of ['reporter-0', 'reporter-31', 'not-a-member']) {
      const expected = ownerOf(k, members) === replica;
      if (isOwner(replica, k, members) !== expected)
        t.fail(`isOwner(${replica}, ${k.name}) must be ${expected}, as ownerOf says`);
      if (expected) owned++;
    }
  t.ok(owned > 0, `the comparison covers keys a replica owns (${owned})`);
  t.notOk(isOwner('r', keys[0]!, ['a', 'b']), 'a replica that is not a member owns nothing');
  t.ok(isOwner('r', keys[0]!, ['r', 'r']), 'a replica listed twice is still the only member');
  // The weight is SHA-256 over member, NUL, key (what the deployed reporters compute): unchanged.
  const key = 'Application/argocd/guestbook';
  t.equal(
    rendezvousWeight('reporter-0', key),
    createHash('sha256').update('reporter-0').update('\0').update(key).digest().readBigUInt64BE(0),
    'the weight is the first 8 bytes of SHA-256(member, NUL, key)',
  );
});
