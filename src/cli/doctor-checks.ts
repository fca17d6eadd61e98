/**
 * The checks of `pgleaderlock doctor`, each a verdict (ok / warn / fail), a one-line reason
 * and what to do. They go through the same connection path the lock would (host list,
 * pooler, TLS) and, for the settings and the pooler mode, run a real `LeaderLock` on a
 * scratch key: what the doctor reports is what the library does, not a re-implementation.
 */
import type pg from 'pg';
import { systemClock } from '../core/clock.js';
import { destroyClient } from '../core/connect.js';
import { endpointsOf } from '../core/endpoints.js';
import { sqlStateOf } from '../core/errors.js';
import type { LeaderLockOptions } from '../core/lock-options.js';
import { detectPgpool, type PgpoolFront } from '../core/pgpool.js';
import { type Found, findPrimary, NoPrimaryError } from '../core/primary.js';
import { connectSettings, resolveTimings, type Safety } from '../core/safety.js';
import { LeaderLock } from '../leader/leader-lock.js';
import { type Dsn, type Keys, scrub } from './args.js';
import { connectionOptions, explain, humanMs } from './common.js';
import type { Check, Verdict } from './doctor-check.js';
import { lockTableCheck, lockTableSize } from './doctor-locktable.js';
import { pgpoolChecks } from './doctor-pgpool.js';
import { defaultsCheck, holderCheck, latencyCheck, permissionChecks } from './doctor-queries.js';

export type { Check, Verdict };

export interface DoctorInput {
  dsn: Dsn;
  /** The key to report the holder of, if given. */
  keys: Keys | null;
  /** The lock options the service would use (durations from the command line). */
  lockOptions: LeaderLockOptions;
  timeoutMs: number;
  /** `--partitions P --workers N`: check that the group fits in the lock table. */
  group?: { partitions: number; workers: number } | null;
}

const APP = 'pgleaderlock-doctor';
const TESTED = 'PostgreSQL 14 to 18';

/** Runs each check in turn; stops after a check the rest cannot do without (no server, no primary). */
export async function runChecks(input: DoctorInput, report: (c: Check) => void): Promise<void> {
  const { dsn, timeoutMs } = input;
  const say = (c: Check): Check => {
    report({ ...c, reason: scrub(c.reason, dsn.url), ...(c.fix ? { fix: scrub(c.fix, dsn.url) } : {}) });
    return c;
  };

  // connect: survey the hosts as the lock does
  const t0 = performance.now();
  let found: Found;
  try {
    found = await findPrimary(endpointsOf(connectionOptions(dsn), APP, timeoutMs), {
      clock: systemClock,
      queryTimeoutMs: timeoutMs,
    });
  } catch (err) {
    if (err instanceof NoPrimaryError) {
      err.standbys.close();
      say({ id: 'connect', verdict: 'ok', reason: 'the server answers' });
      say({
        id: 'primary',
        verdict: 'fail',
        reason: `no primary: ${err.message}`,
        fix: 'point the lock at the primary, or list every host of the cluster (libpq style) so that it finds the primary after a failover',
      });
      return;
    }
    say({
      id: 'connect',
      verdict: 'fail',
      reason: `cannot connect: ${connectFailure(err)}`,
      fix: 'check the host, port, user, password and database; with a pooler, that it accepts the connection (some reject startup parameters such as application_name)',
    });
    return;
  }
  const client = found.client;
  const opened = new Set<pg.Client>([client]);
  // every step has a deadline: a connection that stops answering (a blackhole, a pooler
  // stuck on its server) fails the step that waits on it instead of hanging the doctor
  let step = 'version';
  const bounded = <T>(id: string, work: Promise<T>, ms = timeoutMs): Promise<T> => {
    step = id;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms (--timeout)`)), ms);
    });
    return Promise.race([work, late]).finally(() => clearTimeout(timer));
  };
  try {
    say({
      id: 'connect',
      verdict: 'ok',
      reason: `connected to ${found.endpoint.label} in ${Math.round(performance.now() - t0)} ms`,
    });
    const others = found.others.map((o) => `${o.endpoint.label}: ${o.state.kind}`);
    say({
      id: 'primary',
      verdict: 'ok',
      reason: `${found.endpoint.label} is the primary (timeline ${found.timeline || 'unknown'})${others.length ? `; ${others.join(', ')}` : ''}`,
    });
    const version = await bounded('version', serverVersion(client));
    say(versionCheck(version));
    const pooled = await bounded('pooler', poolerInPath(client));
    const pgpool = await bounded(
      'pgpool',
      detectPgpool(async (sql) => (await client.query(sql)).rows),
    );
    const lockRun = await bounded('pooler', tryLock(input), 2 * timeoutMs + 5000);
    say(poolerCheck(pooled, lockRun, pgpool));
    if (pgpool) for (const c of pgpoolChecks(pgpool)) say(c);
    say(settingsCheck(lockRun, version, input.lockOptions)); // known already: before a step that may stop the rest
    say(await bounded('exclusion', exclusionCheck(input, opened), 3 * timeoutMs));
    say(await bounded('defaults', defaultsCheck(client, input.lockOptions)));
    // up to 20 round trips, each under a quarter of queryTimeoutMs before it warns: a bound
    // of one --timeout would fail the slow path the check is there to warn about
    const warnAfterMs = 5 * (input.lockOptions.queryTimeoutMs ?? 5000) + timeoutMs;
    say(await bounded('latency', latencyCheck(client, input.lockOptions), warnAfterMs));
    for (const c of await bounded('permissions', permissionChecks(client))) say(c);
    if (input.keys) say(await bounded('holder', holderCheck(client, input.keys)));
    const group = input.group;
    if (group) {
      say(lockTableCheck(await bounded('locktable', lockTableSize(client)), group.partitions, group.workers));
    }
  } catch (err) {
    // the reason is scrubbed by say(); no stack trace
    say({
      id: step,
      verdict: 'fail',
      reason: explain(err),
      fix: 'the server or the path to it stopped answering; the checks after this one were not run',
    });
  } finally {
    for (const c of opened) destroyClient(c);
  }
}

/** The driver's words and SQLSTATE for the usual failures, passwords scrubbed by the caller. */
function connectFailure(err: unknown): string {
  const cause = (err as { cause?: unknown }).cause;
  const inner = cause && typeof cause === 'object' ? cause : err;
  const state = sqlStateOf(inner);
  if (state === '28P01') return `${explain(inner)}: wrong password, or no such user`;
  if (state === '08P01') return `${explain(inner)}: the server or a pooler rejected the connection's startup`;
  return explain(inner);
}

async function serverVersion(client: pg.Client): Promise<{ num: number; text: string }> {
  const { rows } = await client.query<{ num: string; text: string }>(
    "SELECT current_setting('server_version_num') AS num, current_setting('server_version') AS text",
  );
  return { num: Number(rows[0]?.num ?? 0), text: rows[0]?.text ?? 'unknown' };
}

function versionCheck(v: { num: number; text: string }): Check {
  const name = `PostgreSQL ${v.text}`;
  if (v.num >= 140000) {
    return {
      id: 'version',
      verdict: v.num < 190000 ? 'ok' : 'warn',
      reason: `${name}: idle_session_timeout, tcp_user_timeout and client_connection_check_interval are available${v.num < 190000 ? '' : `; tested on ${TESTED}`}`,
    };
  }
  if (v.num >= 120000) {
    return {
      id: 'version',
      verdict: 'warn',
      reason: `${name} lacks idle_session_timeout and client_connection_check_interval (14+): a frozen leader's lock is freed by TCP keepalives and tcp_user_timeout only, and a waiter whose client vanished stays queued and may inherit the lock until the server notices the socket`,
      fix: `upgrade to PostgreSQL 14 or later (tested on ${TESTED})`,
    };
  }
  return {
    id: 'version',
    verdict: 'fail',
    reason: `${name} lacks tcp_user_timeout (12+), idle_session_timeout and client_connection_check_interval (14+): a frozen leader's lock is freed by keepalives alone`,
    fix: `upgrade to PostgreSQL 14 or later (tested on ${TESTED})`,
  };
}

/** A pooler answers the startup itself: the pid it announces is not the backend's. */
async function poolerInPath(client: pg.Client): Promise<boolean> {
  const announced = (client as unknown as { processID?: number | null }).processID ?? null;
  const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  return announced !== null && announced !== rows[0]?.pid;
}

type LockRun = { ok: true; safety: Safety } | { ok: false; error: Error };

/** A real LeaderLock on a scratch key, with the service's options: leads, or says why not. */
async function tryLock(input: DoctorInput): Promise<LockRun> {
  const [key1, key2] = LeaderLock.keysFromName(`pgleaderlock-doctor-${process.pid}-${Math.random()}`);
  const lock = new LeaderLock({
    ...input.lockOptions,
    key1,
    key2,
    acquireMode: 'poll',
    takeoverDelayMs: 0,
    id: `${APP}-${process.pid}`,
    unref: true,
  });
  let first: Error | null = null;
  lock.onError((err) => {
    first ??= err;
  });
  try {
    await lock.start();
    const deadline = performance.now() + input.timeoutMs;
    while (!lock.isLeader && first === null && performance.now() < deadline) {
      await lock.waitForLeadership({ timeoutMs: 50 });
    }
    if (lock.isLeader && lock.safety) return { ok: true, safety: lock.safety };
    return {
      ok: false,
      error: first ?? new Error(`not leader of a free scratch key after ${input.timeoutMs} ms`),
    };
  } finally {
    await lock.shutdown({ timeoutMs: 5000 }).catch(() => {});
  }
}

function poolerCheck(pooled: boolean, run: LockRun, pgpool: PgpoolFront | null): Check {
  const unsafe = !run.ok && (run.error as { code?: string }).code === 'ERR_PGLEADERLOCK_UNSAFE';
  if (unsafe && /pooler/.test(run.error.message)) {
    return {
      id: 'pooler',
      verdict: 'fail',
      reason: `a pooler in transaction or statement mode shares backends between clients: the lock refuses (ERR_PGLEADERLOCK_UNSAFE), two clients could both hold one advisory lock`,
      fix: 'connect directly to PostgreSQL, or through the pooler in session mode (e.g. a separate PgBouncer database with pool_mode = session)',
    };
  }
  if (pgpool) {
    return {
      id: 'pooler',
      verdict: 'ok',
      reason: `pgpool-II ${pgpool.version} is in the path (it answers SHOW pool_version): it does not share a backend between clients; keepalive and tcp_user_timeout settings apply to pgpool's connection to the server, not to the lock's client`,
    };
  }
  if (pooled) {
    return {
      id: 'pooler',
      verdict: 'warn',
      reason:
        "a pooler in session mode is in the path (the pid it announced is not the backend's): it works, with one probe connection per attempt and one kept by the leader; keepalive and tcp_user_timeout settings apply to the pooler's connection, not to the lock's client",
      fix: 'prefer a direct connection for the lock; keep the pooler in session mode if you must use it',
    };
  }
  return {
    id: 'pooler',
    verdict: 'ok',
    reason: "direct connection: the backend pid announced at connect is the backend's own",
  };
}

/** Two sessions, one scratch key: the second must be refused while the first holds it. */
async function exclusionCheck(input: DoctorInput, opened: Set<pg.Client>): Promise<Check> {
  const [k1, k2] = LeaderLock.keysFromName(`pgleaderlock-doctor-x-${process.pid}-${Math.random()}`);
  const open = async (): Promise<pg.Client> => {
    const found = await findPrimary(endpointsOf(connectionOptions(input.dsn), APP, input.timeoutMs), {
      clock: systemClock,
      queryTimeoutMs: input.timeoutMs,
    });
    opened.add(found.client);
    return found.client;
  };
  const a = await open();
  const b = await open();
  try {
    const take = async (c: pg.Client): Promise<boolean> =>
      (await c.query<{ got: boolean }>('SELECT pg_try_advisory_lock($1, $2) AS got', [k1, k2])).rows[0]
        ?.got === true;
    const first = await take(a);
    const second = await take(b);
    await a.query('SELECT pg_advisory_unlock_all()');
    await b.query('SELECT pg_advisory_unlock_all()');
    if (first && !second) {
      return { id: 'exclusion', verdict: 'ok', reason: 'a second session is refused a key the first holds' };
    }
    return {
      id: 'exclusion',
      verdict: 'fail',
      reason: first
        ? 'two sessions both got the same advisory lock: advisory locks do not exclude on this path (a pooler sharing backends, or a Postgres-compatible database that accepts the calls and excludes nothing)'
        : 'pg_try_advisory_lock on a free key returned false',
      fix: 'use PostgreSQL itself, connected directly or through a session-mode pooler',
    };
  } catch (err) {
    return {
      id: 'exclusion',
      verdict: 'fail',
      reason: `advisory locks cannot be taken: ${explain(err)}`,
      fix: 'use PostgreSQL itself, connected directly or through a session-mode pooler',
    };
  } finally {
    destroyClient(a);
    destroyClient(b);
  }
}

function settingsCheck(run: LockRun, version: { num: number }, o: LeaderLockOptions): Check {
  if (!run.ok) {
    return {
      id: 'settings',
      verdict: 'fail',
      reason: `a lock on a scratch key did not lead: ${explain(run.error)}`,
      fix: 'see the reason; docs/safety.md explains each refusal',
    };
  }
  const s = run.safety;
  const applied = s.settings;
  const wantedMs = resolveTimings(o).serverReleaseMs;
  const wanted = new Map(connectSettings(wantedMs, version.num));
  const got: Record<string, number | null> = {
    tcp_keepalives_idle: applied.tcpKeepalivesIdleS,
    tcp_keepalives_interval: applied.tcpKeepalivesIntervalS,
    tcp_keepalives_count: applied.tcpKeepalivesCount,
    tcp_user_timeout: applied.tcpUserTimeoutMs,
    client_connection_check_interval: applied.clientConnectionCheckIntervalMs,
  };
  const missed = [...wanted].filter(([name, value]) => got[name] !== null && String(got[name]) !== value);
  const figures = `lease ${humanMs(s.leaseMs)}, the server frees a dead leader's lock within ${humanMs(s.serverReleaseMs)} of its last check, a silent loss is noticed within ${humanMs(s.detectionMs)}`;
  const appliedText = `idle_session_timeout ${applied.idleSessionTimeoutMs ?? 'n/a'} ms, tcp_user_timeout ${applied.tcpUserTimeoutMs ?? 'n/a'} ms, keepalives ${applied.tcpKeepalivesIdleS}/${applied.tcpKeepalivesIntervalS}/${applied.tcpKeepalivesCount}, client_connection_check_interval ${applied.clientConnectionCheckIntervalMs ?? 'n/a'} ms`;
  if (missed.length) {
    return {
      id: 'settings',
      verdict: 'warn',
      reason: `not applied as asked: ${missed.map(([n, v]) => `${n} = ${got[n]} (asked ${v})`).join(', ')} (a Unix socket has no TCP settings; a managed service may pin them); as applied: ${appliedText}; lock.safety: ${figures}`,
      fix: 'connect over TCP; where a setting is pinned, the lease follows what the server applies (docs/safety.md)',
    };
  }
  return { id: 'settings', verdict: 'ok', reason: `as applied: ${appliedText}; lock.safety: ${figures}` };
}
