/**
 * The Source Server's contract: what it answers the event reporter and the app-proxy about an
 * Argo CD Application's Git side, and what an application report carries of it to the control
 * plane (`UpsertItem.change`, events.ts).
 *
 * Everything here comes from Argo CD itself (its API server generated the manifests, read the
 * revision metadata and compared Git with the cluster) or from Git (which commit last touched the
 * application's source path); the Source Server never renders manifests on its own.
 *
 * Sizes are bounded so that a report stays small and the tenant's budgets can count it: a change
 * names at most MAX_CHANGED_RESOURCES resources with at most MAX_CHANGED_FIELDS field paths each,
 * and at most MAX_IMAGE_CHANGES images; a serialized `ApplicationChange` is at most
 * MAX_CHANGE_BYTES of JSON (the Source Server drops field paths, then resources, and says so with
 * `truncated`). The full manifests and the per-resource diff are fetched on demand (`diff`), never
 * pushed.
 */

/** Where the Source Server serves inside the runtime (its Service, port AGENT_PORT). */
export const SOURCE_SERVER_PATH_PREFIX = '/v1/applications';

export const MAX_CHANGED_RESOURCES = 100;
export const MAX_CHANGED_FIELDS = 20;
export const MAX_IMAGE_CHANGES = 50;
/** Longest commit message kept in a change (characters; the rest is cut and `…` appended). */
export const MAX_COMMIT_MESSAGE_CHARS = 2000;
export const MAX_CHANGE_BYTES = 32 * 1024;
/** Longest diff answer (bytes of JSON): larger ones drop the objects of the last resources and set `truncated`. */
export const MAX_DIFF_BYTES = 4 * 1024 * 1024;

/** A commit as Argo CD's RevisionMetadata gives it (author, date, message, tags, signature). */
export interface CommitInfo {
  revision: string;
  author?: string;
  /** ISO 8601. */
  date?: string;
  message?: string;
  tags?: string[];
  /** Argo CD's signature verification result, when it verifies signatures. */
  signatureInfo?: string;
}

/** How one managed resource differs between two sets of manifests (or Git and the cluster). */
export interface ResourceChange {
  group: string;
  kind: string;
  namespace: string;
  name: string;
  action: 'added' | 'removed' | 'modified';
  /**
   * Paths of the fields that differ, JSONPath-like, list items by their `name` when they have one:
   * `spec.template.spec.containers[name=web].image`, `spec.replicas`, `data.LOG_LEVEL`. Empty for
   * added and removed resources. At most MAX_CHANGED_FIELDS (`fieldsTruncated` when more).
   */
  fields: string[];
  fieldsTruncated?: boolean;
}

/** A container image that moved (`before` absent: added; `after` absent: removed). */
export interface ImageChange {
  /** `<kind>/<namespace>/<name>` of the workload. */
  resource: string;
  container: string;
  before?: string;
  after?: string;
}

/**
 * What changed an Application, computed when its revision moves: the commit that last changed its
 * source path (`changeRevision`), that commit's metadata, and what its manifests changed compared
 * with the previous change revision.
 *
 *  - The head moved but the application's path did not → `changeRevision` stays.
 *  - Multi-source Applications: each Git source has its change revision in its repository (its
 *    path, or for a source with a `ref` the value files the others read through it); the
 *    application's is the newest of them, with that commit and what it changed (the other
 *    sources held at theirs). `revision` is the first source's. `unsupported: 'multi-source'`
 *    is what a Source Server before this answered.
 *  - The manifests cannot be generated at `changeRevision` (Argo CD refuses them): `error` holds
 *    Argo CD's message; `commit` is still filled from Git and Argo CD when it can be.
 */
export interface ApplicationChange {
  /** The revision the change was computed at (the Application's synced or compared revision, or the head of its targetRevision). */
  revision: string;
  /** The last commit at or before `revision` that changed a path its manifests are generated from (its source path, value files, Kustomize bases…). */
  changeRevision?: string;
  /** The change revision before it (the commit before `changeRevision` that touched the path); absent for the first. */
  previousChangeRevision?: string;
  commit?: CommitInfo;
  /** Resources whose manifests differ between previousChangeRevision and changeRevision. */
  resources: ResourceChange[];
  images: ImageChange[];
  /** Resources, fields or images were left out to stay within the limits. */
  truncated: boolean;
  /** Argo CD's message when the manifests could not be generated or compared. */
  error?: string;
  /** No source is a Git repository over http(s) (`not-git`); `multi-source` only from older Source Servers. */
  unsupported?: 'multi-source' | 'not-git';
}

/** One resource of a diff: both sides whole (null: absent on that side), for a side-by-side view. */
export interface ResourceDiff extends ResourceChange {
  before: Record<string, unknown> | null;
  after: Record<string, unknown> | null;
}

/**
 * `GET /v1/applications/:namespace/:name/diff[?revision=R]`.
 *  - With `revision`: the manifests Argo CD generates at R (`after`) against those at the change
 *    revision before R (`before`): what that commit changed. `base` names the before revision.
 *  - Without: Git (Argo CD's target state) against the cluster (its normalized live state), per
 *    managed resource: what a sync would change. `base` is `live`.
 */
export interface ApplicationDiff {
  application: { namespace: string; name: string };
  revision: string;
  base: string;
  resources: ResourceDiff[];
  truncated: boolean;
}

/** A resource of a preview: how it changes from what runs now to the manifests at the revision asked. */
export interface PreviewResource extends ResourceChange {
  /**
   * Fields of `fields` the Git change alone does not cause: they differ between what runs and the
   * manifests at the Application's synced revision too (drift, or commits not synced yet). For an
   * added or removed resource, `['.']` when the synced revision already has it that way. Absent:
   * the Git change accounts for the whole change.
   */
  notFromChange?: string[];
}

/**
 * `GET /v1/applications/:namespace/:name/preview?revision=R` (R required: a commit, or a branch
 * or tag resolved to one). What a sync to R would change in what runs now, per resource: the
 * manifests Argo CD generates at R against the live objects (Argo CD's normalized live state) —
 * only the fields the manifests set are compared, so what the API server fills in is not a change
 * — and, for each change, whether the Git change from the synced revision (`current`) to R causes
 * it (`notFromChange` otherwise). Single-source Applications (409 UNSUPPORTED_SOURCE otherwise).
 * At most MAX_CHANGED_RESOURCES resources and MAX_CHANGED_FIELDS fields each (`truncated`).
 */
export interface ApplicationPreview {
  application: { namespace: string; name: string };
  revision: string;
  /** The revision Argo CD synced the Application to (empty: none yet). */
  current: string;
  resources: PreviewResource[];
  truncated: boolean;
}
