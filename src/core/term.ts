/**
 * Leadership terms. A term opens each time the lock becomes leader (also when a recovered
 * leadership returns from RECONNECTING, and when a lapsed lease is renewed) and ends the
 * moment leadership ends, whatever the cause; its `signal` aborts then, synchronously,
 * before any callback runs. Terms are opened and ended only by `Leadership`.
 */
import { PgLeaderLockError } from './errors.js';

/** One period of leadership. */
export interface Term {
  /** 1, 2, 3, … within this LeaderLock. */
  readonly id: number;
  /** Wall-clock time the term opened. */
  readonly acquiredAt: Date;
  /** Aborts when the term ends (loss, release, step-down, shutdown, entering RECONNECTING, a lapsed lease). */
  readonly signal: AbortSignal;
  /** Fencing epoch, when fencing is on; otherwise null. */
  readonly epoch: bigint | null;
  /**
   * The server the lock is held on: `host:port` as configured (a socket directory for a
   * Unix socket), or `connect()` when a `connect` hook opens the connection.
   */
  readonly host: string;
}

/** Why a term ended: the reason its signal aborts with. */
export class TermEndedError extends PgLeaderLockError {
  override name = 'TermEndedError';
  /** The id of the term that ended ({@link Term.id}). */
  readonly termId: number;
  constructor(termId: number, why: string) {
    super(`leadership term ${termId} ended: ${why}`, { code: 'ERR_PGLEADERLOCK_TERM_ENDED' });
    this.termId = termId;
  }
}
