/**
 * A tenant's spec and its settings, defined once: these schemas are the API's (api/schemas.ts
 * uses them in every answer that holds a tenant, the PATCH body is made of the settings' schemas),
 * and the store's types are derived from them (store/tenants.ts), so the row's view, the wire and
 * the clients cannot disagree. In store/ because the store may import nothing above it; it imports
 * only the closed lists of states.ts and the schema package (the console's type-check reads it).
 */
import { Type, type Static } from 'typebox';
import { MAX_DURATION_MINUTES, MAX_WINDOWS, MIN_DURATION_MINUTES } from './states.ts';

export const TenantSpecSchema = Type.Object({
  plan: Type.String(),
  region: Type.Union([Type.String(), Type.Null()], {
    description: 'region placement is restricted to; null: any region',
  }),
  runtimeVersion: Type.String(),
  suspended: Type.Boolean(),
  deleted: Type.Boolean(),
});
export type TenantSpec = Static<typeof TenantSpecSchema>;

/** A maintenance window (fleet/windows.ts): an RFC 5545 rule in a time zone, open for durationMinutes of wall-clock time. */
export const MaintenanceWindowSchema = Type.Object(
  {
    rrule: Type.String({
      minLength: 1,
      maxLength: 500,
      description:
        'RFC 5545 RRULE value, FREQ DAILY, WEEKLY, MONTHLY or YEARLY; the local time of day from BYHOUR/BYMINUTE or dtstart (e.g. FREQ=WEEKLY;BYDAY=SA;BYHOUR=2;BYMINUTE=0)',
    }),
    timeZone: Type.String({
      minLength: 1,
      maxLength: 64,
      description: 'IANA time zone of the local times (e.g. Europe/Berlin); DST-correct',
    }),
    // An integer of a request has a declared range (http/request-rules.ts), as BoundedInteger gives it.
    durationMinutes: Type.Integer({
      maximum: MAX_DURATION_MINUTES,
      minimum: MIN_DURATION_MINUTES,
      description:
        'wall-clock minutes from each start: 02:00 for 120 is 02:00–04:00 local, also on the nights the clocks change',
    }),
    dtstart: Type.Optional(
      Type.String({
        maxLength: 19,
        description: 'DTSTART as a local date-time (2026-01-03T02:00); default 2020-01-01T00:00',
      }),
    ),
  },
  { additionalProperties: false },
);
export type MaintenanceWindow = Static<typeof MaintenanceWindowSchema>;

/**
 * A tenant's settings: what its own key or an operator sets beside the spec with PATCH
 * /v1/tenants/:id, that no engine run applies (no generation, no operation: stored, shown in every
 * answer that holds the tenant, audited as `tenant.<column>` with the value before and after).
 * A new setting is a property here, its entry in TENANT_SETTINGS and its column (a migration); the
 * answers, the PATCH body, the store's reads and writes and the audit follow from these two
 * (tenant-api/service.ts adds a check a schema cannot express, such as a time zone's).
 */
export const TenantSettingsSchema = Type.Object({
  maintenanceWindows: Type.Array(MaintenanceWindowSchema, {
    maxItems: MAX_WINDOWS,
    description:
      'when fleet upgrades may upgrade the tenant (PATCH replaces the list); [] (the default): any time. A setting, not a spec change: no operation is queued',
  }),
  timeZone: Type.Union([Type.String({ minLength: 1, maxLength: 64 }), Type.Null()], {
    description:
      'the tenant\'s IANA time zone (e.g. Europe/Berlin), as the time zone database names it; a plan\'s keep-awake windows are read in it (docs/operations.md "Sleep"); null (the default): not set. A setting, not a spec change: no operation is queued',
  }),
});
export type TenantSettings = Static<typeof TenantSettingsSchema>;

/** Each setting's column of `tenants`, and its value where a row was read without it (the column's default). */
export const TENANT_SETTINGS = {
  maintenanceWindows: { column: 'maintenance_windows', unset: [] as MaintenanceWindow[] },
  timeZone: { column: 'time_zone', unset: null },
} as const satisfies { [K in keyof TenantSettings]: { column: string; unset: TenantSettings[K] } };

/** The settings' columns as a row of `tenants` holds them (absent from rows read without them). */
export type TenantSettingColumns = {
  [K in keyof TenantSettings as (typeof TENANT_SETTINGS)[K]['column']]?: TenantSettings[K];
};
