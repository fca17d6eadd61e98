/**
 * `pgleaderlock break`: terminate the backend that holds the key, for a holder that is
 * stuck or abandoned. Only with --yes, never a session younger than --min-age, and only the
 * backend that still holds the key at the moment of termination (one statement).
 */

import type pg from 'pg';
import { sqlStateOf } from '../core/errors.js';
import { idOfSession } from '../core/identity.js';
import { detectPgpool, pgpoolRisks } from '../core/pgpool.js';
import { KEY_LOCKS } from '../core/statements.js';
import { type Dsn, type Keys, type OptionSpec, optionalDuration, UsageError, type Values } from './args.js';
import { CliExit, connectOrExit, EXIT, explain, humanMs } from './common.js';

export const BREAK_OPTIONS: OptionSpec[] = [
  { name: 'yes', type: 'boolean', help: 'really terminate the holding backend' },
  {
    name: 'min-age',
    type: 'string',
    value: 'DURATION',
    default: '30s',
    help: 'refuse if the holder’s session is younger than this',
  },
];

const KEY_MATCH = `${KEY_LOCKS} AND l.granted`;

const HOLDER = `SELECT l.pid, a.application_name, a.query, host(a.client_addr) AS client_addr, a.usename,
    a.backend_start, (extract(epoch FROM clock_timestamp() - a.backend_start) * 1000)::float8 AS age_ms
  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
  WHERE ${KEY_MATCH}`;

interface Holder {
  pid: number;
  application_name: string | null;
  query: string | null;
  client_addr: string | null;
  usename: string | null;
  backend_start: Date | null;
  age_ms: number;
}

function describeHolder(h: Holder): string {
  // a candidate by its whole id (its statements carry one its application_name cannot)
  const id = idOfSession(h.application_name, h.query);
  const app = id !== null ? `pgleaderlock:${id}` : h.application_name || '(no application_name)';
  return `${app} (pid ${h.pid}, role ${h.usename ?? '?'}${h.client_addr ? `, ${h.client_addr}` : ''}, session ${humanMs(h.age_ms)} old)`;
}

async function holder(client: pg.Client, keys: Keys): Promise<Holder | null> {
  const { rows } = await client.query<Holder>(HOLDER, [keys.key1, keys.key2]);
  return rows[0] ?? null;
}

export async function breakLock(
  values: Values,
  dsn: Dsn,
  keys: Keys,
  write: (line: string) => void,
): Promise<number> {
  const minAgeMs = optionalDuration(values, 'min-age') ?? 30_000;
  const client = await connectOrExit(dsn, 'pgleaderlock-break');
  try {
    const found = await holder(client, keys);
    const key = `key (${keys.key1}, ${keys.key2})`;
    if (!found) {
      write(`nothing to break: nobody holds ${key}`);
      return EXIT.NOT_ACQUIRED;
    }
    if (found.age_ms < minAgeMs) {
      write(
        `refusing: ${key} is held by ${describeHolder(found)}, younger than --min-age ${humanMs(minAgeMs)}; a live leader may have just started`,
      );
      return EXIT.NOT_ACQUIRED;
    }
    // behind pgpool-II with failover_on_backend_shutdown, the terminated backend's pgpool
    // child detaches the primary: the whole pool goes down (core/pgpool.ts)
    const pgpool = await detectPgpool(async (sql) => (await client.query(sql)).rows);
    const risk = pgpool && pgpoolRisks(pgpool).find((r) => r.setting === 'failover_on_backend_shutdown');
    if (pgpool && risk) {
      write(
        `refusing: this connection goes through pgpool-II ${pgpool.version} with failover_on_backend_shutdown = on. ` +
          `Terminating ${describeHolder(found)} would make pgpool detach the primary, and every client of the pool would fail ` +
          '(whichever path the terminate takes, when the holder is connected through pgpool). ' +
          `If the holder connects to PostgreSQL directly, run break against the primary directly (--dsn naming the primary, not pgpool); ` +
          `otherwise ${risk.fix}, or stop the holder's process.`,
      );
      return EXIT.NOT_ACQUIRED;
    }
    if (values.yes !== true) {
      throw new UsageError(
        `${key} is held by ${describeHolder(found)}; pass --yes to terminate that backend`,
      );
    }
    const { rows: version } = await client.query<{ v: number }>(
      "SELECT current_setting('server_version_num')::int AS v",
    );
    // PG14+: wait (up to 5 s) until the backend has exited, so the key is free on return
    const call =
      (version[0]?.v ?? 0) >= 140000 ? 'pg_terminate_backend(l.pid, 5000)' : 'pg_terminate_backend(l.pid)';
    let terminated: boolean;
    try {
      const { rows } = await client.query<{ ok: boolean }>(
        `SELECT ${call} AS ok FROM pg_locks l WHERE ${KEY_MATCH} AND l.pid = $3`,
        [keys.key1, keys.key2, found.pid],
      );
      if (rows.length === 0) {
        write(
          `not terminated: pid ${found.pid} no longer holds ${key} (it changed hands); look again with status`,
        );
        return EXIT.NOT_ACQUIRED;
      }
      terminated = rows[0]?.ok === true;
    } catch (err) {
      if (sqlStateOf(err) === '42501') {
        throw new CliExit(
          EXIT.USAGE,
          `permission denied to terminate pid ${found.pid} (role ${found.usename ?? '?'}): connect as a superuser, as that role, or as a member of pg_signal_backend (${explain(err)})`,
          { cause: err },
        );
      }
      throw err;
    }
    const now = await holder(client, keys);
    const after = now ? `now held by ${describeHolder(now)}` : 'the key is now free';
    write(
      terminated
        ? `terminated ${describeHolder(found)}; ${after}`
        : `asked pid ${found.pid} to terminate; it had not exited after 5 s; ${after}`,
    );
    return terminated ? EXIT.OK : EXIT.NOT_ACQUIRED; // a holder that did not go is no success
  } finally {
    await client.end().catch(() => {});
  }
}
