/**
 * The Source Server's account in the runtime's Argo CD: a local account `source-server` that can
 * only log in (no API keys) and reads as `role:readonly`, so that the manifests, revision metadata
 * and diffs it serves are the ones Argo CD itself generated, under Argo CD's own RBAC.
 *
 * Its password is derived from the runtime token (HMAC-SHA256 under a fixed label): a Pulumi run
 * computes the same password every time without storing one, and a rotated runtime token rotates
 * it. Argo CD keeps a bcrypt hash (`accounts.<name>.password` in argocd-secret); its salt is
 * derived the same way, so that a run that changes nothing shows no diff in the release values.
 *
 * Added to the argo-cd release's values only at runtime versions that install the Source Server
 * (agentsAt(version)): a runtime at an older version keeps exactly the values it had. The keys
 * (configs.cm, configs.rbac `policy.csv`, configs.secret.extra) are the same in every pinned
 * argo-cd chart (7.8.2, 7.9.1, 8.0.17, 8.3.7).
 */
import { createHmac } from 'node:crypto';
import bcrypt from 'bcryptjs';
import { SOURCE_SERVER_ARGOCD_ACCOUNT } from './agents.ts';

const PASSWORD_LABEL = 'hosted-runtimes/source-server/argocd-password/v1';
const SALT_LABEL = 'hosted-runtimes/source-server/argocd-password-salt/v1';
/** bcrypt's cost; Argo CD verifies the hash once per login (the Source Server logs in rarely). */
const BCRYPT_ROUNDS = 10;
/**
 * `accounts.<name>.passwordMtime`: Argo CD refuses session tokens issued before it. Fixed, so that
 * a run does not change it; a new password (rotated runtime token) is refused at the next login.
 */
export const SOURCE_SERVER_PASSWORD_MTIME = '2026-11-28T00:00:00Z';

/** The Source Server's Argo CD password for a runtime token. */
export function sourceServerPassword(runtimeToken: string): string {
  return createHmac('sha256', runtimeToken).update(PASSWORD_LABEL).digest('base64url');
}

/** The bcrypt hash Argo CD stores of the password, with a salt derived from the token. */
export function sourceServerPasswordHash(runtimeToken: string): string {
  const saltBytes = createHmac('sha256', runtimeToken).update(SALT_LABEL).digest().subarray(0, 16);
  const salt = `$2a$${BCRYPT_ROUNDS}$${bcrypt.encodeBase64(saltBytes, 16)}`;
  return bcrypt.hashSync(sourceServerPassword(runtimeToken), salt);
}

/**
 * The argo-cd chart values that declare the account and its role, without a password: a hybrid
 * runtime's bundle (argo=new), whose Source Server writes the password's hash itself once the
 * runtime token exists in the cluster (runtime/agents/source-server/argocd-setup.ts).
 */
export function sourceServerArgoCdAccountValues(): Record<string, unknown> {
  const account = SOURCE_SERVER_ARGOCD_ACCOUNT;
  return {
    configs: {
      cm: { [`accounts.${account}`]: 'login' },
      rbac: { 'policy.csv': `g, ${account}, role:readonly\n` },
    },
  };
}

/**
 * The argo-cd chart values that create the account (merged over the release's own values), with
 * the password's hash (sourceServerPasswordHash; the offline render shows a placeholder).
 */
export function sourceServerArgoCdValues(passwordHash: string): Record<string, unknown> {
  const account = SOURCE_SERVER_ARGOCD_ACCOUNT;
  const declared = sourceServerArgoCdAccountValues() as { configs: Record<string, unknown> };
  return {
    configs: {
      ...declared.configs,
      secret: {
        extra: {
          [`accounts.${account}.password`]: passwordHash,
          [`accounts.${account}.passwordMtime`]: SOURCE_SERVER_PASSWORD_MTIME,
        },
      },
    },
  };
}
