/**
 * The Argo charts of a hybrid runtime with argo=new, rendered by the control plane for its install
 * URL (runtime/hybrid/install.ts): `helm template` (the chart tools' helm, runtime/render/
 * chart-tools.ts) of each chart the catalog pins, from the provisioner's local chart directory
 * (PROVISIONER_CHART_REPOSITORIES's `argo`, the charts the tenants program installs from), with
 * the hosted runtime's values on the default plan and the catalog's Kubernetes version, the same
 * path as `provisioner runtime render`. Each version is rendered once per process (the catalog
 * bounds how many); a failed render is not kept.
 *
 * Without a local chart directory, a chart file or helm, the install URL of an argo=new runtime is
 * not given (`unavailable` says why and which setting or file is missing): the registration
 * answers the files and the helm command instead.
 */
import { existsSync } from 'node:fs';
import { ARGO_RELEASES, argoReleaseValues } from '../../runtime/component/argo-releases.ts';
import { isLocalPath } from '../../runtime/component/chart-source.ts';
import type { RenderedChart } from '../../runtime/hybrid/install.ts';
import { ChartToolMissingError, findChartTool } from '../../runtime/render/chart-tools.ts';
import { ChartMissingError, helmTemplate, mirroredChart } from '../../runtime/render/helm.ts';
import type { RuntimeVersion } from '../../runtime/versions.ts';
import { DEFAULT_PLAN, PLANS } from '../../tenants/plans.ts';

export interface ArgoChartsOptions {
  /** PROVISIONER_CHART_REPOSITORIES (config.engine.chartRepositories); only a local `argo` directory is rendered from. */
  chartRepositories: Record<string, string> | undefined;
  /** The helm binary (default: findChartTool's). */
  helm?: () => string;
}

/** The local directory of the Argo charts, from PROVISIONER_CHART_REPOSITORIES, or undefined. */
export function localArgoCharts(chartRepositories: Record<string, string> | undefined): string | undefined {
  const location = chartRepositories?.argo;
  return location !== undefined && isLocalPath(location) ? location.replace(/^file:\/\//, '') : undefined;
}

export class ArgoCharts {
  readonly #dir: string | undefined;
  readonly #helm: () => string;
  readonly #rendered = new Map<string, Promise<RenderedChart[]>>();

  constructor(opts: ArgoChartsOptions) {
    this.#dir = localArgoCharts(opts.chartRepositories);
    this.#helm = opts.helm ?? (() => findChartTool('helm'));
  }

  /** Why the charts of `version` cannot be rendered here (the setting, file or tool missing), or undefined. */
  unavailable(version: RuntimeVersion): string | undefined {
    if (this.#dir === undefined)
      return 'the control plane renders the Argo charts from a local chart directory, and it has none: the operator sets PROVISIONER_CHART_REPOSITORIES\'s argo to a directory of <chart>-<version>.tgz (docs/operations.md, "Air-gapped installs: the chart mirror")';
    if (!existsSync(this.#dir))
      return `the Argo chart directory ${this.#dir} (PROVISIONER_CHART_REPOSITORIES) does not exist`;
    try {
      for (const spec of ARGO_RELEASES)
        mirroredChart(this.#dir, 'argo', spec.chart, version.components[spec.component], version.version);
      this.#helm();
    } catch (err) {
      if (err instanceof ChartMissingError || err instanceof ChartToolMissingError) return err.message;
      throw err;
    }
    return undefined;
  }

  /** The four Argo charts of `version`, rendered (once per version; callers must not change them). */
  render(version: RuntimeVersion): Promise<RenderedChart[]> {
    let rendered = this.#rendered.get(version.version);
    if (!rendered) {
      rendered = this.#render(version);
      this.#rendered.set(version.version, rendered);
      rendered.catch(() => this.#rendered.delete(version.version));
    }
    return rendered;
  }

  async #render(version: RuntimeVersion): Promise<RenderedChart[]> {
    const why = this.unavailable(version);
    if (why !== undefined) throw new ArgoChartsUnavailableError(why);
    const helm = this.#helm();
    const budget = PLANS[DEFAULT_PLAN]!.runtime;
    return Promise.all(
      ARGO_RELEASES.map(async (spec) => ({
        release: spec.releaseName,
        namespace: spec.namespace,
        objects: await helmTemplate(helm, {
          release: spec.releaseName,
          chart: mirroredChart(this.#dir!, 'argo', spec.chart, version.components[spec.component], version.version),
          namespace: spec.namespace,
          values: argoReleaseValues(spec, budget),
          kubeVersion: version.components.kubernetes,
        }),
      })),
    );
  }
}

export class ArgoChartsUnavailableError extends Error {
  override name = 'ArgoChartsUnavailableError';
}
