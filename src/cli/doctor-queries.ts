/**
 * The doctor's checks that are plain queries on the primary's connection: server defaults,
 * latency, permissions and the key's holder (doctor-checks.ts runs them).
 */

import type pg from 'pg';
import { DEFAULT_FENCING_TABLE } from '../core/fencing.js';
import { idOfSession } from '../core/identity.js';
import type { LeaderLockOptions } from '../core/lock-options.js';
import { KEY_LOCKS } from '../core/statements.js';
import type { Keys } from './args.js';
import { humanMs } from './common.js';
import type { Check } from './doctor-check.js';

export async function defaultsCheck(client: pg.Client, o: LeaderLockOptions): Promise<Check> {
  const { rows } = await client.query<{ name: string; setting: string; unit: string | null }>(
    `SELECT name, setting, unit FROM pg_settings
      WHERE name IN ('statement_timeout', 'lock_timeout', 'idle_in_transaction_session_timeout', 'idle_session_timeout')`,
  );
  const ms = (name: string): number => Number(rows.find((r) => r.name === name)?.setting ?? 0);
  const slice = o.waitSliceMs ?? 30_000;
  const problems: string[] = [];
  const statement = ms('statement_timeout');
  if (statement > 0 && statement <= slice) {
    problems.push(
      `statement_timeout ${humanMs(statement)} cancels a waiting follower's pg_advisory_lock before its ${humanMs(slice)} slice ends: it loses its place in the queue and backs off (slower failover)`,
    );
  }
  const idle = ms('idle_session_timeout');
  if (idle > 0) {
    problems.push(
      `idle_session_timeout ${humanMs(idle)} closes idle follower sessions (poll mode): each such close is an error and a reconnect`,
    );
  }
  const off = (n: number): string => (n ? humanMs(n) : 'off');
  const info = `lock_timeout ${off(ms('lock_timeout'))} (the lock sets its own in wait mode), idle_in_transaction_session_timeout ${off(ms('idle_in_transaction_session_timeout'))} (the lock never idles in a transaction)`;
  if (problems.length) {
    return {
      id: 'defaults',
      verdict: 'warn',
      reason: `${problems.join('; ')}; ${info}`,
      fix: `for the lock's role: ALTER ROLE … SET statement_timeout = 0 (or above waitSliceMs) and idle_session_timeout = 0, or set waitSliceMs below statement_timeout`,
    };
  }
  return {
    id: 'defaults',
    verdict: 'ok',
    reason: `statement_timeout ${statement ? humanMs(statement) : 'off'}, idle_session_timeout off, ${info}`,
  };
}

export async function latencyCheck(client: pg.Client, o: LeaderLockOptions): Promise<Check> {
  const deadline = o.queryTimeoutMs ?? 5000;
  const samples: number[] = [];
  // up to 20, stopping at the first over the threshold: 20 slow ones would outlast the step
  for (let i = 0; i < 20 && (samples.at(-1) ?? 0) * 4 <= deadline; i++) {
    const t = performance.now();
    await client.query('SELECT 1');
    samples.push(performance.now() - t);
  }
  const n = samples.length;
  samples.sort((x, y) => x - y);
  const p50 = samples[Math.floor(n / 2)] ?? 0;
  const max = samples.at(-1) ?? 0;
  const text = `round trip p50 ${p50.toFixed(1)} ms, max ${max.toFixed(1)} ms over ${n} quer${n === 1 ? 'y' : 'ies'}`;
  if (max * 4 > deadline) {
    return {
      id: 'latency',
      verdict: 'warn',
      reason: `${text}: within 4× of queryTimeoutMs ${deadline} ms, checks may time out`,
      fix: 'run the lock closer to the database, or raise queryTimeoutMs (and healthIntervalMs with it)',
    };
  }
  return { id: 'latency', verdict: 'ok', reason: text };
}

export async function permissionChecks(client: pg.Client): Promise<Check[]> {
  const { rows } = await client.query<{
    signal: boolean;
    create: boolean;
    table: string | null;
    write: boolean | null;
    ro: boolean;
  }>(
    `SELECT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
              OR pg_has_role(current_user, 'pg_signal_backend', 'MEMBER') AS signal,
            has_schema_privilege(current_schema(), 'CREATE') AS create,
            to_regclass($1)::text AS table,
            CASE WHEN to_regclass($1) IS NULL THEN NULL
                 ELSE has_table_privilege(to_regclass($1), 'SELECT, INSERT, UPDATE') END AS write,
            current_setting('default_transaction_read_only') = 'on' AS ro`,
    [DEFAULT_FENCING_TABLE],
  );
  const r = rows[0];
  const checks: Check[] = [];
  checks.push(
    r?.signal
      ? {
          id: 'permissions.break',
          verdict: 'ok',
          reason: 'may terminate other backends (pgleaderlock break)',
        }
      : {
          id: 'permissions.break',
          verdict: 'warn',
          reason:
            'not a member of pg_signal_backend: `pgleaderlock break` cannot end an abandoned holder of another role',
          fix: 'GRANT pg_signal_backend TO <role> for the operator who runs break (the lock itself does not need it)',
        },
  );
  const fencing = r?.ro
    ? {
        verdict: 'warn' as const,
        reason:
          'sessions of this role are read-only (default_transaction_read_only = on): fencing: true writes its table and would fail',
      }
    : r?.table != null
      ? r.write
        ? { verdict: 'ok' as const, reason: `may write the fencing table ${r.table}` }
        : {
            verdict: 'warn' as const,
            reason: `cannot write the fencing table ${r.table}: fencing: true would fail`,
          }
      : r?.create
        ? {
            verdict: 'ok' as const,
            reason: `may create the fencing table ${DEFAULT_FENCING_TABLE} (fencing: true)`,
          }
        : {
            verdict: 'warn' as const,
            reason: `cannot create the fencing table ${DEFAULT_FENCING_TABLE} in the current schema: fencing: true would fail`,
          };
  checks.push({
    id: 'permissions.fencing',
    ...fencing,
    ...(fencing.verdict === 'warn'
      ? {
          fix: `create it once as an owner (docs/fencing.md) and GRANT SELECT, INSERT, UPDATE on it, or GRANT CREATE ON SCHEMA`,
        }
      : {}),
  });
  return checks;
}

export async function holderCheck(client: pg.Client, keys: Keys): Promise<Check> {
  const { rows } = await client.query<{
    pid: number;
    granted: boolean;
    app: string | null;
    query: string | null;
    since: Date | null;
  }>(
    `SELECT l.pid, l.granted, a.application_name AS app, a.query, a.backend_start AS since
       FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
      WHERE ${KEY_LOCKS} ORDER BY l.granted DESC`,
    [keys.key1, keys.key2],
  );
  const key = `key (${keys.key1}, ${keys.key2})`;
  const waiting = `${rows.filter((r) => !r.granted).length} waiting`;
  const l = rows.find((r) => r.granted);
  if (!l) return { id: 'holder', verdict: 'ok', reason: `${key} is free; ${waiting}` };
  const since = l.since ? `, session since ${l.since.toISOString()}` : '';
  const id = idOfSession(l.app, l.query); // whole, whatever its length or alphabet
  if (id === null) {
    return {
      id: 'holder',
      verdict: 'warn',
      reason: `${key} is held by pid ${l.pid} (application_name ${JSON.stringify(l.app ?? '')})${since}, which is not a pgleaderlock candidate; ${waiting}`,
      fix: 'another program uses the same advisory key: choose another --name or key',
    };
  }
  return {
    id: 'holder',
    verdict: 'ok',
    reason: `${key} is held by ${id} (pid ${l.pid}${since}); ${waiting}`,
  };
}
