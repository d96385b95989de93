import { Type } from 'typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import {
  BoundedInteger,
  CONTROL_FREE,
  DisplayText,
  DnsLabel,
  FleetPlan,
  FleetUpgrade,
  IdParams,
  MaintenanceWindowSchema,
  Semver,
  StringEnum,
  Uuid,
  withErrors,
} from '../schemas.ts';
import type { FleetUpgradeEvents } from '../api-types.ts';
import { MAX_FREEZES } from '../../fleet/windows.ts';
import { requesterOf } from '../auth.ts';
import { errors } from '../../errors.ts';
import { FLEET_CHANNEL } from '../../store/fleet-upgrades.ts';
import { FLEET_STATES, SKIPPABLE_GATE_CHECKS } from '../../store/states.ts';
import { serveEventStream } from '../streams.ts';
import { armWait } from '../../../runtime/loops/wait.ts';
import type { AppContext } from '../context.ts';

const OPERATOR = ['operator'] as const;
/** The most tenants an explicit id list may name. */
export const MAX_SELECTED_IDS = 10_000;
/** Room for MAX_SELECTED_IDS quoted UUIDs and the rest of the body. */
const CREATE_BODY_LIMIT = 512 * 1024;

const Wave = Type.Object(
  {
    count: Type.Optional(BoundedInteger({ minimum: 1, maximum: 100_000, description: 'tenants in this wave' })),
    percent: Type.Optional(
      BoundedInteger({
        minimum: 1,
        maximum: 100,
        description: 'share of all upgradeable tenants reached at the end of this wave (cumulative: 5, 25, 100)',
      }),
    ),
    maxConcurrency: Type.Optional(BoundedInteger({ minimum: 1, maximum: 1000 })),
    maxUnavailable: Type.Optional(BoundedInteger({ minimum: 1, maximum: 100_000 })),
    soakSeconds: Type.Optional(BoundedInteger({ minimum: 0, maximum: 7 * 86400 })),
    maxFailures: Type.Optional(BoundedInteger({ minimum: 0, maximum: 100_000 })),
    maxFailurePercent: Type.Optional(BoundedInteger({ minimum: 0, maximum: 100 })),
  },
  {
    additionalProperties: false,
    description: 'count or percent; the other fields override the top-level options for this wave',
  },
);

const Selector = Type.Object(
  {
    all: Type.Optional(Type.Boolean({ description: 'every live tenant (alone)' })),
    versions: Type.Optional(
      Type.Array(Semver, { maxItems: 50, description: "tenants whose spec's version is one of these" }),
    ),
    plans: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 40 }), { maxItems: 20 })),
    regions: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 63 }), { maxItems: 50 })),
    clusters: Type.Optional(Type.Array(DnsLabel, { maxItems: 200, description: 'root cluster names' })),
    tenantIds: Type.Optional(Type.Array(Uuid, { maxItems: MAX_SELECTED_IDS })),
  },
  { additionalProperties: false, description: 'every field given must match; all: true takes every live tenant' },
);

const CreateBody = Type.Object(
  {
    targetVersion: Semver,
    selector: Selector,
    waves: Type.Optional(
      Type.Array(Wave, {
        minItems: 1,
        maxItems: 20,
        description: 'the first is the canary (count 1 to 5); default [{count: 1}, {percent: 25}, {percent: 100}]',
      }),
    ),
    maxConcurrency: Type.Optional(BoundedInteger({ minimum: 1, maximum: 1000, description: 'per wave; default 2' })),
    maxUnavailable: Type.Optional(
      BoundedInteger({
        minimum: 1,
        maximum: 100_000,
        description:
          "per wave, tenants upgrading or not Ready (already unhealthy ones count); default: the wave's maxConcurrency",
      }),
    ),
    soakSeconds: Type.Optional(
      BoundedInteger({
        minimum: 0,
        maximum: 7 * 86400,
        description: "wait after a wave's last tenant before the next wave; default 300",
      }),
    ),
    gateTimeoutSeconds: Type.Optional(
      BoundedInteger({
        minimum: 1,
        maximum: 86400,
        description: 'a step not healthy by then fails its gate; default 1800',
      }),
    ),
    failureBudget: Type.Optional(
      Type.Object(
        {
          maxFailures: Type.Optional(BoundedInteger({ minimum: 0, maximum: 100_000 })),
          maxPercent: Type.Optional(BoundedInteger({ minimum: 0, maximum: 100 })),
        },
        {
          additionalProperties: false,
          description: 'halt when more than maxFailures tenants or maxPercent % of a wave fail; default maxFailures 0',
        },
      ),
    ),
    gate: Type.Optional(
      Type.Object(
        {
          tunnel: Type.Optional(
            Type.Boolean({ description: 'the tunnel must reconnect after the upgrade (default true)' }),
          ),
          applications: Type.Optional(
            Type.Boolean({ description: 'Healthy and Synced Applications no fewer than before (default true)' }),
          ),
        },
        { additionalProperties: false },
      ),
    ),
    freezes: Type.Optional(
      Type.Array(
        Type.Union([
          Type.Object(
            {
              from: Type.String({ format: 'date-time' }),
              until: Type.String({ format: 'date-time' }),
              reason: Type.Optional(DisplayText({ minLength: 1, maxLength: 500 })),
            },
            { additionalProperties: false, description: 'an absolute deny period [from, until)' },
          ),
          Type.Object(
            {
              ...MaintenanceWindowSchema.properties,
              reason: Type.Optional(DisplayText({ minLength: 1, maxLength: 500 })),
            },
            { additionalProperties: false, description: 'a recurring deny period, written like a maintenance window' },
          ),
        ]),
        {
          maxItems: MAX_FREEZES,
          description:
            'deny periods: no tenant starts in one, whatever its windows say (a freeze always wins, also over overrideWindows); a step must fit before the next one begins',
        },
      ),
    ),
    windowWaitSeconds: Type.Optional(
      BoundedInteger({
        minimum: 0,
        maximum: 30 * 86400,
        description:
          "how long a wave waits for its tenants' maintenance windows, from the wave's start; tenants whose windows do not open (with room) by then are skipped, reason outside-window; default 691200 (8 days)",
      }),
    ),
    defaultUpgradeSeconds: Type.Optional(
      BoundedInteger({
        minimum: 1,
        maximum: 86400,
        description:
          "the expected duration of a hop whose version edge has no upgrade history (otherwise the p95 of the edge's past upgrades); default 1800",
      }),
    ),
    overrideWindows: Type.Optional(
      Type.Object(
        { reason: DisplayText({ minLength: 1, maxLength: 500 }) },
        {
          additionalProperties: false,
          description:
            "ignore the tenants' maintenance windows and the duration-fits rule for this fleet upgrade (freezes still hold); the reason is audited",
        },
      ),
    ),
  },
  { additionalProperties: false },
);

/**
 * The optional body of pause and abort (no body at all is the common case), checked here: only
 * the named fields; `reason` a display text of 1 to 500 characters.
 */
function optionalBody(body: unknown, fields: readonly string[]): Record<string, unknown> {
  if (body === undefined || body === null) return {};
  if (typeof body !== 'object' || Array.isArray(body))
    throw errors.validation(`the body, when sent, must be an object with ${fields.join(' and/or ')}`, 'body');
  for (const key of Object.keys(body))
    if (!fields.includes(key)) throw errors.validation(`'${key}' is not a field here; only ${fields.join(', ')}`, key);
  const reason = (body as { reason?: unknown }).reason;
  if (
    reason !== undefined &&
    (typeof reason !== 'string' ||
      reason.length < 1 ||
      reason.length > 500 ||
      !new RegExp(CONTROL_FREE, 'u').test(reason))
  )
    throw errors.validation('reason must be 1 to 500 characters without control characters', 'reason');
  return body as Record<string, unknown>;
}

export const fleetUpgradeRoutes =
  (ctx: AppContext): FastifyPluginAsyncTypebox =>
  async (app) => {
    app.addSchema(FleetUpgrade);

    app.post(
      '/v1/fleet-upgrades',
      {
        config: { roles: OPERATOR },
        bodyLimit: Math.max(ctx.config.bodyLimit, CREATE_BODY_LIMIT),
        schema: {
          summary: 'Plan (dryRun=1) or start a fleet upgrade',
          description:
            'Moves the selected tenants to targetVersion in waves (canary first), each tenant along its catalog path, ' +
            'with health gates, soak times and a failure budget (docs/fleet-upgrades.md). With dryRun=1 nothing is written: ' +
            'the answer is the plan (each tenant with its path and wave, and the tenants that cannot be upgraded, with the reason).',
          tags: ['fleet upgrades'],
          querystring: Type.Object(
            { dryRun: Type.Optional(StringEnum(['1', '0', 'true', 'false'] as const)) },
            { additionalProperties: false },
          ),
          body: CreateBody,
          response: withErrors({
            200: FleetPlan,
            201: Type.Object({ fleetUpgrade: Type.Ref('FleetUpgrade'), plan: FleetPlan }),
          }),
        },
      },
      async (request, reply) => {
        const dry = request.query.dryRun === '1' || request.query.dryRun === 'true';
        if (dry) return ctx.fleetUpgrades.plan(request.body);
        const out = await ctx.fleetUpgrades.create(request.body, requesterOf(request));
        return reply.status(201).header('location', `/v1/fleet-upgrades/${out.fleetUpgrade.id}`).send(out);
      },
    );

    app.get(
      '/v1/fleet-upgrades',
      {
        config: { roles: OPERATOR },
        schema: {
          summary: 'List fleet upgrades, newest first',
          description:
            'With tenantId: the fleet upgrades that tenant is part of (pending or under way in one, or finished in one still running, paused, halted or aborting), each with that tenant alone in `tenants` (its state, step and gate wait); state does not apply then.',
          tags: ['fleet upgrades'],
          querystring: Type.Object(
            {
              state: Type.Optional(StringEnum(FLEET_STATES)),
              tenantId: Type.Optional(Uuid),
              limit: Type.Optional(BoundedInteger({ minimum: 1, maximum: 200, default: 50 })),
            },
            { additionalProperties: false },
          ),
          response: withErrors({ 200: Type.Object({ items: Type.Array(Type.Ref('FleetUpgrade')) }) }),
        },
      },
      async (request) => {
        const limit = request.query.limit ?? 50;
        if (request.query.tenantId !== undefined) {
          if (request.query.state !== undefined) throw errors.validation('give state or tenantId, not both', 'state');
          return { items: await ctx.fleetUpgrades.ofTenant(request.query.tenantId, limit) };
        }
        return { items: await ctx.fleetUpgrades.list(limit, request.query.state) };
      },
    );

    app.get(
      '/v1/fleet-upgrades/:id',
      {
        config: { roles: OPERATOR },
        schema: {
          summary: 'A fleet upgrade: waves, every tenant with its state and last gate result, counts, ETA',
          tags: ['fleet upgrades'],
          params: IdParams,
          response: withErrors({ 200: Type.Ref('FleetUpgrade') }),
        },
      },
      async (request) => {
        const f = await ctx.fleetUpgrades.get(request.params.id);
        if (!f) throw errors.notFound('fleet upgrade', request.params.id);
        return f;
      },
    );

    app.get(
      '/v1/fleet-upgrades/:id/events',
      {
        config: { roles: OPERATOR },
        schema: {
          summary: "A fleet upgrade's progress, live (Server-Sent Events)",
          description:
            'SSE events: `state` (data: the fleet upgrade without its tenants) first; `event` (data {seq, at, action, tenantId, data}, id = seq) ' +
            'for every decision (start, pause, wave_start, tenant_upgrade, tenant_succeeded, tenant_rollback, tenant_quarantined, halt, …); ' +
            '`progress` (the fleet upgrade, counts per wave) after each batch; `end` (data {state}) once it is completed or aborted. ' +
            'Reconnect with Last-Event-ID (or after=) to resume; after=0 replays every event.',
          tags: ['fleet upgrades'],
          params: IdParams,
          querystring: Type.Object(
            { after: Type.Optional(BoundedInteger({ minimum: 0, description: 'events after this seq' })) },
            { additionalProperties: false },
          ),
          response: withErrors({ 200: Type.String({ description: 'text/event-stream' }) }),
        },
      },
      async (request, reply) => {
        const id = request.params.id;
        // Taken before the first await, so that a burst of opens cannot all pass the limit.
        const slot = ctx.streams.reserve(request.auth?.keyId, ctx.config.sseStreamsPerKey);
        let unsubscribe = (): void => {};
        try {
          const first = await ctx.fleetUpgrades.get(id, false);
          if (!first) throw errors.notFound('fleet upgrade', id);
          const lastEventId = Number(request.headers['last-event-id']);
          let after = request.query.after ?? (Number.isSafeInteger(lastEventId) && lastEventId > 0 ? lastEventId : 0);
          // A notification for this fleet upgrade (a decision was committed) wakes the stream; a poll every 5 s is the safety net.
          let pending = false;
          let wake: (() => void) | undefined;
          unsubscribe = ctx.notifications.subscribe(
            FLEET_CHANNEL,
            (payload) => {
              if (payload !== id) return;
              pending = true;
              wake?.();
            },
            () => {
              pending = true;
              wake?.();
            },
          );
          await serveEventStream<FleetUpgradeEvents>(
            slot,
            request,
            reply,
            { log: 'fleet upgrade events failed', message: 'fleet upgrade event stream failed' },
            async (stream) => {
              stream.send('state', first);
              const BATCH = 500;
              for (;;) {
                pending = false;
                const events = await ctx.fleetUpgrades.events(id, after, BATCH);
                for (const e of events) {
                  if (!stream.send('event', e, e.seq)) await stream.drained();
                  after = e.seq;
                }
                const now = await ctx.fleetUpgrades.get(id, false);
                if (!now || stream.signal.aborted) return;
                if (events.length > 0) stream.send('progress', now);
                if (events.length === BATCH) continue;
                if (now.state === 'completed' || now.state === 'aborted') {
                  // Events committed with the final state were read above (the state is read after them).
                  if ((await ctx.fleetUpgrades.events(id, after, 1)).length > 0) continue;
                  stream.send('end', { state: now.state });
                  return;
                }
                if (pending) continue;
                const armed = armWait(5000, stream.signal);
                wake = armed.wake;
                await armed.done;
                wake = undefined;
                if (stream.signal.aborted) return;
              }
            },
          );
        } finally {
          unsubscribe();
          slot.release();
        }
      },
    );

    app.post(
      '/v1/fleet-upgrades/:id/pause',
      {
        config: { roles: OPERATOR },
        schema: {
          summary: 'Pause: nothing new starts (steps under way finish and are judged)',
          tags: ['fleet upgrades'],
          params: IdParams,
          description: 'Optional body {"reason": "…"}.',
          response: withErrors({ 200: Type.Ref('FleetUpgrade') }),
        },
      },
      async (request) =>
        ctx.fleetUpgrades.pause(
          request.params.id,
          requesterOf(request),
          optionalBody(request.body, ['reason']).reason as string | undefined,
        ),
    );

    app.post(
      '/v1/fleet-upgrades/:id/resume',
      {
        config: { roles: OPERATOR },
        schema: {
          summary: "Resume a paused or halted fleet upgrade (a halted wave's failures so far are forgiven)",
          tags: ['fleet upgrades'],
          params: IdParams,
          response: withErrors({ 200: Type.Ref('FleetUpgrade') }),
        },
      },
      async (request) => ctx.fleetUpgrades.resume(request.params.id, requesterOf(request)),
    );

    app.post(
      '/v1/fleet-upgrades/:id/override-windows',
      {
        config: { roles: OPERATOR },
        schema: {
          summary: "Override the tenants' maintenance windows for this fleet upgrade (freezes still hold)",
          description:
            'Body {"reason": "…"} (required, audited). From now on its tenants start without waiting for their windows or for a window long enough (the duration-fits rule); a freeze still stops every start.',
          tags: ['fleet upgrades'],
          params: IdParams,
          body: Type.Object({ reason: DisplayText({ minLength: 1, maxLength: 500 }) }, { additionalProperties: false }),
          response: withErrors({ 200: Type.Ref('FleetUpgrade') }),
        },
      },
      async (request) =>
        ctx.fleetUpgrades.overrideWindows(request.params.id, requesterOf(request), request.body.reason),
    );

    app.post(
      '/v1/fleet-upgrades/:id/tenants/:tenantId/skip-gate',
      {
        config: { roles: OPERATOR },
        schema: {
          summary: "Skip health-gate checks a tenant's step waits on (that step only)",
          description:
            'Body {"checks": ["tunnel" and/or "applications"], "reason": "…"} (reason required, audited). The checks, as ' +
            "the tenant's gateWait.waitingOn names them, count as passed for the rest of the judgment of the step under way " +
            '(the driver moves the tenant on at its next round if the other checks pass); later steps are judged in full. ' +
            "Only the checks of the runtime's agents can be skipped. A repeat naming only checks already skipped for the " +
            "tenant's latest step changes nothing. 409 GATE_NOT_WAITING when its step does not wait on them, " +
            'FLEET_UPGRADE_STATE when the fleet upgrade ended. The answer holds that tenant alone in `tenants`, ' +
            'with `gateSkipped`.',
          tags: ['fleet upgrades'],
          params: Type.Object({ id: Uuid, tenantId: Uuid }, { additionalProperties: false }),
          body: Type.Object(
            {
              checks: Type.Array(StringEnum(SKIPPABLE_GATE_CHECKS), {
                minItems: 1,
                maxItems: SKIPPABLE_GATE_CHECKS.length,
                description: "the checks to skip, as the tenant's gateWait.waitingOn names them",
              }),
              reason: DisplayText({ minLength: 1, maxLength: 500, description: 'why (audited)' }),
            },
            { additionalProperties: false },
          ),
          response: withErrors({ 200: Type.Ref('FleetUpgrade') }),
        },
      },
      async (request) =>
        ctx.fleetUpgrades.skipGate(request.params.id, request.params.tenantId, requesterOf(request), request.body),
    );

    app.post(
      '/v1/fleet-upgrades/:id/abort',
      {
        config: { roles: OPERATOR },
        schema: {
          summary: 'Abort; with rollback: true, roll the moved tenants back in reverse wave order',
          tags: ['fleet upgrades'],
          params: IdParams,
          description: 'Optional body {"rollback": true|false (default false), "reason": "…"}.',
          response: withErrors({ 200: Type.Ref('FleetUpgrade') }),
        },
      },
      async (request) => {
        const body = optionalBody(request.body, ['rollback', 'reason']);
        if (body.rollback !== undefined && typeof body.rollback !== 'boolean')
          throw errors.validation('rollback must be true or false', 'rollback');
        return ctx.fleetUpgrades.abort(request.params.id, requesterOf(request), {
          rollback: body.rollback === true,
          reason: body.reason as string | undefined,
        });
      },
    );
  };
