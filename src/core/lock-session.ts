/**
 * A lock session, the same for every election that holds advisory locks (LeaderLock's
 * session, a partitions worker's member session): one {@link Connection}; its session
 * marker (statements.ts); its preparation (prepare.ts: a hot standby and a pooler that
 * shares backends refused, the settings that bound how long the server keeps a dead
 * client's locks, read back); the check that a statement ran on the session's own backend
 * with its marker; behind a pooler, the guard that no other connection reaches that
 * backend (pooler.ts); freeing what the session left on a backend it proved not to be
 * pinned to (statements.ts `FREE_STRANDED`); and its end. Each election adds only its own
 * statements and what it makes of their rows.
 */
import type { ConnectFn } from './connect.js';
import { Connection, type ConnectionOptions } from './connection.js';
import type { PgpoolFront } from './pgpool.js';
import { markerToken, type Prepared, type PrepareOptions, prepareSession } from './prepare.js';
import type { AppliedSettings } from './safety.js';
import { FREE_STRANDED } from './statements.js';

export interface LockSessionOptions extends ConnectionOptions {
  /**
   * The session's anchor key: the lock (LeaderLock), or the worker's member lock
   * (partitions). Freeing what the session left on a backend happens only while that
   * backend holds it.
   */
  readonly key1: number;
  readonly key2: number;
  /**
   * Freeing on the session's own backend releases every advisory lock there (a worker's
   * partitions too), not only the anchor key.
   */
  readonly freeAll: boolean;
  /** The source of the session marker token (null: crypto; a seeded source replays a run exactly). */
  readonly random?: (() => number) | null | undefined;
  /**
   * How the session marks its statements (LeaderLock: its priority and id, leader/sql.ts
   * `StatementTag`): given once here, for the free and for the preparation's pooler guard.
   */
  readonly tag?: ((sql: string) => string) | undefined;
  /** Told of each statement this module sends on the election's behalf (the free). */
  readonly onStatement?: (() => void) | undefined;
}

/** What the session's own preparation needs beyond the session's options (prepare.ts). */
export type LockSessionPrepare = Omit<PrepareOptions, 'token' | 'clock' | 'queryTimeoutMs' | 'tag'>;

/** What a statement that checks its backend reports: the backend that ran it, and whether it carries the session's marker. */
export interface BackendRow {
  readonly pid: number;
  readonly same: boolean;
}

export class LockSession {
  private marker: string | null = null;
  private prepared: Prepared | null = null;
  // why it gave up its locks (free), before its connection ends; and who to tell
  private given: Error | null = null;
  private readonly told = new Set<(err: Error) => void>();

  private constructor(
    /** The connection, for the election's own statements. */
    readonly conn: Connection,
    private readonly o: LockSessionOptions,
  ) {}

  /** Open the connection (bounded by `queryTimeoutMs` and `signal`); `prepare` comes next. */
  static async open(connect: ConnectFn, o: LockSessionOptions, signal?: AbortSignal): Promise<LockSession> {
    return new LockSession(await Connection.open(connect, o, signal), o);
  }

  /**
   * The session marker (16 hex digits), drawn on first use: each election draws it where it
   * always has, so that a seeded `random` replays a run exactly.
   */
  get token(): string {
    this.marker ??= markerToken(this.o.random);
    return this.marker;
  }

  /** Mark the session, refuse what is unsafe, apply and read back the settings (prepare.ts). */
  async prepare(p: LockSessionPrepare): Promise<Prepared> {
    this.prepared = await prepareSession(this.conn, {
      ...p,
      ...(this.o.tag ? { tag: this.o.tag } : {}),
      token: this.token,
      clock: this.o.clock,
      queryTimeoutMs: this.o.queryTimeoutMs,
    });
    return this.prepared;
  }

  /** The session's own backend pid (`pg_backend_pid()` once prepared; 0 before). */
  get pid(): number {
    return this.prepared?.pid ?? 0;
  }

  /** The settings the server applied at preparation (null before). */
  get settings(): AppliedSettings | null {
    return this.prepared?.settings ?? null;
  }

  /** The pgpool-II in the path, if preparation recognised one (pgpool.ts). */
  get pgpool(): PgpoolFront | null {
    return this.prepared?.pgpool ?? null;
  }

  /**
   * A statement's row shows it ran with this session's marker, on backend `pid` (the
   * session's own by default; null: any backend that carries the marker).
   */
  ranHere(row: BackendRow | undefined, pid: number | null = this.pid): boolean {
    return row?.same === true && (pid === null || row.pid === pid);
  }

  /**
   * This session proved (or could not prove) not to be pinned to its backend while it may
   * hold locks on backend `pid`: it ends for its election first (`onDeath`, as a lost
   * connection), then frees them there (statements.ts `FREE_STRANDED`). Best effort (the
   * role may lack the right to terminate); the caller reports `why` and closes.
   */
  async free(why: Error, pid: number | null = this.pid): Promise<void> {
    this.giveUp(why);
    if (pid === null) return;
    const sql = this.o.tag ? this.o.tag(FREE_STRANDED) : FREE_STRANDED;
    this.o.onStatement?.();
    try {
      await this.conn.query(sql, [this.o.key1, this.o.key2, pid, this.o.freeAll]);
    } catch {
      // reported by the caller's error; nothing more to do here
    }
  }

  /**
   * Behind a pooler, while locks are held: the probe must not reach this session's backend
   * (pooler.ts `verifyHolding`). If it does, free what the session holds on backend `pid`
   * and throw the guard's error.
   */
  async guardPooler(pid: number | null = this.pid): Promise<void> {
    const pooler = this.prepared?.pooler;
    if (!pooler) return;
    try {
      await pooler.verifyHolding();
    } catch (err) {
      await this.free(err as Error, pid);
      throw err;
    }
  }

  get dead(): boolean {
    return this.given !== null || this.conn.dead;
  }

  /** Why the session ended, once it has. */
  get cause(): Error | null {
    return this.given ?? this.conn.cause;
  }

  /** Call `fn` once when the session ends (its connection's death, or `free`). Returns an unsubscribe. */
  onDeath(fn: (err: Error) => void): () => void {
    const ended = this.cause;
    if (ended) {
      fn(ended);
      return () => {};
    }
    const once = (err: Error): void => {
      if (this.told.delete(once)) fn(err); // else told already
    };
    this.told.add(once);
    const off = this.conn.onDeath(once);
    return () => {
      off();
      this.told.delete(once);
    };
  }

  private giveUp(why: Error): void {
    if (this.dead) return;
    this.given = why;
    for (const fn of [...this.told]) fn(why);
  }

  /** Close at once: the server frees the session's locks when it sees EOF. */
  destroy(reason?: Error): void {
    this.prepared?.pooler?.close();
    this.conn.destroy(reason);
  }

  /** Close gracefully within `closeTimeoutMs`: the server frees whatever is still held. */
  close(): Promise<void> {
    this.prepared?.pooler?.close();
    return this.conn.close();
  }
}
