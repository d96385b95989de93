/**
 * The tunnel server's public surface (see docs/tunnel.md for wiring it into the app).
 */
export {
  createTunnelServer,
  DEFAULT_TUNNEL_LIMITS,
  TunnelError,
  type ForwardRequest,
  type ForwardResponse,
  type TunnelErrorCode,
  type TunnelIdentity,
  type TunnelLogger,
  type TunnelLimits,
  type TunnelServer,
  type TunnelServerOptions,
  type TunnelStats,
  type TunnelInfo,
  type TunnelStatus,
} from './server.ts';
export { tunnelRoutes, runtimePath, appErrorFromTunnel, type TunnelRouteOptions } from './route.ts';
export {
  createRequestSigner,
  generateRequestSigningKeys,
  type RequestSigner,
  type RequestSignerOptions,
  type SignInput,
} from './request-token.ts';
export { CloseCode, SUBPROTOCOL, TUNNEL_PATH } from '../../runtime/protocol/frames.ts';
export { TunnelDirectory, type TunnelOwner, type TunnelDirectoryOptions } from './directory.ts';
export { TUNNEL_CHANNEL, TUNNEL_LEASE_SECONDS } from '../store/tunnels.ts';
export { RELAY_HEADER } from './relay.ts';
