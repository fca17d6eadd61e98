/**
 * Handing leadership to a named candidate (docs/choosing-the-leader.md). PostgreSQL grants
 * an advisory lock to its waiters in queue order, so a leader cannot pick who is granted
 * next; instead its `released` event names the successor (a {@link Directive}), and every
 * other waiter granted the lock before the directive's deadline gives it back before its
 * term opens: it sends `released` with the same directive and unlocks (a yield), then
 * queues again. The named successor, granted in turn, sees a `released` event right before
 * its grant: the handover is proven clean, and its term opens with no takeover delay. The
 * leader that handed over watches until the successor holds the lock. A successor that is
 * gone (its session ended) stops nobody: the next waiter leads, under the usual proof. One
 * that is still there but has not taken the lock within the timeout: the leader that
 * handed over (named `back` in the directive, queued again) takes it back.
 */
import { sleep } from '../core/clock.js';
import { LockError } from '../core/errors.js';
import { MAX_HANDOVER_TIMEOUT_MS } from '../core/handover.js';
import type { ResolvedOptions } from '../core/lock-options.js';
import type { Handover } from './phase.js';
import type { Session } from './session.js';
import type { Acquired } from './session-types.js';

/** How often the leader that handed over asks whether its successor holds the lock. */
const POLL_MS = 2;

export function handoverError(message: string, cause?: unknown): LockError {
  return new LockError(message, { code: 'ERR_PGLEADERLOCK_HANDOVER', cause });
}

export class Succession {
  constructor(private readonly o: Pick<ResolvedOptions, 'id' | 'clock' | 'logger'>) {}

  /**
   * After a grant, before anything else: while a handover to another candidate is in
   * progress, give the lock back (true: it is free again, and this attempt is over). Yield
   * while the successor `to` has a session: until `until` to it; then, until `backUntil`,
   * to `back` (the leader that handed over) if it has one, which takes the lock itself
   * then. A successor that is gone stops nobody: the next waiter leads.
   */
  async yields(session: Session, acquired: Acquired): Promise<boolean> {
    const d = acquired.directive;
    const now = acquired.serverMs;
    if (d === null || d.to === this.o.id || now >= Math.max(d.until, d.backUntil)) return false;
    if (d.backUntil - now > 2 * MAX_HANDOVER_TIMEOUT_MS) return false; // forged: see MAX_HANDOVER_TIMEOUT_MS
    if (!(await session.channel.successor(d.to)).connected) return false;
    const toSuccessor = now < d.until;
    const toBack =
      !toSuccessor &&
      d.back !== null &&
      d.back !== this.o.id &&
      now < d.backUntil &&
      (await session.channel.successor(d.back)).connected;
    if (!toSuccessor && !toBack) return false;
    if (!(await session.release(null, d))) {
      throw new LockError('yielding a handover: pg_advisory_unlock returned false', {
        code: 'ERR_PGLEADERLOCK_RELEASE',
      });
    }
    this.o.logger.info({ event: 'handover_yielded', to: toSuccessor ? d.to : d.back }, 'handover_yielded');
    return true;
  }

  /**
   * After the unlock of a handover: ask every 2 ms whether the successor holds the lock,
   * until it does, or its `acquired` was heard since the release ('taken'), it has no
   * session any more, or `timeoutMs` has passed (an
   * error, `timedOut`: the waiters now yield to the leader named `back`). `stopped` ends the
   * wait early (an error: the outcome is not known); so does a failed query.
   */
  async awaitSuccessor(
    session: Session,
    h: Handover,
    stopped: () => AbortSignal | null,
  ): Promise<{ outcome: 'taken' | Error; timedOut: boolean }> {
    try {
      return await this.watchSuccessor(session, h, stopped);
    } catch (err) {
      return {
        outcome: handoverError(`handover: could not see whether "${h.to}" took the lock`, err),
        timedOut: false,
      };
    }
  }

  private async watchSuccessor(
    session: Session,
    h: Handover,
    stopped: () => AbortSignal | null,
  ): Promise<{ outcome: 'taken' | Error; timedOut: boolean }> {
    const { clock } = this.o;
    const until = clock.now() + h.timeoutMs;
    const failed = (message: string, timedOut = false) => ({ outcome: handoverError(message), timedOut });
    for (;;) {
      const s = await session.channel.successor(h.to);
      // holding now, or heard taking it since the release and still there (it may have handed
      // the lock on already, between two looks: to a candidate of a higher priority, this one
      // included). Heard taking it but gone: a backend whose client had died was granted the
      // lock (the server had not yet noticed: DEAD_CLIENT_CHECK_MS) and ended right after.
      if (s.holds) return { outcome: 'taken', timedOut: false };
      if (session.successorTook(h.to)) {
        if (s.connected) return { outcome: 'taken', timedOut: false };
        return failed(
          `handover: candidate "${h.to}" was granted the lock, but its session had ended by the first look (its process may have died)`,
        );
      }
      if (!s.connected) return failed(`handover: candidate "${h.to}" left before it took the lock`);
      if (clock.now() >= until) {
        return failed(`handover: candidate "${h.to}" did not take the lock within ${h.timeoutMs} ms`, true);
      }
      const signal = stopped();
      if (signal === null) {
        return failed(
          `handover: the lock shut down before "${h.to}" was seen holding the lock (the release named it)`,
        );
      }
      await sleep(clock, POLL_MS, signal);
    }
  }
}
