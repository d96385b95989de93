/**
 * The only way this service builds a @kubernetes/client-node KubeConfig from text: the text is
 * checked by the kubeconfig policy first and only the sanitised copy reaches loadFromString
 * (which would otherwise read `token-file` and run `exec` as the kubeconfig says).
 */
import { KubeConfig } from '@kubernetes/client-node';
import type { Lookup } from './address.ts';
import { pinKubeconfig, STRICT_KUBECONFIG_POLICY, type KubeconfigPolicy } from './policy.ts';

/** Checked, resolved once and pinned to the checked address (pinKubeconfig). */
export async function kubeConfigFrom(
  text: string,
  policy: KubeconfigPolicy = STRICT_KUBECONFIG_POLICY,
  lookup?: Lookup,
): Promise<KubeConfig> {
  const checked = await pinKubeconfig(text, policy, lookup);
  const kc = new KubeConfig();
  kc.loadFromString(checked.text);
  return kc;
}
