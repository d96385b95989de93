/**
 * The app-proxy's actions on Argo objects and on the GitOps Operator's products and promotions
 * (docs/promotions.md "What the control plane can do"), shared by the app-proxy (which serves them) and the
 * control plane (which audits every one it forwards): `POST /api/<resource>/<namespace>/<name>/<action>`
 * on the runtime, i.e. `POST /v1/tenants/:id/runtime/api/<resource>/<namespace>/<name>/<action>`
 * on the control plane.
 */
import type { Metadata, PromotionPreviewSpec, PromotionSpec, PromotionStatus } from './promotions.ts';

export const ACTION_RESOURCES = {
  applications: { kind: 'Application', actions: ['refresh', 'sync'] },
  rollouts: { kind: 'Rollout', actions: ['promote', 'abort', 'retry'] },
  workflows: { kind: 'Workflow', actions: ['terminate', 'stop', 'retry'] },
  products: { kind: 'Product', actions: ['promote', 'rollback', 'dry-run'] },
  promotions: { kind: 'Promotion', actions: ['retry', 'abort'] },
  promotionpreviews: { kind: 'PromotionPreview', actions: ['abort'] },
} as const;

export type ActionResource = keyof typeof ACTION_RESOURCES;
export type ActionKind = (typeof ACTION_RESOURCES)[ActionResource]['kind'];

/**
 * An object as the runtime answers an action on it (the Kubernetes API server's object after the
 * action). Not checked when read: every field may be absent.
 */
export interface ActionObject<S = Record<string, unknown>, T = unknown> {
  apiVersion?: string;
  kind?: string;
  metadata?: Partial<Metadata>;
  spec?: Partial<S>;
  status?: T;
}

/**
 * What each resource's actions answer: the Argo object they changed; a product's promote and
 * rollback the Promotion they created, its dry-run the PromotionPreview it created; a promotion's
 * retry and abort the Promotion they changed; a preview's abort the PromotionPreview.
 */
export interface ActionAnswers {
  applications: ActionObject;
  rollouts: ActionObject;
  workflows: ActionObject;
  products: ActionObject<PromotionSpec & PromotionPreviewSpec, PromotionStatus>;
  promotions: ActionObject<PromotionSpec, PromotionStatus>;
  promotionpreviews: ActionObject<PromotionPreviewSpec, PromotionStatus>;
}

export interface RuntimeAction {
  resource: ActionResource;
  kind: ActionKind;
  namespace: string;
  name: string;
  action: string;
  /** The audit action name, e.g. `runtime.rollout.promote`. */
  auditAction: string;
}

function decode(segment: string): string | undefined {
  try {
    return decodeURIComponent(segment);
  } catch {
    return undefined;
  }
}

/**
 * The action a runtime-side request invokes, if any. Segments are percent-decoded one by one, as
 * the app-proxy's router decodes them, so that no spelling of an action path escapes the audit.
 */
export function runtimeActionOf(method: string, path: string): RuntimeAction | undefined {
  if (method.toUpperCase() !== 'POST') return undefined;
  const q = path.search(/[?#]/);
  const parts = (q === -1 ? path : path.slice(0, q)).split('/');
  if (parts.length !== 6 || parts[0] !== '') return undefined;
  const [, api, resource, namespace, name, action] = parts.map(decode);
  if (api !== 'api' || resource === undefined || namespace === undefined || name === undefined || action === undefined)
    return undefined;
  if (!Object.hasOwn(ACTION_RESOURCES, resource)) return undefined;
  const def = ACTION_RESOURCES[resource as ActionResource];
  if (!(def.actions as readonly string[]).includes(action) || namespace === '' || name === '') return undefined;
  return {
    resource: resource as ActionResource,
    kind: def.kind,
    namespace,
    name,
    action,
    auditAction: `runtime.${def.kind.toLowerCase()}.${action}`,
  };
}
