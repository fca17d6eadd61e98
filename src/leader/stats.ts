/** The counters behind `lock.stats()`. */
import type { LockState } from '../core/state.js';
import type { Term } from '../core/term.js';

/** A snapshot from `lock.stats()`. */
export interface LockStats {
  /** The lock's state (`lock.state`). */
  state: LockState;
  /** The current term, or null. */
  term: Term | null;
  /** Times leadership was acquired (recoveries from RECONNECTING not included). */
  acquisitions: number;
  /** Involuntary losses (onLost). */
  losses: number;
  /** Voluntary releases (onReleased). */
  releases: number;
  /** Attempts that found the lock held elsewhere (onAcquireFailed). */
  failedAttempts: number;
  /** Acquisitions that held the lock for the takeover delay (`takeoverDelayMs`) before their term opened. */
  takeoverFences: number;
  /** Times RECONNECTING was entered, and how many of those recovered leadership. */
  reconnects: number;
  /** Times RECONNECTING got the lock back (the term went on). */
  recoveries: number;
  /** Total milliseconds spent as LEADER, the current stretch included. */
  leaderMs: number;
  /** The last error reported to onError, or null. */
  lastError: Error | null;
}

export class Counters {
  acquisitions = 0;
  losses = 0;
  releases = 0;
  failedAttempts = 0;
  /** Reported as `stats().takeoverFences`. */
  takeoverDelays = 0;
  reconnects = 0;
  recoveries = 0;
  leaderMsClosed = 0;
  leaderSince: number | null = null;
  lastError: Error | null = null;

  /** A `stats()` snapshot: these counters, with the state and term, at clock time `now`. */
  snapshot(state: LockState, term: Term | null, now: number): LockStats {
    const since = this.leaderSince;
    return {
      state,
      term,
      acquisitions: this.acquisitions,
      losses: this.losses,
      releases: this.releases,
      failedAttempts: this.failedAttempts,
      takeoverFences: this.takeoverDelays,
      reconnects: this.reconnects,
      recoveries: this.recoveries,
      leaderMs: this.leaderMsClosed + (since === null ? 0 : now - since),
      lastError: this.lastError,
    };
  }
}
