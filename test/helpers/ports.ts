/**
 * A free TCP port on loopback that the kernel never hands out on its own: below the ephemeral
 * range (`net.ipv4.ip_local_port_range`), from which both `listen(0)` and every outgoing
 * connection take their ports. A test that stops a server and listens on the same port again
 * later (a control-plane outage) uses it, so that nothing else on a busy machine takes the port
 * in between.
 */
import { readFile } from 'node:fs/promises';
import net from 'node:net';

async function ephemeralLow(): Promise<number> {
  try {
    const [low] = (await readFile('/proc/sys/net/ipv4/ip_local_port_range', 'utf8')).trim().split(/\s+/).map(Number);
    if (low && Number.isInteger(low) && low > 2048) return low;
  } catch {
    // not Linux: the IANA range's start
  }
  return 49152;
}

function tryListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

export async function portOutsideEphemeralRange(): Promise<number> {
  const high = (await ephemeralLow()) - 1;
  const low = Math.max(1024, high - 20_000);
  for (let i = 0; i < 200; i++) {
    const port = low + Math.floor(Math.random() * (high - low + 1));
    if (await tryListen(port)) return port;
  }
  throw new Error(`no free port between ${low} and ${high} after 200 tries`);
}

/**
 * A port the kernel just had free (listen on 0): the embedded Postgres's own port picker
 * (provisioner/db/embedded.ts), the one tests take their ports from.
 */
export { freePort } from '../../provisioner/db/embedded.ts';
