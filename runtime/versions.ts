/**
 * Runtime versions. Each pins every component it installs; `upgrade.minFrom` makes older
 * versions step through an intermediate release.
 */
import type { RuntimeVersion } from './catalog.ts';

export const VERSIONS: readonly RuntimeVersion[] = [
  {
    version: '1.3.0',
    releaseDate: '2026-06-02',
    channel: 'stable',
    components: { vcluster: '0.24.1', kubernetes: 'v1.31.6', argoCd: '7.8.2', argoWorkflows: '0.45.4', argoRollouts: '2.39.0', argoEvents: '2.4.13', agents: '1.3.0' },
    upgrade: {},
  },
  {
    version: '1.4.0',
    releaseDate: '2026-08-18',
    channel: 'stable',
    components: { vcluster: '0.25.1', kubernetes: 'v1.32.3', argoCd: '7.9.1', argoWorkflows: '0.45.12', argoRollouts: '2.39.5', argoEvents: '2.4.15', agents: '1.4.0' },
    upgrade: { minFrom: '1.3.0' },
  },
  {
    version: '1.5.0',
    releaseDate: '2026-10-27',
    channel: 'latest',
    components: { vcluster: '0.26.0', kubernetes: 'v1.33.1', argoCd: '8.0.17', argoWorkflows: '0.45.19', argoRollouts: '2.40.0', argoEvents: '2.4.15', agents: '1.5.0' },
    upgrade: { minFrom: '1.4.0' },
  },
];
