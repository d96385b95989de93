/**
 * What the control plane checks in an event batch beyond its JSON schema (http/routes/
 * runtime-objects.ts), and how items become rows: every error names the field at fault
 * (`items.3.resourceVersion`), and an item whose resourceVersion is not a decimal integer is refused
 * rather than ordered by arrival (runtime/protocol/events.ts, parseResourceVersion).
 */
import { errors } from '../errors.ts';
import {
  MAX_OBJECT_BYTES,
  parseResourceVersion,
  type DeleteItem,
  type EventBatch,
  type UpsertItem,
} from '../../runtime/protocol/events.ts';
import type { ObjectWrite } from '../store/runtime-objects.ts';
import { MAX_CHANGE_BYTES } from '../../runtime/protocol/sources.ts';
import { historyWriteOf, type HistoryWrite } from '../app-history/rules.ts';

/** The batch's items as rows, one per object key (the newest of duplicates), and how many duplicates were older. */
export interface PreparedBatch {
  writes: ObjectWrite[];
  /** Items of the batch superseded by a newer item of the same object in the same batch. */
  superseded: number;
  /** The history entries the batch's Application reports make (app-history/rules.ts), one per application. */
  history: HistoryWrite[];
}

const str = (v: unknown): string | null => (typeof v === 'string' && v !== '' ? v : null);

/** The summary fields the listings filter on, by kind (a Rollout's phase is also its health). */
export function filterColumns(item: UpsertItem): Pick<ObjectWrite, 'health' | 'sync' | 'phase'> {
  const s = item.summary as Record<string, unknown>;
  switch (item.kind) {
    case 'Application':
      return { health: str(s.healthStatus), sync: str(s.syncStatus), phase: str(s.operationPhase) };
    case 'Rollout':
      return { health: str(s.phase), sync: null, phase: str(s.phase) };
    case 'Workflow':
    case 'Promotion':
    case 'PromotionPreview':
      return { health: null, sync: null, phase: str(s.phase) };
    case 'Product':
      return { health: null, sync: null, phase: null };
  }
}

function checkResourceVersion(rv: string, field: string): bigint {
  const n = parseResourceVersion(rv);
  if (n === undefined)
    throw errors.validation(
      `${field} must be a decimal integer of at most 19 digits (the etcd revision an API server issues), got '${rv.slice(0, 40)}': states are ordered by it`,
      field,
    );
  return n;
}

/**
 * Checks what the schema cannot say and turns the items into rows. `checkObjectSizes`: whether an
 * `object` may be larger than MAX_OBJECT_BYTES (only a body larger than that can hold one).
 */
export function prepareBatch(batch: EventBatch, checkObjectSizes: boolean): PreparedBatch {
  const byKey = new Map<string, { rv: bigint; write: ObjectWrite; history: HistoryWrite | undefined }>();
  let superseded = 0;
  batch.items.forEach((item, i) => {
    const at = `items.${i}`;
    const rv = checkResourceVersion(item.resourceVersion, `${at}.resourceVersion`);
    let write: ObjectWrite;
    let history: HistoryWrite | undefined;
    if (item.type === 'upsert') {
      for (const f of ['generation', 'summary', 'object', 'truncated'] as const)
        if ((item as Partial<UpsertItem>)[f] === undefined)
          throw errors.validation(`${at}.${f} is required in an upsert item`, `${at}.${f}`);
      // Serialized once: its size is checked here and the text goes into the statement as it is.
      const objectJson = JSON.stringify(item.object);
      if (
        checkObjectSizes &&
        objectJson.length * 3 > MAX_OBJECT_BYTES &&
        Buffer.byteLength(objectJson) > MAX_OBJECT_BYTES
      )
        throw errors.validation(
          `${at}.object is larger than ${MAX_OBJECT_BYTES} bytes of JSON: trim it and set truncated`,
          `${at}.object`,
        );
      write = {
        kind: item.kind,
        namespace: item.namespace,
        name: item.name,
        uid: item.uid,
        rv: item.resourceVersion,
        generation: item.generation,
        ...filterColumns(item),
        summary: item.summary as Record<string, unknown>,
        objectJson,
        truncated: item.truncated,
        deleted: false,
        observed_at: item.observedAt,
      };
      if (item.change !== undefined) {
        if (item.kind !== 'Application')
          throw errors.validation(
            `${at}.change is for Applications only (what changed an Application, from the runtime's Source Server); a ${item.kind} has none`,
            `${at}.change`,
          );
        const changeBytes = Buffer.byteLength(JSON.stringify(item.change));
        if (changeBytes > MAX_CHANGE_BYTES)
          throw errors.validation(
            `${at}.change is ${changeBytes} bytes of JSON, over the limit of ${MAX_CHANGE_BYTES}: leave out field paths, then resources, and set truncated`,
            `${at}.change`,
          );
        history = historyWriteOf(item);
      }
    } else {
      for (const f of ['generation', 'summary', 'object', 'truncated', 'change'] as const)
        if ((item as unknown as Record<string, unknown>)[f] !== undefined)
          throw errors.validation(`${at}.${f} is not a field of a delete item`, `${at}.${f}`);
      const d: DeleteItem = item;
      write = {
        kind: d.kind,
        namespace: d.namespace,
        name: d.name,
        uid: d.uid,
        rv: d.resourceVersion,
        generation: 0,
        health: null,
        sync: null,
        phase: null,
        summary: {},
        objectJson: null,
        truncated: false,
        deleted: true,
        observed_at: d.observedAt,
      };
    }
    const key = `${item.kind}/${item.namespace}/${item.name}`;
    const prev = byKey.get(key);
    if (prev) superseded++;
    if (!prev || rv > prev.rv) byKey.set(key, { rv, write, history });
  });
  const digestKinds = new Set<string>();
  (batch.digests ?? []).forEach((d, i) => {
    // A replica that is not among its members owns nothing: such a digest could never remove
    // anything, and the reporter computes its share only while it holds its own Lease.
    if (!d.members.includes(d.replica))
      throw errors.validation(
        `digests.${i}.replica '${d.replica.slice(0, 63)}' is not among digests.${i}.members: a digest covers the share of a live replica, which is one of the members`,
        `digests.${i}.replica`,
      );
    if (digestKinds.has(d.kind))
      throw errors.validation(
        `digests.${i}.kind: a batch holds one digest per kind, and ${d.kind} has one already`,
        `digests.${i}.kind`,
      );
    digestKinds.add(d.kind);
    checkResourceVersion(d.listResourceVersion, `digests.${i}.listResourceVersion`);
    d.objects.forEach((o, j) => checkResourceVersion(o.resourceVersion, `digests.${i}.objects.${j}.resourceVersion`));
  });
  const kept = [...byKey.values()];
  return {
    writes: kept.map((v) => v.write),
    superseded,
    history: kept.flatMap((v) => (v.history ? [v.history] : [])),
  };
}
