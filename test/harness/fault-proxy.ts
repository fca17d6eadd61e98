/**
 * An in-process TCP proxy for fault injection: pass-through, added latency, blackhole
 * (bytes stop flowing, sockets stay open: a half-dead network) and reset (RST to both
 * sides). Listens on 127.0.0.1 only.
 *
 * A userland proxy cannot make the *server* notice a dead client: its own kernel answers
 * the server's keepalives. Use `resetUpstream()` or server-side settings for that.
 */
import net from 'node:net';
import { listenFree } from '../../src/cli/ports.js';

export type ProxyMode = 'pass' | 'blackhole';

interface Pair {
  client: net.Socket;
  upstream: net.Socket;
  /** `silenceCurrent()`: this connection forwards nothing more, whatever the mode. */
  silenced: boolean;
}

export interface FaultProxy {
  readonly port: number;
  readonly host: string;
  /** Number of live client connections. */
  readonly connections: number;
  /** CancelRequests dropped (`dropCancels`). */
  readonly cancelsDropped: number;
  /** When each dropped CancelRequest arrived (`performance.now()`, this process). */
  readonly cancelsDroppedAt: readonly number[];
  /** Connection string through the proxy, built from `targetUrl`. */
  url(targetUrl: string): string;
  /** Stop forwarding bytes in both directions on current and future connections. */
  blackhole(): void;
  /** Forward again (bytes held while blackholed are dropped, as on a real network). */
  pass(): void;
  /** Delay every chunk by `ms` in each direction. */
  setLatency(ms: number): void;
  /** RST both sides of every current connection. */
  reset(): void;
  /** RST only the proxy's connections to the server: the server sees the client vanish. */
  resetUpstream(): void;
  /** Send new connections to another server (a DNS name or VIP moving); current ones stay. */
  retarget(to: { host: string; port: number }): void;
  /**
   * Blackhole the current connections only (bytes and FINs stop, sockets stay open); new
   * ones pass: a server fenced off the network while its name moves to another.
   */
  silenceCurrent(): void;
  close(): Promise<void>;
}

export interface FaultProxyOptions {
  /**
   * While blackholed, also swallow FINs: a client that half-closes (pg's `end()` sends
   * Terminate, then FIN, and waits for the server's FIN) hears nothing back, as behind a
   * real blackhole. Default false: the proxy's own socket answers a FIN at once, in every
   * mode, so `end()` returns even while blackholed.
   */
  silentFin?: boolean;
  /**
   * Drop protocol CancelRequests, as proxies without cancel support do (AWS RDS Proxy and
   * others): a connection whose first message is one is closed without reaching the server.
   */
  dropCancels?: boolean;
}

/** A CancelRequest: length 16, code 80877102. */
function isCancelRequest(chunk: Buffer): boolean {
  return chunk.length >= 8 && chunk.readInt32BE(0) === 16 && chunk.readInt32BE(4) === 80877102;
}

export async function startFaultProxy(
  initial: { host: string; port: number },
  options: FaultProxyOptions = {},
): Promise<FaultProxy> {
  const halfOpen = options.silentFin === true;
  let target = initial;
  const pairs = new Set<Pair>();
  let mode: ProxyMode = 'pass';
  let latencyMs = 0;

  const forward = (from: net.Socket, to: net.Socket, pair: Pair): void => {
    from.on('data', (chunk: Buffer) => {
      if (mode === 'blackhole' || pair.silenced) return;
      const write = (): void => {
        if (mode === 'blackhole' || pair.silenced || to.destroyed) return;
        to.write(chunk);
      };
      if (latencyMs > 0) setTimeout(write, latencyMs).unref();
      else write();
    });
  };

  let cancelsDropped = 0;
  const cancelsDroppedAt: number[] = [];
  const server = net.createServer({ allowHalfOpen: halfOpen }, (client) => {
    if (options.dropCancels) {
      client.pause();
      client.once('data', (first: Buffer) => {
        if (isCancelRequest(first)) {
          cancelsDropped += 1;
          cancelsDroppedAt.push(performance.now());
          client.on('error', () => {});
          client.end();
          return;
        }
        client.unshift(first);
        connectPair(client);
        client.resume();
      });
      client.resume();
      return;
    }
    connectPair(client);
  });

  const connectPair = (client: net.Socket): void => {
    const upstream = net.connect({ port: target.port, host: target.host, allowHalfOpen: halfOpen });
    const pair: Pair = { client, upstream, silenced: false };
    pairs.add(pair);
    forward(client, upstream, pair);
    forward(upstream, client, pair);
    if (halfOpen) {
      // a FIN is passed on like the bytes before it, and swallowed while blackholed
      client.on('end', () => {
        if (mode !== 'blackhole') upstream.end();
      });
      upstream.on('end', () => {
        if (mode !== 'blackhole') client.end();
      });
    }
    const teardown = (): void => {
      pairs.delete(pair);
      if (!client.destroyed) client.destroy();
      if (!upstream.destroyed) upstream.destroy();
    };
    for (const s of [client, upstream]) {
      s.on('error', () => {});
      s.on('close', () => {
        // while blackholed, a closed side is not propagated: the peer hears nothing, and the
        // pair stays listed so that reset(), resetUpstream() and close() still reach it
        if (mode === 'blackhole' || pair.silenced) return;
        teardown();
      });
    }
  };
  server.on('error', () => {});

  const port = await listenFree(server);

  return {
    port,
    host: '127.0.0.1',
    get cancelsDropped() {
      return cancelsDropped;
    },
    cancelsDroppedAt,
    get connections() {
      return [...pairs].filter((p) => !p.client.destroyed || !p.upstream.destroyed).length;
    },
    url(targetUrl: string) {
      const u = new URL(targetUrl);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    blackhole() {
      mode = 'blackhole';
    },
    pass() {
      mode = 'pass';
    },
    setLatency(ms: number) {
      latencyMs = ms;
    },
    reset() {
      for (const { client, upstream } of [...pairs]) {
        if (!client.destroyed) client.resetAndDestroy();
        if (!upstream.destroyed) upstream.resetAndDestroy();
      }
      pairs.clear();
    },
    resetUpstream() {
      for (const { upstream } of pairs) if (!upstream.destroyed) upstream.resetAndDestroy();
    },
    retarget(to) {
      target = to;
    },
    silenceCurrent() {
      for (const pair of pairs) pair.silenced = true;
    },
    async close() {
      for (const { client, upstream } of pairs) {
        client.destroy();
        upstream.destroy();
      }
      pairs.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A fault proxy in front of the server at `url` (host and port taken from it). */
export function proxyTo(url: string, options: FaultProxyOptions = {}): Promise<FaultProxy> {
  const target = new URL(url);
  return startFaultProxy({ host: target.hostname, port: Number(target.port) }, options);
}
