/**
 * The lifecycle task (spec §5.1): one async loop per `start()` that owns the session, the
 * state, the retry timer and the health loop. Each state has a step that does that
 * state's work and returns the next input; `transition()` (fsm.ts) turns it into the next
 * state and the effects, which the loop then carries out. Outside calls (`shutdown`,
 * `stepDown`) only set a flag and wake the loop; they never touch the session.
 */
import type { Callbacks } from './callbacks.js';
import { type Deferred, deferred, sleep } from './clock.js';
import { ConnectionError, LockError, PgLeaderLockError, toError } from './errors.js';
import { type Effect, type Input, transition } from './fsm.js';
import { Lease } from './lease.js';
import {
  type AcquiredMessage,
  type Counters,
  type ErrorMessage,
  type LostMessage,
  publish,
} from './observe.js';
import type { ResolvedOptions } from './options.js';
import { RetryCycle } from './retry.js';
import type { Safety } from './safety.js';
import { Session } from './session.js';
import { LockState } from './state.js';
import type { Terms } from './term.js';

const { STOPPED, FOLLOWER, ACQUIRING, LEADER, RECONNECTING, RELEASING } = LockState;

/** Told about every state change, before the change's effects run. */
export type TransitionListener = (from: LockState, to: LockState, input: Input) => void;

export class Lifecycle {
  private current: LockState = STOPPED;
  private session: Session | null = null;
  private stopRequested = false;
  private stepDownRequested = false;
  private releaseForStepDown = false;
  private interrupt = new AbortController();
  private nextAttempt: 'attemptNow' | 'backOff' = 'attemptNow';
  /** Error behind the input being applied (for onError). */
  private inputError: Error | null = null;
  private readonly retry: RetryCycle;
  private releaseWaiters: Deferred<void>[] = [];
  private readonly lease: Lease;
  private lastLeaderSeen: string | null = null;
  /** The next health check must also announce this leader (NOTIFY). */
  private announcePending = false;
  /** The grant was announced already, by the check that verified it (wait mode). */
  private announced = false;
  /** Check without waiting a health interval (the lease lapsed). */
  private checkSoon = false;
  /** The fencing epoch of the current leadership (kept when a term reopens after a lapse). */
  private leaderEpoch: bigint | null = null;
  /** Epoch for the term about to open (fencing). */
  private pendingEpoch: bigint | null = null;
  private running: Promise<void> | null = null;

  constructor(
    private readonly o: ResolvedOptions,
    private readonly callbacks: Callbacks,
    private readonly onTransition: TransitionListener,
    private readonly terms: Terms,
    private readonly counters: Counters,
  ) {
    this.retry = new RetryCycle(o.retryStrategy, () => o.clock.now());
    this.lease = new Lease(o.clock, () => this.leaseLapsed());
  }

  get state(): LockState {
    return this.current;
  }

  /** LEADER and within the lease. Read from the clock at each call, so a process that was frozen sees false on waking. */
  get isLeader(): boolean {
    return this.current === LEADER && this.lease.valid();
  }

  /** When the current lease ends, on the lock's clock; null if never acquired. */
  get leaseExpiresAt(): number | null {
    return this.lease.expiresAt;
  }

  /** Safety figures of the session that last acquired the lock. */
  get safety(): Safety | null {
    return this.lease.safety;
  }

  /** Renew the lease from a successful check or acquisition sent at `sentAt`. */
  private renew(session: Session, sentAt: number): void {
    if (session.safety) this.lease.renew(session.safety, sentAt);
  }

  /**
   * The lease ran out with no check to renew it (a blocked event loop, a slow network):
   * end the term now so leader work stops, and check at once. If the check proves the lock
   * is still held, a new term opens (same fencing epoch: the lock was never lost).
   */
  private leaseLapsed(): void {
    if (this.current !== LEADER) return;
    this.terms.end('lease expired before a check renewed it (leader work is suspended)');
    this.checkSoon = true;
    this.wake();
  }

  /** Run the loop until STOPPED. Returns the loop's promise (never rejects). */
  run(): Promise<void> {
    this.running ??= this.loop();
    return this.running;
  }

  /** StopRequested: the loop leaves at its next step (releasing first if leader). */
  requestStop(): void {
    this.stopRequested = true;
    this.releaseForStepDown = false;
    this.wake();
  }

  /** ReleaseRequested: resolves when the release is over (at once when not leader). */
  requestStepDown(): Promise<void> {
    if (this.current !== LEADER && this.current !== RELEASING) return Promise.resolve();
    const d = deferred<void>();
    this.releaseWaiters.push(d);
    if (this.current === LEADER) {
      this.stepDownRequested = true;
      this.wake();
    }
    return d.promise;
  }

  /** Close the session by force (destroy the socket): the server releases the lock on EOF. */
  forceClose(reason: string): void {
    this.session?.destroy(new ConnectionError(reason));
    this.wake();
  }

  private wake(): void {
    this.interrupt.abort();
  }

  /** A signal that the next wake() aborts. Check the flags after calling this, then wait on it. */
  private arm(): AbortSignal {
    if (this.interrupt.signal.aborted) this.interrupt = new AbortController();
    return this.interrupt.signal;
  }

  private async loop(): Promise<void> {
    try {
      await this.apply('Start');
      while (this.current !== STOPPED) {
        const input = await this.step();
        await this.apply(input);
      }
    } catch (err) {
      // a bug, not a database condition: never leave a session or a half state behind
      this.o.logger.error({ event: 'lifecycle_failed', error: String(err) }, 'lifecycle_failed');
      this.callbacks.emit('error', toError(err));
      const from = this.current;
      this.current = STOPPED;
      if (from !== STOPPED) this.onTransition(from, STOPPED, 'StopRequested');
    } finally {
      this.lease.cancel();
      const s = this.session;
      this.session = null;
      if (s) await s.close();
      this.settleReleaseWaiters();
    }
  }

  private step(): Promise<Input> {
    switch (this.current) {
      case FOLLOWER:
        return this.follow();
      case ACQUIRING:
        return this.acquire();
      case LEADER:
        return this.lead();
      case RECONNECTING:
        return this.reconnect();
      case RELEASING:
        return this.release();
      case STOPPED:
        return Promise.resolve('StopRequested');
    }
  }

  /** FOLLOWER: wait until the next attempt is due. */
  private async follow(): Promise<Input> {
    const signal = this.arm();
    if (this.stopRequested) return 'StopRequested';
    if (this.nextAttempt === 'attemptNow') return 'AcquireAttempt';
    const delay = this.nextDelay();
    if (delay === null) return 'RetryExhausted';
    const until = this.o.clock.now() + delay;
    // only a stop cuts the back-off short (a follower's idle session dying does not)
    for (let s = signal; ; s = this.arm()) {
      if (this.stopRequested) return 'StopRequested';
      const left = until - this.o.clock.now();
      if (left <= 0) return 'AcquireAttempt';
      await sleep(this.o.clock, left, s);
    }
  }

  /**
   * ACQUIRING: connect if needed, then one attempt: a `pg_try_advisory_lock` (poll mode) or
   * one server-side wait of at most a slice followed by an ownership check (wait mode).
   */
  private async acquire(): Promise<Input> {
    if (!this.session || this.session.dead) {
      await this.closeSession();
      try {
        this.session = await this.open();
      } catch (err) {
        this.fail(err);
        return this.stopRequested ? 'StopRequested' : 'ConnectFailed';
      }
    }
    if (this.stopRequested) return 'StopRequested';
    let ok: boolean;
    const sentAt = this.o.clock.now();
    try {
      if (this.o.acquireMode === 'wait') {
        ok = await this.waitForLock(this.session);
        // The grant may have come at any point of a long wait, and this process may have
        // been frozen before reading it: verify ownership with a check and count the lease
        // from when that check was sent (never later than the server's last activity).
        if (ok && !this.stopRequested) {
          const checkedAt = this.o.clock.now();
          const result = await this.session.check(this.o.id); // verifies the grant and announces it
          if (!result.ok) throw new LockError(result.reason, { code: 'ERR_PGLEADERLOCK_LOST' });
          this.announced = true;
          this.renew(this.session, checkedAt);
        }
      } else {
        // the lease counts from when the try-lock was sent: never later than the server's
        // last activity on the session, even if this process froze before reading the reply
        ok = await this.session.tryLock();
        if (ok) this.renew(this.session, sentAt);
      }
    } catch (err) {
      this.fail(err);
      return this.stopRequested ? 'StopRequested' : 'DbError';
    }
    // a lock granted to a session about to be closed is released by the close
    if (this.stopRequested) return 'StopRequested';
    if (ok) {
      try {
        await this.bumpEpoch(this.session);
      } catch (err) {
        this.fail(err);
        return this.stopRequested ? 'StopRequested' : 'DbError';
      }
    }
    this.retry.lastError = null;
    return ok ? 'AcquireSucceeded' : 'AcquireFailed';
  }

  /**
   * One server-side wait (wait mode). A stop sends a CancelRequest so the backend leaves the
   * lock queue within milliseconds; a lock granted meanwhile is freed when the session closes.
   */
  private async waitForLock(session: Session): Promise<boolean> {
    const signal = this.arm();
    const onWake = (): void => {
      if (this.stopRequested) void session.cancel();
    };
    if (this.stopRequested) return false;
    signal.addEventListener('abort', onWake, { once: true });
    try {
      return await session.waitLock();
    } finally {
      signal.removeEventListener('abort', onWake);
    }
  }

  /** LEADER: health checks every `healthIntervalMs`; wakes at once on stop, step-down or a dead session. */
  private async lead(): Promise<Input> {
    for (;;) {
      const signal = this.arm();
      if (this.stopRequested) return 'StopRequested';
      if (this.stepDownRequested) {
        this.stepDownRequested = false;
        this.releaseForStepDown = true;
        return 'ReleaseRequested';
      }
      const session = this.session;
      if (!session || session.dead) {
        this.fail(
          new LockError('lock connection lost', { cause: session?.cause, code: 'ERR_PGLEADERLOCK_LOST' }),
        );
        return 'HealthFailed';
      }
      const delay = this.checkSoon ? 0 : this.o.healthIntervalMs;
      this.checkSoon = false;
      const elapsed = await sleep(this.o.clock, delay, signal);
      if (!elapsed) continue; // woken: the top of the loop says why
      let result: Awaited<ReturnType<Session['check']>>;
      const sentAt = this.o.clock.now();
      try {
        // the first check of a term also announces this leader (onNewLeader elsewhere)
        result = await session.check(this.announcePending ? this.o.id : undefined);
        this.announcePending = false;
      } catch (err) {
        this.fail(err);
        return 'DbError';
      }
      if (!result.ok) {
        this.fail(new LockError(result.reason, { code: 'ERR_PGLEADERLOCK_LOST' }));
        return 'HealthFailed';
      }
      this.renew(session, sentAt);
      // the lease had lapsed, but the lock is still ours: leadership resumes in a new term
      if (!this.terms.current) this.terms.open(this.leaderEpoch);
    }
  }

  /** RECONNECTING: reconnect and re-acquire within `reconnectGraceMs`; the lock is not held meanwhile. */
  private async reconnect(): Promise<Input> {
    const { clock } = this.o;
    const deadline = clock.now() + (this.o.reconnectGraceMs ?? 0);
    for (;;) {
      const signal = this.arm();
      if (this.stopRequested) return 'StopRequested';
      const remaining = deadline - clock.now();
      if (remaining <= 0) return 'GraceExpired';
      try {
        if (!this.session || this.session.dead) {
          await this.closeSession();
          this.session = await this.open();
        }
        const sentAt = clock.now();
        const ok = await this.session.tryLock();
        if (this.stopRequested) return 'StopRequested';
        if (ok) {
          this.renew(this.session, sentAt);
          await this.bumpEpoch(this.session);
          return 'ReacquireSucceeded';
        }
        this.inputError = new LockError('the lock is held by another session', {
          code: 'ERR_PGLEADERLOCK_LOST',
        });
        return 'ReacquireFailed';
      } catch (err) {
        this.fail(err);
        await this.closeSession();
        const delay = this.nextDelay();
        if (delay === null) return 'GraceExpired';
        await sleep(clock, Math.min(delay, Math.max(0, deadline - clock.now())), signal);
      }
    }
  }

  /** RELEASING: one `pg_advisory_unlock`. */
  private async release(): Promise<Input> {
    const session = this.session;
    if (!session || session.dead) {
      this.fail(
        new LockError('cannot release: the lock connection is gone', {
          cause: session?.cause,
          code: 'ERR_PGLEADERLOCK_RELEASE',
        }),
      );
      return 'DbError';
    }
    try {
      if (await session.unlock()) return 'ReleaseSucceeded';
      this.fail(
        new LockError('pg_advisory_unlock returned false: the lock was not held', {
          code: 'ERR_PGLEADERLOCK_RELEASE',
        }),
      );
      return 'ReleaseFailed';
    } catch (err) {
      this.fail(
        new LockError(`release failed: ${toError(err).message}`, {
          cause: err,
          code: 'ERR_PGLEADERLOCK_RELEASE',
        }),
      );
      return 'DbError';
    }
  }

  /** Apply the table's transition for `input`, then carry out its effects in order. */
  private async apply(input: Input): Promise<void> {
    const from = this.current;
    const t = transition(from, input, {
      autoReacquire: this.o.autoReacquire,
      graceEnabled: this.o.reconnectGraceMs !== null,
      releaseForStepDown: this.releaseForStepDown,
      waitMode: this.o.acquireMode === 'wait',
    });
    const error = this.inputError;
    this.inputError = null;
    if (!t) return;
    this.current = t.to;
    if (t.to !== LEADER) this.stepDownRequested = false;
    if (from !== t.to) this.onLeadershipEdge(from, t.to, input);
    if (from !== t.to) this.onTransition(from, t.to, input);
    for (const effect of t.effects) await this.perform(effect, error);
    if ((from === LEADER && t.to !== RELEASING && t.to !== LEADER) || from === RELEASING) {
      this.releaseForStepDown = false;
      this.settleReleaseWaiters();
    }
  }

  /** Terms and leader time: a term ends the moment LEADER is left, and opens on entering it. */
  private onLeadershipEdge(from: LockState, to: LockState, input: Input): void {
    const c = this.counters;
    const now = this.o.clock.now();
    if (from === LEADER) {
      this.lease.cancel();
      if (c.leaderSince !== null) c.leaderMsClosed += now - c.leaderSince;
      c.leaderSince = null;
      this.terms.end(termEndReason(input, to));
    }
    if (to === RECONNECTING) c.reconnects += 1;
    if (to === LEADER) {
      c.leaderSince = now;
      if (from === RECONNECTING) c.recoveries += 1;
      this.leaderEpoch = this.pendingEpoch;
      this.terms.open(this.pendingEpoch);
      this.announcePending = !this.announced;
      this.announced = false;
      this.lastLeaderSeen = this.o.id;
      this.pendingEpoch = null;
    }
  }

  private async perform(effect: Effect, error: Error | null): Promise<void> {
    const { logger, key1, key2 } = this.o;
    switch (effect) {
      case 'closeConnection':
        return this.closeSession();
      case 'emitAcquired': {
        const term = this.terms.current;
        logger.info(
          { event: 'lock_acquired', key1, key2, attempt: this.retry.attempt + 1, term: term?.id },
          'lock_acquired',
        );
        this.counters.acquisitions += 1;
        if (!term) return;
        publish('acquired', { id: this.o.id, key1, key2, term } as AcquiredMessage);
        return this.callbacks.emit('acquired', term);
      }
      case 'emitAcquireFailed':
        this.counters.failedAttempts += 1;
        return this.callbacks.emit('acquireFailed');
      case 'emitLost':
        logger.warn({ event: 'lock_lost', key1, key2, error: error?.message }, 'lock_lost');
        this.counters.losses += 1;
        publish('lost', { id: this.o.id, key1, key2, error } as LostMessage);
        return this.callbacks.emit('lost');
      case 'emitReleased':
        logger.info({ event: 'lock_released', key1, key2 }, 'lock_released');
        this.counters.releases += 1;
        publish('released', { id: this.o.id, key1, key2 });
        return this.callbacks.emit('released');
      case 'emitStopped':
        return this.callbacks.emit('stopped');
      case 'emitError': {
        const err = error ?? new PgLeaderLockError('unknown error');
        const code = (err as { code?: unknown }).code;
        logger.error({ event: 'error', key1, key2, code, error: err.message }, 'error');
        this.counters.lastError = err;
        publish('error', { id: this.o.id, key1, key2, error: err } as ErrorMessage);
        return this.callbacks.emit('error', err);
      }
      case 'resetRetry':
        this.retry.reset();
        return;
      case 'attemptNow':
      case 'backOff':
        this.nextAttempt = effect;
        return;
      case 'warn':
        logger.warn(
          { event: 'health_check_failed', key1, key2, error: error?.message },
          'health_check_failed',
        );
        return;
      case 'notice':
        logger.info({ event: 'leadership_recovered', key1, key2 }, 'leadership_recovered');
        return;
    }
  }

  /** Fencing: the next term's epoch, bumped while holding the lock, before the term opens. */
  private async bumpEpoch(session: Session): Promise<void> {
    this.pendingEpoch = this.o.fencingTable ? await session.bumpEpoch(this.o.fencingTable, this.o.id) : null;
  }

  /** onNewLeader: another candidate leads; reported once per change. */
  private leaderSeen(id: string): void {
    if (id === this.lastLeaderSeen) return;
    this.lastLeaderSeen = id;
    if (id !== this.o.id) this.callbacks.emit('newLeader', id);
  }

  /** Ask the retry strategy for the next delay; null (or a bad answer) gives up. */
  private nextDelay(): number | null {
    const next = this.retry.next();
    if ('giveUp' in next) {
      this.inputError = next.giveUp;
      return null;
    }
    return next.delayMs;
  }

  private fail(err: unknown): void {
    const e = toError(err);
    this.inputError = e;
    this.retry.lastError = e;
  }

  private async open(): Promise<Session> {
    const session = await Session.open(this.o.connect, {
      key1: this.o.key1,
      key2: this.o.key2,
      applicationName: this.o.applicationName,
      clock: this.o.clock,
      queryTimeoutMs: this.o.queryTimeoutMs,
      closeTimeoutMs: this.o.closeTimeoutMs,
      serverReleaseMs: this.o.serverReleaseMs,
      healthIntervalMs: this.o.healthIntervalMs,
      // ±10 % per session: followers started together must not re-queue (and, 1 s later, all
      // run PostgreSQL's deadlock check) in step every slice
      waitSliceMs:
        this.o.waitSliceMs === null ? null : Math.round(this.o.waitSliceMs * (0.9 + Math.random() * 0.2)),
    });
    session.onDeath(() => this.wake());
    if (session.holderAtConnect) this.leaderSeen(session.holderAtConnect);
    session.onAnnouncement((id) => this.leaderSeen(id));
    return session;
  }

  private async closeSession(): Promise<void> {
    const s = this.session;
    this.session = null;
    if (s) await s.close();
  }

  private settleReleaseWaiters(): void {
    const waiters = this.releaseWaiters;
    this.releaseWaiters = [];
    for (const w of waiters) w.resolve();
  }
}

/** Words for why a term ended, from the input that ended it. */
function termEndReason(input: Input, to: LockState): string {
  if (input === 'StopRequested') return 'shutdown';
  if (input === 'ReleaseRequested') return 'step-down';
  if (to === RECONNECTING) return 'connection lost; reconnecting (leader work is suspended)';
  return 'leadership lost';
}
