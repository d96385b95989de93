/**
 * What a root cluster's kubeconfig must be to be registered: parseable, with a current context
 * that names a cluster (at an http(s) server) and a user.
 */
import { KubeConfig } from '@kubernetes/client-node';
import { errors } from '../errors.ts';

/** Parses a kubeconfig and checks it names a current context with a cluster and user. */
export function validateKubeconfig(text: string): void {
  const kc = new KubeConfig();
  try {
    kc.loadFromString(text);
  } catch (err) {
    throw errors.validation(`kubeconfig could not be parsed: ${(err as Error).message.split('\n')[0]}`, 'kubeconfig');
  }
  const ctxName = kc.getCurrentContext();
  if (!ctxName || !kc.getCurrentCluster() || !kc.getCurrentUser()) {
    throw errors.validation('kubeconfig must set current-context to a context with a cluster and a user', 'kubeconfig');
  }
  const server = kc.getCurrentCluster()!.server;
  if (!/^https?:\/\//.test(server)) throw errors.validation(`kubeconfig cluster server '${server}' is not an http(s) URL`, 'kubeconfig');
}
