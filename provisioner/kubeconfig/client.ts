/**
 * The only way this service builds a @kubernetes/client-node KubeConfig from text: the text is
 * checked by the kubeconfig policy first and only the sanitised copy reaches loadFromString
 * (which would otherwise read `token-file` and run `exec` as the kubeconfig says).
 */
import { KubeConfig } from '@kubernetes/client-node';
import { checkKubeconfig, STRICT_KUBECONFIG_POLICY, type KubeconfigPolicy } from './policy.ts';

export function kubeConfigFrom(text: string, policy: KubeconfigPolicy = STRICT_KUBECONFIG_POLICY): KubeConfig {
  const checked = checkKubeconfig(text, policy);
  const kc = new KubeConfig();
  kc.loadFromString(checked.text);
  return kc;
}
