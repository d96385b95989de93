/**
 * A tenant's spec and its maintenance windows, defined once: these schemas are the API's (http/
 * schemas.ts uses them in every answer that holds a tenant, the PATCH body validates windows with
 * one), and the store's types are derived from them (store/tenants.ts), so the row's view, the
 * wire and the clients cannot disagree. In store/ because the store may import nothing above it;
 * it imports only the closed lists of states.ts and the schema package (the console's type-check
 * reads it).
 */
import { Type, type Static } from 'typebox';
import { MAX_DURATION_MINUTES, MIN_DURATION_MINUTES } from './states.ts';

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
