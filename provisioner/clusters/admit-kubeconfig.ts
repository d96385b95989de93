/**
 * Where a caller's kubeconfig enters the API (cluster registration today, managed clusters
 * later): the policy's refusal becomes a 400 naming the field. One call, before anything is
 * stored or used.
 */
import { errors } from '../errors.ts';
import {
  pinKubeconfig,
  KubeconfigPolicyError,
  type CheckedKubeconfig,
  type KubeconfigPolicy,
} from '../../kubeconfig-policy/policy.ts';

/** Checks a kubeconfig from a request body field (`field`, default `kubeconfig`); 400 when refused. */
export async function admitKubeconfig(
  text: string,
  policy: KubeconfigPolicy,
  field = 'kubeconfig',
): Promise<CheckedKubeconfig> {
  try {
    return await pinKubeconfig(text, policy);
  } catch (err) {
    if (err instanceof KubeconfigPolicyError)
      throw errors.validation(`${field} ${err.message}`, field, err.path ? { path: err.path } : undefined);
    throw err;
  }
}
