/**
 * A runtime's tunnel client connected to a test app: a runtime key for the tenant, the client
 * dialling the app's /v1/tunnel and forwarding to `upstream`. Resolves once connected.
 */
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { once } from 'node:events';
import { startTunnelClient } from '../../runtime/agents/tunnel-client/client.ts';
import type { TestApi } from './api.ts';

export interface ConnectedRuntime {
  client: ReturnType<typeof startTunnelClient>;
  /** The runtime key as POST /v1/keys answered it (`key`, `info.id`). */
  runtimeKey: { key: string; info: { id: string } };
}

export async function connectRuntime(
  api: TestApi,
  baseUrl: string,
  tenantId: string,
  upstream: http.Server,
  name = 'runtime',
): Promise<ConnectedRuntime> {
  const runtimeKey = (await api.request('POST', '/v1/keys', { body: { role: 'runtime', name, tenantId } })).json<
    ConnectedRuntime['runtimeKey']
  >();
  const client = startTunnelClient({
    url: baseUrl.replace('http', 'ws') + '/v1/tunnel',
    token: runtimeKey.key,
    upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
    backoff: { initialMs: 50, maxMs: 200 },
  });
  if (!client.connected) await once(client.events, 'connected');
  return { client, runtimeKey };
}
