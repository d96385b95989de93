/**
 * The bootstrap of a registered hybrid runtime: its single-use token (stored as its SHA-256), the
 * install URL that serves the whole install while the token is unredeemed (installText), and the
 * exchange of the token for the runtime key by the bundle's bootstrap Job (redeem), which makes
 * the runtime `installed`.
 */
import { createHash, randomBytes } from 'node:crypto';
import { withTx } from '../db/tx.ts';
import { AppError } from '../errors.ts';
import { writeAudit } from '../store/audit.ts';
import { createKey } from '../store/keys.ts';
import { claimRuntimeBootstrap, runtimeByBootstrapToken, setRuntimeKey } from '../store/runtimes.ts';
import type { RuntimeBootstrapAnswer } from '../api/types.ts';
import { chartsPart, EMPTY_CHARTS_PART, installDocument, type ChartsPart } from '../../runtime/hybrid/install.ts';
import { BOOTSTRAP_TOKEN_PATTERN, type BootstrapAnswer } from '../../runtime/protocol/bootstrap.ts';
import { bundleCacheKey } from './bundle-cache.ts';
import { bundleInput, renderedCharts } from './bundles.ts';
import { tunnelUrlOf, type Runtimes } from './context.ts';

export function newRuntimeBootstrapToken(): { token: string; hash: string } {
  const token = `hrth_${randomBytes(32).toString('base64url')}`;
  return { token, hash: hashRuntimeBootstrapToken(token) };
}

export const hashRuntimeBootstrapToken = (token: string): string => createHash('sha256').update(token).digest('base64');

/**
 * The bootstrap exchange: a known, unexpired, unredeemed token of a runtime that is not removed
 * (of a tenant not deleted) is claimed, the runtime key made and the runtime `installed`, in one
 * transaction; anything else is one 401 that never says which.
 */
export async function redeemBootstrap(
  rt: Runtimes,
  bootstrapToken: string,
  requestId: string,
): Promise<RuntimeBootstrapAnswer> {
  const publicUrl = rt.deps.publicUrl;
  if (!BOOTSTRAP_TOKEN_PATTERN.test(bootstrapToken) || publicUrl === undefined) throw bootstrapInvalid();
  return withTx(rt.deps.pool, async (tx) => {
    const row = await claimRuntimeBootstrap(tx, hashRuntimeBootstrapToken(bootstrapToken));
    if (!row) throw bootstrapInvalid();
    const actor = { id: `bootstrap:${row.id}`, role: 'bootstrap' };
    const { key, info } = await createKey(tx, {
      role: 'runtime',
      tenantId: row.tenant_id,
      name: `hybrid runtime ${row.name}`,
      createdBy: actor.id,
      runtimeId: row.id,
    });
    await setRuntimeKey(tx, row.id, info.id);
    await writeAudit(tx, actor, {
      action: 'runtime.bootstrap',
      targetType: 'runtime',
      targetId: row.id,
      after: { tenantId: row.tenant_id, name: row.name, state: 'installed', keyId: info.id, keyPrefix: info.prefix },
      requestId,
    });
    // The wire type the bootstrap Job reads (runtime/protocol/bootstrap.ts).
    const answer: BootstrapAnswer = {
      tenantId: row.tenant_id,
      runtimeId: row.id,
      name: row.name,
      runtimeToken: key,
      tunnelUrl: tunnelUrlOf(publicUrl),
      controlPlaneUrl: publicUrl,
      publicKey: rt.deps.publicKeyPem,
    };
    return answer;
  });
}

/**
 * What a runtime's install URL serves (`GET /v1/install/<bootstrap token>.yaml`): the complete
 * install as YAML (runtime/hybrid/install.ts), with the bootstrap token in its Secret. Reads
 * only: the token stays unredeemed until the bundle's Job exchanges it. Served while the runtime
 * awaits install with the token unexpired: a token not issued here (or of a removed runtime, a
 * deleted tenant) is 404, a redeemed or expired one 410, each saying what to do. Within the
 * runtime's and the tenant's bundle rates (429).
 */
export async function installText(rt: Runtimes, bootstrapToken: string): Promise<string> {
  const publicUrl = rt.deps.publicUrl;
  if (!BOOTSTRAP_TOKEN_PATTERN.test(bootstrapToken) || publicUrl === undefined) throw installNotFound();
  const row = await runtimeByBootstrapToken(rt.deps.pool, hashRuntimeBootstrapToken(bootstrapToken));
  if (!row || row.state === 'removed' || row.tenant_deleted) throw installNotFound();
  rt.rates.bundle(row.tenant_id, row.name);
  if (!row.usable) {
    if (row.bootstrap_redeemed_at)
      throw new AppError(
        'BOOTSTRAP_TOKEN_USED',
        `runtime '${row.name}' was installed with this URL's token at ${row.bootstrap_redeemed_at.toISOString()}: the URL served its install once; to upgrade it, apply the bundle GET /v1/tenants/${row.tenant_id}/runtimes/${row.name}/bundle answers`,
      );
    throw new AppError(
      'BOOTSTRAP_TOKEN_EXPIRED',
      `this install URL expired at ${row.bootstrap_expires_at?.toISOString() ?? 'its time'} before runtime '${row.name}' was installed: remove the runtime and register it again for a new one`,
    );
  }
  const input = bundleInput(rt, row, publicUrl);
  const bundle = rt.bundle({ ...input, bootstrapToken });
  let part = EMPTY_CHARTS_PART;
  if (row.argo === 'new') {
    const { charts } = await renderedCharts(rt, input.version);
    if ('unavailable' in charts)
      throw new AppError('INSTALL_CHARTS_UNAVAILABLE', charts.unavailable, {
        details: { setting: 'PROVISIONER_CHART_REPOSITORIES' },
      });
    // Its YAML is the bulk of the document (the Argo CD CRDs): written once per runtime and
    // version, in the build queue's turns, and kept with the generated bundles.
    part = await rt.generated.getQueued(
      bundleCacheKey('install-charts', row.tenant_id, row.name, input.version.version),
      row.tenant_id,
      () => chartsPart({ tenantId: row.tenant_id, name: row.name }, input.version, charts.rendered),
      (p: ChartsPart) => p.text.length + 1024,
    );
  }
  return installDocument(bundle, input.version, part).text;
}

const installNotFound = () =>
  new AppError(
    'INSTALL_NOT_FOUND',
    'no runtime install at this URL: the token in it is not one this control plane issued, or its runtime was removed; register the runtime for a new URL',
  );

const bootstrapInvalid = () =>
  new AppError(
    'BOOTSTRAP_TOKEN_INVALID',
    'the bootstrap token is not valid (unknown, expired, already used, or its runtime was removed): register the runtime again for a new one',
  );
