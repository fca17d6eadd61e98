/**
 * pg_locks joined with pg_stat_activity, as the library's statements read them: who holds
 * a key, who queues for it (in the order they started waiting), and what one
 * application_name's sessions hold or await.
 */
import type { Backend } from './backend.js';
import type { LockTable } from './locks.js';

/** The holder of `key`: its pid and application_name (no row when free). */
export function holderRows(locks: LockTable, key: string): Record<string, unknown>[] {
  const h = locks.holderOf(key);
  return h ? [{ pid: h.pid, application_name: h.appName }] : [];
}

/** The waiters for `key`, by when their statement started: application_name and query. */
export function queuedRows(locks: LockTable, key: string): Record<string, unknown>[] {
  return [...locks.entry(key).queue]
    .sort((x, y) => x.queryStart - y.queryStart)
    .map((w) => ({ application_name: w.appName, query: w.query }));
}

/** The sessions shown as `name`: how many, whether one holds `key`, whether one waits for it. */
export function successorRow(
  locks: LockTable,
  backends: Iterable<Backend>,
  key: string,
  name: string,
): Record<string, unknown> {
  const e = locks.entry(key);
  let sessions = 0;
  let holds = false;
  let waits = false;
  for (const x of backends) {
    if (x.appName !== name) continue;
    sessions++;
    if (e.holder === x) holds = true;
    if (x.waiting?.key === key) waits = true;
  }
  return { holds, waits, sessions };
}
