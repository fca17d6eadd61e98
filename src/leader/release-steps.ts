/**
 * The RELEASING phase's two steps (steps.ts gives every other phase's): wait for the
 * ended term's runs to settle, then send the `released` proof and unlock in one round trip,
 * and, for a handover, watch for the successor (succession.ts).
 */
import { untilWoken } from '../core/clock.js';
import { LockError, toError } from '../core/errors.js';
import type { ResolvedOptions } from '../core/lock-options.js';
import type { Runners } from '../core/runner.js';
import type { Term } from '../core/term.js';
import type { Input } from './fsm.js';
import type { MailView, PhaseOf } from './phase.js';
import type { StepContext } from './step-context.js';
import type { Succession } from './succession.js';

export class ReleaseSteps {
  constructor(
    private readonly o: ResolvedOptions,
    private readonly mail: MailView,
    private readonly runners: Runners<Term>,
    private readonly ctx: StepContext,
    private readonly succession: Succession,
  ) {}

  /** RELEASING, first step: the term has ended; wait for every run to settle before unlocking. */
  async drain(phase: PhaseOf<'releasing'>): Promise<Input> {
    for (;;) {
      const signal = this.ctx.arm();
      if (phase.session.dead) return { type: 'DbError', error: this.releaseError(phase, null) };
      if (!this.runners.busy) return { type: 'Drained' };
      const wake = untilWoken(signal);
      let timer: unknown = null;
      const interval = new Promise<'check'>((resolve) => {
        timer = this.o.clock.setTimeout(() => resolve('check'), this.o.healthIntervalMs);
      });
      const first = await Promise.race([this.runners.idle(), wake.promise, interval]);
      this.o.clock.clearTimeout(timer);
      wake.dispose();
      // work slow to stop: keep the session busy, or the server's idle_session_timeout
      // (serverReleaseMs) would end it, and the lock with it, before the unlock
      if (first === 'check') await phase.session.check().catch(() => {});
    }
  }

  /** RELEASING, second step: the `released` proof, then `pg_advisory_unlock` (one round trip). */
  async unlock(phase: PhaseOf<'releasing'>): Promise<Input> {
    const { session } = phase;
    if (session.dead) return { type: 'DbError', error: this.releaseError(phase, null) };
    try {
      const table = this.o.fencingTable;
      const fencing = table !== null && phase.epoch !== null ? { table, epoch: phase.epoch } : null;
      const h = phase.release.handover;
      // a handover: the lock goes to `to`; this leader takes it back if `to` is gone (when it queues again)
      const back = phase.after === 'follow' && this.o.autoReacquire ? this.o.id : null;
      const directive = h ? { to: h.to, back, timeoutMs: h.timeoutMs } : null;
      if (await session.release(fencing, directive)) {
        let handover: 'taken' | Error | null = null;
        let invite = false;
        if (h) {
          const seen = await this.succession.awaitSuccessor(session, h, () => {
            const signal = this.ctx.arm();
            return this.mail.stop ? null : signal;
          });
          handover = seen.outcome;
          // the successor's time is up: the waiters yield to `back` (this leader) now; poll
          // mode, nothing would prompt it before its back-off ends: invite it (phase.ts)
          invite = seen.timedOut && back !== null && this.o.acquireMode === 'poll';
        }
        // queuing again on this session: say so, with the priority (a successor with a lower
        // one hands back: docs/choosing-the-leader.md)
        if (phase.after === 'follow' && this.o.autoReacquire)
          session.channel.announceWaiting().catch(() => {});
        return { type: 'ReleaseSucceeded', handover, invite };
      }
      const error = new LockError('pg_advisory_unlock returned false: the lock was not held', {
        code: 'ERR_PGLEADERLOCK_RELEASE',
      });
      return { type: 'ReleaseFailed', error };
    } catch (err) {
      return { type: 'DbError', error: this.releaseError(phase, err) };
    }
  }

  /** Why a release failed: its deadline (a ShutdownError), else what the session or query said. */
  private releaseError(phase: PhaseOf<'releasing'>, err: unknown): Error {
    if (phase.release.expired) return phase.release.expired;
    const why = err
      ? `release failed: ${toError(err).message}`
      : 'cannot release: the lock connection is gone';
    return new LockError(why, { cause: err ?? phase.session.cause, code: 'ERR_PGLEADERLOCK_RELEASE' });
  }
}
