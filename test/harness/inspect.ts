/**
 * `LeaderLock.inspect()` reads the holder's priority and pending state from the statement
 * its session ran last: a test of that must know which statement `inspect` saw.
 */
import { LeaderLock, type LockInspection } from '../../src/index.js';
import { adminQuery } from './db.js';

/** A backend's last statement, and when it began. */
export interface LastStatement {
  query: string;
  began: string;
}

export async function lastStatement(url: string, pid: number): Promise<LastStatement> {
  const [row] = await adminQuery<LastStatement>(
    url,
    'SELECT query, query_start::text AS began FROM pg_stat_activity WHERE pid = $1',
    [pid],
  );
  return row ?? { query: '', began: '' };
}

/**
 * Wait until backend `pid`'s last statement satisfies `is`, then inspect (key1, key2); again
 * if the backend ran another statement meanwhile (a check, a re-read of the queue), so that
 * `inspect` provably saw that statement. At most `timeoutMs`.
 */
export async function inspectDuring(
  url: string,
  pid: number,
  keys: { key1: number; key2: number },
  is: (query: string) => boolean,
  timeoutMs = 5000,
): Promise<{ statement: LastStatement; seen: LockInspection }> {
  const until = performance.now() + timeoutMs;
  let last: LastStatement = { query: '', began: '' };
  while (performance.now() < until) {
    last = await lastStatement(url, pid);
    if (is(last.query)) {
      const seen = await LeaderLock.inspect({ connectionString: url, ...keys });
      const after = await lastStatement(url, pid);
      if (after.query === last.query && after.began === last.began) return { statement: last, seen };
    } else {
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  throw new Error(
    `backend ${pid}: no inspect during the statement wanted within ${timeoutMs} ms; last: ${last.query.slice(0, 120)}`,
  );
}
