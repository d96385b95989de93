/**
 * The bootstrap exchange of a hybrid runtime: the install bundle's Job presents the single-use
 * bootstrap token to the control plane once and writes the runtime token it gets back into the
 * runtime credentials Secret. The names both ends and the bundle share. It imports nothing.
 */

/** The control plane's route that exchanges a bootstrap token (Authorization: Bearer) for the runtime token. */
export const BOOTSTRAP_PATH = '/v1/runtimes/bootstrap';

/** A bootstrap token: `hrth_` + 43 base64url characters (32 random bytes). */
export const BOOTSTRAP_TOKEN_PATTERN = /^hrth_[A-Za-z0-9_-]{43}$/;

/** The Secret of the install bundle holding the bootstrap token, deleted once it is redeemed. */
export const BOOTSTRAP_SECRET = 'runtime-bootstrap';
/** Key of the bootstrap Secret holding the token. */
export const BOOTSTRAP_TOKEN_KEY = 'bootstrap-token';

/** The Secret holding the runtime token and the control plane's addresses and public key. */
export const CREDENTIALS_SECRET = 'runtime-credentials';

/** Keys of the runtime credentials Secret (the agents read them; the bootstrap writes them in a hybrid runtime). */
export const CREDENTIAL_KEYS = {
  token: 'runtime-token',
  tunnelUrl: 'tunnel-url',
  controlPlaneUrl: 'control-plane-url',
  publicKey: 'control-plane-public-key',
} as const;

/** The control plane's 200 answer to a redeemed bootstrap token. */
export interface BootstrapAnswer {
  tenantId: string;
  runtimeId: string;
  name: string;
  runtimeToken: string;
  tunnelUrl: string;
  controlPlaneUrl: string;
  publicKey: string;
}
