/**
 * A TCP server that accepts connections and never answers: a path where connecting hangs
 * (a host behind a blackhole after the SYN/ACK, a proxy whose upstream is gone). It reads
 * what the client sends, so that a client's close is seen at once. `forwardFirstTo`: the
 * first connection is relayed to that PostgreSQL instead (a path that answers a process's
 * first connection but no later one).
 */
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { listenFree } from '../../src/cli/ports.js';
import { eventually, within } from './db.js';

export interface SilentServer {
  /** `url` with its host and port replaced by this server's. */
  url(url: string): string;
  /** Connections open now that were not relayed (the ones left unanswered). */
  readonly open: number;
  /** When each connection that was not relayed closed (performance.now()). */
  readonly closedAt: readonly number[];
  close(): Promise<void>;
}

export async function silentServer(options: { forwardFirstTo?: string } = {}): Promise<SilentServer> {
  const sockets = new Set<net.Socket>();
  const silent = new Set<net.Socket>();
  const closedAt: number[] = [];
  let relay = options.forwardFirstTo ? new URL(options.forwardFirstTo) : null;
  const track = (socket: net.Socket, onClose?: () => void): void => {
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => {
      sockets.delete(socket);
      onClose?.();
    });
  };
  const server = net.createServer((socket) => {
    if (relay) {
      const upstream = net.connect(Number(relay.port), relay.hostname);
      relay = null;
      track(socket, () => upstream.destroy());
      track(upstream, () => socket.destroy());
      socket.pipe(upstream).pipe(socket);
      return;
    }
    silent.add(socket);
    track(socket, () => {
      silent.delete(socket);
      closedAt.push(performance.now());
    });
    socket.resume(); // read what the client sends, so that its FIN is seen
  });
  const port = await listenFree(server);
  return {
    url(url: string): string {
      const u = new URL(url);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    get open() {
      return silent.size;
    },
    closedAt,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** What a stop while connecting showed: how long the stop took, when the connection closed (both from the call), what onError got. */
export interface StopWhileConnecting {
  tookMs: number;
  closedAfterMs: number;
  /**
   * The baseline: a bare socket to a silent server of its own, connected before the stop and
   * destroyed in the same tick as the call, closed this long after it (as that server saw it).
   */
  bareClosedAfterMs: number;
  errors: Error[];
}

/**
 * Start `subject` (pointed at `silent`, with `queryTimeoutMs`), wait until its first
 * connection attempt has been pending 100 ms, then stop it: how long the stop took and when
 * the server saw the connection close. `start()` must settle within 1 s of the stop. The
 * errors are those reported until the attempt's own deadline had passed (what an attempt
 * left running would report by then).
 */
export async function stopWhileConnecting(
  silent: SilentServer,
  queryTimeoutMs: number,
  subject: { start(): Promise<void>; stop(): Promise<void>; onError(fn: (e: Error) => void): void },
): Promise<StopWhileConnecting> {
  const errors: Error[] = [];
  subject.onError((e) => {
    errors.push(e);
  });
  const started = subject.start();
  await eventually(() => silent.open === 1, { what: 'the connection attempt to arrive' });
  await new Promise((r) => setTimeout(r, 100)); // well into the attempt
  const bareServer = await silentServer();
  const bare = net.connect(Number(new URL(bareServer.url('postgres://x@h/d')).port), '127.0.0.1');
  bare.on('error', () => {});
  await eventually(() => bareServer.open === 1, { what: 'the bare socket to arrive' });
  const t0 = performance.now();
  const stopping = subject.stop();
  bare.destroy();
  await within(stopping, 5000, 'the stop while connecting');
  const tookMs = performance.now() - t0;
  await within(started, 1000, 'start() after the stop');
  await eventually(() => silent.closedAt.length === 1, { timeoutMs: 1000, what: 'the connection to close' });
  const closedAfterMs = (silent.closedAt[0] as number) - t0;
  await eventually(() => bareServer.closedAt.length === 1, {
    timeoutMs: 1000,
    what: 'the bare socket to close',
  });
  const bareClosedAfterMs = (bareServer.closedAt[0] as number) - t0;
  await bareServer.close();
  const past = t0 - 100 + queryTimeoutMs + 200 - performance.now();
  if (past > 0) await new Promise((r) => setTimeout(r, past));
  return { tookMs, closedAfterMs, bareClosedAfterMs, errors };
}
