/**
 * The API's route map: every route a client calls, by method and path, with the schemas of its
 * path parameters, query, body, headers and answers. The routes register from it (`endpoint`,
 * http/routes/*.ts: the method, the path and the schemas come from here, the route file adds its
 * documentation, roles and handler) and the one client (http/api-client.ts) is typed from it: a
 * route and its callers cannot disagree on a shape. The OpenAPI document is generated from the
 * same schemas.
 *
 * Not here: the routes no client of this project calls through it — the runtimes' own routes
 * (event reports, the tunnel, the upgrader, the bootstrap install files), the proxied runtime
 * paths, health, metrics and the console's files.
 *
 * Like schemas.ts, this module imports only modules that need no Node.js: the console's
 * type-check reads it (the console imports its types only).
 */
import { Type, type TSchema } from 'typebox';
import {
  Accepted,
  ApplicationDiff,
  ApplicationHistoryPage,
  BoundedInteger,
  Capacity,
  ClusterPutAnswer,
  CreatedKey,
  DisplayText,
  FleetPlan,
  IDEMPOTENCY_KEY,
  IdParams,
  Identity,
  LogPage,
  ManagedClusterRegistered,
  OperationPage,
  PathInfo,
  PlanInfo,
  RegionInfo,
  RuntimeBootstrapAnswer,
  RuntimeObjectDetail,
  RuntimeObjectPage,
  RuntimePage,
  RuntimeRegistered,
  RuntimeRemoved,
  RuntimeUpgradeBundle,
  RuntimeUpgraded,
  RuntimeVersionInfo,
  RuntimeVersionList,
  SignupResponse,
  STREAM_CURSOR,
  StringEnum,
  TenantPage,
  TenantSummary,
  Uuid,
  withErrors,
} from '../api/schemas.ts';
import * as R from './route-schemas.ts';
import { AVAILABILITIES, FLEET_STATES, SKIPPABLE_GATE_CHECKS } from '../store/states.ts';

/** What the map says of one route. */
export interface RouteShape {
  params?: TSchema;
  querystring?: TSchema;
  body?: TSchema;
  headers?: TSchema;
  response?: Record<number, TSchema>;
  /**
   * A body the route takes or not (no body at all is the common case): its handler checks it,
   * the validator does not see it (`endpoint` leaves it out), the client is typed from it.
   */
  optionalBody?: TSchema;
}

/** The routes of each kind of reported object (KIND_PATHS), the same shapes for every kind. */
type KindPath = keyof typeof R.KIND_PATHS;
const KindList = {
  params: Type.Object({ id: Uuid }, { additionalProperties: false }),
  querystring: R.RuntimeObjectListQuery,
  response: withErrors({ 200: RuntimeObjectPage }),
};
const KindGet = { params: R.ObjectParams, response: withErrors({ 200: RuntimeObjectDetail }) };
const RuntimeKindList = {
  params: R.RuntimeParams,
  querystring: R.RuntimeObjectListQuery,
  response: withErrors({ 200: RuntimeObjectPage }),
};
const RuntimeKindGet = { params: R.RuntimeObjectParams, response: withErrors({ 200: RuntimeObjectDetail }) };
type KindRoutes = { [P in KindPath as `GET /v1/tenants/:id/${P}`]: typeof KindList } & {
  [P in KindPath as `GET /v1/tenants/:id/${P}/:namespace/:name`]: typeof KindGet;
} & { [P in KindPath as `GET /v1/tenants/:id/runtimes/:name/objects/${P}`]: typeof RuntimeKindList } & {
  [P in KindPath as `GET /v1/tenants/:id/runtimes/:name/objects/${P}/:namespace/:objectName`]: typeof RuntimeKindGet;
};
function kindRoutes(): KindRoutes {
  const out: Record<string, RouteShape> = {};
  for (const path of Object.keys(R.KIND_PATHS)) {
    out[`GET /v1/tenants/:id/${path}`] = KindList;
    out[`GET /v1/tenants/:id/${path}/:namespace/:name`] = KindGet;
    out[`GET /v1/tenants/:id/runtimes/:name/objects/${path}`] = RuntimeKindList;
    out[`GET /v1/tenants/:id/runtimes/:name/objects/${path}/:namespace/:objectName`] = RuntimeKindGet;
  }
  return out as KindRoutes;
}

export const API_ROUTES = {
  // provisioner/http/routes/signup.ts
  'POST /v1/signup': {
    body: R.SignupBody,
    headers: Type.Object({
      'idempotency-key': Type.Optional(
        Type.String({
          pattern: IDEMPOTENCY_KEY,
          description:
            'a secret of 22 to 255 characters of A-Z, a-z, 0-9, - and _ (a UUID or `openssl rand -hex 16`): the same key and body replay the first answer, with its API key, for an hour; the same key with another body is 409 IDEMPOTENCY_KEY_REUSED, and while the first request runs 409 IDEMPOTENCY_KEY_IN_PROGRESS',
        }),
      ),
    }),
    response: withErrors({ 202: SignupResponse }),
  },
  // provisioner/http/routes/tenants.ts
  'GET /v1/tenants': {
    querystring: R.TenantListQuery,
    response: withErrors({
      200: TenantPage,
    }),
  },
  'GET /v1/tenants/summary': {
    querystring: Type.Omit(R.TenantListQuery, ['phase', 'sort', 'order', 'limit', 'cursor']),
    response: withErrors({
      200: TenantSummary,
    }),
  },
  'GET /v1/tenants/events': {
    querystring: Type.Object(
      {
        id: Type.Optional(Uuid),
        after: Type.Optional(
          Type.String({
            pattern: STREAM_CURSOR,
            description: 'start after the event with this id (0: from the start)',
          }),
        ),
      },
      { additionalProperties: false },
    ),
  },
  'GET /v1/tenants/:id': {
    params: IdParams,
    response: withErrors({ 200: Type.Ref('Tenant') }),
  },
  'PATCH /v1/tenants/:id': {
    params: IdParams,
    body: R.TenantPatchBody,
    response: withErrors({ 202: Accepted }),
  },
  'POST /v1/tenants/:id/upgrade': {
    params: IdParams,
    body: R.TenantUpgradeBody,
    response: withErrors({ 202: Accepted }),
  },
  'POST /v1/tenants/:id/suspend': {
    params: IdParams,
    optionalBody: Type.Object(
      { reason: Type.Optional(DisplayText({ minLength: 1, maxLength: 500 })) },
      { additionalProperties: false },
    ),
    response: withErrors({ 202: Accepted }),
  },
  'POST /v1/tenants/:id/resume': {
    params: IdParams,
    response: withErrors({ 202: Accepted }),
  },
  'POST /v1/tenants/:id/sleep': {
    params: IdParams,
    response: withErrors({ 202: Accepted }),
  },
  'POST /v1/tenants/:id/wake': {
    params: IdParams,
    response: withErrors({ 202: Accepted }),
  },
  'POST /v1/tenants/:id/retry': {
    params: IdParams,
    response: withErrors({ 202: Accepted }),
  },
  'DELETE /v1/tenants/:id': {
    params: IdParams,
    response: withErrors({ 202: Accepted }),
  },
  // provisioner/http/routes/operations.ts
  'GET /v1/tenants/:id/operations': {
    params: IdParams,
    querystring: Type.Object(
      {
        limit: Type.Optional(BoundedInteger({ minimum: 1, maximum: 200, default: 50 })),
        cursor: Type.Optional(Type.String({ maxLength: 512 })),
      },
      { additionalProperties: false },
    ),
    response: withErrors({
      200: OperationPage,
    }),
  },
  'GET /v1/operations/:id': {
    params: IdParams,
    response: withErrors({ 200: Type.Ref('Operation') }),
  },
  'GET /v1/operations/:id/log': {
    params: IdParams,
    querystring: Type.Object(
      {
        follow: Type.Optional(
          StringEnum(['1', '0', 'true', 'false'] as const, {
            description: '1 or true: stream with Server-Sent Events',
          }),
        ),
        after: Type.Optional(BoundedInteger({ minimum: 0, description: 'return lines after this sequence number' })),
        limit: Type.Optional(BoundedInteger({ minimum: 1, maximum: 5000, default: 1000 })),
      },
      { additionalProperties: false },
    ),
    response: withErrors({
      200: LogPage,
    }),
  },
  // provisioner/http/routes/clusters.ts
  'GET /v1/clusters': {
    response: withErrors({ 200: Type.Object({ items: Type.Array(Type.Ref('Cluster')) }) }),
  },
  'GET /v1/clusters/:name': {
    params: R.ClusterNameParams,
    response: withErrors({ 200: Type.Ref('Cluster') }),
  },
  'POST /v1/clusters': {
    body: R.ClusterRegisterBody,
    response: withErrors({ 201: Type.Ref('Cluster') }),
  },
  'POST /v1/clusters/:name/cordon': {
    params: R.ClusterNameParams,
    response: withErrors({ 200: Type.Ref('Cluster') }),
  },
  'POST /v1/clusters/:name/uncordon': {
    params: R.ClusterNameParams,
    response: withErrors({ 200: Type.Ref('Cluster') }),
  },
  'PUT /v1/clusters/:name': {
    params: R.ClusterNameParams,
    body: R.ClusterPutBody,
    response: withErrors({ 200: ClusterPutAnswer, 201: ClusterPutAnswer }),
  },
  // provisioner/http/routes/keys.ts
  'GET /v1/whoami': {
    response: withErrors({
      200: Identity,
    }),
  },
  'POST /v1/keys': {
    body: R.KeyCreateBody,
    response: withErrors({ 201: CreatedKey }),
  },
  'GET /v1/keys': {
    querystring: Type.Object(
      { tenantId: Type.Optional(Uuid), includeRevoked: Type.Optional(Type.Boolean()) },
      { additionalProperties: false },
    ),
    response: withErrors({ 200: Type.Object({ items: Type.Array(Type.Ref('ApiKey')) }) }),
  },
  'DELETE /v1/keys/:id': {
    params: IdParams,
    response: withErrors({ 200: Type.Ref('ApiKey') }),
  },
  // provisioner/http/routes/runtime-versions.ts
  'GET /v1/runtime-versions': {
    response: withErrors({
      200: RuntimeVersionList,
    }),
  },
  'PUT /v1/runtime-versions/:version/availability': {
    params: Type.Object({ version: Type.String({ maxLength: 32 }) }, { additionalProperties: false }),
    body: Type.Object({ availability: StringEnum(AVAILABILITIES) }, { additionalProperties: false }),
    response: withErrors({ 200: RuntimeVersionInfo }),
  },
  'GET /v1/runtime-versions/paths': {
    response: withErrors({ 200: Type.Object({ items: Type.Array(PathInfo) }) }),
  },
  'GET /v1/plans': {
    response: withErrors({ 200: Type.Object({ items: Type.Array(PlanInfo) }) }),
  },
  'GET /v1/regions': {
    response: withErrors({ 200: Type.Object({ items: Type.Array(RegionInfo) }) }),
  },
  // provisioner/http/routes/capacity.ts
  'GET /v1/capacity': {
    response: withErrors({ 200: Capacity }),
  },
  // provisioner/http/routes/audit.ts
  'GET /v1/audit': {
    querystring: Type.Object(
      {
        targetType: Type.Optional(Type.String({ maxLength: 40 })),
        targetId: Type.Optional(Type.String({ maxLength: 100 })),
        before: Type.Optional(BoundedInteger({ minimum: 1, description: 'return entries with id below this' })),
        limit: Type.Optional(BoundedInteger({ minimum: 1, maximum: 500, default: 100 })),
      },
      { additionalProperties: false },
    ),
    response: withErrors({ 200: Type.Object({ items: Type.Array(R.AuditEntry) }) }),
  },
  // provisioner/http/routes/doctor.ts
  'GET /v1/doctor': {
    response: withErrors({ 200: Type.Ref('DoctorReport') }),
  },
  // provisioner/http/routes/fleet-upgrades.ts
  'POST /v1/fleet-upgrades': {
    querystring: Type.Object(
      { dryRun: Type.Optional(StringEnum(['1', '0', 'true', 'false'] as const)) },
      { additionalProperties: false },
    ),
    body: R.FleetCreateBody,
    response: withErrors({
      200: FleetPlan,
      201: Type.Object({ fleetUpgrade: Type.Ref('FleetUpgrade'), plan: FleetPlan }),
    }),
  },
  'GET /v1/fleet-upgrades': {
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
  'GET /v1/fleet-upgrades/:id': {
    params: IdParams,
    response: withErrors({ 200: Type.Ref('FleetUpgrade') }),
  },
  'GET /v1/fleet-upgrades/:id/events': {
    params: IdParams,
    querystring: Type.Object(
      { after: Type.Optional(BoundedInteger({ minimum: 0, description: 'events after this seq' })) },
      { additionalProperties: false },
    ),
    response: withErrors({ 200: Type.String({ description: 'text/event-stream' }) }),
  },
  'POST /v1/fleet-upgrades/:id/pause': {
    params: IdParams,
    optionalBody: Type.Object(
      { reason: Type.Optional(DisplayText({ minLength: 1, maxLength: 500 })) },
      { additionalProperties: false },
    ),
    response: withErrors({ 200: Type.Ref('FleetUpgrade') }),
  },
  'POST /v1/fleet-upgrades/:id/resume': {
    params: IdParams,
    response: withErrors({ 200: Type.Ref('FleetUpgrade') }),
  },
  'POST /v1/fleet-upgrades/:id/override-windows': {
    params: IdParams,
    body: Type.Object({ reason: DisplayText({ minLength: 1, maxLength: 500 }) }, { additionalProperties: false }),
    response: withErrors({ 200: Type.Ref('FleetUpgrade') }),
  },
  'POST /v1/fleet-upgrades/:id/tenants/:tenantId/skip-gate': {
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
  'POST /v1/fleet-upgrades/:id/abort': {
    params: IdParams,
    optionalBody: Type.Object(
      { rollback: Type.Optional(Type.Boolean()), reason: Type.Optional(DisplayText({ minLength: 1, maxLength: 500 })) },
      { additionalProperties: false },
    ),
    response: withErrors({ 200: Type.Ref('FleetUpgrade') }),
  },
  // provisioner/http/routes/managed-clusters.ts
  'GET /v1/tenants/:id/managed-clusters': {
    params: R.ManagedClusterTenantParams,
    response: withErrors({ 200: Type.Object({ items: Type.Array(Type.Ref('ManagedCluster')) }) }),
  },
  'GET /v1/tenants/:id/managed-clusters/:name': {
    params: R.ManagedClusterParams,
    response: withErrors({ 200: Type.Ref('ManagedCluster') }),
  },
  'POST /v1/tenants/:id/managed-clusters': {
    params: R.ManagedClusterTenantParams,
    body: R.ManagedClusterRegisterBody,
    response: withErrors({ 201: Type.Union([ManagedClusterRegistered, R.IssuedBootstrap]) }),
  },
  'DELETE /v1/tenants/:id/managed-clusters/:name': {
    params: R.ManagedClusterParams,
    querystring: R.ManagedClusterRemoveQuery,
    response: withErrors({
      202: Type.Object({
        operationId: Uuid,
        revocation: Type.Optional(
          Type.Object(
            {
              serviceAccount: Type.String({
                description: '`namespace/name` of the ServiceAccount whose tokens the control plane held',
              }),
              revoked: Type.Boolean({
                description:
                  "the tokens issued no longer work: the bootstrap's ServiceAccount, or the Secret they are bound to, is gone",
              }),
              removed: Type.Array(Type.String(), { description: 'the RBAC objects removed' }),
              binding: Type.Optional(
                Type.String({ description: '`namespace/name` of the Secret the tokens were bound to' }),
              ),
              command: Type.Optional(
                Type.String({ description: 'when not revoked: the command that revokes them on the cluster' }),
              ),
              validUntil: Type.Optional(
                Type.String({
                  format: 'date-time',
                  description: 'tokens that were not bound: when the last one issued expires (it works until then)',
                }),
              ),
              error: Type.Optional(Type.String({ description: 'why the revocation did not complete' })),
            },
            { description: 'absent when the credentials were kept as given (nothing was issued)' },
          ),
        ),
      }),
      204: Type.Null({ description: 'no such registration (any more): nothing to do' }),
    }),
  },
  'POST /v1/managed-clusters/redeem': {
    body: R.ManagedClusterRedeemBody,
    response: withErrors({ 201: ManagedClusterRegistered }),
  },
  // provisioner/http/routes/webhooks.ts
  'POST /v1/tenants/:id/webhook-url': {
    params: IdParams,
    response: withErrors({ 201: Type.Object({ url: Type.String({ format: 'uri' }) }) }),
  },
  // provisioner/http/routes/runtimes.ts
  'GET /v1/tenants/:id/runtimes': {
    params: R.RuntimeTenantParams,
    response: withErrors({ 200: Type.Object({ items: Type.Array(Type.Ref('Runtime')) }) }),
  },
  'GET /v1/tenants/:id/runtimes/:name': {
    params: R.RuntimeNameParams,
    response: withErrors({ 200: Type.Ref('Runtime') }),
  },
  'POST /v1/tenants/:id/runtimes': {
    params: R.RuntimeTenantParams,
    body: R.RuntimeRegisterBody,
    headers: Type.Object({
      'idempotency-key': Type.Optional(
        Type.String({
          pattern: IDEMPOTENCY_KEY,
          description:
            'a secret of 22 to 255 characters of A-Z, a-z, 0-9, - and _: the same key and body replay the first answer, with its bootstrap token, for an hour',
        }),
      ),
    }),
    response: withErrors({ 201: RuntimeRegistered }),
  },
  'DELETE /v1/tenants/:id/runtimes/:name': {
    params: R.RuntimeNameParams,
    response: withErrors({ 200: RuntimeRemoved }),
  },
  'GET /v1/tenants/:id/runtimes/:name/bundle': {
    params: R.RuntimeNameParams,
    querystring: R.RuntimeBundleQuery,
    response: withErrors({ 200: RuntimeUpgradeBundle }),
  },
  'POST /v1/tenants/:id/runtimes/:name/upgrade': {
    params: R.RuntimeNameParams,
    body: R.RuntimeUpgradeBody,
    response: withErrors({ 200: RuntimeUpgraded }),
  },
  'GET /v1/runtimes': {
    querystring: R.RuntimeListAllQuery,
    response: withErrors({ 200: RuntimePage }),
  },
  'POST /v1/runtimes/bootstrap': {
    body: Type.Optional(Type.Object({}, { additionalProperties: false })),
    response: withErrors({ 200: RuntimeBootstrapAnswer }),
  },
  // provisioner/http/routes/app-history.ts
  'GET /v1/tenants/:id/applications/:namespace/:name/history': {
    params: R.TenantAppParams,
    querystring: R.HistoryQuery,
    response: withErrors({ 200: ApplicationHistoryPage }),
  },
  'GET /v1/tenants/:id/runtimes/:name/objects/applications/:namespace/:objectName/history': {
    params: R.RuntimeAppParams,
    querystring: R.HistoryQuery,
    response: withErrors({ 200: ApplicationHistoryPage }),
  },
  'GET /v1/tenants/:id/applications/:namespace/:name/diff': {
    params: R.TenantAppParams,
    querystring: R.DiffQuery,
    response: withErrors({ 200: ApplicationDiff }),
  },
  'GET /v1/tenants/:id/runtimes/:name/objects/applications/:namespace/:objectName/diff': {
    params: R.RuntimeAppParams,
    querystring: R.DiffQuery,
    response: withErrors({ 200: ApplicationDiff }),
  },
  'GET /v1/tenants/:id/applications/:namespace/:name/history/stream': {
    params: R.TenantAppParams,
    querystring: R.HistoryStreamQuery,
  },
  'GET /v1/tenants/:id/runtimes/:name/objects/applications/:namespace/:objectName/history/stream': {
    params: R.RuntimeAppParams,
    querystring: R.HistoryStreamQuery,
  },
  // provisioner/http/routes/runtime-objects.ts
  'GET /v1/tenants/:id/changes': {
    params: Type.Object({ id: Uuid }, { additionalProperties: false }),
    querystring: R.ChangesQuery,
  },
  'GET /v1/tenants/:id/runtimes/:name/objects/changes': {
    params: R.RuntimeParams,
    querystring: R.ChangesQuery,
  },
  // provisioner/http/routes/runtime-objects.ts: the reported objects of each kind (KIND_PATHS)
  ...kindRoutes(),
} as const satisfies Record<string, RouteShape>;

export type ApiRoutes = typeof API_ROUTES;
/** A route of the map: `'POST /v1/tenants/:id/sleep'`. */
export type RouteKey = Extract<keyof ApiRoutes, string>;
export type MethodOf<K extends string> = K extends `${infer M} ${string}` ? M : never;
export type PathOf<K extends string> = K extends `${string} ${infer P}` ? P : never;

/** The documentation a route file adds to its route's shape (the OpenAPI document shows it). */
export interface RouteDoc {
  summary: string;
  description?: string;
  tags: string[];
}

/**
 * What a route registers with (`app.route({ ...endpoint(key, doc), config, handler })`): its
 * method and path from the key, its schemas from the map.
 */
export function endpoint<K extends RouteKey, D extends RouteDoc>(
  key: K,
  doc: D,
): { method: MethodOf<K>; url: PathOf<K>; schema: Omit<ApiRoutes[K], 'optionalBody'> & D } {
  const space = key.indexOf(' ');
  const { optionalBody: _checkedByTheHandler, ...shape } = API_ROUTES[key] as RouteShape;
  return {
    method: key.slice(0, space) as MethodOf<K>,
    url: key.slice(space + 1) as PathOf<K>,
    schema: { ...(shape as Omit<ApiRoutes[K], 'optionalBody'>), ...doc },
  };
}
