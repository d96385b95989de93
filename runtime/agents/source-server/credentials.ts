/**
 * The Git credentials Argo CD holds for a repository, read from its repository Secrets (the
 * Source Server's Role allows `list secrets` in Argo CD's namespace and nothing else), matched
 * the way Argo CD matches them:
 *  - `argocd.argoproj.io/secret-type: repository`: the Secret whose `url` is the repository's;
 *  - `argocd.argoproj.io/secret-type: repo-creds`: a credential template, the one whose `url` is
 *    the longest prefix of the repository's.
 * URLs are compared as Argo CD normalizes them: case-insensitive, without a trailing `/` or `.git`.
 * The list is read again at most every `ttlMs` (a changed password is picked up within that time)
 * and the values never leave this module but to the git process that uses them.
 */
import type { KubeTransport } from '../../kube/transport.ts';
import { GitError, type CredentialSource, type RepoCredentials } from './git.ts';

export const SECRET_TYPE_LABEL = 'argocd.argoproj.io/secret-type';
/** At most this many repository Secrets are considered (a list larger than this is cut). */
const MAX_SECRETS = 1000;

export function normalizeRepoUrl(repoURL: string): string {
  return repoURL
    .trim()
    .toLowerCase()
    .replace(/\/+$/, '')
    .replace(/\.git$/, '');
}

interface RepoSecret {
  type: 'repository' | 'repo-creds';
  url: string;
  credentials: RepoCredentials;
}

function decode(data: Record<string, unknown>, key: string): string | undefined {
  const v = data[key];
  if (typeof v !== 'string') return undefined;
  return Buffer.from(v, 'base64').toString('utf8');
}

/** The credentials for `repoURL` among `secrets` (the repository's own first, else the longest repo-creds prefix). */
export function matchCredentials(secrets: readonly RepoSecret[], repoURL: string): RepoCredentials | undefined {
  const url = normalizeRepoUrl(repoURL);
  const own = secrets.find((s) => s.type === 'repository' && normalizeRepoUrl(s.url) === url);
  if (own) return own.credentials;
  let best: RepoSecret | undefined;
  for (const s of secrets) {
    if (s.type !== 'repo-creds') continue;
    const prefix = normalizeRepoUrl(s.url);
    if (prefix !== '' && url.startsWith(prefix) && (!best || prefix.length > normalizeRepoUrl(best.url).length))
      best = s;
  }
  return best?.credentials;
}

/** Repository Secrets as the API server lists them (JSON), reduced to what matching needs. */
export function parseRepoSecrets(list: unknown): RepoSecret[] {
  const items = (list as { items?: unknown })?.items;
  if (!Array.isArray(items)) return [];
  const out: RepoSecret[] = [];
  for (const item of items.slice(0, MAX_SECRETS)) {
    const s = item as { metadata?: { labels?: Record<string, string> }; data?: Record<string, unknown> };
    const type = s.metadata?.labels?.[SECRET_TYPE_LABEL];
    if (type !== 'repository' && type !== 'repo-creds') continue;
    const data = s.data ?? {};
    const url = decode(data, 'url');
    const username = decode(data, 'username');
    const password = decode(data, 'password');
    if (!url || password === undefined) continue;
    // A newline would end the credential helper's answer early: such a Secret cannot be used.
    if (/[\n\r\0]/.test(`${username ?? ''}${password}`)) continue;
    out.push({ type, url, credentials: { username: username ?? '', password } });
  }
  return out;
}

/** A CredentialSource over the API server: Argo CD's repository Secrets in `namespace`. */
export function argoCdRepoCredentials(kube: KubeTransport, namespace: string, ttlMs = 10_000): CredentialSource {
  let cached: { at: number; secrets: RepoSecret[] } | undefined;
  let pending: Promise<RepoSecret[]> | undefined;
  const load = async (): Promise<RepoSecret[]> => {
    if (cached && Date.now() - cached.at < ttlMs) return cached.secrets;
    pending ??= (async () => {
      try {
        const res = await kube.request(`/api/v1/namespaces/${namespace}/secrets`, {
          query: { labelSelector: `${SECRET_TYPE_LABEL} in (repository,repo-creds)`, limit: String(MAX_SECRETS) },
        });
        if (res.status !== 200)
          throw new GitError(
            'unavailable',
            `Argo CD's repository Secrets in '${namespace}' cannot be listed: HTTP ${res.status}`,
          );
        const secrets = parseRepoSecrets(res.body);
        cached = { at: Date.now(), secrets };
        return secrets;
      } catch (err) {
        if (err instanceof GitError) throw err;
        throw new GitError(
          'unavailable',
          `Argo CD's repository Secrets cannot be read: ${err instanceof Error ? err.message : String(err)}`,
        );
      } finally {
        pending = undefined;
      }
    })();
    return pending;
  };
  return async (repoURL) => matchCredentials(await load(), repoURL);
}
