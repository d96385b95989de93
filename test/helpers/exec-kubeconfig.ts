/**
 * A kubeconfig whose user runs an exec credential plugin that would create a marker file: the
 * proof, in tests of every path a stored or submitted kubeconfig takes, that nothing a caller
 * supplies is executed (the marker never appears).
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface ExecMarkerKubeconfig {
  /** The kubeconfig (JSON), pointing at a documentation address (nothing answers there). */
  kubeconfig: string;
  /** Whether the exec command ran (the marker file exists). */
  ran: () => boolean;
}

export function execMarkerKubeconfig(t: { teardown(fn: () => void): void }, prefix = 'kc-exec-'): ExecMarkerKubeconfig {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const marker = join(dir, 'marker');
  const kubeconfig = JSON.stringify({
    apiVersion: 'v1',
    kind: 'Config',
    'current-context': 'x',
    clusters: [{ name: 'c', cluster: { server: 'https://203.0.113.10:6443' } }],
    contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
    users: [
      {
        name: 'u',
        user: {
          exec: { apiVersion: 'client.authentication.k8s.io/v1', command: '/bin/sh', args: ['-c', `touch ${marker}`] },
        },
      },
    ],
  });
  return { kubeconfig, ran: () => existsSync(marker) };
}
