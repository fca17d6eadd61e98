/** Building and tearing down the lock's pg clients. */
import os from 'node:os';
import pg from 'pg';

/** Opens a connected client that the lock then owns (the `connect` option). */
export type ConnectFn = () => Promise<pg.Client>;

interface PgInternals {
  connection?: { stream?: { destroy(): void; unref?(): void; readyState?: string } };
}

/** Attempts of the default `connect` abandoned after the server had accepted their TCP connection. */
const acceptedWhenAbandoned = new WeakSet<AbortSignal>();

/**
 * Whether the default `connect` attempt that `signal` abandoned had its TCP connection
 * accepted (a busy server, or a proxy in front of it), rather than not yet answered (a
 * silent path). False for a `connect` hook's attempt: it cannot be known.
 */
export function abandonedAfterAccept(signal: AbortSignal): boolean {
  return acceptedWhenAbandoned.has(signal);
}

/** Parse a formatted time setting (`'4200ms'`, `'5s'`, `'1min'`, `'0'`) into milliseconds. */
export function parseSettingMs(value: string | null): number | null {
  if (value === null) return null;
  const m = /^(\d+)\s*(ms|s|min|h|d)?$/.exec(value.trim());
  if (!m) return null;
  const factor = { ms: 1, s: 1000, min: 60_000, h: 3_600_000, d: 86_400_000 }[m[2] ?? 'ms'] ?? 1;
  return Number(m[1]) * factor;
}

/** Let a client's socket not keep the process alive (the lock's `unref` option). */
export function unrefClient(client: pg.Client): void {
  (client as unknown as PgInternals).connection?.stream?.unref?.();
}

/** Destroy a client's socket without waiting; keeps an 'error' listener so nothing is unhandled. */
export function destroyClient(client: pg.Client): void {
  if (client.listenerCount('error') === 0) client.on('error', () => {});
  const internals = client as unknown as PgInternals;
  internals.connection?.stream?.destroy();
  client.end().catch(() => {});
}

/** Default candidate id: host-pid-random. */
export function defaultId(): string {
  return `${os.hostname()}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
}

/**
 * The default `connect`: a new `pg.Client` with listeners attached before `connect()`,
 * TCP keepalive on, identified by `application_name`. `signal` abandons the attempt: its
 * socket is destroyed at once (a shutdown does not leave it open until the connect
 * timeout) and the call rejects.
 */
export function defaultConnect(
  config: pg.ClientConfig,
  appName: string,
  timeoutMs: number,
): (applicationName?: string, signal?: AbortSignal, deadlineMs?: number) => Promise<pg.Client> {
  return async (applicationName = appName, signal, deadlineMs = timeoutMs) => {
    signal?.throwIfAborted();
    const client = new pg.Client({
      ...config,
      application_name: applicationName,
      keepAlive: true,
      keepAliveInitialDelayMillis: 2000,
      connectionTimeoutMillis: Math.max(1, Math.ceil(deadlineMs)),
    });
    client.on('error', () => {}); // replaced by the session's handler; never unhandled
    // the socket alone: connect() then rejects ("Connection terminated unexpectedly"), where
    // destroyClient's end() would leave it pending for ever
    const abandon = (): void => {
      const stream = (client as unknown as PgInternals).connection?.stream;
      if (signal && stream?.readyState === 'open') acceptedWhenAbandoned.add(signal);
      stream?.destroy();
    };
    signal?.addEventListener('abort', abandon, { once: true });
    try {
      await client.connect();
      signal?.throwIfAborted(); // connected as the abort came: closed, not handed over
    } catch (err) {
      destroyClient(client);
      throw err;
    } finally {
      signal?.removeEventListener('abort', abandon);
    }
    client.removeAllListeners('error');
    client.on('error', () => {}); // until the session attaches
    return client;
  };
}
