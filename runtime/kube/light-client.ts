/**
 * A KubeTransport (transport.ts) over Node's own http/https, from a kubeconfig file or the pod's
 * service account: what the event reporter needs of an API server (lists, watches, Leases)
 * without loading @kubernetes/client-node, which costs the process about 60 MiB of memory.
 *
 * Credentials: client certificate and key (inline or files), a bearer token (inline or a file,
 * read again every minute: projected service account tokens are rotated by the kubelet), basic
 * auth; the CA (inline or a file), `insecure-skip-tls-verify`, `tls-server-name`. Exec and
 * auth-provider plugins are refused with a message naming the kubeconfig (the runtime's reporter
 * runs in-cluster, or with the certificate kubeconfig the tenant program writes).
 */
import { readFileSync } from 'node:fs';
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { dirname, isAbsolute, join } from 'node:path';
import { createInterface } from 'node:readline';
import { parse as parseYaml } from 'yaml';
import { statusError, type KubeRequestOptions, type KubeResponse, type KubeTransport } from './transport.ts';

type Obj = Record<string, unknown>;

export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/** What a request needs: where, with which TLS settings and which Authorization. */
export interface KubeConnection {
  server: string;
  ca?: string | Buffer;
  cert?: string | Buffer;
  key?: string | Buffer;
  insecureSkipTlsVerify?: boolean;
  tlsServerName?: string;
  /** The Authorization header's value, read when a request is made (a token file may change). */
  authorization?: () => string | undefined;
}

export class KubeconfigError extends Error {}

const rec = (v: unknown): Obj => (typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Obj) : {});
const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);

/** A file's text, re-read at most once a minute. */
function fileReader(path: string): () => string {
  let cached: { at: number; text: string } | undefined;
  return () => {
    if (!cached || Date.now() - cached.at > 60_000)
      cached = { at: Date.now(), text: readFileSync(path, 'utf8').trim() };
    return cached.text;
  };
}

/** The connection of a kubeconfig file's current context. */
export function connectionFromKubeconfig(file: string): KubeConnection {
  try {
    return readKubeconfig(file);
  } catch (err) {
    if (err instanceof KubeconfigError) throw err;
    throw new KubeconfigError(`${file} cannot be read as a kubeconfig: ${(err as Error).message}`);
  }
}

function readKubeconfig(file: string): KubeConnection {
  const doc = rec(parseYaml(readFileSync(file, 'utf8')));
  const named = (list: unknown, name: string | undefined, what: string): Obj => {
    const found = (Array.isArray(list) ? list : []).map(rec).find((e) => e.name === name);
    if (!found) throw new KubeconfigError(`${file}: ${what} '${name ?? ''}' is not defined`);
    return found;
  };
  const contextName = str(doc['current-context']);
  const context = rec(named(doc.contexts, contextName, 'context').context);
  const cluster = rec(named(doc.clusters, str(context.cluster), 'cluster').cluster);
  const user = rec(named(doc.users, str(context.user), 'user').user);
  const server = str(cluster.server);
  if (!server) throw new KubeconfigError(`${file}: the current context's cluster has no server`);
  const rel = (p: string) => (isAbsolute(p) ? p : join(dirname(file), p));
  const data = (inline: unknown, path: unknown): Buffer | undefined =>
    str(inline) ? Buffer.from(str(inline)!, 'base64') : str(path) ? readFileSync(rel(str(path)!)) : undefined;
  if (user.exec || user['auth-provider'])
    throw new KubeconfigError(
      `${file}: the user of context '${contextName ?? ''}' uses an exec or auth-provider plugin, which the event reporter does not run; use a client certificate or a token`,
    );
  const token = str(user.token);
  const tokenFile = str(user.tokenFile);
  const readToken = tokenFile ? fileReader(rel(tokenFile)) : undefined;
  const basic =
    str(user.username) !== undefined
      ? `Basic ${Buffer.from(`${str(user.username)}:${str(user.password) ?? ''}`).toString('base64')}`
      : undefined;
  const ca = data(cluster['certificate-authority-data'], cluster['certificate-authority']);
  const cert = data(user['client-certificate-data'], user['client-certificate']);
  const key = data(user['client-key-data'], user['client-key']);
  return {
    server,
    ...(ca ? { ca } : {}),
    ...(cert ? { cert } : {}),
    ...(key ? { key } : {}),
    ...(cluster['insecure-skip-tls-verify'] === true ? { insecureSkipTlsVerify: true } : {}),
    ...(str(cluster['tls-server-name']) ? { tlsServerName: str(cluster['tls-server-name'])! } : {}),
    authorization: () => (token ? `Bearer ${token}` : readToken ? `Bearer ${readToken()}` : basic),
  };
}

/** The pod's own service account (KUBERNETES_SERVICE_HOST/PORT, token and CA mounted in the pod). */
export function connectionInCluster(env: NodeJS.ProcessEnv = process.env, dir = SERVICE_ACCOUNT_DIR): KubeConnection {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT ?? '443';
  if (!host) throw new KubeconfigError('KUBERNETES_SERVICE_HOST is not set: not running in a pod; set KUBECONFIG');
  const readToken = fileReader(join(dir, 'token'));
  let ca: Buffer;
  try {
    ca = readFileSync(join(dir, 'ca.crt'));
    readToken();
  } catch (err) {
    throw new KubeconfigError(`the pod's service account cannot be read: ${(err as Error).message}`);
  }
  return {
    server: `https://${host.includes(':') ? `[${host}]` : host}:${port}`,
    ca,
    authorization: () => `Bearer ${readToken()}`,
  };
}

/** The transport of a connection: one kept-alive connection pool, JSON requests, watch streams. */
export function lightTransport(c: KubeConnection, idleTimeoutMs = 150_000): KubeTransport {
  const base = new URL(c.server.replace(/\/+$/, '') + '/');
  const tls = base.protocol === 'https:';
  const agent = tls
    ? new HttpsAgent({
        keepAlive: true,
        ...(c.ca ? { ca: c.ca } : {}),
        ...(c.cert ? { cert: c.cert } : {}),
        ...(c.key ? { key: c.key } : {}),
        rejectUnauthorized: !c.insecureSkipTlsVerify,
        ...(c.tlsServerName ? { servername: c.tlsServerName } : {}),
      })
    : new HttpAgent({ keepAlive: true });
  const send = tls ? httpsRequest : httpRequest;
  const prefix = base.pathname.replace(/\/$/, '');

  const open = (
    path: string,
    query: Record<string, string>,
    o: { method?: string; body?: string; contentType?: string; signal?: AbortSignal },
  ): Promise<IncomingMessage> => {
    const url = new URL(prefix + path, base);
    for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v);
    const auth = c.authorization?.();
    return new Promise((resolve, reject) => {
      const req = send(
        url,
        {
          method: o.method ?? 'GET',
          agent,
          headers: {
            accept: 'application/json',
            ...(auth ? { authorization: auth } : {}),
            ...(o.body !== undefined
              ? { 'content-type': o.contentType ?? 'application/json', 'content-length': Buffer.byteLength(o.body) }
              : {}),
          },
          ...(o.signal ? { signal: o.signal } : {}),
        },
        resolve,
      );
      req.on('error', reject);
      req.end(o.body);
    });
  };

  return {
    async request(path: string, opts: KubeRequestOptions = {}): Promise<KubeResponse> {
      const res = await open(path, opts.query ?? {}, {
        method: opts.method ?? 'GET',
        ...(opts.body !== undefined ? { body: JSON.stringify(opts.body) } : {}),
        ...(opts.contentType ? { contentType: opts.contentType } : {}),
        signal: opts.signal ?? AbortSignal.timeout(60_000),
      });
      const chunks: Buffer[] = [];
      for await (const chunk of res) chunks.push(chunk as Buffer);
      const text = Buffer.concat(chunks).toString('utf8');
      let body: unknown;
      try {
        body = text ? JSON.parse(text) : undefined;
      } catch {
        body = undefined;
      }
      return { status: res.statusCode ?? 0, body };
    },

    async watch(path, query, onEvent, done) {
      const controller = new AbortController();
      let called = false;
      let timer: NodeJS.Timeout | undefined;
      let timedOut = false;
      const finish = (err: unknown) => {
        if (called) return;
        called = true;
        clearTimeout(timer);
        controller.abort();
        done(timedOut ? Object.assign(new Error('the watch was silent too long'), { name: 'TimeoutError' }) : err);
      };
      const idle = () => {
        clearTimeout(timer);
        timer = setTimeout(() => {
          timedOut = true;
          finish(null);
        }, idleTimeoutMs);
        timer.unref();
      };
      const q: Record<string, string> = { watch: 'true' };
      for (const [k, v] of Object.entries(query)) q[k] = String(v);
      idle();
      open(path, q, { signal: controller.signal }).then(
        (res) => {
          // Ending the watch aborts the response: an error then is expected, and reported once at most.
          res.on('error', finish);
          if (res.statusCode !== 200) {
            res.resume();
            return finish(statusError(`watch ${path}`, res.statusCode ?? 0));
          }
          idle();
          res.on('data', idle);
          res.once('close', () => finish(null));
          const lines = createInterface({ input: res, crlfDelay: Infinity });
          lines.on('error', finish); // readline passes the response's errors on
          lines.on('line', (line) => {
            if (called || line === '') return;
            let ev: { type?: unknown; object?: unknown };
            try {
              ev = JSON.parse(line) as typeof ev;
            } catch {
              return; // not an event: skipped, as client-node does
            }
            if (typeof ev.type === 'string') onEvent(ev.type, rec(ev.object));
          });
        },
        (err: unknown) => finish(err),
      );
      return controller;
    },
  };
}

/** The transport of KUBECONFIG when given, else of the pod's service account. */
export function loadLightTransport(kubeconfig: string | undefined): KubeTransport {
  return lightTransport(kubeconfig ? connectionFromKubeconfig(kubeconfig) : connectionInCluster());
}
