/**
 * A tenant's products and their promotions (docs/promotions.md), as the runtime's event reporter
 * reported the GitOps Operator's resources, live through the tenant's change stream
 * (GET /v1/tenants/:id/changes?kind=product | promotion | promotionpreview):
 *
 *  - on the tenant page, each product with the release each environment holds;
 *  - a product's page (#/tenants/<id>/products/<ns>/<name>): its environments side by side, its
 *    promotions and previews (dry runs, kind PromotionPreview) newest first, and the chosen one's
 *    timeline (each step's phase, commit, gates and timing, live; a preview's changes per
 *    environment, application and resource). Promote, Preview (dry run), retry and abort go
 *    through the tenant's runtime (POST /v1/tenants/:id/runtime/api/…), as the CLI's
 *    `products promote [--dry-run]` and `promotions retry | abort` do; a refusal or an unreachable
 *    runtime is shown as the API says it.
 */
import { useEffect, useState } from 'preact/hooks';
import { ApiError, client, type RuntimeObject } from './api.ts';
import type { ActionAnswers } from '../../runtime/protocol/actions.ts';
import { openStream, type StreamStatus } from './sse.ts';
import { Banner, ErrorBox, Time } from './util.tsx';
import type { ProductSummary, PromotionSummary } from '../../runtime/protocol/promotions.ts';

type Step = NonNullable<PromotionSummary['steps']>[number];
const FINAL = new Set(['Succeeded', 'Failed', 'Aborted', 'Superseded']);

const key = (o: { namespace: string; name: string }) => `${o.namespace}/${o.name}`;
const productOf = (o: RuntimeObject): ProductSummary => o.summary;
const promotionOf = (o: RuntimeObject): PromotionSummary => o.summary;
const startedOf = (o: RuntimeObject) => promotionOf(o).startedAt ?? o.updatedAt;
const newestFirst = (a: RuntimeObject, b: RuntimeObject) =>
  startedOf(b).localeCompare(startedOf(a)) || b.name.localeCompare(a.name);
const shortSha = (s: string | undefined) => (s ? s.slice(0, 7) : undefined);
/** A preview (a promotion's dry run, kind PromotionPreview), listed beside the promotions. */
const isPreview = (o: RuntimeObject) => o.kind === 'PromotionPreview';
/** A promotion's or a preview's key in the list (the two kinds may share a name). */
const runKey = (o: RuntimeObject) => `${o.kind}/${o.name}`;

/** The product's page. */
export const productHref = (tenantId: string, p: { namespace: string; name: string }) =>
  `#/tenants/${tenantId}/products/${encodeURIComponent(p.namespace)}/${encodeURIComponent(p.name)}`;

/** `1 min 5 s` between two times (to now while running). */
function took(from: string | undefined, to: string | undefined): string | null {
  if (!from) return null;
  const s = Math.max(0, Math.round(((to ? Date.parse(to) : Date.now()) - Date.parse(from)) / 1000));
  if (!Number.isFinite(s)) return null;
  return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min${s % 60 ? ` ${s % 60} s` : ''}`;
}

/**
 * The tenant's reported objects of one kind, kept current by its change stream: a page read each
 * time the stream opens (first, and after a lost connection), then every change.
 */
function useReported(
  tenantId: string,
  kind: 'product' | 'promotion' | 'promotionpreview',
  filter?: (o: RuntimeObject) => boolean,
) {
  const [items, setItems] = useState<Map<string, RuntimeObject> | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const [stream, setStream] = useState<StreamStatus>('connecting');
  useEffect(() => {
    setItems(null);
    const keep = (o: RuntimeObject) => filter === undefined || filter(o);
    const load = () =>
      client.call(`GET /v1/tenants/:id/${kind}s`, { params: { id: tenantId }, query: { limit: 500 } }).then(
        (r) => (setItems(new Map(r.items.filter(keep).map((o) => [key(o), o]))), setError(null)),
        (e: unknown) => setError(e as ApiError),
      );
    const s = openStream('GET /v1/tenants/:id/changes', {
      params: { id: tenantId },
      query: { kind },
      onStatus: (st) => {
        setStream(st);
        if (st === 'open' || st === 'failed') void load();
      },
      onEvents: (events) =>
        setItems((current) => {
          const next = new Map(current ?? []);
          for (const e of events) {
            if (e.event === 'reset') next.clear();
            if (e.event !== 'change') continue;
            const { deleted, item } = e.data;
            if (deleted || !keep(item)) next.delete(key(item));
            else next.set(key(item), item);
          }
          return next;
        }),
    });
    return () => s.close();
  }, [tenantId, kind]);
  return { items, error, stream };
}

/** dev 1.2.0 → staging 1.2.0 → prod 1.1.0 */
function Releases({ product }: { product: ProductSummary }) {
  const envs = product.environments ?? [];
  if (envs.length === 0) return <span class="muted">not read yet</span>;
  return (
    <span class="releases">
      {envs.map((e, i) => (
        <span key={e.environment}>
          {i > 0 && <span aria-hidden="true"> → </span>}
          <span class="env-chip">
            {e.environment} <strong>{e.release ?? '—'}</strong>
          </span>
        </span>
      ))}
    </span>
  );
}

/** The tenant page's card: every product with the release each environment holds. */
export function Products({ tenantId }: { tenantId: string }) {
  const { items, error, stream } = useReported(tenantId, 'product');
  const list = [...(items?.values() ?? [])].sort((a, b) => key(a).localeCompare(key(b)));
  return (
    <div class="card">
      <h2>Products</h2>
      <Banner status={stream} />
      <ErrorBox error={error} />
      {items !== null && list.length === 0 ? (
        <p>
          No products reported. Promotions run in runtimes from 1.8.0: keep Product, PromotionFlow and PromotionTemplate
          resources in the configuration repository (docs/promotions.md).
        </p>
      ) : (
        <table class="products">
          <thead>
            <tr>
              <th scope="col">Product</th>
              <th scope="col">Release in each environment</th>
              <th scope="col">Updated</th>
            </tr>
          </thead>
          <tbody>
            {list.map((p) => (
              <tr key={key(p)}>
                <td>
                  <a href={productHref(tenantId, p)}>{key(p)}</a>
                </td>
                <td>
                  <Releases product={productOf(p)} />
                </td>
                <td>
                  <Time iso={p.updatedAt} ago />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}

function Gate({ label, action }: { label: string; action: Step['preAction'] }) {
  if (!action) return null;
  const phase = action.phase ?? 'Running';
  return (
    <span class={`gate gate-${phase.toLowerCase()}`} title={action.message}>
      {label}: <code>{action.workflow}</code> {phase}
    </span>
  );
}

/** A step's dry run: per application, each resource that would change from what runs, and what the change does not cause. */
function DryRunView({ dryRun }: { dryRun: NonNullable<Step['dryRun']> }) {
  return (
    <div class="dry-run" aria-label="dry run">
      <p class="muted">
        {dryRun.commit ? (
          <>
            The change to {dryRun.files.join(', ')}, previewed at scratch commit{' '}
            <code title={dryRun.commit}>{shortSha(dryRun.commit)}</code> (its branch deleted).
          </>
        ) : (
          'No Git change: previewed at the branch head.'
        )}
      </p>
      <table class="dry-run-diff">
        <thead>
          <tr>
            <th scope="col">Application</th>
            <th scope="col">Resource</th>
            <th scope="col">Change</th>
            <th scope="col">Fields</th>
          </tr>
        </thead>
        <tbody>
          {dryRun.applications.flatMap((a) => {
            if (a.error)
              return [
                <tr key={a.application}>
                  <td>{a.application}</td>
                  <td colSpan={3} class="error">
                    not previewed: {a.error}
                  </td>
                </tr>,
              ];
            if (a.resources.length === 0 && !a.moreResources)
              return [
                <tr key={a.application}>
                  <td>{a.application}</td>
                  <td colSpan={3} class="muted">
                    unchanged
                  </td>
                </tr>,
              ];
            return [
              ...a.resources.map((r) => (
                <tr
                  key={`${a.application}/${r.kind}/${r.namespace}/${r.name}`}
                  class={r.notFromChange?.length ? 'outside-template' : undefined}
                >
                  <td>{a.application}</td>
                  <td>
                    {r.kind} {r.namespace ? `${r.namespace}/` : ''}
                    {r.name}
                  </td>
                  <td>{r.action}</td>
                  <td>
                    {r.fields.map((f) => (
                      <code key={f}>{f} </code>
                    ))}
                    {r.moreFields ? <span class="muted"> +{r.moreFields} more</span> : null}
                    {r.notFromChange?.length ? (
                      <div class="warning">
                        not from the change:{' '}
                        {r.notFromChange.includes('.') ? 'the whole resource' : r.notFromChange.join(', ')}
                      </div>
                    ) : null}
                  </td>
                </tr>
              )),
              ...(a.moreResources
                ? [
                    <tr key={`${a.application}/more`}>
                      <td>{a.application}</td>
                      <td colSpan={3} class="muted">
                        {a.moreResources} more resources
                      </td>
                    </tr>,
                  ]
                : []),
            ];
          })}
        </tbody>
      </table>
    </div>
  );
}

/** One promotion or preview: what it moves, who asked, and each step. */
function Timeline({ promotion }: { promotion: RuntimeObject }) {
  const p = promotionOf(promotion);
  const phase = p.phase ?? 'Pending';
  const preview = isPreview(promotion);
  return (
    <section class="promotion" aria-label={`${preview ? 'Preview' : 'Promotion'} ${promotion.name}`} data-phase={phase}>
      <h3>
        {preview ? 'Preview (dry run)' : 'Promotion'} {promotion.name}{' '}
        <span class={`phase phase-${phase.toLowerCase()}`}>{phase}</span>
      </h3>
      {preview && <p class="muted">A preview of what each environment would get: nothing is changed.</p>}
      <p>
        {p.rollback && (
          <>
            Rollback of <strong>{p.rollback}</strong>
            {p.rollbackFrom ? ` from ${p.rollbackFrom}` : ''}.{' '}
          </>
        )}
        Release <strong>{p.release ?? "the trigger environment's"}</strong>, asked by {p.requestedBy ?? 'unknown'}
        {p.startedAt && (
          <>
            , started <Time iso={p.startedAt} ago />
            {p.finishedAt ? `, took ${took(p.startedAt, p.finishedAt) ?? '—'}` : ''}
          </>
        )}
        .
      </p>
      {p.message && <p class="promotion-message">{p.message}</p>}
      <ol class="promotion-timeline">
        {(p.steps ?? []).map((s) => (
          <li key={s.environment} data-environment={s.environment} data-phase={s.phase}>
            <span class="step-env">{s.environment}</span>{' '}
            <span class={`phase phase-${s.phase.toLowerCase()}`}>{s.phase}</span>
            {s.commit && (
              <>
                {' '}
                commit <code title={s.commit}>{shortSha(s.commit)}</code>
              </>
            )}
            {s.revert && (
              <>
                {' '}
                reverted by <code title={s.revert}>{shortSha(s.revert)}</code>
              </>
            )}
            {s.proposal && !s.commit && (
              <>
                {' '}
                proposed on branch <code>{s.proposal.branch}</code>
              </>
            )}
            {s.proposal?.pullRequest && (
              <>
                {' '}
                <a class="pull-request" href={s.proposal.pullRequest.url} target="_blank" rel="noreferrer">
                  pull request #{s.proposal.pullRequest.number}
                </a>
                {s.proposal.pullRequest.state && s.proposal.pullRequest.state !== 'open' && (
                  <span class="muted"> ({s.proposal.pullRequest.state})</span>
                )}
              </>
            )}
            {s.startedAt && <span class="muted"> {took(s.startedAt, s.finishedAt)}</span>}
            <div class="gates">
              <Gate label="pre-action" action={s.preAction} />
              <Gate label="post-action" action={s.postAction} />
            </div>
            {s.message && <div class="step-message">{s.message}</div>}
            {s.dryRun && <DryRunView dryRun={s.dryRun} />}
          </li>
        ))}
      </ol>
    </section>
  );
}

export function ProductPage({ tenantId, namespace, name }: { tenantId: string; namespace: string; name: string }) {
  const { items: products, error, stream } = useReported(tenantId, 'product');
  const promotions = useReported(tenantId, 'promotion', (o) => o.namespace === namespace);
  const previews = useReported(tenantId, 'promotionpreview', (o) => o.namespace === namespace);
  const [selected, setSelected] = useState<string | null>(null);
  const [release, setRelease] = useState('');
  const [busy, setBusy] = useState(false);
  const [actionError, setActionError] = useState<ApiError | string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);

  const product = products?.get(`${namespace}/${name}`);
  const list = [...(promotions.items?.values() ?? []), ...(previews.items?.values() ?? [])]
    .filter((p) => promotionOf(p).product === name)
    .sort(newestFirst);
  const shown = list.find((p) => runKey(p) === selected) ?? list[0];
  // A preview changes no environment: not shown as arriving there.
  const running = list.find(
    (p) => !FINAL.has(promotionOf(p).phase ?? 'Pending') && !isPreview(p) && !promotionOf(p).dryRun,
  );

  /** An action through the tenant's runtime (runtime/protocol/actions.ts), its answer as the runtime gives it. */
  const act = async <R extends 'products' | 'promotions' | 'promotionpreviews'>(
    target: { resource: R; namespace: string; name: string; action: string },
    body: unknown,
    done: (answer: ActionAnswers[R]) => string,
  ) => {
    setBusy(true);
    setActionError(null);
    setNotice(null);
    try {
      const answer = await client.runtimeAction(tenantId, target, { body });
      setNotice(done(answer));
    } catch (err) {
      setActionError(err instanceof ApiError ? err : String(err));
    } finally {
      setBusy(false);
    }
  };
  const promote = (e: Event) => {
    e.preventDefault();
    const r = release.trim();
    void act({ resource: 'products', namespace, name, action: 'promote' }, r ? { release: r } : {}, (a) => {
      if (a.metadata?.name) setSelected(`Promotion/${a.metadata.name}`);
      setRelease('');
      return `Promotion ${a.metadata?.name ?? ''} started: the GitOps Operator runs it; it shows here once the runtime reports it.`;
    });
  };
  const preview = () => {
    const r = release.trim();
    void act({ resource: 'products', namespace, name, action: 'dry-run' }, r ? { release: r } : {}, (a) => {
      if (a.metadata?.name) setSelected(`PromotionPreview/${a.metadata.name}`);
      return `Preview ${a.metadata?.name ?? ''} started: each environment's change is previewed against what runs there; nothing is changed.`;
    });
  };
  const rollback = (environment: string, release: string | undefined) => {
    if (
      !confirm(
        `Roll ${environment} back from ${release ?? 'its release'} to the release it held before? The GitOps Operator commits it.`,
      )
    )
      return;
    void act({ resource: 'products', namespace, name, action: 'rollback' }, { environment }, (a) => {
      if (a.metadata?.name) setSelected(`Promotion/${a.metadata.name}`);
      return `Rollback ${a.metadata?.name ?? ''} of ${environment} started: the GitOps Operator restores the release it held before.`;
    });
  };
  const onPromotion = (p: RuntimeObject, what: 'retry' | 'abort') =>
    isPreview(p)
      ? void act(
          { resource: 'promotionpreviews', namespace: p.namespace, name: p.name, action: 'abort' },
          undefined,
          () => `Abort of preview ${p.name} asked: the GitOps Operator stops it and deletes its scratch branches.`,
        )
      : void act({ resource: 'promotions', namespace: p.namespace, name: p.name, action: what }, undefined, () =>
          what === 'retry'
            ? `Retry of ${p.name} asked: the GitOps Operator runs it again from its failed step.`
            : `Abort of ${p.name} asked: the GitOps Operator stops it at the next safe point and reverts a change already pushed for the running step.`,
        );

  const shownPhase = shown ? (promotionOf(shown).phase ?? 'Pending') : undefined;
  return (
    <>
      <p>
        <a href={`#/tenants/${tenantId}`}>← Tenant</a>
      </p>
      <h1>
        Product {namespace}/{name}
      </h1>
      <Banner status={stream} />
      <ErrorBox error={error ?? promotions.error ?? previews.error} />
      {products !== null && !product ? (
        <p>The runtime has reported no product {`${namespace}/${name}`}.</p>
      ) : (
        <>
          <div class="card">
            <h2>Environments</h2>
            {product && <p class="muted">Flow {productOf(product).flow ?? '—'}</p>}
            <ol class="environments">
              {(product ? (productOf(product).environments ?? []) : []).map((e) => {
                const step = running
                  ? promotionOf(running).steps?.find((s) => s.environment === e.environment)
                  : undefined;
                return (
                  <li key={e.environment} data-environment={e.environment}>
                    <span class="env-name">{e.environment}</span>
                    <strong class="env-release">{e.release ?? '—'}</strong>
                    {e.revision && <code title={e.revision}>{shortSha(e.revision)}</code>}
                    {step && step.phase !== 'Pending' && (
                      <span class={`phase phase-${step.phase.toLowerCase()}`}>
                        {promotionOf(running!).release} {step.phase}
                      </span>
                    )}
                    <button
                      type="button"
                      class="link"
                      disabled={busy}
                      aria-label={`Roll back ${e.environment}`}
                      onClick={() => rollback(e.environment, e.release)}
                    >
                      Roll back
                    </button>
                  </li>
                );
              })}
            </ol>
            <form class="promote" onSubmit={promote}>
              <label>
                Release{' '}
                <input
                  name="release"
                  placeholder="the trigger environment's"
                  value={release}
                  onInput={(e) => setRelease(e.currentTarget.value)}
                />
              </label>
              <button type="submit" disabled={busy}>
                Promote
              </button>{' '}
              <button type="button" disabled={busy} onClick={preview}>
                Preview (dry run)
              </button>
            </form>
            {notice && (
              <p class="notice" role="status">
                {notice}
              </p>
            )}
            <ErrorBox error={actionError} />
          </div>
          <div class="card">
            <h2>Promotions and previews</h2>
            {list.length === 0 ? (
              <p>No promotion of this product reported yet.</p>
            ) : (
              <>
                <table class="promotions">
                  <thead>
                    <tr>
                      <th scope="col">Promotion</th>
                      <th scope="col">Release</th>
                      <th scope="col">Phase</th>
                      <th scope="col">Started</th>
                    </tr>
                  </thead>
                  <tbody>
                    {list.map((p) => {
                      const s = promotionOf(p);
                      return (
                        <tr
                          key={runKey(p)}
                          class={`clickable${shown === p ? ' selected' : ''}`}
                          aria-selected={shown === p}
                          onClick={() => setSelected(runKey(p))}
                        >
                          <td>
                            <button type="button" class="link" onClick={() => setSelected(runKey(p))}>
                              {p.name}
                            </button>
                          </td>
                          <td>{s.release ?? '—'}</td>
                          <td>
                            {s.phase ?? 'Pending'}
                            {isPreview(p) ? ' (dry run)' : s.dryRun ? ' (spec.dryRun: refused)' : ''}
                          </td>
                          <td>{s.startedAt ? <Time iso={s.startedAt} ago /> : '—'}</td>
                        </tr>
                      );
                    })}
                  </tbody>
                </table>
                {shown && (
                  <>
                    <Timeline promotion={shown} />
                    <p class="actions">
                      <button
                        type="button"
                        disabled={busy || shownPhase !== 'Failed' || isPreview(shown)}
                        onClick={() => onPromotion(shown, 'retry')}
                      >
                        Retry
                      </button>{' '}
                      <button
                        type="button"
                        disabled={busy || FINAL.has(shownPhase ?? 'Pending')}
                        onClick={() => onPromotion(shown, 'abort')}
                      >
                        Abort
                      </button>
                    </p>
                  </>
                )}
              </>
            )}
          </div>
        </>
      )}
    </>
  );
}
