/**
 * `pgleaderlock run --http HOST:PORT`: the library's `probes(lock)` (`/healthz`, `/readyz`,
 * `/metrics`) on a server of its own; a follower is ready (docs/observability.md, "Probes").
 */
import http from 'node:http';
import { LockMetrics, type MetricsTarget } from '../ops/metrics.js';
import { probes } from '../ops/probes.js';
import { UsageError } from './args.js';

export interface HttpAddress {
  host: string;
  port: number;
}

/** `HOST:PORT`, `:PORT` (every interface: host '') or `[IPv6]:PORT`. */
export function parseHttpAddress(text: string): HttpAddress {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]*)):(\d{1,5})$/.exec(text);
  const port = m ? Number(m[3]) : Number.NaN;
  if (!m || !(port >= 0 && port <= 65_535)) {
    throw new UsageError(
      `--http must be HOST:PORT (e.g. 127.0.0.1:9464, :9464 or [::1]:9464) with a port from 0 to 65535, received ${JSON.stringify(text)}`,
    );
  }
  return { host: m[1] ?? m[2] ?? '', port };
}

export interface HealthServer {
  /** The address it listens on (the port chosen when 0 was asked for). */
  readonly address: HttpAddress;
  close(): Promise<void>;
}

/** Listen on `address`; a port in use or a host that cannot be bound is a UsageError (exit 2). */
export async function serveHealth(target: MetricsTarget, address: HttpAddress): Promise<HealthServer> {
  const metrics = new LockMetrics<MetricsTarget>(target);
  const server = http.createServer(probes(target, { metrics }));
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      // no host: node listens on :: (IPv6 and IPv4) where IPv6 exists, else on 0.0.0.0
      server.listen(address.port, address.host || undefined, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (err) {
    metrics.close();
    const code = (err as NodeJS.ErrnoException).code;
    const why =
      code === 'EADDRINUSE'
        ? 'the port is in use'
        : code === 'EACCES'
          ? 'permission denied (ports below 1024 need privileges)'
          : code === 'EADDRNOTAVAIL' || code === 'ENOTFOUND'
            ? 'no such local address'
            : (err as Error).message;
    const shown = address.host.includes(':') ? `[${address.host}]` : address.host;
    throw new UsageError(`--http ${shown}:${address.port}: cannot listen: ${why}`, { cause: err });
  }
  server.on('error', () => {}); // after listening, an error on the server is not fatal
  const bound = server.address();
  const port = typeof bound === 'object' && bound ? bound.port : address.port;
  const host = typeof bound === 'object' && bound ? bound.address : address.host;
  return {
    address: { host, port },
    close: async () => {
      metrics.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
