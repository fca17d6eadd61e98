/**
 * The ring watch: each worker queues, on a session of its own, for the member lock of the
 * member after it (ids sorted, wrapping). The server grants that lock the moment the
 * member's session ends (a crash, SIGKILL, `pg_terminate_backend`, a server-side timeout of a
 * frozen worker), so the death is known within milliseconds, with no time-to-live to wait
 * out. The watcher frees the lock again at once and reports the death; the worker then
 * tells everyone (NOTIFY). The wait is in slices (`lock_timeout`): about one statement per
 * slice, and a new target is taken up by cancelling the wait. The session is a
 * {@link Connection} prepared as every session is (prepare.ts); its cancels go through the
 * Connection too (`sendCancel`), never the pg client itself.
 */
import { type Clock, sleep } from '../core/clock.js';
import type { ConnectFn } from '../core/connect.js';
import { Connection } from '../core/connection.js';
import { sqlStateOf } from '../core/errors.js';
import { markerToken, prepareSession } from '../core/prepare.js';
import { RetryCycle, type RetryStrategy } from '../core/retry.js';
import { inline } from '../core/statements.js';

export interface WatchOptions {
  /** Opens the watch's session; `signal` (the watch's close) abandons an attempt under way. */
  connect: (signal: AbortSignal) => ReturnType<ConnectFn>;
  /** Key1 of the member locks. */
  membersKey: number;
  appName: string;
  sliceMs: number;
  clock: Clock;
  queryTimeoutMs: number;
  closeTimeoutMs: number;
  unref: boolean;
  serverReleaseMs: number;
  /** The member in `slot` has gone. */
  onDeath: (slot: number) => void;
  onError: (error: Error) => void;
  /** Counts statements (stats). */
  onStatement: () => void;
  /** The source of the session marker token (null: crypto). */
  random?: (() => number) | null;
  /**
   * Paces the watch's reconnects after a failure (the worker's `retryStrategy`); the
   * failures counted from the last session that opened.
   */
  retryStrategy: RetryStrategy;
  /** The strategy gave up on the watch's session (the watch has stopped). */
  onGiveUp: (error: Error) => void;
}

/** How often a cancel meant for a stale wait is sent again until the wait has ended. */
const RECANCEL_MS = 50;

export class RingWatch {
  private target: number | null = null;
  private conn: Connection | null = null;
  /** The slot the running wait statement queues for (null: no wait running). */
  private waiting: number | null = null;
  private stopped = false;
  /** Aborted by close(): a connection under way is abandoned at once. */
  private readonly closing = new AbortController();
  private readonly wakeUp = new AbortController();
  private changed: (() => void) | null = null;
  private recancel: unknown = null;
  /** A session closed on purpose: its wait outlived `closeTimeoutMs` of cancels (retarget). */
  private retired: Connection | null = null;
  private readonly done: Promise<void>;
  private readonly retry: RetryCycle;
  /** Why the watch's session failed, until a statement on a new one succeeds (`health()`). */
  down: Error | null = null;

  constructor(private readonly o: WatchOptions) {
    this.retry = new RetryCycle(o.retryStrategy, () => o.clock.now());
    this.done = this.loop();
  }

  /** Watch `slot` (the successor), or nobody (alone). Cancels a wait on another slot. */
  watch(slot: number | null): void {
    if (this.target === slot) return;
    this.target = slot;
    this.changed?.();
    this.retarget();
  }

  /** Cancel a wait on a slot that is no longer the target (see {@link endWait}). */
  private retarget(): void {
    const conn = this.conn;
    if (!conn || this.waiting === null || this.waiting === this.target || this.recancel !== null) return;
    void this.endWait(conn, () => this.waiting !== this.target);
  }

  /**
   * End the wait running on `conn` while `wanted()`: a cancel now and again every 50 ms
   * until the wait has ended (a cancel that reaches the server before the statement does
   * is lost), for `closeTimeoutMs` at most; then, on a path that drops cancel requests
   * (some proxies), the session is closed (retired: the loop opens a new one at once).
   * Resolves once the wait ended, failed on its own (its error reaches the loop), or the
   * session was closed.
   */
  private endWait(conn: Connection, wanted: () => boolean): Promise<void> {
    const { clock, closeTimeoutMs } = this.o;
    const until = clock.now() + closeTimeoutMs;
    return new Promise((resolve) => {
      const again = (): void => {
        this.recancel = null;
        if (this.conn !== conn || conn.dead || this.waiting === null || !wanted()) {
          resolve();
          return;
        }
        if (clock.now() >= until) {
          this.retired = conn;
          conn.destroy();
          resolve();
          return;
        }
        void conn.sendCancel(closeTimeoutMs);
        this.recancel = clock.setTimeout(again, RECANCEL_MS);
      };
      again();
    });
  }

  /**
   * Stop, leaving nothing queued on the server: a running wait is cancelled and awaited
   * (if the cancel gets no answer within `closeTimeoutMs`, the socket is destroyed), then
   * the session is closed.
   */
  async close(): Promise<void> {
    this.stopped = true;
    this.closing.abort();
    this.wakeUp.abort();
    this.stopRecancel();
    this.changed?.();
    const conn = this.conn;
    if (conn && this.waiting !== null) {
      // done as soon as the loop has ended: no pause between cancels left behind
      await Promise.race([this.endWait(conn, () => true), this.done]);
      this.stopRecancel();
    }
    await conn?.close();
    await this.done;
    await this.conn?.close(); // opened while closing
  }

  private stopRecancel(): void {
    if (this.recancel !== null) this.o.clock.clearTimeout(this.recancel);
    this.recancel = null;
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      const target = this.target;
      if (target === null) {
        await new Promise<void>((resolve) => {
          this.changed = resolve;
        });
        this.changed = null;
        continue;
      }
      try {
        const conn = await this.session();
        if (this.stopped) break;
        if (this.target !== target) continue; // retargeted while connecting
        this.waiting = target;
        this.o.onStatement();
        try {
          // simple protocol: behind pgpool-II, see statements.ts `inline`
          await conn.simple(
            inline('/* pgleaderlock:watch */ SELECT pg_advisory_lock($1::int4, $2::int4)', [
              this.o.membersKey,
              target,
            ]),
            this.o.sliceMs, // the slice (lock_timeout) ends it first
          );
        } finally {
          this.waiting = null;
        }
        // granted: the member's session has ended. Free its slot again at once (again if a
        // late cancel meant for the wait cancels the unlock)
        for (let freed = false; !freed; ) {
          this.o.onStatement();
          freed = await conn
            .query('/* pgleaderlock:watch */ SELECT pg_advisory_unlock($1, $2)', [this.o.membersKey, target])
            .then(
              () => true,
              (err: unknown) => {
                if (sqlStateOf(err) === '57014' && !conn.dead) return false;
                throw err;
              },
            );
        }
        if (this.target === target) this.target = null;
        this.o.onDeath(target);
      } catch (err) {
        const state = sqlStateOf(err);
        if (this.stopped) break;
        if (this.conn !== null && this.conn === this.retired) {
          // closed here for a retarget: no failure to report, and no back-off before the
          // new session
          this.conn = null;
          this.retired = null;
          continue;
        }
        if ((state === '55P03' || state === '57014') && !this.conn?.dead) {
          // slice over, or cancelled to retarget; but a grant that raced the timeout or the
          // cancel leaves the slot held here: that is a death too (and the slot is freed)
          if (await this.lateGrant(target)) {
            if (this.target === target) this.target = null;
            this.o.onDeath(target);
          }
          continue;
        }
        this.conn?.destroy();
        this.conn = null;
        this.down = err as Error;
        this.o.onError(err as Error);
        this.retry.lastError = err as Error;
        const next = this.retry.next();
        if ('giveUp' in next) {
          this.stopped = true;
          this.o.onGiveUp(next.giveUp);
          break;
        }
        await sleep(this.o.clock, next.delayMs, this.wakeUp.signal);
      }
    }
  }

  /** After a wait ended without a grant: was `slot` granted anyway? Frees it if so. */
  private async lateGrant(slot: number): Promise<boolean> {
    const conn = this.conn;
    if (!conn || conn.dead) return false;
    this.o.onStatement();
    try {
      const [row] = await conn.query<{ freed: boolean }>(
        `/* pgleaderlock:watch */ SELECT pg_advisory_unlock($1, $2) AS freed FROM pg_locks
          WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted AND objsubid = 2
            AND classid = $1::int4::oid AND objid = $2::int4::oid`,
        [this.o.membersKey, slot],
      );
      return row?.freed === true;
    } catch {
      return false; // the loop's next statement finds out what is wrong with the session
    }
  }

  private async session(): Promise<Connection> {
    if (this.conn && !this.conn.dead) return this.conn;
    const { signal } = this.closing;
    const conn = await Connection.open(() => this.o.connect(signal), this.o, signal);
    try {
      await prepareSession(conn, {
        token: markerToken(this.o.random),
        applicationName: this.o.appName,
        clock: this.o.clock,
        queryTimeoutMs: this.o.queryTimeoutMs,
        serverReleaseMs: this.o.serverReleaseMs,
        probe: null, // the member session, on the same path, was probed
        // idle_session_timeout (PG14+), as on the member session: a wait granted after its
        // client vanished unheard (a blackholed connection behind a pooler, whose backend
        // keepalive and tcp_user_timeout never see it) would hold the dead member's slot
        // until the pooler noticed, and a worker restarting with that id could not join
        extra: (version) => [
          ['lock_timeout', String(Math.ceil(this.o.sliceMs))],
          ...(version >= 140000
            ? [['idle_session_timeout', String(Math.ceil(this.o.serverReleaseMs))] as [string, string]]
            : []),
        ],
      });
    } catch (err) {
      conn.destroy();
      throw err;
    }
    this.o.onStatement();
    this.conn = conn;
    this.down = null;
    this.retry.reset();
    if (this.stopped) await conn.close();
    return conn;
  }
}
