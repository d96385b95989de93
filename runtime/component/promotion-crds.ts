/**
 * The CustomResourceDefinitions of promotions (runtime/protocol/promotions.ts, docs/promotions.md):
 * plain data, one per kind, namespaced, version v1alpha1, each with its status subresource (the
 * operator writes status only; the customer's Git, through Argo CD, writes spec). The schemas
 * refuse what the operator cannot run (an unknown action, an empty flow) at apply time, with the
 * API server's message naming the field.
 *
 * Installed by the hosted runtime (gitops-runtime.ts) and by a hybrid runtime's bundle
 * (runtime/hybrid/bundle.ts), where one cluster's runtimes, of any catalog version, share them: a
 * change here must stay compatible with every version's operator (new optional fields, a new
 * served version beside the old), since the last runtime to apply them wins.
 */
import { PROMOTIONS_GROUP, PROMOTIONS_VERSION, PROMOTION_KINDS, type PromotionKind } from '../protocol/promotions.ts';

type Schema = Record<string, unknown>;

const str = (o: Schema = {}): Schema => ({ type: 'string', ...o });
const name = str({ minLength: 1, maxLength: 253, pattern: '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$' });
const names = { type: 'array', items: name, maxItems: 100 };
const preserved: Schema = { type: 'object', 'x-kubernetes-preserve-unknown-fields': true };
const jsonPath = str({ minLength: 2, maxLength: 512, pattern: '^\\$' });
const file = str({ minLength: 1, maxLength: 512 });
const action: Schema = {
  type: 'object',
  required: ['workflowTemplate'],
  properties: { workflowTemplate: name },
};

const SPECS: Record<PromotionKind, Schema> = {
  Environment: {
    type: 'object',
    required: ['kind'],
    properties: { kind: str({ enum: ['PROD', 'NON_PROD'] }) },
  },
  Product: {
    type: 'object',
    required: ['repository', 'branch', 'template', 'flow', 'environments'],
    properties: {
      repository: str({ pattern: '^https?://', maxLength: 2048 }),
      branch: str({ minLength: 1, maxLength: 200 }),
      template: name,
      flow: name,
      environments: {
        type: 'array',
        minItems: 1,
        maxItems: 50,
        items: {
          type: 'object',
          required: ['environment', 'path', 'applications'],
          properties: { environment: name, path: file, applications: names },
        },
      },
    },
  },
  PromotionTemplate: {
    type: 'object',
    required: ['version', 'files'],
    properties: {
      version: { type: 'object', required: ['file', 'jsonPath'], properties: { file, jsonPath } },
      files: {
        type: 'array',
        minItems: 1,
        maxItems: 50,
        items: {
          type: 'object',
          required: ['path', 'jsonPaths'],
          properties: { path: file, jsonPaths: { type: 'array', minItems: 1, maxItems: 50, items: jsonPath } },
        },
      },
    },
  },
  PromotionFlow: {
    type: 'object',
    required: ['triggerEnvironment', 'steps'],
    properties: {
      triggerEnvironment: name,
      steps: {
        type: 'array',
        minItems: 1,
        maxItems: 50,
        items: { type: 'object', required: ['environment'], properties: { environment: name, dependsOn: names } },
      },
      hooks: { type: 'object', properties: { onStart: action, onSuccess: action, onFail: action } },
    },
  },
  PromotionPolicy: {
    type: 'object',
    required: ['action'],
    properties: {
      selector: { type: 'object', properties: { products: names, environments: names } },
      action: str({ enum: ['commit', 'pr', 'no-commit'] }),
      pullRequest: {
        type: 'object',
        required: ['provider', 'apiUrl'],
        properties: {
          provider: str({ enum: ['github', 'gitea', 'gitlab'] }),
          apiUrl: str({ pattern: '^https?://', maxLength: 512 }),
          repository: str({ pattern: '^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$', maxLength: 512 }),
        },
      },
      preAction: action,
      postAction: action,
      syncTimeoutSeconds: { type: 'integer', minimum: 10, maximum: 86_400 },
      dryRun: {
        type: 'object',
        properties: { required: { type: 'boolean' }, onlyTemplateChanges: { type: 'boolean' } },
      },
    },
  },
  Promotion: {
    type: 'object',
    required: ['product'],
    properties: {
      product: name,
      release: str({ minLength: 1, maxLength: 256 }),
      requestedBy: str({ maxLength: 256 }),
      abort: { type: 'boolean' },
      retry: { type: 'integer', minimum: 0 },
      rollback: { type: 'object', required: ['environment'], properties: { environment: name } },
      // Kept in the schema (an unknown field would be pruned, and an operator that predates dry runs
      // would then run the object as a real promotion) and refused by the rule below: a dry run is a
      // PromotionPreview.
      dryRun: { type: 'boolean' },
    },
    'x-kubernetes-validations': [
      {
        rule: '!has(self.dryRun) || !self.dryRun',
        message:
          'spec.dryRun is not supported on a Promotion: create a PromotionPreview (promotions.hosted-runtimes.io/v1alpha1) for a dry run',
        fieldPath: '.dryRun',
      },
    ],
  },
  PromotionPreview: {
    type: 'object',
    required: ['product'],
    properties: {
      product: name,
      release: str({ minLength: 1, maxLength: 256 }),
      requestedBy: str({ maxLength: 256 }),
      abort: { type: 'boolean' },
    },
  },
};

const PROMOTION_COLUMNS = [
  { name: 'Product', type: 'string', jsonPath: '.spec.product' },
  { name: 'Release', type: 'string', jsonPath: '.status.release' },
  { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
  { name: 'Message', type: 'string', jsonPath: '.status.message', priority: 1 },
  { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
];

const COLUMNS: Partial<Record<PromotionKind, unknown[]>> = {
  Promotion: PROMOTION_COLUMNS,
  PromotionPreview: PROMOTION_COLUMNS,
  Product: [
    { name: 'Repository', type: 'string', jsonPath: '.spec.repository' },
    { name: 'Flow', type: 'string', jsonPath: '.spec.flow' },
  ],
};

/** The CRDs, in the order to apply them. */
export function promotionCrds(): Record<string, unknown>[] {
  return (Object.keys(PROMOTION_KINDS) as PromotionKind[]).map((kind) => {
    const plural = PROMOTION_KINDS[kind];
    return {
      apiVersion: 'apiextensions.k8s.io/v1',
      kind: 'CustomResourceDefinition',
      metadata: { name: `${plural}.${PROMOTIONS_GROUP}`, labels: { 'app.kubernetes.io/part-of': 'hosted-runtime' } },
      spec: {
        group: PROMOTIONS_GROUP,
        scope: 'Namespaced',
        names: { kind, plural, singular: kind.toLowerCase(), listKind: `${kind}List`, categories: ['promotions'] },
        versions: [
          {
            name: PROMOTIONS_VERSION,
            served: true,
            storage: true,
            subresources: { status: {} },
            ...(COLUMNS[kind] ? { additionalPrinterColumns: COLUMNS[kind] } : {}),
            schema: {
              openAPIV3Schema: {
                type: 'object',
                required: ['spec'],
                properties: {
                  apiVersion: str(),
                  kind: str(),
                  metadata: { type: 'object' },
                  spec: SPECS[kind],
                  status: preserved,
                },
              },
            },
          },
        ],
      },
    };
  });
}

/**
 * The GitOps Operator's rights, all in Argo CD's namespace (where the promotion resources, the
 * Applications and the actions' Workflows are): least privilege.
 */
export const GITOPS_OPERATOR_RULES = [
  // The promotion resources: read; Promotions created (a new release) and every status written.
  { apiGroups: [PROMOTIONS_GROUP], resources: Object.values(PROMOTION_KINDS), verbs: ['get', 'list', 'watch'] },
  { apiGroups: [PROMOTIONS_GROUP], resources: ['promotions'], verbs: ['create'] },
  {
    apiGroups: [PROMOTIONS_GROUP],
    resources: ['products/status', 'promotions/status', 'promotionpreviews/status'],
    verbs: ['update'],
  },
  // Finished previews beyond MAX_FINISHED_PREVIEWS per product, oldest first (the one kind it deletes).
  { apiGroups: [PROMOTIONS_GROUP], resources: ['promotionpreviews'], verbs: ['delete'] },
  // Argo CD's Applications: read, and a refresh annotation after a commit.
  { apiGroups: ['argoproj.io'], resources: ['applications'], verbs: ['get', 'patch'] },
  // The actions: a Workflow from a template, then its result.
  { apiGroups: ['argoproj.io'], resources: ['workflows'], verbs: ['get', 'create'] },
  // Argo CD's repository Secrets: the operator pushes with the credentials Argo CD pulls with.
  { apiGroups: [''], resources: ['secrets'], verbs: ['list'] },
  // One active operator.
  { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['create'] },
  {
    apiGroups: ['coordination.k8s.io'],
    resources: ['leases'],
    resourceNames: ['gitops-operator'],
    verbs: ['get', 'update'],
  },
];

/** The GitOps Operator's account (in the runtime's namespace) and its Role in `namespace` (Argo CD's), as plain objects (tests, a cluster of one's own). */
export function gitopsOperatorRbac(namespace: string, runtimeNamespace: string): Record<string, unknown>[] {
  const meta = { name: 'gitops-operator', labels: { 'app.kubernetes.io/name': 'gitops-operator' } };
  return [
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { ...meta, namespace: runtimeNamespace } },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: { ...meta, namespace },
      rules: GITOPS_OPERATOR_RULES,
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: { ...meta, namespace },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'gitops-operator' },
      subjects: [{ kind: 'ServiceAccount', name: 'gitops-operator', namespace: runtimeNamespace }],
    },
  ];
}
