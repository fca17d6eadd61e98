/**
 * Each phase's work (phase.ts): what the lifecycle does while in that state, returning
 * the input that ends it (RELEASING's two steps are in release-steps.ts). A step never
 * writes its phase or the request box: what changes its own phase's data (the session
 * ACQUIRING and RECONNECTING open or close, the takeover delay, takeover.ts) is an input
 * too, handed to the loop with `advance()` (fsm.ts, the rows that keep the state); the step
 * goes on with the phase that follows. Requests from outside are read from the mailbox;
 * `arm()` gives a signal that aborts on the next wake-up (a request, a dead session, a
 * lapsed lease).
 */
import { sleep, sleepInSteps, untilWoken } from '../core/clock.js';
import { endsTheRun, isPathRefusal, LockError, toError } from '../core/errors.js';
import type { ResolvedOptions } from '../core/lock-options.js';
import { NoPrimaryError } from '../core/primary.js';
import type { RetryCycle } from '../core/retry.js';
import type { Runners } from '../core/runner.js';
import type { Term } from '../core/term.js';
import { MAX_TIMER_MS } from '../core/validate.js';
import { type Input, STOP } from './fsm.js';
import { INVITE_RETRY_MS, type MailView, type Phase, type PhaseOf } from './phase.js';
import { ReleaseSteps } from './release-steps.js';
import type { Session } from './session.js';
import type { Acquired } from './session-types.js';
import type { StepContext } from './step-context.js';
import { Succession } from './succession.js';
import { Takeover } from './takeover.js';

type Attempt = PhaseOf<'acquiring'> | PhaseOf<'reconnecting'>;

/** A short wait before asking again whether our own previous backend has let go (RECONNECTING). */
const OWN_BACKEND_POLL_MS = 20;

export class Steps {
  private readonly takeover: Takeover;
  private readonly succession: Succession;
  private readonly releasing: ReleaseSteps;
  /** A session of this run connected: a refusal at connect after that is retried (`endsTheRun`). */
  private connected = false;
  /**
   * An acquisition attempt of this run (a Lifecycle and its Steps per `start()`) ran to the
   * end on the session's own backend. Until then a refusal of the path itself
   * (`isPathRefusal`) met by an attempt ends the run as one at connect does: the pooler's
   * probe at connect can pass (it handed the probe a backend of its own) and the session's
   * first acquisition then be refused.
   */
  private served = false;

  constructor(
    private readonly o: ResolvedOptions,
    private readonly mail: MailView,
    private readonly retry: RetryCycle,
    runners: Runners<Term>,
    private readonly ctx: StepContext,
  ) {
    this.takeover = new Takeover(o, mail, ctx);
    this.succession = new Succession(o);
    this.releasing = new ReleaseSteps(o, mail, runners, ctx, this.succession);
  }

  step(phase: Phase): Promise<Input> {
    switch (phase.kind) {
      case 'follower':
        return this.follow(phase);
      case 'acquiring':
        return this.acquire(phase);
      case 'leader':
        return this.lead(phase);
      case 'reconnecting':
        return this.reconnect(phase);
      case 'releasing':
        return phase.step === 'draining' ? this.releasing.drain(phase) : this.releasing.unlock(phase);
      case 'stopped':
        return Promise.resolve(STOP);
    }
  }

  /** FOLLOWER: wait until the next attempt is due; only a stop cuts a back-off short. */
  private async follow(phase: PhaseOf<'follower'>): Promise<Input> {
    if (this.mail.stop) return STOP;
    if (phase.next === 'now') return { type: 'AcquireAttempt' };
    if (phase.next === 'primary') return this.awaitPrimary(phase);
    if (phase.next === 'backoff' && this.o.clock.now() < this.mail.invitedUntil) {
      // named as successor a moment ago, and the attempt found the lock still held (its
      // `released` event came before the unlock): again shortly, the strategy untouched
      const signal = this.ctx.arm();
      if (this.mail.stop) return STOP;
      if (!this.mail.invited) await sleep(this.o.clock, INVITE_RETRY_MS, signal);
      if (this.mail.stop) return STOP;
      return { type: 'AcquireAttempt', invitation: true };
    }
    const next = this.retry.next();
    if ('giveUp' in next) return { type: 'RetryExhausted', error: next.giveUp };
    if (phase.next === 'requeue') return { type: 'AcquireAttempt' }; // the server-side wait was the delay
    const until = this.o.clock.now() + next.delayMs;
    for (;;) {
      const signal = this.ctx.arm();
      if (this.mail.stop) return STOP;
      const left = until - this.o.clock.now();
      // a handover names this candidate (poll mode: it heard the `released` event): at once
      if (left <= 0 || this.mail.invited) return { type: 'AcquireAttempt', invitation: true };
      await sleep(this.o.clock, Math.min(left, MAX_TIMER_MS), signal);
    }
  }

  /**
   * FOLLOWER after a survey found no primary, only standbys: survey again after the retry
   * strategy's delay (a primary that restarts, a host that comes back, a strategy that
   * gives up), or as soon as one of the standbys, asked every 100 ms on the connections the
   * survey left open (core/standby-watch.ts), says it was promoted: a promotion is not paced by the
   * back-off that paces real errors. Leaving FOLLOWER closes those connections (fsm-actions.ts).
   */
  private async awaitPrimary(phase: PhaseOf<'follower'>): Promise<Input> {
    const next = this.retry.next();
    if ('giveUp' in next) return { type: 'RetryExhausted', error: next.giveUp };
    const signal = this.ctx.arm();
    if (this.mail.stop) return STOP;
    const done = new AbortController();
    const onWake = (): void => {
      if (this.mail.stop) done.abort();
    };
    signal.addEventListener('abort', onWake);
    const delay = sleepInSteps(this.o.clock, next.delayMs, done.signal).then(() => done.abort());
    try {
      // true at a promotion; false when `done` aborts (the delay ran out, a stop) or once
      // every standby connection failed (then the delay runs out first)
      const promoted = phase.standbys ? await phase.standbys.promoted(done.signal) : false;
      if (!promoted && !done.signal.aborted) await delay;
      return this.mail.stop ? STOP : { type: 'AcquireAttempt' };
    } finally {
      done.abort();
      signal.removeEventListener('abort', onWake);
    }
  }

  /** Drop a dead session. */
  private async dropDead<P extends Attempt>(phase: P): Promise<P> {
    return phase.session?.dead ? this.ctx.advance(phase, { type: 'SessionClosed' }) : phase;
  }

  /**
   * Open a session for `phase` if it has none; a stop cuts the wait short (a session that
   * opens later is closed). Returns STOP if a stop came first; throws what connecting threw.
   */
  private async ensureSession<P extends Attempt>(phase: P): Promise<P | Input> {
    if (phase.session) return phase;
    const abandon = new AbortController();
    const opening = this.ctx.open(abandon.signal);
    for (;;) {
      const wake = untilWoken(this.ctx.arm());
      if (this.mail.stop) {
        wake.dispose();
        // a connection under way is closed now, not at its connect timeout; one that
        // opened anyway (a `connect` hook cannot be abandoned) is closed when it does (and
        // the standbys a survey kept open)
        abandon.abort();
        opening.then(
          (late) => late.close(),
          (err: unknown) => {
            if (err instanceof NoPrimaryError) err.standbys.close();
          },
        );
        return STOP;
      }
      try {
        const session = await Promise.race([opening, wake.promise]);
        if (session) {
          this.connected = true;
          const opened = await this.ctx.advance(phase, { type: 'Connected', session });
          return this.mail.stop ? STOP : opened;
        }
      } finally {
        wake.dispose();
      }
    }
  }

  /**
   * ACQUIRING: connect if needed, then one attempt: a `pg_try_advisory_lock` (poll mode) or
   * one server-side wait of at most a slice followed by an ownership check (wait mode),
   * then what follows a grant (takeover.ts).
   */
  private async acquire(entered: PhaseOf<'acquiring'>): Promise<Input> {
    let phase = await this.dropDead(entered);
    try {
      const ready = await this.ensureSession(phase);
      if ('type' in ready) return ready;
      phase = ready;
    } catch (err) {
      if (err instanceof NoPrimaryError) {
        this.retry.lastError = err;
        if (!this.mail.stop) return { type: 'NoPrimary', error: err };
        err.standbys.close();
        return STOP;
      }
      const error = toError(err);
      this.retry.lastError = error;
      if (this.mail.stop) return STOP;
      return endsTheRun(error, this.connected)
        ? { type: 'Refused', error }
        : { type: 'ConnectFailed', error };
    }
    const session = phase.session as Session;
    let acquired: Acquired | null;
    try {
      acquired = this.o.acquireMode === 'wait' ? await this.waitOnce(session) : await session.tryLock();
    } catch (err) {
      const error = toError(err);
      this.retry.lastError = error;
      return this.mail.stop ? STOP : this.attemptFailed(error);
    }
    // a lock granted to a session about to be closed is released by the close
    if (this.mail.stop) return STOP;
    if (!acquired) {
      this.retry.lastError = null;
      this.served = true;
      return { type: 'AcquireFailed' };
    }
    try {
      // a handover to another candidate is in progress: give the lock back, queue again
      if (await this.succession.yields(session, acquired)) {
        this.served = true;
        return { type: 'AcquireFailed' };
      }
    } catch (err) {
      const error = toError(err);
      this.retry.lastError = error;
      return this.mail.stop ? STOP : this.attemptFailed(error);
    }
    const grant = await this.takeover.complete(session, acquired, async (delay) => {
      phase = await this.ctx.advance(phase, { type: 'TakeoverDelayed', delay });
    });
    if ('type' in grant) {
      // refusals after the grant (its settings, a newer primary, the probe after the grant or
      // a check in the takeover delay) are retried: the term may have been fenced already
      if (grant.type === 'DbError') this.retry.lastError = grant.error;
      if (grant.type !== 'ConnectFailed') return grant;
      // an old primary still up: leave it
      await this.ctx.advance(phase, { type: 'SessionClosed' });
      return this.mail.stop ? STOP : grant;
    }
    this.retry.lastError = null;
    this.served = true;
    return { type: 'AcquireSucceeded', grant };
  }

  /** An attempt's failure: a refusal of the path before the run's first attempt served ends the run. */
  private attemptFailed(error: Error): Input {
    return endsTheRun(error, this.served) && isPathRefusal(error)
      ? { type: 'Refused', error }
      : { type: 'DbError', error };
  }

  /**
   * Wait mode: one server-side wait; a stop sends a CancelRequest so the backend leaves the
   * queue within milliseconds. The grant may come at any point of a long wait, and this
   * process may freeze before reading it: the lease counts from the grant itself, timed by
   * the server (the wait's send time plus how long the server saw it wait), so a grant
   * read after its lease ran out opens no term until a check proves ownership again.
   */
  private async waitOnce(session: Session): Promise<Acquired | null> {
    const signal = this.ctx.arm();
    if (this.mail.stop) return null;
    const onWake = (): void => {
      if (this.mail.stop) void session.cancel();
    };
    signal.addEventListener('abort', onWake, { once: true });
    let acquired: Awaited<ReturnType<Session['waitLock']>>;
    try {
      acquired = await session.waitLock();
    } finally {
      signal.removeEventListener('abort', onWake);
    }
    return this.mail.stop ? null : acquired;
  }

  /** LEADER: an ownership check every `healthIntervalMs` (at once while the term is suspended). */
  private async lead(phase: PhaseOf<'leader'>): Promise<Input> {
    const { session, leadership } = phase;
    for (;;) {
      const signal = this.ctx.arm();
      if (this.mail.stop) return STOP;
      if (this.mail.stepDown) return { type: 'ReleaseRequested' };
      if (phase.promotion) return { type: 'HealthFailed', error: phase.promotion };
      if (session.dead) {
        const error = new LockError('lock connection lost', {
          cause: session.cause,
          code: 'ERR_PGLEADERLOCK_LOST',
        });
        return { type: 'HealthFailed', error };
      }
      const delay = leadership.term ? this.o.healthIntervalMs : 0; // at once while the term is suspended
      if (delay > 0 && !(await sleep(this.o.clock, delay, signal))) continue; // woken: the top of the loop says why
      const sentAt = this.o.clock.now();
      let result: Awaited<ReturnType<Session['check']>>;
      try {
        result = await session.check();
      } catch (err) {
        return { type: 'DbError', error: toError(err) };
      }
      if (!result.ok) {
        return {
          type: 'HealthFailed',
          error: new LockError(result.reason, { code: 'ERR_PGLEADERLOCK_LOST' }),
        };
      }
      // a promotion seen while the check ran: its term must not reopen on this server
      if (phase.promotion) return { type: 'HealthFailed', error: phase.promotion };
      // the answer came with the session's death (a FATAL in the same packet: pg emits the
      // 'error' before this continues): the death ended the term; the top of the loop reports it
      if (session.dead) continue;
      leadership.renew(sentAt, result.safety);
    }
  }

  /**
   * RECONNECTING: reconnect and re-acquire (try-lock) within `reconnectGraceMs`; the lock
   * is not held meanwhile. Finding it held by another session ends the grace period at
   * once, unless the holder is our own previous backend, whose close may not have reached
   * the server yet.
   */
  private async reconnect(entered: PhaseOf<'reconnecting'>): Promise<Input> {
    const { clock } = this.o;
    let phase = entered;
    let lastError: Error | null = null;
    this.retry.goingAtOnce(); // the loss's first reconnect is the one below
    for (;;) {
      if (this.mail.stop) return STOP;
      const remaining = phase.deadline - clock.now();
      if (remaining <= 0) return { type: 'GraceExpired', error: lastError };
      let delay: number | null;
      phase = await this.dropDead(phase);
      try {
        const ready = await this.ensureSession(phase);
        if ('type' in ready) return ready;
        phase = ready;
        const session = phase.session as Session;
        const acquired = await session.tryLock();
        if (this.mail.stop) return STOP;
        if (acquired && (await this.succession.yields(session, acquired))) {
          const error = new LockError('a handover to another candidate is in progress', {
            code: 'ERR_PGLEADERLOCK_LOST',
          });
          return { type: 'ReacquireFailed', error };
        }
        if (acquired) {
          const grant = await this.takeover.complete(session, acquired, async (delay) => {
            phase = await this.ctx.advance(phase, { type: 'TakeoverDelayed', delay });
          });
          if (!('type' in grant)) return { type: 'ReacquireSucceeded', grant };
          if (grant.type === 'StopRequested') return grant;
          // a failed attempt within the grace period: below
          throw 'error' in grant && grant.error
            ? grant.error
            : new LockError(`re-acquisition failed (${grant.type})`);
        }
        if ((await session.holderPid()) !== phase.previousPid) {
          const error = new LockError('the lock is held by another session', {
            code: 'ERR_PGLEADERLOCK_LOST',
          });
          return { type: 'ReacquireFailed', error };
        }
        delay = OWN_BACKEND_POLL_MS;
      } catch (err) {
        if (err instanceof NoPrimaryError) err.standbys.close();
        lastError = toError(err);
        this.retry.lastError = lastError;
        if (phase.session) phase = await this.ctx.advance(phase, { type: 'SessionClosed' });
        const next = this.retry.next();
        delay = 'giveUp' in next ? null : next.delayMs;
        if (delay === null) return { type: 'GraceExpired', error: lastError };
      }
      await sleep(clock, Math.min(delay, Math.max(0, phase.deadline - clock.now())), this.ctx.arm());
    }
  }
}
