/**
 * The API's shapes as JSON schemas (TypeBox): the answers, the streams' events and the pieces the
 * routes' request schemas (http/route-schemas.ts) are built from. Fastify validates requests and
 * serializes answers with them, the OpenAPI document is generated from them and the API's types
 * (types.ts) derive from them, so nothing is written twice. Below http/: services answer with
 * these shapes.
 */
import { Type, type TSchema } from 'typebox';
import {
  AVAILABILITIES,
  FLEET_STATES,
  FLEET_TENANT_STATES,
  OPERATION_KINDS,
  OPERATION_STATES,
  PHASES,
  SKIPPABLE_GATE_CHECKS,
  WAVE_STATES,
} from '../store/states.ts';
import { ERROR_CODES, type ErrorCode } from '../errors.ts';
import { MaintenanceWindowSchema, TenantSettingsSchema, TenantSpecSchema } from '../store/tenant-shapes.ts';
import { REPORTED_KIND_NAMES } from '../../runtime/protocol/kinds.ts';

export const StringEnum = <T extends readonly string[]>(values: T, opts: { description?: string } = {}) =>
  Type.Unsafe<T[number]>({ type: 'string', enum: [...values], ...opts });

/**
 * The router's limit on one path parameter (fastify's `maxParamLength`; longer is 414
 * URI_TOO_LONG): above the longest path parameter a schema allows (a Kubernetes name, 253).
 */
export const MAX_PATH_PARAM_LENGTH = 256;

/** A string without NUL characters (PostgreSQL's text cannot hold one): every request string follows it (request-rules.ts). */
export const NUL_FREE = '^[^\\u0000]*$';
/** What a stream cursor looks like (the pattern of a stream's `after=`; http/stream-cursor.ts reads them). */
export const STREAM_CURSOR = '^(0|[A-Za-z0-9_-]{40,200})$';

/** A string without control characters (C0, DEL and C1): names and labels people read. */
export const CONTROL_FREE = '^[^\\u0000-\\u001f\\u007f-\\u009f]*$';

/**
 * The public route's Idempotency-Key is a secret that replays the first answer (with its API
 * key): at least 22 characters of base64url, hex or a UUID (128 bits of randomness), never a
 * counter or a short word.
 */
export const IDEMPOTENCY_KEY = '^[A-Za-z0-9_-]{22,255}$';

/** What a request pattern means, in the words of a 400's message (error-handler.ts). */
export const PATTERN_MEANINGS: Readonly<Record<string, string>> = {
  [NUL_FREE]: 'must not contain NUL characters',
  [CONTROL_FREE]: 'must not contain control characters',
  [IDEMPOTENCY_KEY]:
    'must be 22 to 255 characters of A-Z, a-z, 0-9, - and _ (a random value such as a UUID or `openssl rand -hex 16`): it is the secret that replays the answer',
};

/** A name or label a person reads: no control characters (no NUL, newline, escape sequences). */
export const DisplayText = (opts: { minLength?: number; maxLength: number; description?: string }) =>
  Type.String({ ...opts, pattern: CONTROL_FREE });

/** An integer of a request, with its declared range (request-rules.ts requires one, within Number.MAX_SAFE_INTEGER). */
export const BoundedInteger = (opts: { minimum: number; maximum?: number; default?: number; description?: string }) =>
  Type.Integer({ maximum: Number.MAX_SAFE_INTEGER, ...opts });

export const Uuid = Type.String({ format: 'uuid', description: 'UUID' });
export const DnsLabel = Type.String({
  minLength: 1,
  maxLength: 40,
  pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$',
  description: 'lower-case DNS label: letters, digits and dashes, starting and ending with a letter or digit',
});
/** A Git revision or chart version: printable, no spaces. */
export const Revision = Type.String({
  minLength: 1,
  maxLength: 256,
  pattern: '^[^\\s\\u0000-\\u001f\\u007f-\\u009f]+$',
  description: 'a revision: a commit SHA, a tag, a chart version (printable, no spaces)',
});
export const Semver = Type.String({ pattern: '^\\d+\\.\\d+\\.\\d+$', maxLength: 32, description: 'x.y.z' });

export const ErrorBody = Type.Object(
  {
    error: Type.Object({
      code: StringEnum(Object.keys(ERROR_CODES) as ErrorCode[], {
        description: 'stable error code (docs/api.md lists them)',
      }),
      message: Type.String(),
      field: Type.Optional(Type.String()),
      details: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
      requestId: Type.Optional(Type.String()),
    }),
  },
  { $id: 'Error' },
);

export const Condition = Type.Object({
  type: Type.String(),
  status: StringEnum(['True', 'False', 'Unknown'] as const),
  reason: Type.String(),
  message: Type.String(),
  lastTransitionTime: Type.String({ format: 'date-time' }),
});

/** The spec and the settings (maintenance windows, time zone) are defined with the store's types (store/tenant-shapes.ts): one definition. */
export const TenantSpec = TenantSpecSchema;
export { MaintenanceWindowSchema, TenantSettingsSchema };

export const Tenant = Type.Object(
  {
    id: Uuid,
    organization: Type.String(),
    email: Type.String(),
    generation: Type.Integer(),
    spec: TenantSpec,
    status: Type.Object({
      phase: StringEnum(PHASES),
      observedGeneration: Type.Integer(),
      runtimeVersion: Type.Union([Type.String(), Type.Null()]),
      previousRuntimeVersion: Type.Union([Type.String(), Type.Null()]),
      cluster: Type.Union([Type.String(), Type.Null()]),
      endpoints: Type.Record(Type.String(), Type.String()),
      conditions: Type.Array(Condition),
      lastOperationId: Type.Union([Uuid, Type.Null()]),
      observedAt: Type.Optional(
        Type.Union([Type.String({ format: 'date-time' }), Type.Null()], {
          description: 'when a reconcile last ended well (the status was observed then); null: never',
        }),
      ),
      stale: Type.Optional(
        Type.Boolean({
          description:
            'a Ready or Suspended tenant not observed for two resync periods (PROVISIONER_RESYNC_SECONDS): its status may no longer be true',
        }),
      ),
      tunnel: Type.Optional(
        Type.Object({ connected: Type.Boolean(), since: Type.Union([Type.String(), Type.Null()]) }),
      ),
      reporting: Type.Optional(
        Type.Object(
          {
            lastHeartbeatAt: Type.String({ format: 'date-time' }),
            replicas: Type.Integer({
              description: 'event reporter replicas heard from within the stale window (60 s)',
            }),
            objects: Type.Integer({ description: 'objects the reporting replicas own, per their heartbeats' }),
            stale: Type.Boolean({
              description: 'no heartbeat within the stale window (condition Reporting=False, Stale)',
            }),
          },
          { description: "present once the runtime's event reporter has reported" },
        ),
      ),
      managedClusters: Type.Optional(
        Type.Array(
          Type.Object({
            name: Type.String(),
            server: Type.String(),
            reachable: StringEnum(['True', 'False', 'Unknown'] as const),
          }),
          {
            description:
              "the clusters the tenant's Argo CD deploys to and their Reachable status; while none is reachable, condition ActionRequired says how to connect one",
          },
        ),
      ),
      suspension: Type.Optional(
        Type.Object(
          {
            by: StringEnum(['operator', 'tenant'] as const, {
              description: "an operator's suspension is lifted only by an operator",
            }),
            reason: Type.Union([Type.String(), Type.Null()]),
          },
          { description: 'present while suspended' },
        ),
      ),
      sleep: Type.Optional(
        Type.Object(
          {
            asleep: Type.Boolean({
              description:
                'put to sleep (phase Sleeping once applied); the next request to its runtime, POST …/wake or a spec change wakes it',
            }),
            since: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], {
              description: 'when it was put to sleep; null while awake',
            }),
            wokeAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], {
              description:
                'when it was last woken; for a few minutes after, until its runtime is connected again, requests wait for it (or get 503 TENANT_WAKING) and RuntimeConnected says Waking, not an alarm',
            }),
            lastActivityAt: Type.String({
              format: 'date-time',
              description:
                'the last request that reached its runtime (written at most every 30 s); the plan sleeps after its idle time without one',
            }),
          },
          { description: 'idle sleep (docs/operations.md "Sleep")' },
        ),
      ),
    }),
    // The tenant's settings (maintenanceWindows, timeZone): set with PATCH, no operation.
    ...TenantSettingsSchema.properties,
    createdAt: Type.String({ format: 'date-time' }),
    updatedAt: Type.String({ format: 'date-time' }),
    deletedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  },
  { $id: 'Tenant' },
);

export const Operation = Type.Object(
  {
    id: Uuid,
    tenantId: Uuid,
    kind: StringEnum(OPERATION_KINDS),
    generation: Type.Integer(),
    fromVersion: Type.Union([Type.String(), Type.Null()]),
    toVersion: Type.Union([Type.String(), Type.Null()]),
    state: StringEnum(OPERATION_STATES),
    attempt: Type.Integer(),
    error: Type.Union([Type.Object({ code: Type.String(), message: Type.String() }), Type.Null()]),
    createdAt: Type.String({ format: 'date-time' }),
    startedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
    finishedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  },
  { $id: 'Operation' },
);

export const Accepted = Type.Object({
  tenant: Type.Ref('Tenant'),
  operationId: Type.String({
    format: 'uuid',
    description: 'the operation this request queued; with queued false, the last or running operation',
  }),
  queued: Type.Boolean({
    description: 'false: nothing changed that needs an operation (a repeated or no-op request); nothing was queued',
  }),
});

export const RuntimeVersionInfo = Type.Object({
  version: Type.String(),
  releaseDate: Type.String(),
  channel: StringEnum(['stable', 'latest'] as const),
  availability: StringEnum(AVAILABILITIES),
  default: Type.Boolean(),
  components: Type.Record(Type.String(), Type.String(), {
    description: 'chart versions of vcluster and the Argo charts, the Kubernetes and agents versions',
  }),
  appVersions: Type.Record(Type.String(), Type.String(), {
    description: "the Argo applications' own versions (each chart's appVersion: argoCd v3.0.6 for chart 8.0.17)",
  }),
  upgrade: Type.Object({
    minFrom: Type.Optional(Type.String()),
    steppingStone: Type.Optional(Type.Boolean({ description: 'no upgrade may jump over this version' })),
  }),
  rollback: Type.Object({
    allowed: Type.Boolean({ description: 'a tenant on this version may go back to an older one (catalog rules)' }),
    reason: Type.Optional(Type.String()),
  }),
  notes: Type.Optional(Type.String({ description: 'release notes' })),
});

export const Cluster = Type.Object(
  {
    id: Uuid,
    name: Type.String(),
    region: Type.String(),
    labels: Type.Record(Type.String(), Type.String()),
    capacity: Type.Integer(),
    plans: Type.Array(Type.String()),
    cordoned: Type.Boolean(),
    tenants: Type.Integer(),
    createdAt: Type.String({ format: 'date-time' }),
    updatedAt: Type.String({ format: 'date-time' }),
  },
  { $id: 'Cluster' },
);

export const ManagedCluster = Type.Object(
  {
    name: Type.String(),
    server: Type.String({ description: "the API server URL, as Argo CD's cluster Secret names it" }),
    namespaces: Type.Array(Type.String(), {
      description: 'namespaces Argo CD manages there; empty: the whole cluster',
    }),
    authMethod: StringEnum(['kubeconfig', 'token'] as const),
    reach: StringEnum(['controlPlane', 'runtime'] as const, {
      description:
        "where the cluster is reached from: the control plane, or only the tenant's runtime (through its tunnel)",
    }),
    serverVersion: Type.Union([Type.String(), Type.Null()], { description: 'Kubernetes version when last heard from' }),
    conditions: Type.Array(Condition, { description: '`Reachable`: the last health probe (or the registration)' }),
    lastProbeAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
    tokenRotation: Type.Union(
      [
        Type.Object({
          serviceAccount: Type.String({ description: '`namespace/name` of the ServiceAccount on the cluster' }),
          expiresAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], {
            description: 'when the token Argo CD holds now expires',
          }),
          refreshDueAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], {
            description: 'when the next token is requested',
          }),
          lastRotatedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
          rotations: Type.Integer({ minimum: 0, description: 'tokens renewed since the registration' }),
          binding: Type.Union([Type.String(), Type.Null()], {
            description:
              '`namespace/name` of the Secret the tokens are bound to: removal deletes it, which revokes them; null: not bound',
          }),
          unbound: Type.Union([Type.String(), Type.Null()], {
            description:
              'when the tokens are not bound: why, and what that means (each stays valid until it expires after removal)',
          }),
        }),
        Type.Null(),
      ],
      {
        description:
          'short-lived credentials the control plane keeps (a ServiceAccount token of about 1 h, renewed at half its life); null: the credentials as given',
      },
    ),
    createdAt: Type.String({ format: 'date-time' }),
    updatedAt: Type.String({ format: 'date-time' }),
  },
  { $id: 'ManagedCluster', description: "a cluster the tenant's Argo CD deploys to; credentials are never returned" },
);

export const ApiKeyInfo = Type.Object(
  {
    id: Uuid,
    prefix: Type.String(),
    role: StringEnum(['admin', 'operator', 'tenant', 'runtime'] as const),
    tenantId: Type.Union([Uuid, Type.Null()]),
    name: Type.String(),
    createdBy: Type.Union([Type.String(), Type.Null()]),
    createdAt: Type.String({ format: 'date-time' }),
    revokedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  },
  { $id: 'ApiKey' },
);

const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);
const DateTime = Type.String({ format: 'date-time' });

/** A page of `GET /v1/tenants`. */
export const TenantPage = Type.Object({
  items: Type.Array(Type.Ref('Tenant')),
  nextCursor: Type.Union([Type.String(), Type.Null()]),
});

/** `GET /v1/tenants/summary`. */
export const TenantSummary = Type.Object({
  phases: Type.Object(
    Object.fromEntries(PHASES.map((p) => [p, Type.Integer()])) as Record<
      (typeof PHASES)[number],
      ReturnType<typeof Type.Integer>
    >,
  ),
  total: Type.Integer({ description: 'tenants not deleted' }),
  suspended: Type.Integer({
    description: 'tenants not deleted whose spec is suspended, whatever their phase',
  }),
  runtimeVersions: Type.Array(
    Type.Object({
      version: Type.String(),
      tenants: Type.Integer({ description: 'tenants not deleted whose spec names this version' }),
      running: Type.Integer({ description: 'tenants not deleted that have this version installed' }),
    }),
    { description: 'by version, oldest first; only versions some tenant names or runs' },
  ),
});

/** The answer of `POST /v1/signup`. */
export const SignupResponse = Type.Object({
  tenant: Type.Ref('Tenant'),
  apiKey: Type.String({ description: 'the tenant API key; shown only in this response' }),
  operationId: Type.String({ format: 'uuid' }),
  warm: Type.Optional(
    Type.Boolean({
      description:
        "served from the warm pool: a runtime provisioned ahead of the signup, Ready now; operationId is the `bind` operation that applies the tenant's names to it",
    }),
  ),
});

/** A page of `GET /v1/tenants/:id/operations`. */
export const OperationPage = Type.Object({
  items: Type.Array(Type.Ref('Operation')),
  nextCursor: Type.Union([Type.String(), Type.Null()]),
});

export const LogLine = Type.Object({
  seq: Type.Integer(),
  stream: Type.String(),
  line: Type.String(),
  at: Type.String(),
});
/** A page of `GET /v1/operations/:id/log`. */
export const LogPage = Type.Object({
  items: Type.Array(LogLine),
  state: StringEnum(OPERATION_STATES),
  nextAfter: Type.Integer(),
});

/** `GET /v1/runtime-versions`. */
export const RuntimeVersionList = Type.Object({ items: Type.Array(RuntimeVersionInfo), defaultVersion: Type.String() });

export const PathInfo = Type.Object({
  from: Type.String(),
  to: Type.String(),
  allowed: Type.Boolean({ description: 'the catalog allows going from `from` to `to` directly' }),
  path: Type.Array(Type.String(), {
    description: 'versions to go through, in order, ending with `to` (empty: no way there)',
  }),
  reason: Type.Optional(Type.String({ description: 'why a direct move is refused' })),
});
const PlanResources = Type.Object({ cpu: Type.String(), memory: Type.String() });
export const PlanInfo = Type.Object({
  name: Type.String(),
  quota: Type.Object({
    cpu: Type.String(),
    memory: Type.String(),
    limits: PlanResources,
    pods: Type.Integer(),
    storage: Type.String(),
    pvcs: Type.Integer(),
  }),
  container: Type.Object({ defaultRequest: PlanResources, default: PlanResources, max: PlanResources }),
});
export const RegionInfo = Type.Object({
  name: Type.String(),
  accepting: Type.Boolean({ description: 'a root cluster of the region has room for a new tenant' }),
});

/** `GET /v1/whoami`: the calling key. */
export const Identity = Type.Object({
  keyId: Uuid,
  role: StringEnum(['admin', 'operator', 'tenant', 'runtime'] as const),
  tenantId: Type.Union([Uuid, Type.Null()]),
});

/** The answer of `POST /v1/keys`: the key, shown only here. */
export const CreatedKey = Type.Object({ key: Type.String(), info: Type.Ref('ApiKey') });

/** The answer of `PUT /v1/clusters/:name`. */
export const ClusterPutAnswer = Type.Object(
  {
    cluster: Type.Ref('Cluster'),
    created: Type.Boolean({ description: 'true when the cluster was not registered before' }),
    changed: Type.Array(
      Type.Union([
        Type.Literal('region'),
        Type.Literal('capacity'),
        Type.Literal('labels'),
        Type.Literal('plans'),
        Type.Literal('kubeconfig'),
      ]),
      {
        description: 'fields of an existing registration that changed; empty when nothing did',
      },
    ),
  },
  { additionalProperties: false },
);

/** The answer of a managed cluster's registration. */
export const ManagedClusterRegistered = Type.Object({ managedCluster: Type.Ref('ManagedCluster'), operationId: Uuid });

export const DoctorCheck = Type.Object(
  {
    name: Type.String({
      description: 'engine.cli, engine.languageHost, engine.kubernetesPlugin, clusters, cluster/<name>, loop/<name>…',
    }),
    status: StringEnum(['ok', 'problem', 'warning', 'skipped'] as const, {
      description:
        'problem: tenants are not provisioned until it is fixed; skipped: checked once an earlier problem is fixed',
    }),
    message: Type.String(),
    fix: Type.Array(Type.String(), { description: 'commands or steps that fix it, in order' }),
    detail: Type.Record(Type.String(), Type.String(), { description: 'what was found (paths, versions, servers)' }),
  },
  { $id: 'DoctorCheck' },
);
export const DoctorReport = Type.Object(
  {
    version: Type.String({ description: "the provisioner's version" }),
    checks: Type.Array(Type.Ref('DoctorCheck')),
  },
  { $id: 'DoctorReport' },
);

const FleetCounts = Type.Object(Object.fromEntries(FLEET_TENANT_STATES.map((s) => [s, Type.Integer()])));
export const GateCheck = Type.Object({
  name: Type.String(),
  ok: Type.Boolean(),
  detail: Type.String(),
  skipped: Type.Optional(
    Type.Boolean({ description: 'true: it did not pass and an operator skipped it for this step (see gateSkipped)' }),
  ),
});
/** An API key as people know it: by its name and role (the actor of a fleet upgrade's actions). */
const KeyLabel = Type.Object(
  { id: Uuid, name: Type.String(), role: Type.String() },
  { description: 'the API key, by name and role; null: not a key (the system)' },
);
/** An operator's skip of gate checks for one step of a tenant (provisioner/fleet/service.ts GateSkipView). */
const GateSkip = Type.Object({
  step: Type.Object({
    kind: StringEnum(['upgrade', 'rollback', 'revert'] as const),
    from: Type.String(),
    to: Type.String(),
  }),
  checks: Type.Array(StringEnum(SKIPPABLE_GATE_CHECKS)),
  reason: Type.String(),
  by: Type.String({ description: 'the actor: the id of the API key' }),
  byKey: Nullable(KeyLabel),
  at: DateTime,
});
/** A step under way waiting on its health gate (provisioner/fleet/service.ts GateWait). */
const GateWait = Type.Object(
  {
    step: StringEnum(['upgrade', 'rollback', 'revert'] as const),
    waitingOn: Type.Array(GateCheck, {
      description: 'the checks not passing at the last judgment, less those skipped since (empty before it)',
    }),
    since: Type.String({ format: 'date-time', description: 'the step started: the gate is judged from then' }),
    timeoutAt: Type.String({ format: 'date-time', description: 'the gate fails if it has not passed by then' }),
    secondsLeft: Type.Integer({ minimum: 0, description: 'until timeoutAt; 0 once it passed' }),
    onTimeout: Type.String({ description: 'what the fleet upgrade does with the tenant when the gate times out' }),
  },
  {
    description:
      'a step under way whose gate has not passed: what it waits on and the time left; null when no step is under way or its gate passed (docs/fleet-upgrades.md)',
  },
);

const PlannedWave = Type.Object({
  wave: Type.Integer(),
  tenants: Type.Array(Uuid),
  size: Type.Integer(),
  maxConcurrency: Type.Integer(),
  maxUnavailable: Type.Integer(),
  soakSeconds: Type.Integer(),
  maxFailures: Nullable(Type.Integer()),
  maxFailurePercent: Nullable(Type.Number()),
});

export const FleetPlan = Type.Object({
  targetVersion: Type.String(),
  waves: Type.Array(PlannedWave),
  tenants: Type.Array(
    Type.Object({
      tenantId: Uuid,
      organization: Type.String(),
      cluster: Nullable(Type.String()),
      fromVersion: Type.String(),
      path: Type.Array(Type.String(), { description: 'every hop, in order; each a separate upgrade' }),
      wave: Type.Integer(),
      position: Type.Integer(),
      earliestStart: Type.Optional(
        Nullable(
          Type.String({
            format: 'date-time',
            description: 'with windows or freezes: when its first window that fits opens (null: now)',
          }),
        ),
      ),
      expectedSeconds: Type.Optional(
        Type.Integer({ description: "with windows or freezes: its path's expected duration (p95 per edge)" }),
      ),
    }),
  ),
  excluded: Type.Array(
    Type.Object({ tenantId: Uuid, organization: Type.String(), version: Type.String(), reason: Type.String() }),
  ),
  counts: Type.Object({ selected: Type.Integer(), upgradeable: Type.Integer(), excluded: Type.Integer() }),
});

export const FleetUpgrade = Type.Object(
  {
    id: Uuid,
    targetVersion: Type.String(),
    state: StringEnum(FLEET_STATES),
    stateReason: Nullable(Type.String()),
    selector: Type.Record(Type.String(), Type.Unknown()),
    options: Type.Record(Type.String(), Type.Unknown()),
    currentWave: Type.Integer(),
    abortRollback: Type.Boolean(),
    createdBy: Type.String({ description: "the actor: the id of the API key that started it (or 'system')" }),
    createdByKey: Nullable(KeyLabel),
    createdAt: DateTime,
    updatedAt: DateTime,
    finishedAt: Nullable(DateTime),
    windowsOverride: Nullable(
      Type.Object(
        { by: Type.String(), byKey: Nullable(KeyLabel), reason: Type.String(), at: DateTime },
        { description: "the operator's override of the maintenance windows, with the reason (audited)" },
      ),
    ),
    counts: FleetCounts,
    etaSeconds: Nullable(Type.Integer()),
    waves: Type.Array(
      Type.Object({
        wave: Type.Integer(),
        name: Type.String(),
        size: Type.Integer(),
        state: StringEnum(WAVE_STATES),
        maxConcurrency: Type.Integer(),
        maxUnavailable: Type.Integer(),
        soakSeconds: Type.Integer(),
        maxFailures: Nullable(Type.Integer()),
        maxFailurePercent: Nullable(Type.Number()),
        startedAt: Nullable(DateTime),
        settledAt: Nullable(DateTime),
        completedAt: Nullable(DateTime),
        counts: FleetCounts,
      }),
    ),
    tenants: Type.Optional(
      Type.Array(
        Type.Object({
          tenantId: Uuid,
          organization: Type.String(),
          wave: Nullable(Type.Integer()),
          state: StringEnum(FLEET_TENANT_STATES),
          fromVersion: Type.String(),
          path: Type.Array(Type.String()),
          hop: Type.Integer(),
          step: Nullable(
            Type.Object({
              from: Type.String(),
              to: Type.String(),
              operationId: Nullable(Uuid),
              startedAt: Nullable(DateTime),
            }),
          ),
          gate: Nullable(Type.Object({ passed: Type.Boolean(), checks: Type.Array(GateCheck), at: Type.String() })),
          gateWait: Nullable(GateWait),
          gateSkipped: Type.Array(GateSkip, {
            description:
              "every skip of this tenant's gate checks by an operator in this fleet upgrade, oldest first (POST /v1/fleet-upgrades/:id/tenants/:tenantId/skip-gate)",
          }),
          rolledBack: Type.Boolean(),
          reason: Nullable(Type.String()),
          deferredUntil: Nullable(DateTime),
          startedAt: Nullable(DateTime),
          finishedAt: Nullable(DateTime),
        }),
        { description: 'every selected tenant, excluded ones too (state excluded, with the reason)' },
      ),
    ),
    customerActionNeeded: Type.Optional(
      Type.Array(
        Type.Object({
          tenantId: Uuid,
          runtime: Type.String(),
          version: Type.String(),
          reportedVersion: Nullable(Type.String()),
          action: StringEnum(['upgrade', 'apply'] as const),
          message: Type.String(),
        }),
        {
          description:
            "with `tenants`: the selected tenants' hybrid runtimes not at the target version (asked and reported) that need their customer (`upgrade`: ask for the version; `apply`: apply its bundle): every runtime with upgrades=customer, and those with upgrades=agent whose upgrader was not asked or did not succeed",
        },
      ),
    ),
    upgradedByAgent: Type.Optional(
      Type.Array(
        Type.Object({
          tenantId: Uuid,
          runtime: Type.String(),
          version: Type.String(),
          reportedVersion: Nullable(Type.String()),
          phase: StringEnum(['waiting', 'pending', 'applying', 'succeeded'] as const),
          message: Type.String(),
        }),
        {
          description:
            "with `tenants`: the selected tenants' hybrid runtimes with upgrades=agent the fleet upgrade moves: asked for the target once their tenant's hosted runtime reached it in its wave (`waiting` until then), then applied by their in-cluster upgrader",
        },
      ),
    ),
  },
  { $id: 'FleetUpgrade' },
);

/**
 * One object a tenant's runtime reported (an Argo CD Application, an Argo Rollout or Workflow), as
 * `GET /v1/tenants/:id/{applications,rollouts,workflows}` lists it and the change stream sends it.
 */
export const RuntimeObject = Type.Object({
  kind: StringEnum(REPORTED_KIND_NAMES),
  namespace: Type.String(),
  name: Type.String(),
  uid: Type.String(),
  resourceVersion: Type.String(),
  generation: Type.Integer(),
  health: Nullable(Type.String()),
  sync: Nullable(Type.String()),
  phase: Nullable(Type.String()),
  summary: Type.Record(Type.String(), Type.Unknown()),
  truncated: Type.Boolean(),
  reportedBy: Type.String({ description: 'the reporter replica whose report this is' }),
  observedAt: Type.String({ format: 'date-time', description: 'when the reporter saw this state' }),
  updatedAt: Type.String({ format: 'date-time', description: 'when the control plane stored it' }),
  ageSeconds: Type.Number({ description: 'seconds since updatedAt' }),
});
/** A page of `GET /v1/tenants/:id/{applications,rollouts,workflows}`. */
export const RuntimeObjectPage = Type.Object({
  items: Type.Array(RuntimeObject),
  nextCursor: Nullable(Type.String()),
});
/** `GET /v1/tenants/:id/{applications,rollouts,workflows}/:namespace/:name`: the object too. */
export const RuntimeObjectDetail = Type.Intersect([
  RuntimeObject,
  Type.Object({ object: Nullable(Type.Record(Type.String(), Type.Unknown())) }),
]);

/*
 * The payloads of the Server-Sent Events streams (`data:` of each event, JSON). No route validates
 * them (a stream's answer is text/event-stream); the streams write them through a typed sender
 * (http/streams.ts) and the clients read them with the types types.ts derives from these, so a
 * field changed here is a compile error on both sides. docs/api.md describes each stream.
 */

/** `error`, on every stream, then the stream ends: the key was revoked (INVALID_API_KEY) or the server failed (INTERNAL). */
export const StreamError = Type.Object({
  code: StringEnum(Object.keys(ERROR_CODES) as ErrorCode[]),
  message: Type.String(),
});
/** `GET /v1/tenants/events`, `ready` (first): the cursor the stream starts after. */
export const TenantStreamReady = Type.Object({
  after: Type.String({ description: 'the opaque cursor the stream starts after (pass it as after= to resume)' }),
});
/** `GET /v1/operations/:id/log?follow=1`, `state` (first): the operation's state when the stream opened. */
export const OperationLogState = Type.Object({ state: StringEnum(OPERATION_STATES) });
/** `GET /v1/operations/:id/log?follow=1`, `end` (last): the operation's final state (`unknown` if it is gone). */
export const OperationLogEnd = Type.Object({ state: StringEnum([...OPERATION_STATES, 'unknown'] as const) });
/** `GET /v1/fleet-upgrades/:id/events`, `event`: one decision of the fleet upgrade (id = seq). */
export const FleetEvent = Type.Object({
  seq: Type.Integer(),
  at: DateTime,
  action: Type.String({
    description:
      'start, pause, wave_start, tenant_upgrade, tenant_succeeded, tenant_rollback, tenant_quarantined, halt, …',
  }),
  tenantId: Nullable(Uuid),
  data: Type.Record(Type.String(), Type.Unknown()),
});
/** `GET /v1/fleet-upgrades/:id/events`, `end` (last): the fleet upgrade's final state. */
export const FleetStreamEnd = Type.Object({ state: StringEnum(['completed', 'aborted'] as const) });
/** `GET /v1/tenants/:id/changes`, `change` (id = an opaque cursor): an object stored or deleted. */
export const RuntimeObjectChange = Type.Object({ deleted: Type.Boolean(), item: RuntimeObject });
/** `GET /v1/tenants/:id/changes`, `reset`: deletions since the given event were purged; drop what you hold, every live object follows. */
export const ChangeStreamReset = Type.Object({ reason: Type.Literal('TombstonesPurged'), message: Type.String() });

/** One managed resource a commit changed (runtime/protocol/sources.ts ResourceChange). */
export const ResourceChange = Type.Object({
  group: Type.String(),
  kind: Type.String(),
  namespace: Type.String(),
  name: Type.String(),
  action: StringEnum(['added', 'removed', 'modified'] as const),
  fields: Type.Array(Type.String(), {
    description: 'paths of the fields that differ: `spec.template.spec.containers[name=web].image`, `spec.replicas`',
  }),
  fieldsTruncated: Type.Optional(Type.Boolean()),
});
/** A container image that moved (sources.ts ImageChange): `before` absent: added; `after` absent: removed. */
export const ImageChange = Type.Object({
  resource: Type.String({ description: '`<kind>/<namespace>/<name>` of the workload' }),
  container: Type.String(),
  before: Type.Optional(Type.String()),
  after: Type.Optional(Type.String()),
});
/**
 * One deployment of an application (`GET …/applications/:namespace/:name/history`): the change
 * revision (the commit that last changed the application's source path), its commit, what it
 * changed, and how its sync went.
 */
export const ApplicationHistoryEntry = Type.Object({
  id: Uuid,
  runtime: Type.String({ description: 'the runtime that reported it (`hosted` or a hybrid runtime by name)' }),
  application: Type.Object({ namespace: Type.String(), name: Type.String() }),
  changeRevision: Type.String({ description: 'the commit that last changed the application at `revision`' }),
  revision: Type.String({ description: 'the revision Argo CD compared or synced when the change was computed' }),
  previousChangeRevision: Nullable(Type.String()),
  author: Nullable(Type.String()),
  date: Nullable(DateTime),
  message: Nullable(Type.String()),
  tags: Type.Array(Type.String()),
  images: Type.Array(ImageChange),
  resources: Type.Array(ResourceChange),
  truncated: Type.Boolean({ description: 'resources, fields or images were left out to stay within the limits' }),
  result: StringEnum(['pending', 'running', 'succeeded', 'failed'] as const),
  resultMessage: Nullable(
    Type.String({ description: "Argo CD's message (a failed sync, a manifest it cannot generate)" }),
  ),
  startedAt: Nullable(DateTime),
  finishedAt: Nullable(DateTime),
  durationMs: Nullable(Type.Integer()),
  recordedAt: DateTime,
  updatedAt: DateTime,
});
/** A page of an application's history, newest first. */
export const ApplicationHistoryPage = Type.Object({
  items: Type.Array(ApplicationHistoryEntry),
  nextCursor: Nullable(Type.String()),
});
/** One resource of a diff, both sides whole (null: absent on that side), for a side-by-side view. */
export const ResourceDiff = Type.Intersect([
  ResourceChange,
  Type.Object({
    before: Nullable(Type.Record(Type.String(), Type.Unknown())),
    after: Nullable(Type.Record(Type.String(), Type.Unknown())),
  }),
]);
/** `GET …/applications/:namespace/:name/diff` (sources.ts ApplicationDiff), from the runtime's Source Server. */
export const ApplicationDiff = Type.Object({
  application: Type.Object({ namespace: Type.String(), name: Type.String() }),
  revision: Type.String(),
  base: Type.String({ description: 'the before side: the previous change revision, or `live` (the cluster)' }),
  resources: Type.Array(ResourceDiff),
  truncated: Type.Boolean(),
});
/** `GET …/applications/:namespace/:name/history/stream`, `entry` (id = an opaque cursor): an entry created or updated. */
export const ApplicationHistoryChange = Type.Object({ item: ApplicationHistoryEntry });

/**
 * A runtime of a tenant: its hosted runtime (state, versions and conditions are the tenant's, as
 * `GET /v1/tenants/:id` shows them) or a hybrid runtime in the customer's own cluster.
 */
export const Runtime = Type.Object(
  {
    id: Uuid,
    tenantId: Uuid,
    organization: Type.String({ description: "the tenant's organization" }),
    name: Type.String(),
    mode: StringEnum(['hosted', 'hybrid'] as const),
    state: Type.String({
      description:
        "hosted: the tenant's phase (Pending, Ready, …); hybrid: `awaiting-install` (bootstrap token not redeemed), `installed` or `removed`",
    }),
    version: Nullable(
      Type.String({
        description: "hosted: the tenant's spec version; hybrid: the catalog version the bundle was made for",
      }),
    ),
    reportedVersion: Nullable(
      Type.String({
        description: 'hosted: the version installed; hybrid: the version its agents reported (null: none yet)',
      }),
    ),
    versionSkew: Nullable(
      Type.Boolean({ description: 'the reported version differs from `version`; null while none is reported' }),
    ),
    previousVersion: Nullable(
      Type.String({
        description:
          "the version before the last change (a rollback may return only to it): hosted, the tenant's; hybrid, the one before its last upgrade",
      }),
    ),
    versionChangedAt: Nullable(
      Type.String({ format: 'date-time', description: 'hybrid: when its last upgrade was asked for; hosted: null' }),
    ),
    conditions: Type.Array(Condition, {
      description:
        "hosted: the tenant's; hybrid: `Installed` (bootstrap redeemed, awaiting it, or expired) and, for access=tunnel, `TunnelConnected`",
    }),
    tunnel: Type.Object({ connected: Type.Boolean(), since: Nullable(DateTime) }),
    access: Nullable(StringEnum(['tunnel', 'ingress'] as const)),
    ingressUrl: Nullable(Type.String()),
    argo: Nullable(StringEnum(['new', 'existing'] as const)),
    argoNamespace: Nullable(Type.String()),
    namespace: Type.String({
      description:
        "where the runtime's agents run: hosted, `hosted-runtime` in the tenant's virtual cluster; hybrid, its own namespace in the customer's cluster (`hosted-runtime-<name>`; `hosted-runtime` for runtimes registered before names were per runtime)",
    }),
    upgrades: Nullable(
      StringEnum(['customer', 'agent'] as const, {
        description: 'who applies upgrades: the customer, or the in-cluster upgrader agent it opted in to',
      }),
    ),
    upgrade: Nullable(
      Type.Object(
        {
          from: Type.String(),
          to: Type.String(),
          phase: StringEnum(['pending', 'applying', 'succeeded', 'rolled-back', 'failed'] as const),
          message: Nullable(Type.String()),
          updatedAt: DateTime,
        },
        {
          description:
            'upgrades=agent: the last upgrade the in-cluster upgrader was asked to apply and how it went (`rolled-back`: the rollout failed and the version before was put back; `version` is that one again); null when none',
        },
      ),
    ),
    bootstrapExpiresAt: Nullable(DateTime),
    installedAt: Nullable(Type.String({ format: 'date-time', description: 'when the bootstrap token was redeemed' })),
    keyIssued: Type.Boolean({
      description:
        "the runtime holds a runtime key that is not revoked (hybrid: from the bootstrap exchange; hosted: the one made for the tenant's agents)",
    }),
    lastHeartbeatAt: Nullable(DateTime),
    createdBy: Type.String(),
    createdAt: DateTime,
    removedAt: Nullable(DateTime),
  },
  { $id: 'Runtime' },
);

/** A page of `GET /v1/runtimes`. */
export const RuntimePage = Type.Object({
  items: Type.Array(Type.Ref('Runtime')),
  nextCursor: Type.Union([Type.String(), Type.Null()]),
});

/** A hybrid runtime's bundle: its manifests, Argo charts and commands. */
const RuntimeInstall = Type.Object({
  manifests: Type.String({ description: 'multi-document YAML for `kubectl apply -f`' }),
  charts: Type.Array(
    Type.Object({
      release: Type.String(),
      namespace: Type.String(),
      chart: Type.String(),
      repository: Type.String(),
      version: Type.String(),
      values: Type.String({ description: 'YAML' }),
    }),
    { description: "argo=new: the Argo charts at the catalog's versions with their values; empty for existing" },
  ),
  command: Type.String({ description: 'the one command that applies it (helm first when charts)' }),
  removeCommand: Type.String({ description: 'deletes exactly what the install created' }),
  namespace: Type.String({ description: "the runtime's namespace in the customer's cluster" }),
  unpinnedImages: Type.Array(Type.String(), {
    description: 'the images the install names without a digest: the catalog records none for them yet',
  }),
});

/** The answer of `POST /v1/tenants/:id/runtimes`. */
export const RuntimeRegistered = Type.Object({
  runtime: Type.Ref('Runtime'),
  bootstrapToken: Type.String({
    description: 'single-use bootstrap token (also inside install.manifests); shown only in this answer, stored hashed',
  }),
  bootstrapExpiresAt: DateTime,
  install: Type.Object({
    ...RuntimeInstall.properties,
    url: Type.Union([Type.String(), Type.Null()], {
      description:
        'the install URL (`GET /v1/install/<bootstrap token>.yaml`): the complete install as YAML, the Argo charts rendered for argo=new; served until the bootstrap is redeemed or expires. A secret like the token. null when the control plane cannot render the Argo charts (urlUnavailable says why)',
    }),
    urlUnavailable: Type.Union([Type.String(), Type.Null()], {
      description: 'why there is no install URL (the setting, chart or tool missing); null when there is one',
    }),
    command: Type.String({
      description:
        "the one command: `kubectl apply --server-side -f <url>`; without a URL, the files' command (fileCommand)",
    }),
    fileCommand: Type.String({
      description: 'the command that applies the saved manifests (after helm installs the Argo charts for argo=new)',
    }),
  }),
});

const BundleChangeKind = StringEnum(['added', 'changed', 'removed'] as const);

/** A hybrid runtime's upgrade bundle at a catalog version and what it changes (runtime/hybrid/upgrade.ts). */
export const RuntimeUpgradeBundle = Type.Object({
  from: Semver,
  to: Semver,
  install: Type.Object(RuntimeInstall.properties, {
    description:
      'the upgrade bundle at `to`: no bootstrap token or Job; `command` upgrades the Argo charts that changed, applies the manifest and deletes the objects `to` no longer has',
  }),
  diff: Type.String({ description: 'unified diff of the bundle at `from` and at `to` (manifests, then each chart)' }),
  changes: Type.Object({
    objects: Type.Array(
      Type.Object({
        kind: Type.String(),
        namespace: Type.Optional(Type.String()),
        name: Type.String(),
        change: BundleChangeKind,
      }),
    ),
    charts: Type.Array(
      Type.Object({
        release: Type.String(),
        namespace: Type.String(),
        from: Type.Optional(Type.String()),
        to: Type.Optional(Type.String()),
        change: BundleChangeKind,
      }),
    ),
  }),
});

/** The answer of `POST /v1/tenants/:id/runtimes/:name/upgrade`. */
export const RuntimeUpgraded = Type.Object({
  runtime: Type.Ref('Runtime'),
  changed: Type.Boolean({ description: 'false when the runtime was already at that version (nothing recorded)' }),
  appliedBy: StringEnum(['customer', 'agent'] as const, {
    description:
      "who applies it: `agent`, the runtime's in-cluster upgrader (upgrades=agent, and every change is one it may make), else `customer`",
  }),
  customerActionReason: Nullable(
    Type.String({
      description:
        "upgrades=agent but the customer must apply this one: why (objects added, removed or outside the upgrader's rights, or Argo charts)",
    }),
  ),
  upgrade: RuntimeUpgradeBundle,
});

/** The answer of `GET /v1/runtime/upgrade` (runtime/protocol/upgrade.ts UpgraderAssignment). */
export const UpgraderAssignment = Type.Object({
  version: Type.String({ description: 'the catalog version the runtime is to run' }),
  upgrade: Nullable(
    Type.Object({
      from: Type.String(),
      to: Type.String(),
      phase: StringEnum(['pending', 'applying'] as const),
      apply: Type.Array(Type.Record(Type.String(), Type.Unknown()), {
        description: 'the objects to server-side apply, in order (the upgrader itself last)',
      }),
      rollback: Type.Array(Type.Record(Type.String(), Type.Unknown()), {
        description: 'the same objects as the version before had them',
      }),
    }),
  ),
});

/** The answer of `DELETE /v1/tenants/:id/runtimes/:name`. */
export const RuntimeRemoved = Type.Object({
  runtime: Type.Ref('Runtime'),
  removeCommand: Type.String({ description: "deletes what the install created in the customer's cluster" }),
});

/** The answer of `POST /v1/runtimes/bootstrap` (runtime/protocol's BootstrapAnswer). */
export const RuntimeBootstrapAnswer = Type.Object({
  tenantId: Uuid,
  runtimeId: Uuid,
  name: Type.String(),
  runtimeToken: Type.String({ description: 'the runtime key; shown only in this answer' }),
  tunnelUrl: Type.String(),
  controlPlaneUrl: Type.String(),
  publicKey: Type.String({ description: "the control plane's request-signing public key (PEM)" }),
});

export const IdParams = Type.Object({ id: Uuid }, { additionalProperties: false });

/** Standard error responses every authenticated route can give. */
export function withErrors<T extends Record<number, TSchema>>(ok: T) {
  const ref = Type.Ref('Error');
  return {
    ...ok,
    400: ref,
    401: ref,
    403: ref,
    404: ref,
    409: ref,
    413: ref,
    415: ref,
    422: ref,
    429: ref,
    500: ref,
    503: ref,
  };
}

/** `GET /v1/capacity` (routes/capacity.ts): per plan what tenants reserve awake and asleep, the warm pool, signups, wakes. */
const CapacityReservation = Type.Object({
  cpuMillicores: Type.Integer(),
  memoryBytes: Type.Integer(),
});

export const Capacity = Type.Object({
  defaultVersion: Type.String({ description: 'what new tenants and warm pool entries run' }),
  plans: Type.Array(
    Type.Object({
      plan: Type.String(),
      tenants: Type.Object({ awake: Type.Integer(), asleep: Type.Integer(), waking: Type.Integer() }),
      reservation: Type.Object(
        {
          awakeTenant: CapacityReservation,
          asleepTenant: CapacityReservation,
          now: CapacityReservation,
        },
        {
          description:
            "requests one tenant reserves awake (its runtime at the default version, steady state) and asleep (nothing: no pod), and the plan's tenants together now (awake and waking counted awake)",
        },
      ),
      sleepAfterSeconds: Type.Union([Type.Integer(), Type.Null()], {
        description: 'PROVISIONER_SLEEP_IDLE_SECONDS for the plan; null: never sleeps',
      }),
      warmPool: Type.Object({
        size: Type.Integer({
          description:
            'PROVISIONER_WARM_POOL for the plan: entries kept on each root cluster that takes the plan (0: no pool)',
        }),
        target: Type.Integer({
          description:
            'entries kept in all: size × the root clusters that take the plan now (not cordoned, the plan allowed; a full cluster gets no new entry)',
        }),
        ready: Type.Integer({ description: 'Ready unclaimed entries at the default version, all root clusters' }),
        provisioning: Type.Integer(),
        failing: Type.Integer(),
        oldestReadySeconds: Type.Union([Type.Integer(), Type.Null()]),
        clusters: Type.Array(
          Type.Object({
            cluster: Type.String({ description: 'the root cluster, by name' }),
            ready: Type.Integer(),
            provisioning: Type.Integer(),
            failing: Type.Integer(),
          }),
          { description: "the plan's entries at the default version per root cluster (clusters with none left out)" },
        ),
      }),
      signups24h: Type.Object({
        warm: Type.Integer({ description: 'served from the warm pool: Ready at signup' }),
        cold: Type.Integer(),
      }),
    }),
  ),
  wakes24h: Type.Object({
    count: Type.Integer(),
    p50Seconds: Type.Union([Type.Number(), Type.Null()], { description: "the wake operation's run, median" }),
    maxSeconds: Type.Union([Type.Number(), Type.Null()]),
  }),
});
