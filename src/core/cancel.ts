/**
 * Cancel the statement a client is running, with a protocol CancelRequest sent on a new
 * socket (pg's own `Client.cancel` does not work with the promise API). Used to end a
 * server-side lock wait promptly: a waiting backend left behind could later be granted
 * the lock for a process that has gone.
 */
import net from 'node:net';
import type pg from 'pg';
import { serialize } from 'pg-protocol';
import type { Clock } from './clock.js';

interface CancelTarget {
  processID?: number | null;
  secretKey?: number | null;
  host?: string;
  port?: number;
}

/** Send a CancelRequest for `client`'s running statement. Resolves when sent (or given up), never rejects. */
export function sendCancel(client: pg.Client, clock: Clock, timeoutMs: number): Promise<boolean> {
  const { processID, secretKey, host, port } = client as unknown as CancelTarget;
  if (processID == null || secretKey == null || !port) return Promise.resolve(false);
  return new Promise((resolve) => {
    const socket = host?.startsWith('/')
      ? net.connect(`${host}/.s.PGSQL.${port}`)
      : net.connect(port, host ?? 'localhost');
    let sent = false;
    const timer = clock.setTimeout(() => socket.destroy(), timeoutMs);
    socket.on('connect', () => {
      // write, then let the server (or pooler) close: a FIN right behind the request makes
      // PgBouncer < 1.19.1 drop the cancel, or crash (pgbouncer#801); libpq waits likewise
      socket.write(serialize.cancel(processID, secretKey));
      sent = true;
    });
    socket.on('end', () => socket.destroy());
    socket.on('error', () => {});
    socket.on('close', () => {
      clock.clearTimeout(timer);
      resolve(sent);
    });
  });
}
