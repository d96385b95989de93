/**
 * The runtime version catalog as the API shows it: each version of the catalog (runtime/catalog.ts,
 * fixed in the code) with its availability (kept in the database, changed by operators). A change
 * of availability is written with its audit row in one transaction.
 */
import type pg from 'pg';
import { withTx } from '../db/tx.ts';
import { errors } from '../errors.ts';
import { writeAudit, type Requester } from '../store/audit.ts';
import { availabilityMap, availabilityOf, setAvailability, type Availability } from '../store/versions.ts';
import type { Catalog, Channel } from '../../runtime/catalog.ts';

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
  components: Record<string, string>;
  upgrade: { minFrom?: string };
}

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
    return {
      items: this.#catalog.versions.map((v) => this.#view(v.version, overrides.get(v.version) ?? 'available')),
      defaultVersion: this.#catalog.defaultVersion('stable'),
    };
  }

  async setAvailability(version: string, availability: Availability, by: Requester): Promise<RuntimeVersionView> {
    if (!this.#catalog.get(version)) throw errors.notFound('runtime version', version);
    await withTx(this.#pool, async (tx) => {
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
    });
    return this.#view(version, availability);
  }

  #view(version: string, availability: Availability): RuntimeVersionView {
    const v = this.#catalog.get(version)!;
    return {
      version: v.version,
      releaseDate: v.releaseDate,
      channel: v.channel,
      availability,
      default: v.version === this.#catalog.defaultVersion('stable'),
      components: { ...v.components },
      upgrade: v.upgrade.minFrom ? { minFrom: v.upgrade.minFrom } : {},
    };
  }
}
