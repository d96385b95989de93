/**
 * The runtime version catalog as the API shows it: each version of the catalog (runtime/catalog.ts,
 * fixed in the code) with its availability (kept in the database, changed by operators). A change
 * of availability is written with its audit row in one transaction.
 */
import type pg from 'pg';
import { lockForTransaction, withTx, type Queryable } from '../db/tx.ts';
import { errors } from '../errors.ts';
import { writeAudit, type Requester } from '../store/audit.ts';
import { availabilityMap, availabilityOf, setAvailability } from '../store/versions.ts';
import type { Availability } from '../store/states.ts';
import { compareVersions, type Catalog } from '../../runtime/catalog.ts';
import type { Channel } from '../../runtime/versions.ts';

export interface RuntimeVersionServiceDeps {
  pool: pg.Pool;
  catalog: Catalog;
}

/** A catalog version with its availability. */
export interface RuntimeVersionView {
  version: string;
  releaseDate: string;
  channel: Channel;
  availability: Availability;
  /** The version a signup gets when it names none. */
  default: boolean;
  /** Chart versions (and the vcluster, Kubernetes and agents versions) the version pins. */
  components: Record<string, string>;
  /** The Argo applications' own versions (the charts' appVersion); empty when the catalog does not record them. */
  appVersions: Record<string, string>;
  upgrade: { minFrom?: string; steppingStone?: boolean };
  /** Whether a tenant on this version may go back to an older one, and why not. */
  rollback: { allowed: boolean; reason?: string };
  notes?: string;
}

/**
 * The version a signup gets when it names none: the newest *available* version of the stable
 * channel (the catalog's default unless an operator deprecated or withdrew it), else the newest
 * available version of any channel. Availability changes never leave no version available
 * (LAST_AVAILABLE_RUNTIME_VERSION), so there always is one (docs/decisions.md "The default
 * runtime version is always installable").
 */
export function defaultVersionOf(catalog: Catalog, availability: ReadonlyMap<string, Availability>): string {
  const available = catalog.versions.filter((v) => (availability.get(v.version) ?? 'available') === 'available');
  const stable = available.filter((v) => v.channel === 'stable');
  return (stable.at(-1) ?? available.at(-1))?.version ?? catalog.defaultVersion('stable');
}

/** The default version as the database says now (in `db`'s transaction, when it is one). */
export async function currentDefaultVersion(db: Queryable, catalog: Catalog): Promise<string> {
  return defaultVersionOf(catalog, await availabilityMap(db));
}

/**
 * The version-change rule, the same for a tenant's hosted runtime and a hybrid runtime: a move
 * forward follows the catalog's upgrade path (its stepping stones and minimum versions); a move back
 * returns only to the version run before (`previous`), and only where the catalog allows that
 * rollback. Throws UPGRADE_PATH_REFUSED naming `field` and, where there is one, the way that works.
 */
export function checkVersionChange(
  catalog: Catalog,
  change: { subject: 'tenant' | 'runtime'; from: string; to: string; previous: string | null; field: string },
): void {
  const { from, to, previous, field } = change;
  if (compareVersions(to, from) < 0) {
    if (previous !== to) {
      const ran = change.subject === 'tenant' ? 'the tenant last ran' : 'the runtime ran before';
      throw errors.upgradeRefused(
        `runtime version ${to} is older than ${from}: a rollback can only return to the version ${ran}` +
          (previous ? ` (${previous})` : ' (none recorded)'),
        previous ? [previous] : [],
        field,
      );
    }
    const back = catalog.rollbackAnswer(from, to);
    if (!back.allowed) throw errors.upgradeRefused(back.reason, [], field);
    return;
  }
  const path = catalog.upgradePath(from, to);
  if (!path.allowed) throw errors.upgradeRefused(path.reason, path.path, field);
}

/** Serializes availability changes, so that two cannot together withdraw the last available version. */
const AVAILABILITY_LOCK = 'runtime_version_availability';

export class RuntimeVersionService {
  readonly #pool: pg.Pool;
  readonly #catalog: Catalog;

  constructor(deps: RuntimeVersionServiceDeps) {
    this.#pool = deps.pool;
    this.#catalog = deps.catalog;
  }

  /** Every catalog version, and the default one. */
  async list(): Promise<{ items: RuntimeVersionView[]; defaultVersion: string }> {
    const overrides = await availabilityMap(this.#pool);
    const defaultVersion = defaultVersionOf(this.#catalog, overrides);
    return {
      items: this.#catalog.versions.map((v) =>
        this.#view(v.version, overrides.get(v.version) ?? 'available', defaultVersion),
      ),
      defaultVersion,
    };
  }

  async setAvailability(version: string, availability: Availability, by: Requester): Promise<RuntimeVersionView> {
    if (!this.#catalog.get(version)) throw errors.notFound('runtime version', version);
    const defaultVersion = await withTx(this.#pool, async (tx) => {
      await lockForTransaction(tx, AVAILABILITY_LOCK);
      const overrides = await availabilityMap(tx);
      const after = new Map(overrides).set(version, availability);
      if (
        availability !== 'available' &&
        !this.#catalog.versions.some((v) => (after.get(v.version) ?? 'available') === 'available')
      )
        throw errors.lastAvailableVersion(version, availability);
      const before = await availabilityOf(tx, version);
      await setAvailability(tx, version, availability, by.actor.id);
      await writeAudit(tx, by.actor, {
        action: 'runtime_version.availability',
        targetType: 'runtime_version',
        targetId: version,
        before: { availability: before },
        after: { availability },
        requestId: by.requestId,
      });
      return defaultVersionOf(this.#catalog, after);
    });
    return this.#view(version, availability, defaultVersion);
  }

  #view(version: string, availability: Availability, defaultVersion: string): RuntimeVersionView {
    const v = this.#catalog.get(version)!;
    return {
      version: v.version,
      releaseDate: v.releaseDate,
      channel: v.channel,
      availability,
      default: v.version === defaultVersion,
      components: { ...v.components },
      appVersions: { ...v.appVersions },
      upgrade: {
        ...(v.upgrade.minFrom ? { minFrom: v.upgrade.minFrom } : {}),
        ...(v.upgrade.steppingStone ? { steppingStone: true } : {}),
      },
      rollback: {
        allowed: v.rollback?.allowed !== false,
        ...(v.rollback?.reason ? { reason: v.rollback.reason } : {}),
      },
      ...(v.notes ? { notes: v.notes } : {}),
    };
  }
}
