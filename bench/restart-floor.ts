/**
 * The floor for bench/restart-follow.ts: what any client pays to follow a server restart on
 * this machine. Bare `pg` clients, laid out like the lock's followers (in the bench's process
 * or in its children), each holding nothing but its connection: connected, it asks
 * `pg_try_advisory_lock` (its first statement) and, refused, waits in `pg_advisory_lock`
 * (as a wait-mode follower queues). Lost, it connects again at once and, refused, every
 * RETRY_MS (default 10 ms: as soon as a perfect client could, with no back-off and no
 * deadline on the connect; a schedule no library should ship, for the floor only). Reports
 * the same events as the lock's followers, plus each connect attempt and each statement.
 */
import pg from 'pg';

/** What a follower reports, at a wall-clock time (ms since the epoch, sub-ms precision). */
export type Report = {
  kind: 'attempt' | 'connected' | 'sent' | 'statement' | 'granted' | 'acquired' | 'error';
  at: number;
  what?: string;
  /** connected: when the attempt began; statement: when it was sent. */
  from?: number;
  /** The follower's connect attempt this event belongs to (1, 2, …). */
  n?: number;
};

export const wallNow = (): number => performance.timeOrigin + performance.now();
const RETRY_MS = Number(process.env.RESTART_FOLLOW_FLOOR_RETRY_MS ?? 10);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Report each statement a client sends (its `/* pgleaderlock:NAME *\/`; a bare client's
 * `try-lock` or `wait-lock`) as it is sent, and again when it is answered (`from`: when sent).
 */
export function recordStatements(client: pg.Client, n: number, report: (r: Report) => void): void {
  const query = client.query.bind(client) as (...args: unknown[]) => unknown;
  (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
    const text = typeof args[0] === 'string' ? args[0] : String((args[0] as { text?: string })?.text);
    const what =
      /pgleaderlock:([a-z-]+)/.exec(text)?.[1] ?? (text.includes('try_advisory') ? 'try-lock' : 'wait-lock');
    const from = wallNow();
    report({ kind: 'sent', at: from, what, n });
    const out = query(...args);
    if (out instanceof Promise) {
      out.then(
        () => report({ kind: 'statement', at: wallNow(), what, from, n }),
        () => {},
      );
    }
    return out;
  };
}

/** `count` bare followers of (key1, key2); returns their shutdown. */
export function startBare(
  o: { url: string; key1: number; key2: number; count: number },
  report: (i: number, r: Report) => void,
): () => Promise<void> {
  let stopped = false;
  const clients = new Set<pg.Client>();
  const follow = async (i: number): Promise<void> => {
    let n = 0;
    let refused = false; // the last connect failed: the next waits RETRY_MS (after a loss: at once)
    while (!stopped) {
      if (refused) await sleep(RETRY_MS);
      if (stopped) return;
      n += 1;
      refused = true;
      const from = wallNow();
      report(i, { kind: 'attempt', at: from, n });
      const client = new pg.Client({ connectionString: o.url });
      client.on('error', () => {});
      clients.add(client);
      try {
        await client.connect();
        refused = false;
        report(i, { kind: 'connected', at: wallNow(), from, n });
        recordStatements(client, n, (r) => report(i, r));
        const tried = await client.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1, $2) AS ok', [
          o.key1,
          o.key2,
        ]);
        if (!tried.rows[0]?.ok) await client.query('SELECT pg_advisory_lock($1, $2)', [o.key1, o.key2]);
        report(i, { kind: 'granted', at: wallNow(), n });
        report(i, { kind: 'acquired', at: wallNow(), n });
        // held: until the connection is lost
        await new Promise<void>((resolve) => {
          client.once('error', () => resolve());
          client.once('end', () => resolve());
        });
      } catch (err) {
        if (!stopped)
          report(i, { kind: 'error', at: wallNow(), what: String((err as { code?: string }).code), n });
      } finally {
        clients.delete(client);
        client.end().catch(() => {});
      }
    }
  };
  const running = Array.from({ length: o.count }, (_, i) => follow(i));
  return async () => {
    stopped = true;
    for (const c of clients) c.end().catch(() => {});
    await Promise.allSettled(running);
  };
}
