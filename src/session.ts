/**
 * The lock's dedicated database session: one `pg.Client` per connection attempt, owned
 * by the lock. Every query runs under a deadline; a query that misses it destroys the
 * client (its socket may be dead, and later queries would queue behind it). The
 * client's `'error'` and `'end'` events, and the notices PostgreSQL sends on an
 * immediate shutdown or a crash, mark the session dead at once, exactly once.
 */
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { sendCancel } from './cancel.js';
import type { Clock } from './clock.js';
import { type ConnectFn, destroyClient, parseSettingMs } from './connect.js';
import { ConnectionError, describe, LockError, sqlStateOf, toError } from './errors.js';
import { bumpSql, createTableSql } from './fencing.js';
import { PoolerGuard, reportedPid, SHARED_BACKEND } from './pooler.js';
import { type AppliedSettings, connectSettings, READ_BACK, type Safety, safetyFor } from './safety.js';
import {
  CHECK,
  CHECK_ANNOUNCE,
  CURRENT_HOLDER,
  channelFor,
  FREE_STRANDED,
  PREPARE,
  READ_SETTINGS,
  TRY_LOCK,
  UNLOCK,
  WAIT_LOCK,
} from './sql.js';

/** SQLSTATEs that mean "this session is going away" when they arrive as notices. */
const DYING_NOTICES = new Set(['57P01', '57P02', '57P03']);

/** lock_timeout: the slice ended with the lock still held elsewhere. (A cancel, 57014, is an error.) */
const SLICE_ENDED = '55P03';

export interface SessionOptions {
  key1: number;
  key2: number;
  /** Set on the session at connect (a `connect` hook's client may lack it). */
  applicationName: string;
  clock: Clock;
  /** Target for the server's release of a dead leader's lock (session settings). */
  serverReleaseMs: number;
  healthIntervalMs: number;
  /** Wait mode: the longest single server-side wait (lock_timeout); null in poll mode. */
  waitSliceMs: number | null;
  /** Deadline for connecting and for each query. */
  queryTimeoutMs: number;
  /** Deadline for a graceful `end()` before the socket is destroyed. */
  closeTimeoutMs: number;
}

/** Result of a health check. */
export type CheckResult = { ok: true } | { ok: false; reason: string };

interface PgInternals {
  processID?: number | null;
}

/** A row of TRY_LOCK / WAIT_LOCK (sql.ts). */
interface AcquireRow {
  pid: number;
  same: boolean;
  held_before: boolean;
  ok: boolean;
  idle: string | null;
}

interface CheckRow {
  pid: number;
  same: boolean;
  held: boolean;
}

export class Session {
  /** Backend pid at acquisition (null until a lock attempt succeeds). */
  private lockedPid: number | null = null;
  /** Backend pid when the session was opened. */
  private openedPid: number | null = null;
  private settings: AppliedSettings | null = null;
  private currentSafety: Safety | null = null;
  private fencingReady = false;
  /** The id of the lock's holder when this session connected (null if none, or not ours). */
  holderAtConnect: string | null = null;
  private announcementListener: ((id: string) => void) | null = null;
  private deathCause: Error | null = null;
  private readonly deathListeners = new Set<(err: Error) => void>();
  private closing: Promise<void> | null = null;
  /** The session marker (see sql.ts): proves each statement runs on this session's own backend. */
  private readonly token = randomBytes(8).toString('hex');
  /** Set when a pooler is in the path (null: a direct connection). */
  private pooler: PoolerGuard | null = null;

  private constructor(
    private readonly client: pg.Client,
    private readonly opts: SessionOptions,
  ) {}

  /**
   * Open a session with `connect`, bounded by `queryTimeoutMs`. A client that connects
   * after the deadline is closed, never leaked.
   */
  static async open(connect: ConnectFn, opts: SessionOptions): Promise<Session> {
    const { clock } = opts;
    let timer: unknown;
    let timedOut = false;
    const attempt = connect();
    const timeout = new Promise<never>((_, reject) => {
      timer = clock.setTimeout(() => {
        timedOut = true;
        reject(new ConnectionError(`connecting did not complete within ${opts.queryTimeoutMs} ms`));
      }, opts.queryTimeoutMs);
    });
    let client: pg.Client;
    try {
      client = await Promise.race([attempt, timeout]);
    } catch (err) {
      if (timedOut) {
        attempt.then(
          (late) => destroyClient(late),
          () => {},
        );
        throw err;
      }
      throw new ConnectionError(`could not connect: ${describe(err)}`, { cause: err });
    } finally {
      clock.clearTimeout(timer);
    }
    const session = new Session(client, opts);
    session.attach();
    try {
      await session.prepare(connect);
    } catch (err) {
      session.destroy(toError(err));
      throw err;
    }
    return session;
  }

  /**
   * Refuse a server in recovery and a pooler that shares backends, remember the backend
   * pid, set the keepalive and timeout settings that bound how long the server keeps a
   * dead client's lock, and read back what it applied (Unix sockets, poolers and managed
   * services may ignore some).
   */
  private async prepare(connect: ConnectFn): Promise<void> {
    const [info] = await this.query<{ version: number; recovery: boolean; pid: number }>(PREPARE, [
      this.token,
      this.opts.applicationName,
    ]);
    if (!info) throw new ConnectionError('the server returned nothing for its version');
    if (info.recovery) {
      throw new LockError(
        'the server is in recovery (a hot standby): an advisory lock there excludes nobody on the primary; connect to the primary',
        { code: 'ERR_PGLEADERLOCK_UNSAFE' },
      );
    }
    this.openedPid = info.pid;
    this.pooler = await PoolerGuard.open(
      {
        key1: this.opts.key1,
        key2: this.opts.key2,
        token: this.token,
        connect,
        clock: this.opts.clock,
        timeoutMs: this.opts.queryTimeoutMs,
      },
      info.pid,
      reportedPid(this.client),
    );
    const wanted = connectSettings(this.opts.serverReleaseMs, info.version);
    if (this.opts.waitSliceMs !== null)
      wanted.push(['lock_timeout', String(Math.ceil(this.opts.waitSliceMs))]);
    const calls = wanted.map((_, i) => `set_config($${2 * i + 1}, $${2 * i + 2}, false)`).join(', ');
    await this.query(`/* pgleaderlock:configure */ SELECT ${calls}`, wanted.flat());
    const rows = await this.query<{ name: string; setting: string }>(READ_SETTINGS, [[...READ_BACK]]);
    const read = (name: string): number | null => {
      const row = rows.find((r) => r.name === name);
      return row ? Number(row.setting) : null;
    };
    this.settings = {
      serverVersion: info.version,
      idleSessionTimeoutMs: null, // armed once leader
      tcpKeepalivesIdleS: read('tcp_keepalives_idle') ?? 0,
      tcpKeepalivesIntervalS: read('tcp_keepalives_interval') ?? 0,
      tcpKeepalivesCount: read('tcp_keepalives_count') ?? 0,
      tcpUserTimeoutMs: read('tcp_user_timeout'),
      clientConnectionCheckIntervalMs: read('client_connection_check_interval'),
    };
    // who leads now, and hear of each new leader (NOTIFY) whenever this session is idle
    const channel = channelFor(this.opts.key1, this.opts.key2);
    await this.query(`/* pgleaderlock:listen */ LISTEN ${channel}`, []);
    const [holder] = await this.query<{ application_name: string | null }>(CURRENT_HOLDER);
    this.holderAtConnect = idFromApplicationName(holder?.application_name ?? null);
  }

  /** The safety figures of this session, known once it has acquired the lock. */
  get safety(): Safety | null {
    return this.currentSafety;
  }

  /** True once the connection has failed or been closed. */
  get dead(): boolean {
    return this.deathCause !== null;
  }

  /** Why the session died, if it did. */
  get cause(): Error | null {
    return this.deathCause;
  }

  /** The backend pid the server gave this connection. */
  get backendPid(): number | null {
    return (this.client as unknown as PgInternals).processID ?? null;
  }

  /** Call `fn` once when the session dies (at once if it already has). Returns an unsubscribe. */
  onDeath(fn: (err: Error) => void): () => void {
    if (this.deathCause) {
      fn(this.deathCause);
      return () => {};
    }
    this.deathListeners.add(fn);
    return () => this.deathListeners.delete(fn);
  }

  /**
   * `pg_try_advisory_lock`: true if this session now holds the lock. When granted, arms
   * idle_session_timeout (PG14+) and computes the lease from what the server applied;
   * throws an `ERR_PGLEADERLOCK_UNSAFE` LockError (the caller closes the session, which
   * frees the lock) if the backend changed since connect or the bound cannot hold.
   */
  async tryLock(): Promise<boolean> {
    const [row] = await this.query<AcquireRow>(TRY_LOCK, this.acquireParams());
    return this.acquired(row);
  }

  /** Parameters of TRY_LOCK / WAIT_LOCK: keys, marker, and the idle_session_timeout to arm (PG14+). */
  private acquireParams(): unknown[] {
    const settings = this.settings;
    if (!settings) throw new ConnectionError('session not prepared');
    const arm = settings.serverVersion >= 140000 ? String(Math.ceil(this.opts.serverReleaseMs)) : null;
    return [this.opts.key1, this.opts.key2, this.token, arm];
  }

  /** Read an acquisition row: refuse a shared or moved backend; on a grant, as `granted`. */
  private async acquired(row: AcquireRow | undefined): Promise<boolean> {
    if (!row) throw new LockError('the acquisition returned no row');
    if (!row.same) {
      throw new LockError(
        `this session's statement ran on a backend without its marker (backend pid ${row.pid}): ${SHARED_BACKEND}`,
        { code: 'ERR_PGLEADERLOCK_UNSAFE' },
      );
    }
    if (row.held_before) {
      throw new LockError(
        `the lock was already held by this session's backend (pid ${row.pid}) before it asked: another client shares the backend; ${SHARED_BACKEND}`,
        { code: 'ERR_PGLEADERLOCK_UNSAFE' },
      );
    }
    if (!row.ok) return false;
    return this.granted(row.pid, row.idle);
  }

  /** After a grant: refuse a changed backend, record the pid, compute the lease. */
  private async granted(pid: number, idle: string | null): Promise<true> {
    const settings = this.settings as AppliedSettings;
    if (this.openedPid !== null && pid !== this.openedPid) {
      await this.freeStranded(pid);
      throw new LockError(
        `backend pid changed from ${this.openedPid} to ${pid} between statements: a transaction-mode pooler ` +
          'breaks session advisory locks; connect directly to PostgreSQL or through session mode',
        { code: 'ERR_PGLEADERLOCK_UNSAFE' },
      );
    }
    this.lockedPid = pid;
    await this.verifyNotShared();
    const armed = settings.serverVersion >= 140000;
    const applied = { ...settings, idleSessionTimeoutMs: armed ? parseSettingMs(idle) : null };
    this.currentSafety = safetyFor(applied, this.opts.healthIntervalMs, this.opts.queryTimeoutMs);
    return true;
  }

  /**
   * Wait mode: queue server-side in `pg_advisory_lock` for one slice (lock_timeout). True
   * when granted (then as `tryLock`), false when the slice ended or the wait was cancelled.
   * The query's deadline is the slice plus `queryTimeoutMs`.
   */
  async waitLock(): Promise<boolean> {
    const slice = this.opts.waitSliceMs;
    if (slice === null) throw new ConnectionError('session not prepared for waiting');
    let rows: AcquireRow[];
    try {
      rows = await this.query<AcquireRow>(WAIT_LOCK, this.acquireParams(), slice);
    } catch (err) {
      if (!this.deathCause && sqlStateOf(err) === SLICE_ENDED) return false;
      throw err;
    }
    return this.acquired(rows[0]);
  }

  /**
   * End the running statement (a wait) within milliseconds: a CancelRequest, or if it
   * cannot be sent, destroying the socket (the server then drops the waiter within
   * client_connection_check_interval).
   */
  async cancel(): Promise<void> {
    const sent = await sendCancel(this.client, this.opts.clock, this.opts.closeTimeoutMs);
    if (!sent) this.destroy(new ConnectionError('wait cancelled by closing the session'));
  }

  /**
   * Fencing: while holding the lock, increment this key's epoch in `table` (creating the
   * table on first use) and return the new value.
   */
  async bumpEpoch(table: string, leaderId: string): Promise<bigint> {
    if (!this.fencingReady) {
      try {
        await this.query(createTableSql(table), []);
      } catch (err) {
        // two sessions creating it at once: one wins, the other sees a duplicate
        if (!['42P07', '23505'].includes(sqlStateOf(err) ?? '')) throw err;
      }
      this.fencingReady = true;
    }
    const [row] = await this.query<{ epoch: string }>(bumpSql(table), [
      this.opts.key1,
      this.opts.key2,
      leaderId,
    ]);
    if (!row) throw new LockError('the fencing epoch was not returned');
    return BigInt(row.epoch);
  }

  /** Called with the id in each leadership announcement this session receives. */
  onAnnouncement(fn: (id: string) => void): void {
    this.announcementListener = fn;
  }

  /** `pg_advisory_unlock`: true if the lock was held and is now released. */
  async unlock(): Promise<boolean> {
    const [row] = await this.query<{ ok: boolean; same: boolean }>(UNLOCK, [
      this.opts.key1,
      this.opts.key2,
      this.token,
    ]);
    if (row && !row.same) {
      await this.freeStranded(this.lockedPid);
      throw new LockError(`cannot release on a backend without this session's marker: ${SHARED_BACKEND}`, {
        code: 'ERR_PGLEADERLOCK_UNSAFE',
      });
    }
    if (row?.ok) this.lockedPid = null;
    return row?.ok === true;
  }

  /** Health check: the session answers, is the same backend, and still holds the lock. */
  async check(announceAs?: string): Promise<CheckResult> {
    const { key1, key2 } = this.opts;
    const [row] =
      announceAs === undefined
        ? await this.query<CheckRow>(CHECK, [key1, key2, this.token])
        : await this.query<CheckRow>(CHECK_ANNOUNCE, [
            key1,
            key2,
            this.token,
            channelFor(key1, key2),
            announceAs,
          ]);
    if (!row) return { ok: false, reason: 'health check returned no row' };
    if (!row.same) {
      await this.freeStranded(this.lockedPid);
      return {
        ok: false,
        reason: `the check ran on a backend without this session's marker: ${SHARED_BACKEND}`,
      };
    }
    if (this.lockedPid !== null && row.pid !== this.lockedPid) {
      await this.freeStranded(this.lockedPid);
      return {
        ok: false,
        reason: `backend pid changed from ${this.lockedPid} to ${row.pid} (a transaction-mode pooler?)`,
      };
    }
    if (!row.held) return { ok: false, reason: 'the advisory lock is no longer held by this session' };
    await this.verifyNotShared();
    return { ok: true };
  }

  /** Behind a pooler, while the lock is held: the probe must not reach our backend (pooler.ts); else free it and refuse. */
  private async verifyNotShared(): Promise<void> {
    if (!this.pooler) return;
    try {
      await this.pooler.verifyHolding();
    } catch (err) {
      await this.freeStranded(this.lockedPid);
      throw err;
    }
  }

  /**
   * This session proved not to be pinned to its backend (a pooler moved it) while the lock
   * may be held on backend `pid`: free it there (unlock if this statement lands on it, else
   * terminate that backend), so the key is not left held on a pooled backend. Best effort:
   * the role may lack the right to terminate (docs/safety.md).
   */
  private async freeStranded(pid: number | null): Promise<void> {
    if (pid === null) return;
    try {
      await this.query(FREE_STRANDED, [this.opts.key1, this.opts.key2, pid]);
    } catch {
      // reported by the caller's error; nothing more to do here
    }
  }

  /** Run one statement under the deadline; destroys the client if the deadline passes. */
  private async query<R extends pg.QueryResultRow>(
    text: string,
    values: unknown[] = [this.opts.key1, this.opts.key2],
    extraMs = 0,
  ): Promise<R[]> {
    if (this.deathCause) {
      throw new ConnectionError(`connection is closed: ${this.deathCause.message}`, {
        cause: this.deathCause,
      });
    }
    const { clock } = this.opts;
    const queryTimeoutMs = this.opts.queryTimeoutMs + extraMs;
    let timer: unknown;
    const timeout = new Promise<never>((_, reject) => {
      timer = clock.setTimeout(() => {
        const err = new ConnectionError(`query did not complete within ${queryTimeoutMs} ms`, {
          code: 'ERR_PGLEADERLOCK_QUERY_TIMEOUT',
        });
        this.destroy(err);
        reject(err);
      }, queryTimeoutMs);
    });
    try {
      const result = await Promise.race([this.client.query<R>(text, values), timeout]);
      return result.rows;
    } catch (err) {
      if (err instanceof ConnectionError) throw err;
      if (this.deathCause) {
        throw new ConnectionError(`connection lost: ${describe(err)}`, { cause: err });
      }
      throw new LockError(`query failed: ${describe(err)}`, { cause: err });
    } finally {
      clock.clearTimeout(timer);
    }
  }

  private attach(): void {
    const client = this.client;
    client.on('error', (err: Error) => this.die(err));
    client.on('end', () => this.die(new ConnectionError('connection ended')));
    const channel = channelFor(this.opts.key1, this.opts.key2);
    client.on('notification', (msg: { channel: string; payload?: string }) => {
      if (msg.channel === channel && msg.payload) this.announcementListener?.(msg.payload);
    });
    client.on('notice', (msg: { code?: string; message?: string }) => {
      if (msg.code && DYING_NOTICES.has(msg.code)) {
        const err = new ConnectionError(`server is shutting down (${msg.code}): ${msg.message ?? ''}`, {
          cause: msg,
        });
        this.destroy(err);
      }
    });
    // a client that died between connect() and now
    const internals = client as unknown as { _ending?: boolean; _queryable?: boolean };
    if (internals._ending || internals._queryable === false)
      this.die(new ConnectionError('connection ended'));
  }

  private die(err: unknown): void {
    if (this.deathCause) return; // one disconnect can emit 'error' twice, then 'end'
    this.deathCause = toError(err);
    for (const fn of this.deathListeners) fn(this.deathCause);
    this.deathListeners.clear();
  }

  /** Close at once: destroy the socket (the server releases the lock when it sees EOF). */
  destroy(reason: Error = new ConnectionError('session destroyed')): void {
    this.die(reason);
    this.pooler?.close();
    destroyClient(this.client);
  }

  /**
   * Close gracefully (Terminate message), but never wait longer than `closeTimeoutMs`:
   * on a blackholed socket `end()` waits for a FIN that never comes. Idempotent.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      this.die(new ConnectionError('session closed'));
      this.pooler?.close();
      const { clock, closeTimeoutMs } = this.opts;
      let timer: unknown;
      const timedOut = new Promise<boolean>((resolve) => {
        timer = clock.setTimeout(() => resolve(true), closeTimeoutMs);
      });
      const ended = this.client.end().then(
        () => false,
        () => false,
      );
      const late = await Promise.race([ended, timedOut]);
      clock.clearTimeout(timer);
      if (late) destroyClient(this.client);
    })();
    return this.closing;
  }
}

/** The candidate id in a `pgleaderlock:<id>` application_name, else null. */
export function idFromApplicationName(name: string | null): string | null {
  return name?.startsWith('pgleaderlock:') ? name.slice('pgleaderlock:'.length) : null;
}
