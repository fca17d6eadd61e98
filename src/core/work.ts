/** `runWhileLeader`'s function, and the error of a run that failed. */
import { PgLeaderLockError } from './errors.js';
import type { Term } from './term.js';

export type { LeaderWorkHandle } from './runner.js';

/**
 * Leader-only work for `runWhileLeader`: runs once per term, and should return soon after
 * `term.signal` aborts.
 */
export type LeaderWork = (term: Term) => void | Promise<void>;

/** A run that threw or rejected (other than by its term's abort). Goes to onError. */
export class LeaderWorkError extends PgLeaderLockError {
  override name = 'LeaderWorkError';
  /** The id of the term whose run failed. */
  readonly termId: number;
  constructor(termId: number, cause: unknown) {
    super(`leader work failed in term ${termId}: ${cause instanceof Error ? cause.message : String(cause)}`, {
      cause,
      code: 'ERR_PGLEADERLOCK_RUN',
    });
    this.termId = termId;
  }
}
