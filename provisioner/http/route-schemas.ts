/**
 * The schemas of the API's requests: path parameters, queries, bodies and headers (and the few
 * answers only one route gives), named once here and used by the route map (api-routes.ts), which
 * the routes register from and the clients are typed from. Like schemas.ts, this module imports
 * only modules that need no Node.js: the console's type-check reads it.
 */
import { Type } from 'typebox';
import {
  BoundedInteger,
  CONTROL_FREE,
  DisplayText,
  DnsLabel,
  MaintenanceWindowSchema,
  NUL_FREE,
  Revision,
  Semver,
  STREAM_CURSOR,
  StringEnum,
  TenantSettingsSchema,
  Uuid,
} from '../api/schemas.ts';
import { MAX_FREEZES, PHASES, TENANT_SORT_NAMES } from '../store/states.ts';
import { PLAN_NAMES } from '../../tenants/plan-names.ts';

// ---- from routes/signup.ts

export const SignupBody = Type.Object(
  {
    organization: DnsLabel,
    email: Type.String({ format: 'email', maxLength: 254 }),
    plan: Type.Optional(StringEnum(PLAN_NAMES, { description: 'plan name (GET /v1/plans)' })),
    region: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 63,
        pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$',
        description:
          'place the runtime on a root cluster of this region (GET /v1/regions lists them); default: any region',
      }),
    ),
    runtimeVersion: Type.Optional(Semver),
    timeZone: Type.Optional(TenantSettingsSchema.properties.timeZone),
  },
  { additionalProperties: false },
);

// ---- from routes/tenants.ts

export const TenantListQuery = Type.Object(
  {
    phase: Type.Optional(StringEnum(PHASES)),
    runtimeVersion: Type.Optional(Semver),
    cluster: Type.Optional(Type.String({ maxLength: 63 })),
    plan: Type.Optional(Type.String({ maxLength: 40 })),
    region: Type.Optional(Type.String({ maxLength: 63 })),
    q: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 100,
        description: 'part of the organization (case-insensitive) or a tenant id',
      }),
    ),
    sort: Type.Optional(StringEnum(TENANT_SORT_NAMES, { description: 'default createdAt' })),
    order: Type.Optional(StringEnum(['asc', 'desc'] as const, { description: 'default asc' })),
    limit: Type.Optional(BoundedInteger({ minimum: 1, maximum: 200, default: 50 })),
    cursor: Type.Optional(Type.String({ maxLength: 512 })),
  },
  { additionalProperties: false },
);

export const TenantPatchBody = Type.Object(
  {
    plan: Type.Optional(Type.String({ minLength: 1, maxLength: 40 })),
    runtimeVersion: Type.Optional(Semver),
    suspended: Type.Optional(Type.Boolean()),
    // Every setting of the tenant (store/tenant-shapes.ts: maintenanceWindows, timeZone), each optional.
    ...Type.Partial(TenantSettingsSchema).properties,
  },
  { additionalProperties: false, minProperties: 1 },
);

export const TenantUpgradeBody = Type.Object({ version: Semver }, { additionalProperties: false });

// ---- from routes/clusters.ts

/** The longest kubeconfig, in characters (real ones with inline certificates are 5 to 20 KiB). */
export const KUBECONFIG_MAX_LENGTH = 128 * 1024;

/**
 * The route's body limit: a kubeconfig of KUBECONFIG_MAX_LENGTH characters fits even when every
 * character is JSON-escaped (`\uXXXX`, 6 bytes), with room for the other fields; other routes keep
 * PROVISIONER_BODY_LIMIT.
 */
export const REGISTER_BODY_LIMIT = 6 * KUBECONFIG_MAX_LENGTH + 64 * 1024;

export const ClusterNameParams = Type.Object({ name: DnsLabel }, { additionalProperties: false });

export const ClusterRegisterBody = Type.Object(
  {
    name: DnsLabel,
    region: Type.String({ minLength: 1, maxLength: 63, pattern: '^[a-z0-9-]+$' }),
    capacity: Type.Integer({ minimum: 0, maximum: 100_000, description: 'maximum tenants placed on this cluster' }),
    labels: Type.Optional(
      Type.Unsafe<Record<string, string>>({
        type: 'object',
        propertyNames: { type: 'string', minLength: 1, maxLength: 63, pattern: CONTROL_FREE },
        additionalProperties: { type: 'string', maxLength: 63, pattern: CONTROL_FREE },
        maxProperties: 32,
        description: 'names and values without control characters',
      }),
    ),
    plans: Type.Optional(
      Type.Array(Type.String({ maxLength: 40 }), { maxItems: 16, description: 'plans allowed here; empty means all' }),
    ),
    kubeconfig: Type.String({
      minLength: 1,
      maxLength: KUBECONFIG_MAX_LENGTH,
      description: `kubeconfig contents (YAML or JSON); stored encrypted. The request body may be up to ${REGISTER_BODY_LIMIT} bytes`,
    }),
    force: Type.Optional(
      Type.Boolean({
        description:
          'store the cluster even when its API server cannot be reached, refuses the credentials or lacks permissions the tenants program needs (422 CLUSTER_UNREACHABLE, CLUSTER_UNAUTHORIZED, CLUSTER_PERMISSIONS_MISSING otherwise); the kubeconfig policy applies either way',
      }),
    ),
  },
  { additionalProperties: false },
);

/** The registration of `PUT /v1/clusters/:name`: the name comes from the path. */
export const ClusterPutBody = Type.Omit(ClusterRegisterBody, ['name'], { additionalProperties: false });

// ---- from routes/keys.ts

export const KeyCreateBody = Type.Object(
  {
    role: StringEnum(['admin', 'operator', 'tenant', 'runtime'] as const),
    name: DisplayText({ minLength: 1, maxLength: 100 }),
    tenantId: Type.Optional(Uuid),
  },
  { additionalProperties: false },
);

// ---- from routes/audit.ts

export const AuditEntry = Type.Object({
  id: Type.Integer(),
  at: Type.String(),
  actor: Type.String(),
  actorRole: Type.String(),
  action: Type.String(),
  targetType: Type.String(),
  targetId: Type.String(),
  before: Type.Unknown(),
  after: Type.Unknown(),
  requestId: Type.Union([Type.String(), Type.Null()]),
});

// ---- from routes/fleet-upgrades.ts

/** The most tenants an explicit id list may name. */
export const MAX_SELECTED_IDS = 10_000;

export const FleetWaveBody = Type.Object(
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

export const FleetSelector = Type.Object(
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

export const FleetCreateBody = Type.Object(
  {
    targetVersion: Semver,
    selector: FleetSelector,
    waves: Type.Optional(
      Type.Array(FleetWaveBody, {
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

// ---- from routes/managed-clusters.ts

export const ManagedClusterTenantParams = Type.Object({ id: Uuid }, { additionalProperties: false });

export const ManagedClusterParams = Type.Object({ id: Uuid, name: DnsLabel }, { additionalProperties: false });

export const ManagedClusterNamespace = Type.String({
  minLength: 1,
  maxLength: 63,
  pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$',
  description: 'a namespace name',
});

export const ManagedClusterRegisterBody = Type.Object(
  {
    name: DnsLabel,
    namespaces: Type.Optional(
      Type.Array(ManagedClusterNamespace, {
        maxItems: 32,
        uniqueItems: true,
        description:
          'namespaces Argo CD manages on the cluster; the credentials must be allowed every verb on every resource there. Empty or absent: the whole cluster',
      }),
    ),
    kubeconfig: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: KUBECONFIG_MAX_LENGTH,
        description:
          'kubeconfig contents (YAML or JSON) with inline credentials (token, client certificate, CA); exec, auth-provider and file paths are refused. Or give server and token',
      }),
    ),
    server: Type.Optional(
      Type.String({ minLength: 1, maxLength: 2048, pattern: NUL_FREE, description: 'https URL of the API server' }),
    ),
    token: Type.Optional(
      Type.String({ minLength: 1, maxLength: 16 * 1024, pattern: NUL_FREE, description: 'bearer token (with server)' }),
    ),
    caData: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 64 * 1024,
        pattern: NUL_FREE,
        description: "the API server's CA certificate: PEM, or base64 of PEM (with server)",
      }),
    ),
    reach: Type.Optional(
      StringEnum(['controlPlane', 'runtime'] as const, {
        description:
          "where the cluster is reached from: `controlPlane` (default; the control plane connects to it, within its address policy) or `runtime` (only the tenant's runtime reaches it: the checks and the health probes go through the runtime's tunnel, which must be connected)",
      }),
    ),
    bootstrap: Type.Optional(
      Type.Object(
        {
          namespaces: Type.Optional(
            Type.Array(ManagedClusterNamespace, {
              maxItems: 32,
              uniqueItems: true,
              description: 'namespaces where the ServiceAccount gets a Role with every verb on every resource',
            }),
          ),
          clusterWide: Type.Optional(
            Type.Boolean({ description: 'a ClusterRole instead of namespaced Roles: only when asked for explicitly' }),
          ),
          server: Type.Optional(
            Type.String({
              minLength: 1,
              maxLength: 2048,
              pattern: NUL_FREE,
              description: "the URL the control plane reaches the cluster's API server at (written into the Job)",
            }),
          ),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);

export const IssuedBootstrap = Type.Object({
  bootstrap: Type.Object({
    name: Type.String(),
    token: Type.String({ description: 'single-use bootstrap token; shown once, stored hashed' }),
    expiresAt: Type.String({ format: 'date-time' }),
    namespaces: Type.Array(Type.String()),
    clusterWide: Type.Boolean(),
    job: Type.String({
      description: 'manifest (YAML) to apply on the cluster: ServiceAccount, RBAC, the redeeming Job',
    }),
    command: Type.String({ description: "the same from the tenant's machine with its kubeconfig" }),
  }),
});

export const ManagedClusterRedeemBody = Type.Object(
  {
    server: Type.String({
      minLength: 1,
      maxLength: 2048,
      pattern: NUL_FREE,
      description: "https URL the control plane reaches the cluster's API server at",
    }),
    token: Type.String({
      minLength: 1,
      maxLength: 16 * 1024,
      pattern: NUL_FREE,
      description: "a token of the bootstrap's own ServiceAccount (argocd-manager/argocd-manager-<id>)",
    }),
    caData: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 64 * 1024,
        pattern: NUL_FREE,
        description: "the API server's CA certificate: PEM, or base64 of PEM",
      }),
    ),
  },
  { additionalProperties: false },
);

export const ManagedClusterRemoveQuery = Type.Object(
  {
    removeRbac: Type.Optional(
      Type.Union([Type.Literal('1'), Type.Literal('true'), Type.Literal('0'), Type.Literal('false')], {
        description: 'also delete the Roles and bindings a bootstrap created (1 or true)',
      }),
    ),
  },
  { additionalProperties: false },
);

// ---- from routes/runtimes.ts

export const RuntimeTenantParams = Type.Object({ id: Uuid }, { additionalProperties: false });

export const RuntimeNameParams = Type.Object({ id: Uuid, name: DnsLabel }, { additionalProperties: false });

export const RuntimeRegisterBody = Type.Object(
  {
    name: DnsLabel,
    mode: StringEnum(['hosted', 'hybrid'] as const, {
      description: "`hybrid` (a tenant's hosted runtime comes with its signup: `hosted` is refused with 409)",
    }),
    access: StringEnum(['tunnel', 'ingress'] as const, {
      description:
        "how the control plane reaches the runtime: `tunnel` (its tunnel client dials out over WSS) or `ingress` (the customer's ingress, ingressUrl)",
    }),
    ingressUrl: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 2048,
        pattern: NUL_FREE,
        description:
          "access=ingress: the https origin the customer's ingress serves the runtime at (`https://host[:port]`: no credentials, path, query, fragment, whitespace or control character); stored as its origin (lower-case host, default port dropped)",
      }),
    ),
    argo: StringEnum(['new', 'existing'] as const, {
      description:
        "`new`: the install brings its own Argo CD; `existing`: beside the customer's Argo CD (argoNamespace)",
    }),
    argoNamespace: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 63,
        pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$',
        description: "argo=existing: the namespace of the customer's Argo CD",
      }),
    ),
    upgrades: Type.Optional(
      StringEnum(['customer', 'agent'] as const, {
        description:
          'who applies upgrades: `customer` (default: the API gives the new bundle) or `agent` (the in-cluster upgrader, opted in at install)',
      }),
    ),
    version: Type.Optional(Semver),
  },
  { additionalProperties: false },
);

export const RuntimeBundleQuery = Type.Object(
  {
    version: Type.Optional({
      ...Semver,
      description: "the catalog version of the bundle (default: the version the runtime's customer is asked to run)",
    }),
    from: Type.Optional({
      ...Semver,
      description:
        'the version to compare with (default: the version before the last change when `version` is the current one, else the current one)',
    }),
  },
  { additionalProperties: false },
);

export const RuntimeUpgradeBody = Type.Object({ version: Semver }, { additionalProperties: false });

export const RuntimeListAllQuery = Type.Object(
  {
    limit: Type.Optional(BoundedInteger({ minimum: 1, maximum: 200, default: 50 })),
    cursor: Type.Optional(Type.String({ maxLength: 1024, pattern: NUL_FREE })),
    mode: Type.Optional(StringEnum(['hosted', 'hybrid'] as const)),
  },
  { additionalProperties: false },
);

// ---- from routes/app-history.ts

export const AppName = Type.String({ minLength: 1, maxLength: 253, pattern: CONTROL_FREE });

export const TenantAppParams = Type.Object(
  { id: Uuid, namespace: AppName, name: AppName },
  { additionalProperties: false },
);

export const RuntimeAppParams = Type.Object(
  { id: Uuid, name: DnsLabel, namespace: AppName, objectName: AppName },
  { additionalProperties: false },
);

export const HistoryQuery = Type.Object(
  {
    limit: Type.Optional(BoundedInteger({ minimum: 1, maximum: 200, default: 50 })),
    cursor: Type.Optional(Type.String({ maxLength: 1024 })),
  },
  { additionalProperties: false },
);

export const DiffQuery = Type.Object({ revision: Type.Optional(Revision) }, { additionalProperties: false });

export const HistoryStreamQuery = Type.Object(
  {
    after: Type.Optional(
      Type.String({ pattern: STREAM_CURSOR, description: 'start after the event with this id (0: from the start)' }),
    ),
  },
  { additionalProperties: false },
);

// ---- from routes/runtime-objects.ts

/** The paths of the three kinds, and the singular the change stream's `kind` filter takes. */
export const KIND_PATHS = {
  applications: 'Application',
  rollouts: 'Rollout',
  workflows: 'Workflow',
  products: 'Product',
  promotions: 'Promotion',
  promotionpreviews: 'PromotionPreview',
} as const;

export const KIND_FILTER = {
  application: 'Application',
  rollout: 'Rollout',
  workflow: 'Workflow',
  product: 'Product',
  promotion: 'Promotion',
  promotionpreview: 'PromotionPreview',
} as const;

// Names a runtime reports are shown in terminals and the console: no control characters (400 naming the field).
export const ObjectName = Type.String({ minLength: 1, maxLength: 253, pattern: CONTROL_FREE });

export const ObjectFilter = Type.String({ minLength: 1, maxLength: 63 });

export const RuntimeObjectListQuery = Type.Object(
  {
    health: Type.Optional(ObjectFilter),
    sync: Type.Optional(ObjectFilter),
    phase: Type.Optional(ObjectFilter),
    namespace: Type.Optional(Type.String({ minLength: 1, maxLength: 253 })),
    namePrefix: Type.Optional(Type.String({ minLength: 1, maxLength: 253 })),
    limit: Type.Optional(BoundedInteger({ minimum: 1, maximum: 500, default: 100 })),
    cursor: Type.Optional(Type.String({ maxLength: 1024 })),
  },
  { additionalProperties: false },
);

export const ObjectParams = Type.Object(
  { id: Uuid, namespace: ObjectName, name: ObjectName },
  { additionalProperties: false },
);

export const RuntimeParams = Type.Object({ id: Uuid, name: DnsLabel }, { additionalProperties: false });

export const RuntimeObjectParams = Type.Object(
  { id: Uuid, name: DnsLabel, namespace: ObjectName, objectName: ObjectName },
  { additionalProperties: false },
);

// ---- from routes/runtime-objects.ts (the change streams)
export const ChangesQuery = Type.Object(
  {
    kind: Type.Optional(StringEnum(Object.keys(KIND_FILTER) as (keyof typeof KIND_FILTER)[])),
    after: Type.Optional(
      Type.String({
        pattern: STREAM_CURSOR,
        description: 'start after the event with this id (0: from the start)',
      }),
    ),
  },
  { additionalProperties: false },
);
