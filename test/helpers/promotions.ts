/**
 * Test data for promotions as a runtime reports them: the dry run (preview) of one environment's
 * step, as the GitOps Operator writes it into a PromotionPreview's or a Promotion's status.
 */
import type { StepDryRun } from '../../runtime/protocol/promotions.ts';

/**
 * A step's dry run in the `shop` product's `environment`: its release file previewed at a scratch
 * commit; `shop-<environment>-web`'s Deployment image changed by the promotion; and
 * `shop-<environment>-api` unchanged or, with `outside`, its ConfigMap's `data.color` changed by
 * something other than the promotion's Git change (`notFromChange`).
 */
export function shopDryRun(environment: string, o: { outside: boolean; at: string; commit?: string }): StepDryRun {
  return {
    at: o.at,
    commit: 'feedbeef0123456789abcdef',
    files: [`shop/${environment}/release.yaml`],
    applications: [
      {
        application: `shop-${environment}-web`,
        resources: [
          {
            group: 'apps',
            kind: 'Deployment',
            namespace: `shop-${environment}`,
            name: 'web',
            action: 'modified',
            fields: ['spec.template.spec.containers[name=web].image'],
          },
        ],
      },
      {
        application: `shop-${environment}-api`,
        resources: o.outside
          ? [
              {
                kind: 'ConfigMap',
                namespace: `shop-${environment}`,
                name: 'shop-api',
                action: 'modified',
                fields: ['data.color'],
                notFromChange: ['data.color'],
              },
            ]
          : [],
      },
    ],
  };
}
