/** Helpers for integration tests against the run's shared server (see global-setup.ts). */
import { randomBytes, randomInt } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { type PgServer, type PgServerOptions, startPgServer } from './pg-server.js';

/** URL of the server shared by this run. Never stop it: use `ownServer()` for that. */
export function databaseUrl(): string {
  return inject('databaseUrl');
}

const INT32_MIN = -2_147_483_648;
const INT32_MAX = 2_147_483_647;

/** A random `(key1, key2)` pair: advisory locks are per database, so tests never share keys. */
export function randomKeys(): { key1: number; key2: number } {
  return { key1: randomInt(INT32_MIN, INT32_MAX), key2: randomInt(INT32_MIN, INT32_MAX) };
}

/** A unique prefix for the `id`s (and so the application_names) of one test's locks. */
export function testTag(): string {
  return `t${randomBytes(4).toString('hex')}`;
}

/** Run one statement on a short-lived connection of its own. */
export async function adminQuery<R extends pg.QueryResultRow = pg.QueryResultRow>(
  url: string,
  text: string,
  values: unknown[] = [],
): Promise<R[]> {
  const client = new pg.Client({ connectionString: url, application_name: 'pgleaderlock-test-admin' });
  client.on('error', () => {});
  await client.connect();
  try {
    return (await client.query<R>(text, values)).rows;
  } finally {
    await client.end().catch(() => {});
  }
}

/** An admin connection opened ahead of a timed window, so that connecting (SCRAM) is not in the budget. */
export interface AdminClient extends AsyncDisposable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[]): Promise<R[]>;
  terminate(pid: number): Promise<void>;
}

export async function adminClient(url: string): Promise<AdminClient> {
  const client = new pg.Client({ connectionString: url, application_name: 'pgleaderlock-test-admin' });
  client.on('error', () => {});
  await client.connect();
  const query = async <R extends pg.QueryResultRow>(text: string, values: unknown[] = []): Promise<R[]> =>
    (await client.query<R>(text, values)).rows;
  return {
    query,
    terminate: async (pid) => {
      await query('SELECT pg_terminate_backend($1)', [pid]);
    },
    [Symbol.asyncDispose]: () => client.end().catch(() => {}),
  };
}

/** The server's clock, in whole milliseconds since the epoch (a handover directive's deadlines count on it). */
export async function serverNowMs(client: AdminClient): Promise<number> {
  const [now] = await client.query<{ ms: string }>(
    'SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::int8::text AS ms',
  );
  return Number(now?.ms);
}

/** Backends whose application_name starts with `prefix`. */
/** The statements a lock session runs before its LISTEN (src/core/prepare.ts). */
const SET_UP = ['/* pgleaderlock:prepare */', '/* pgleaderlock:configure */', '/* pgleaderlock:settings */'];

/**
 * A poll-mode candidate's session as `sessionsLike` reads it: set up and idle, so it
 * LISTENs (a session is named by its first statement, before its LISTEN: a handover that
 * names it before then reaches it unheard, and it leads only after the takeover delay).
 */
export function listening(s: { state: string; query: string }): boolean {
  return (
    s.state === 'idle' && s.query.startsWith('/* pgleaderlock:') && !SET_UP.some((t) => s.query.startsWith(t))
  );
}

export async function sessionsLike(
  url: string,
  prefix: string,
): Promise<{ pid: number; state: string; query: string }[]> {
  return adminQuery(
    url,
    'SELECT pid, state, application_name, query FROM pg_stat_activity WHERE application_name LIKE $1',
    [`${prefix.replace(/[%_\\]/g, '\\$&')}%`],
  );
}

/**
 * The backends of worker `id`'s ring watch that wait in the lock queue (its session is
 * named before it is set up, so a named session alone does not mean it waits yet).
 */
export async function waitingWatches(url: string, id: string): Promise<number[]> {
  const rows = await adminQuery<{ pid: number }>(
    url,
    `SELECT s.pid FROM pg_locks l JOIN pg_stat_activity s ON s.pid = l.pid
      WHERE s.application_name = $1 AND l.locktype = 'advisory' AND NOT l.granted`,
    [`pgleaderlock:${id}#watch`],
  );
  return rows.map((r) => r.pid);
}

/** Backends holding or waiting for the advisory lock `(key1, key2)`. */
export async function lockHolders(
  url: string | AdminClient,
  key1: number,
  key2: number,
): Promise<{ pid: number; granted: boolean }[]> {
  const text = `SELECT pid, granted FROM pg_locks
      WHERE locktype = 'advisory' AND classid = $1::int4::oid AND objid = $2::int4::oid AND objsubid = 2
        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`;
  // an admin client of the test's own: no new connection per read (a tight loop of reads)
  return typeof url === 'string' ? adminQuery(url, text, [key1, key2]) : url.query(text, [key1, key2]);
}

/** The pid of the one backend holding (key1, key2); throws if there is not exactly one. */
export async function holderPid(url: string, key1: number, key2: number): Promise<number> {
  const rows = (await lockHolders(url, key1, key2)).filter((r) => r.granted);
  if (rows.length !== 1 || !rows[0]) throw new Error(`expected one holder, found ${JSON.stringify(rows)}`);
  return rows[0].pid;
}

export async function terminate(url: string, pid: number): Promise<void> {
  await adminQuery(url, 'SELECT pg_terminate_backend($1)', [pid]);
}

/** Poll `check` (no fixed sleeps: a short poll on the server's own view) until true or timeout. */
export async function eventually(
  check: () => Promise<boolean> | boolean,
  { timeoutMs = 5_000, intervalMs = 20, what = 'condition' } = {},
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/**
 * Leak check: no backend whose application_name starts with `pgleaderlock:<tag>` may
 * remain (a closed client's backend exits within milliseconds; allow up to 3 s).
 */
export async function assertNoSessions(tag: string, url: string = databaseUrl()): Promise<void> {
  const prefix = `pgleaderlock:${tag}`;
  let left: { pid: number; state: string }[] = [];
  try {
    await eventually(
      async () => {
        left = await sessionsLike(url, prefix);
        return left.length === 0;
      },
      { timeoutMs: 3_000, what: 'our sessions to close' },
    );
  } catch {
    throw new Error(`leaked connections after test: ${JSON.stringify(left)}`);
  }
}

/** A server of the test's own, which it may stop, kill or restart. Dispose it in `finally`. */
export function ownServer(options: PgServerOptions = {}): Promise<PgServer> {
  return startPgServer(options);
}

/** `promise`, or a rejection naming `what` after `ms` (instead of hanging until the test timeout). */
export async function within<T>(promise: Promise<T>, ms: number, what: string | (() => string)): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(new Error(`timed out after ${ms} ms waiting for ${typeof what === 'string' ? what : what()}`));
    }, ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}
