/**
 * What the control plane generates for a hybrid runtime: the input of its install bundle (its
 * settings, the control plane's URL and key), its bundle at a version and its upgrade bundle
 * between two, built once per settings and versions in the cache of generated bundles
 * (bundle-cache.ts), and the Argo charts an argo=new runtime's install URL serves (argo-charts.ts).
 */
import { errors } from '../errors.ts';
import type { RuntimeRow } from '../store/runtimes.ts';
import type { RuntimeUpgradeBundle } from '../api/types.ts';
import { hybridInstallBundle, type InstallBundle, type InstallBundleInput } from '../../runtime/hybrid/bundle.ts';
import { chartObjects, InstallDocumentError, type RenderedChart } from '../../runtime/hybrid/install.ts';
import { unpinnedImages } from '../../runtime/hybrid/images.ts';
import { upgradeBundle } from '../../runtime/hybrid/upgrade.ts';
import { upgraderPatchable } from '../../runtime/hybrid/upgrader.ts';
import type { RuntimeVersion } from '../../runtime/versions.ts';
import { ArgoChartsUnavailableError } from './argo-charts.ts';
import { bundleCacheKey } from './bundle-cache.ts';
import { tunnelUrlOf, type Runtimes } from './context.ts';

/** argo=new: the Argo charts an install URL serves, rendered, with their images lacking a digest; or why there are none. */
export type RenderedCharts = { rendered: RenderedChart[]; unpinnedImages: string[] } | { unavailable: string };

/**
 * argo=new: the Argo charts at `version` as the control plane renders them (argo-charts.ts, once
 * per version), checked as the install writes them, with the images the catalog has no digest
 * for; or why the control plane cannot render them.
 */
export async function renderedCharts(
  rt: Runtimes,
  version: RuntimeVersion,
): Promise<{ version: string; charts: RenderedCharts }> {
  const unavailable = rt.argoCharts.unavailable(version);
  if (unavailable !== undefined) return { version: version.version, charts: { unavailable } };
  try {
    const rendered = await rt.argoCharts.render(version);
    const objects = chartObjects({ tenantId: 'check', name: 'check' }, version, rendered);
    return { version: version.version, charts: { rendered, unpinnedImages: unpinnedImages(objects) } };
  } catch (err) {
    if (err instanceof InstallDocumentError || err instanceof ArgoChartsUnavailableError)
      return { version: version.version, charts: { unavailable: err.message } };
    throw err;
  }
}

export function bundleInput(
  rt: Runtimes,
  row: RuntimeRow,
  publicUrl: string,
): Omit<InstallBundleInput, 'bootstrapToken'> {
  return {
    runtime: {
      tenantId: row.tenant_id,
      runtimeId: row.id,
      name: row.name,
      access: row.access!,
      ...(row.ingress_url ? { ingressUrl: row.ingress_url } : {}),
      argo: row.argo!,
      ...(row.argo_namespace ? { argoNamespace: row.argo_namespace } : {}),
      ...(row.namespace ? { namespace: row.namespace } : {}),
      upgrader: row.upgrades === 'agent',
    },
    version: rt.deps.catalog.get(row.version!)!,
    controlPlaneUrl: publicUrl,
    tunnelUrl: tunnelUrlOf(publicUrl),
    publicKey: rt.deps.publicKeyPem,
  };
}

/** The upgrade bundle of `row` at `version` (what the upgrader's plan compares), built once per settings and version. */
export function bundleAt(rt: Runtimes, row: RuntimeRow, publicUrl: string, version: string): InstallBundle {
  const entry = rt.deps.catalog.get(version);
  if (!entry) throw errors.unknownVersion(version, 'version');
  const { version: _version, ...input } = bundleInput(rt, row, publicUrl);
  return rt.generated.get(
    bundleCacheKey('install-bundle', input, version),
    () => hybridInstallBundle({ ...input, version: entry, purpose: 'upgrade' }),
    installBundleBytes,
  );
}

/** What the upgrader of `row` may patch (its Role, as its bundle at `version` grants it). */
export function patchable(rt: Runtimes, row: RuntimeRow, publicUrl: string, version: string) {
  return upgraderPatchable(bundleAt(rt, row, publicUrl, version));
}

/** `row`'s upgrade bundle from `from` to `to`, built once per settings and versions; `fields` name the request's fields in errors. */
export async function upgradeBundleOf(
  rt: Runtimes,
  row: RuntimeRow,
  publicUrl: string,
  from: string,
  to: string,
  fields: { to: string; from?: string },
): Promise<RuntimeUpgradeBundle> {
  const target = rt.deps.catalog.get(to);
  if (!target) throw errors.unknownVersion(to, fields.to);
  const base = rt.deps.catalog.get(from);
  if (!base) throw errors.unknownVersion(from, fields.from ?? fields.to);
  const { version: _version, ...input } = bundleInput(rt, row, publicUrl);
  // Keyed by everything the bundle is a function of: the settings (with the control plane's URL
  // and public key) and the two catalog versions. A tenant may ask for many pairs at once: the
  // builds wait their turn in the build queue (bundle-cache.ts).
  return rt.generated.getQueued(
    bundleCacheKey('upgrade-bundle', input, from, to),
    row.tenant_id,
    () => upgradeBundle(input, base, target),
    upgradeBundleBytes,
  );
}

/** What a cached install bundle holds, roughly: its manifests twice (text and objects) and its charts. */
const installBundleBytes = (b: InstallBundle): number =>
  2 * b.manifests.length + b.charts.reduce((n, c) => n + c.values.length, 0) + 1024;

/** What a cached upgrade bundle holds, roughly: its manifests, charts and diff. */
const upgradeBundleBytes = (b: RuntimeUpgradeBundle): number =>
  b.install.manifests.length + b.install.charts.reduce((n, c) => n + c.values.length, 0) + b.diff.length + 1024;
