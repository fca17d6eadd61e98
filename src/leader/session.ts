/**
 * The lock's session: the core lock session (core/lock-session.ts: the connection, its
 * marker and preparation, the backend checks, the pooler guard, freeing what was left on
 * another backend) and what LeaderLock runs on it (sql.ts): the acquisition (try or wait),
 * the ownership check, the fencing epoch, the release with its handover, the key's channel
 * (key-channel.ts), and who holds the lock now.
 */
import { type ConnectFn, parseSettingMs } from '../core/connect.js';
import type { EndpointConnect } from '../core/endpoints.js';
import { ConnectionError, LockError, sqlStateOf } from '../core/errors.js';
import { bumpSql, ensureFencingTable } from '../core/fencing.js';
import {
  type Directive,
  HandoverLog,
  type NewHandover,
  payload,
  type SessionIdentity,
} from '../core/handover.js';
import { idOfSession } from '../core/identity.js';
import { channelFor } from '../core/keys.js';
import { LockSession } from '../core/lock-session.js';
import type { PgpoolFront } from '../core/pgpool.js';
import { SHARED_BACKEND } from '../core/pooler.js';
import { unsafe } from '../core/prepare.js';
import { type AppliedSettings, type Safety, safetyFor } from '../core/safety.js';
import { inline, type Literal } from '../core/statements.js';
import { MAX_TIMER_MS } from '../core/validate.js';
import { KeyChannel } from './key-channel.js';
import type {
  Acquired,
  AcquireRow,
  CheckResult,
  CheckRow,
  Epoch,
  HolderRow,
  SessionOptions,
  SessionPlace,
} from './session-types.js';
import * as SQL from './sql.js';

export class Session {
  /** The session marker (statements.ts): proves each statement runs on this session's own backend. */
  private readonly token: string;
  /** Backend pid once the lock was granted. */
  private lockedPid: number | null = null;
  private settings: AppliedSettings | null = null;
  private safety: Safety | null = null;
  private fencingReady = false;
  /** The id of the lock's holder when this session connected (null if none, or not one of ours). */
  holderAtConnect: string | null = null;
  /** The backend pid of the lock's holder when this session connected (null if none). */
  private holderPidAtConnect: number | null = null;
  /** The events seen on the key's channel, for the proof of a clean handover. */
  private readonly handover: HandoverLog;
  /** The key's channel: events heard and sent, and the candidates it concerns (key-channel.ts). */
  readonly channel: KeyChannel;

  /**
   * Wait mode: this session's slice, `waitSliceMs` ± 10 %: followers started together must
   * not re-queue (and, 1 s later, all run PostgreSQL's deadlock check) in step every slice.
   */
  private readonly slice: number | null;

  private constructor(
    private readonly lock: LockSession,
    private readonly o: SessionOptions,
    /** Which host this session is on, its timeline, and what the other hosts said. */
    readonly place: SessionPlace,
    /** Every statement of the session carries it (sql.ts `StatementTag`): `inspect` reads the priority and id from whatever ran last. */
    private readonly tag: SQL.StatementTag,
  ) {
    // a seeded `random` (tests) replays a run exactly; by default the token is crypto's
    const random = o.random;
    this.token = lock.token;
    this.handover = new HandoverLog(this.token, () => this.holderPidAtConnect);
    this.channel = new KeyChannel(lock.conn, o, this.token, this.handover, tag.apply);
    const w = o.waitSliceMs;
    const jitter = (random ?? Math.random)();
    this.slice = w === null ? null : Math.min(MAX_TIMER_MS, Math.round(w * (0.9 + jitter * 0.2)));
  }

  /**
   * Open and prepare a session on `where` (the surveyed primary, primary.ts): `first` is the
   * client the survey connected, `connect` opens more on that host (the pooler probe).
   */
  static async open(
    first: ConnectFn,
    connect: EndpointConnect,
    o: SessionOptions,
    where: SessionPlace = { host: 'connect()', timeline: 1, others: [] },
    /**
     * Proof of drain: this candidate's earlier session, lost uncleanly, whose runs have
     * returned. Announced as the first statement, before the session is prepared: the next
     * holder's takeover delay ends a few round trips sooner.
     */
    drained: SessionIdentity | null = null,
    /** A shutdown: abandons the set-up's pooler probe. */
    signal?: AbortSignal,
  ): Promise<Session> {
    const tag = new SQL.StatementTag(o.priority, o.id);
    const lock = await LockSession.open(first, { ...o, freeAll: false, tag: tag.apply });
    const session = new Session(lock, o, where, tag);
    try {
      if (drained) await session.channel.announceDrained(drained);
      await session.prepare(connect, signal);
    } catch (err) {
      session.destroy();
      throw err;
    }
    return session;
  }

  /** How other sessions know this one: its marker token and backend pid. */
  get identity(): SessionIdentity {
    return { session: this.token, pid: this.lock.pid };
  }

  /** Under the takeover delay: the holder before this session's grant announced its runs drained. */
  previousDrained(): boolean {
    return this.handover.previousDrained();
  }

  /** The proof of drain that ends the takeover delay, if any (handover.ts `drainOf`), for the log. */
  drainProof(): ReturnType<HandoverLog['drainOf']> {
    return this.handover.drainOf();
  }

  /** After a handover's release: `id` was heard taking the lock since (handover.ts `tookOver`). */
  successorTook(id: string): boolean {
    return this.handover.tookOver(id);
  }

  /** Backend pid of this session (`pg_backend_pid()` at connect). */
  get pid(): number {
    return this.lock.pid;
  }

  /** The pgpool-II in the path, if prepare recognised one (pgpool.ts). */
  get pgpool(): PgpoolFront | null {
    return this.lock.pgpool;
  }

  get dead(): boolean {
    return this.lock.dead;
  }

  get cause(): Error | null {
    return this.lock.cause;
  }

  /** The server's version number (server_version_num), once prepared. */
  get serverVersion(): number {
    return this.settings?.serverVersion ?? 0;
  }

  onDeath(fn: (err: Error) => void): () => void {
    return this.lock.onDeath(fn);
  }

  private async prepare(connect: EndpointConnect, signal: AbortSignal | undefined): Promise<void> {
    const slice = this.slice;
    const prepared = await this.lock.prepare({
      applicationName: this.o.applicationName,
      serverReleaseMs: this.o.serverReleaseMs,
      probe: { connect, key1: this.o.key1, key2: this.o.key2 },
      signal,
      extra: () => (slice === null ? [] : [['lock_timeout', String(Math.ceil(slice))]]),
    });
    this.settings = { ...prepared.settings, idleSessionTimeoutMs: null }; // armed once leader
    // hear of each new leader (NOTIFY) whenever this session is idle, and who leads now (read
    // after the LISTEN took effect, in the same round trip: key-channel.ts `listen`)
    const [holder] = await this.channel.listen<HolderRow>(
      this.tag.apply(inline(SQL.CURRENT_HOLDER, this.keys())),
    );
    this.holderAtConnect = idOfSession(holder?.application_name ?? null, holder?.query ?? null);
    this.holderPidAtConnect = holder?.pid ?? null;
  }

  private keys(): [number, number] {
    return [this.o.key1, this.o.key2];
  }

  /** Poll mode: one `pg_try_advisory_lock`. Null when the lock is held elsewhere. */
  async tryLock(): Promise<Acquired | null> {
    const sentAt = this.o.clock.now();
    const [row] = await this.lock.conn.query<AcquireRow>(this.tag.apply(SQL.TRY_LOCK), this.acquireParams());
    return this.acquired(row, sentAt);
  }

  /**
   * Wait mode: queue server-side in `pg_advisory_lock` for one slice (lock_timeout). Null
   * when the slice ended with the lock still held elsewhere. The deadline is the slice
   * plus `queryTimeoutMs`; `cancel()` ends the wait early (an error).
   */
  async waitLock(): Promise<Acquired | null> {
    const slice = this.slice;
    if (slice === null) throw new ConnectionError('session not prepared for waiting');
    let sentAt = this.o.clock.now();
    let rows: AcquireRow[];
    try {
      // simple protocol: behind pgpool-II, see statements.ts `inline`
      rows = await this.lock.conn.simple<AcquireRow>(
        this.tag.apply(inline(SQL.WAIT_LOCK, this.acquireParams())),
        slice,
      );
    } catch (err) {
      if (this.lock.dead || sqlStateOf(err) !== SQL.SLICE_ENDED) throw err;
      // the slice ended; but a grant that raced the timeout leaves the lock held anyway
      sentAt = this.o.clock.now();
      rows = await this.lock.conn.query<AcquireRow>(this.tag.apply(SQL.LATE_GRANT), this.acquireParams());
    }
    return this.acquired(rows[0], sentAt);
  }

  /** Keys, marker, and the idle_session_timeout to arm with the grant (PG14+). */
  private acquireParams(): Literal[] {
    const version = this.settings?.serverVersion ?? 0;
    const arm = version >= 140000 ? String(Math.ceil(this.o.serverReleaseMs)) : null;
    const acquired = payload('acquired', this.o.id, this.token, this.o.priority, this.lock.pid);
    return [this.o.key1, this.o.key2, this.token, arm, acquired, channelFor(this.o.key1, this.o.key2)];
  }

  /** Read an acquisition row: refuse a shared or moved backend; on a grant, compute the lease figures. */
  private async acquired(row: AcquireRow | undefined, sentAt: number): Promise<Acquired | null> {
    if (!row) throw new LockError('the acquisition returned no row');
    if (!row.same) {
      throw unsafe(
        `this session's statement ran on a backend without its marker (backend pid ${row.pid}): ${SHARED_BACKEND}`,
      );
    }
    if (row.held_before) {
      throw unsafe(
        `the lock was already held by this session's backend (pid ${row.pid}) before it asked: another client shares the backend; ${SHARED_BACKEND}`,
      );
    }
    if (!row.ok) return null;
    if (row.twice !== true) {
      // a re-entrant lock on a held key cannot fail: the release's guard would be wrong
      const err = new LockError('the grant did not take the key a second time', {
        code: 'ERR_PGLEADERLOCK_UNSAFE',
      });
      await this.lock.free(err, row.pid);
      throw err;
    }
    if (row.pid !== this.lock.pid) {
      const err = unsafe(
        `the backend pid changed from ${this.lock.pid} to ${row.pid} between statements: ${SHARED_BACKEND}`,
      );
      await this.lock.free(err, row.pid);
      throw err;
    }
    this.lockedPid = row.pid;
    await this.lock.guardPooler(this.lockedPid);
    const settings = this.settings as AppliedSettings;
    const armed = settings.serverVersion >= 140000;
    const applied = { ...settings, idleSessionTimeoutMs: armed ? parseSettingMs(row.idle) : null };
    this.safety = safetyFor(applied, this.o.healthIntervalMs, this.o.queryTimeoutMs);
    const proof = this.handover.takeProof();
    return {
      safety: this.safety,
      provenAt: sentAt + Math.max(0, row.waited_ms ?? 0),
      cleanHandover: proof.clean,
      directive: proof.directive,
      serverMs: row.server_ms ?? 0,
    };
  }

  /**
   * End the running statement (a wait) within milliseconds: a CancelRequest, or if it
   * cannot be sent, destroying the socket (the server then drops the waiter within
   * client_connection_check_interval).
   */
  cancel(): Promise<void> {
    return this.lock.conn.cancel();
  }

  /** Fencing: while holding the lock, increment this key's epoch in `table` (created on first use). */
  async bumpEpoch(table: string, leaderId: string): Promise<Epoch> {
    if (!this.fencingReady) {
      await ensureFencingTable(this.lock.conn, table, this.o.queryTimeoutMs, this.tag.apply);
      this.fencingReady = true;
    }
    const [row] = await this.lock.conn.query<{ epoch: string; prev_released: boolean | null }>(
      this.tag.apply(bumpSql(table)),
      [...this.keys(), leaderId, this.place.timeline],
    );
    if (!row) throw new LockError('the fencing epoch was not returned');
    return { epoch: BigInt(row.epoch), previousReleased: row.prev_released };
  }

  /**
   * A clean release: mark the fencing epoch released and send the `released` event, then
   * unlock, in one round trip (sql.ts `SQL.releaseSql`). True if the lock was held and is now
   * released.
   */
  async release(
    fencing: { table: string; epoch: bigint } | null,
    /** A handover: a new directive (its deadline set by the server), or one forwarded by a yield. */
    handover: NewHandover | Directive | null = null,
  ): Promise<boolean> {
    const sql = SQL.releaseSql({
      key1: this.o.key1,
      key2: this.o.key2,
      id: this.o.id,
      token: this.token,
      channel: channelFor(this.o.key1, this.o.key2),
      handover,
      fencing,
      disarm: this.serverVersion >= 140000,
    });
    const [row] = await this.lock.conn.simple<{ ok: boolean; same: boolean }>(this.tag.apply(sql));
    if (row && !row.same) {
      const err = unsafe(`cannot release on a backend without this session's marker: ${SHARED_BACKEND}`);
      await this.lock.free(err, this.lockedPid);
      throw err;
    }
    if (row?.ok) this.lockedPid = null;
    return row?.ok === true;
  }

  /**
   * Ownership check: the session answers, is the same backend, still holds the lock, and
   * (behind a pooler) the probe does not reach it. `pending`: the lock is held under a
   * takeover delay (the statement is SQL.tagged so that `inspect` can tell).
   */
  async check(pending = false): Promise<CheckResult> {
    const text = this.tag.apply(pending ? SQL.CHECK_PENDING : SQL.CHECK);
    const [row] = await this.lock.conn.query<CheckRow>(text, [...this.keys(), this.token]);
    if (!row) return { ok: false, reason: 'the ownership check returned no row' };
    if (!this.lock.ranHere(row, this.lockedPid)) {
      const reason = `the check ran on another backend (pid ${row.pid}): ${SHARED_BACKEND}`;
      await this.lock.free(new LockError(reason, { code: 'ERR_PGLEADERLOCK_LOST' }), this.lockedPid);
      return { ok: false, reason };
    }
    if (!row.held) return { ok: false, reason: 'the advisory lock is no longer held by this session' };
    if (row.recovery) {
      return {
        ok: false,
        reason: `the server (${this.place.host}) is in recovery now: it is no longer the primary`,
      };
    }
    // the pooler guard's check after a check under the takeover delay is marked pending too
    this.tag.pending = pending;
    await this.lock.guardPooler(this.lockedPid).finally(() => {
      this.tag.pending = false;
    });
    if (!this.safety) return { ok: false, reason: 'the session has not acquired the lock' };
    return { ok: true, safety: this.safety };
  }

  /** The backend pid holding the lock now, or null if nobody does. */
  async holderPid(): Promise<number | null> {
    return (await this.holder())?.pid ?? null;
  }

  /** Who holds the lock now, if anybody. */
  private async holder(): Promise<HolderRow | undefined> {
    const [row] = await this.lock.conn.query<HolderRow>(this.tag.apply(SQL.CURRENT_HOLDER), this.keys());
    return row;
  }

  /** Close at once: the server releases the lock when it sees EOF. */
  destroy(reason?: Error): void {
    this.lock.destroy(reason);
  }

  /** Close gracefully within `closeTimeoutMs`. Idempotent. */
  close(): Promise<void> {
    return this.lock.close();
  }
}
