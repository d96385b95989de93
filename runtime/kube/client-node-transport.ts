/**
 * The reflector's transport over a client-node KubeConfig (transport.ts): requests through
 * undici with the KubeConfig's credentials and one connection pool, watches through client-node's
 * Watch. Loaded only by processes that use client-node anyway (the provisioner's root-cluster watch).
 */
import { HttpMethod, type KubeConfig, RequestContext, Watch } from '@kubernetes/client-node';
import { fetch } from 'undici';
import type { KubeRequestOptions, KubeResponse, KubeTransport } from './transport.ts';

export function clientNodeTransport(kc: KubeConfig, idleTimeoutMs = 150_000): KubeTransport {
  const watch = new Watch(kc);
  // The client aborts a watch silent for 30 s; the API server sends a bookmark only about once a
  // minute, so a quiet kind would reconnect all the time. (Not part of the client's typed API.)
  Object.assign(watch, { requestTimeoutMs: idleTimeoutMs });
  /** One connection pool (a new one per request would set up TLS from scratch each time). */
  let dispatcher: ReturnType<RequestContext['getDispatcher']> | undefined;
  return {
    async request(path: string, opts: KubeRequestOptions = {}): Promise<KubeResponse> {
      const cluster = kc.getCurrentCluster();
      if (!cluster) throw new Error('the kubeconfig has no current cluster');
      const url = new URL(cluster.server.replace(/\/+$/, '') + path);
      for (const [k, v] of Object.entries(opts.query ?? {})) url.searchParams.set(k, v);
      const method = (opts.method ?? 'GET') as HttpMethod;
      const ctx = new RequestContext(url.toString(), method);
      await kc.applySecurityAuthentication(ctx);
      dispatcher ??= ctx.getDispatcher();
      const res = await fetch(url, {
        method,
        headers: {
          ...ctx.getHeaders(),
          ...(opts.body !== undefined ? { 'content-type': opts.contentType ?? 'application/json' } : {}),
        },
        ...(opts.body !== undefined ? { body: JSON.stringify(opts.body) } : {}),
        dispatcher,
        signal: opts.signal ?? AbortSignal.timeout(60_000),
      });
      const text = await res.text();
      let body: unknown;
      try {
        body = text ? JSON.parse(text) : undefined;
      } catch {
        body = undefined;
      }
      return { status: res.status, body };
    },
    watch: (path, query, onEvent, done) => watch.watch(path, query, onEvent, done),
  };
}
