/**
 * The lifecycle task (spec §5.1): one async loop per `start()` that owns the phase (the
 * state and its data, phase.ts), the sessions, the retry cycle and the leadership. Each
 * phase has a step (steps.ts) that does that state's work and returns the next input;
 * `transition()` (fsm.ts) turns it into the next state and its effects, which `apply`
 * carries out in order. Outside calls (`stop`, `stepDown`) only leave a request in the
 * mailbox and wake the loop; they never touch a session. The loop never rejects: an
 * internal failure ends leadership, closes the session and stops (onError, onStopped).
 */
import type pg from 'pg';
import type { Callbacks } from './callbacks.js';
import { deferred } from './clock.js';
import type { ConnectFn } from './connect.js';
import { PgLeaderLockError, ShutdownError, toError } from './errors.js';
import { type Effect, type Input, transition } from './fsm.js';
import { Vitals } from './health.js';
import { type Grant, Leadership, type TermIds } from './leadership.js';
import type { Counters } from './observe.js';
import type { ResolvedOptions } from './options.js';
import { PEER_BOUND_MS, PeerWatch } from './peers.js';
import { Mailbox, type Phase, type Release } from './phase.js';
import { findPrimary } from './primary.js';
import { Reporter } from './report.js';
import { RetryCycle } from './retry.js';
import type { Runners } from './runner.js';
import type { Safety } from './safety.js';
import { Session } from './session.js';
import { LockState, type SpecState } from './state.js';
import { Steps } from './steps.js';
import type { Term } from './term.js';

/** Told about every state change, before the change's effects run. */
export type TransitionListener = (from: SpecState, to: SpecState, input: Input['type']) => void;

/** What the lifecycle reports to the lock that runs it. */
export interface LifecycleHooks {
  changed: TransitionListener;
  /** A term opened (first of a leadership, or reopened after a lapse). */
  termOpened(term: Term): void;
  /** The lease was renewed. */
  renewed(): void;
}

export class Lifecycle {
  private phase: Phase = { kind: 'stopped' };
  private readonly mail = new Mailbox();
  private interrupt = new AbortController();
  private readonly retry: RetryCycle;
  private readonly steps: Steps;
  private readonly report: Reporter;
  private lastLeaderSeen: string | null = null;
  /** The figures and lease end of the last leadership, once it is over. */
  private lastSafety: Safety | null = null;
  private lastLeaseEnd: number | null = null;
  private running: Promise<void> | null = null;
  /** The loop's pulse, for `lock.health()`. */
  readonly vitals: Vitals;

  constructor(
    private readonly o: ResolvedOptions,
    private readonly callbacks: Callbacks,
    private readonly hooks: LifecycleHooks,
    runners: Runners,
    private readonly termIds: TermIds,
    private readonly counters: Counters,
  ) {
    this.retry = new RetryCycle(o.retryStrategy, () => o.clock.now());
    this.vitals = new Vitals(o.clock);
    this.report = new Reporter(o, callbacks, counters);
    this.steps = new Steps(o, this.mail, this.retry, runners, {
      arm: () => this.arm(),
      open: () => this.open(),
      fenced: (fence) => this.report.fenced(fence.delayMs),
    });
  }

  /** The phase's state; `pending` while an attempt holds the lock under a takeover fence. */
  get state(): LockState {
    const p = this.phase;
    if ((p.kind === 'acquiring' || p.kind === 'reconnecting') && p.fence) return LockState.PENDING;
    return p.kind;
  }

  /** LEADER with an open term, a live session and a current lease (read from the clock at each call). */
  get isLeader(): boolean {
    const p = this.phase;
    return p.kind === 'leader' && p.leadership.valid && !p.session.dead;
  }

  get term(): Term | null {
    return this.phase.kind === 'leader' ? this.phase.leadership.term : null;
  }

  /** When the current (or last) lease ends, on the lock's clock; null before the first acquisition. */
  get leaseExpiresAt(): number | null {
    return this.phase.kind === 'leader' ? this.phase.leadership.leaseExpiresAt : this.lastLeaseEnd;
  }

  get safety(): Safety | null {
    return this.phase.kind === 'leader' ? this.phase.leadership.safety : this.lastSafety;
  }

  /** The longest any step may go without re-arming the loop (a generous bound: health()). */
  get quietBoundMs(): number {
    const o = this.o;
    return (
      Math.max(
        o.acquireMode === 'wait' ? (o.waitSliceMs ?? 0) : 0,
        o.healthIntervalMs,
        this.retry.lastDelayMs ?? 0,
        o.reconnectGraceMs ?? 0,
        o.takeoverDelayMs + PEER_BOUND_MS,
        o.closeTimeoutMs,
      ) +
      // an acquisition is a chain of round trips (survey, configure, settings, LISTEN,
      // holder, lock, epoch, peers), each bounded by queryTimeoutMs
      10 * o.queryTimeoutMs +
      1000
    );
  }

  /**
   * Following, and the last attempt failed: why. Null once an attempt is under way on a
   * live session again (a waiter queued after an outage is following normally).
   */
  get failing(): Error | null {
    const p = this.phase;
    if (p.kind === 'acquiring' && p.session && !p.session.dead) return null;
    return p.kind === 'follower' || p.kind === 'acquiring' ? this.retry.lastError : null;
  }

  /** Run the loop until STOPPED. Returns the loop's promise (never rejects). */
  run(): Promise<void> {
    this.running ??= this.loop();
    return this.running;
  }

  /**
   * StopRequested (shutdown): the loop leaves at its next step, releasing first if leader.
   * `deadline` (clock time) bounds a release: past it the releasing session is closed by force.
   */
  stop(deadline: number | null): void {
    const earlier = (a: number | null, b: number | null): number | null =>
      a === null ? b : b === null ? a : Math.min(a, b);
    this.mail.stop = { deadline: earlier(this.mail.stop?.deadline ?? null, deadline) };
    const p = this.phase;
    // leader work stops now, not at the loop's next step; nothing can reopen the term
    if (p.kind === 'leader') p.leadership.end('shutdown');
    if (p.kind === 'releasing') {
      p.after = 'stop';
      this.bound(p.release, earlier(p.release.deadline, deadline));
    }
    this.wake();
  }

  /** A stop has been asked for: the run is ending. */
  get stopping(): boolean {
    return this.mail.stop !== null;
  }

  /** Close the current session by force (a shutdown past its deadline); the loop then ends promptly. */
  forceClose(): void {
    const p = this.phase;
    if (p.kind !== 'stopped') p.session?.destroy();
    this.wake();
  }

  /** ReleaseRequested (stepDown): resolves when the release is over; at once when not leader. */
  stepDown(deadline: number | null): Promise<void> {
    const p = this.phase;
    if (p.kind === 'releasing') {
      const d = deferred<void>();
      p.release.waiters.push(d);
      if (deadline !== null) this.bound(p.release, Math.min(p.release.deadline ?? deadline, deadline));
      return d.promise;
    }
    if (p.kind !== 'leader') return Promise.resolve();
    p.leadership.end('step-down');
    this.mail.stepDown ??= { deadline, waiters: [], expired: null, timer: null };
    const release = this.mail.stepDown;
    if (deadline !== null) release.deadline = Math.min(release.deadline ?? deadline, deadline);
    const d = deferred<void>();
    release.waiters.push(d);
    this.wake();
    return d.promise;
  }

  private wake(): void {
    this.interrupt.abort();
  }

  /** A signal that the next wake() aborts. Check the mailbox after calling this, then wait on it. */
  private arm(): AbortSignal {
    this.vitals.progress();
    if (this.interrupt.signal.aborted) this.interrupt = new AbortController();
    return this.interrupt.signal;
  }

  private async loop(): Promise<void> {
    // a started lock keeps the process alive until it stops (unless `unref`)
    const keepAlive = this.o.unref ? null : setInterval(() => {}, 1 << 30);
    this.vitals.start();
    try {
      await this.apply({ type: 'Start' });
      while (this.phase.kind !== 'stopped') await this.apply(await this.steps.step(this.phase));
    } catch (err) {
      await this.crash(err);
    } finally {
      this.settle(this.mail.stepDown);
      this.mail.stepDown = null;
      if (keepAlive) clearInterval(keepAlive);
      this.vitals.stop();
    }
  }

  /** A bug, not a database condition: never leave a session, a term or a waiter behind. */
  private async crash(err: unknown): Promise<void> {
    const error = toError(err);
    this.o.logger.error({ event: 'lifecycle_failed', error: error.message }, 'lifecycle_failed');
    const p = this.phase;
    this.phase = { kind: 'stopped' };
    if (p.kind === 'leader') p.leadership.end('internal error');
    if (p.kind === 'releasing') this.settle(p.release);
    if (p.kind === 'follower') p.standbys?.close();
    if (p.kind === 'leader') p.peers?.stop();
    if (p.kind !== 'stopped') p.session?.destroy(error);
    this.report.error(new PgLeaderLockError(`internal error: ${error.message}`, { cause: error }));
    if (p.kind !== 'stopped') this.hooks.changed(p.kind, 'stopped', 'StopRequested');
    this.report.stopped();
  }

  /** Apply the table's transition for `input`, then carry out its effects in order. */
  private async apply(input: Input): Promise<void> {
    const prev = this.phase;
    const t = transition(prev.kind, input.type, {
      autoReacquire: this.o.autoReacquire,
      graceEnabled: this.o.reconnectGraceMs !== null,
      releaseThen: prev.kind === 'releasing' ? prev.after : 'stop',
      waitMode: this.o.acquireMode === 'wait',
    });
    if (!t) {
      // a step returned an input its state ignores: a bug; stop rather than spin
      if (input.type !== 'HealthOk')
        throw new Error(`input ${input.type} is not valid in state ${prev.kind}`);
      return;
    }
    const next = this.build(prev, t.to, input, t.effects);
    this.phase = next;
    if (prev.kind === 'leader' && next.kind !== 'leader') this.leaveLeader(prev, input, next.kind);
    if (prev.kind === 'releasing' && next.kind !== 'releasing') this.settle(prev.release);
    if (prev.kind === 'follower') prev.standbys?.close();
    if (next.kind === 'releasing' && prev.kind !== 'releasing')
      this.bound(next.release, next.release.deadline);
    if (next.kind === 'reconnecting') this.counters.reconnects += 1;
    if (prev.kind !== next.kind) this.hooks.changed(prev.kind, next.kind, input.type);
    if (next.kind === 'leader' && prev.kind !== 'leader') {
      this.counters.leaderSince = this.o.clock.now();
      if (prev.kind === 'reconnecting') this.counters.recoveries += 1;
      this.lastLeaderSeen = this.o.id;
      next.leadership.begin();
      next.peers?.start();
    }
    for (const effect of t.effects) await this.perform(effect, input, prev);
  }

  /** The next phase's data: sessions move along unless the transition closes them. */
  private build(prev: Phase, to: SpecState, input: Input, effects: readonly Effect[]): Phase {
    const session = effects.includes('closeConnection') || prev.kind === 'stopped' ? null : prev.session;
    switch (to) {
      case 'stopped':
        return { kind: 'stopped' };
      case 'follower': {
        const next = effects.includes('attemptNow')
          ? 'now'
          : effects.includes('requeue')
            ? 'requeue'
            : effects.includes('awaitPrimary')
              ? 'primary'
              : 'backoff';
        const standbys = input.type === 'NoPrimary' ? input.error.standbys : null;
        return { kind: 'follower', session, next, standbys };
      }
      case 'acquiring':
        return { kind: 'acquiring', session, fence: null };
      case 'leader': {
        if (!session || (input.type !== 'AcquireSucceeded' && input.type !== 'ReacquireSucceeded')) {
          throw new Error(`LEADER entered without a session and a grant (${input.type})`);
        }
        const leadership = this.leadership(input.grant, session);
        const { others, host, timeline } = session.place;
        // timeline 0: unknown (a server that hides it, primary.ts): nothing to compare with
        const peers =
          others.length === 0 || timeline === 0
            ? null
            : new PeerWatch(
                others.map((o) => o.endpoint),
                { label: host, timeline },
                this.o.clock,
                (error) => this.promoted(error),
              );
        return { kind: 'leader', session, leadership, peers, promotion: null };
      }
      case 'reconnecting':
        return {
          kind: 'reconnecting',
          session: null,
          deadline: this.o.clock.now() + (this.o.reconnectGraceMs ?? 0),
          previousPid: prev.kind === 'stopped' ? 0 : (prev.session?.pid ?? 0),
          fence: null,
        };
      case 'releasing': {
        if (prev.kind === 'releasing') return { ...prev, step: 'unlocking' };
        if (!session) throw new Error('RELEASING entered without a session');
        // one release serves the step-down and the stop asked for, with the earlier deadline
        const release: Release = this.mail.stepDown ?? {
          deadline: null,
          waiters: [],
          expired: null,
          timer: null,
        };
        this.mail.stepDown = null;
        const stopBy = this.mail.stop?.deadline ?? null;
        if (stopBy !== null) release.deadline = Math.min(release.deadline ?? stopBy, stopBy);
        const after = input.type === 'ReleaseRequested' && !this.mail.stop ? 'follow' : 'stop';
        const epoch = prev.kind === 'leader' ? prev.leadership.epoch : null;
        return { kind: 'releasing', session, step: 'draining', after, release, epoch };
      }
    }
  }

  private leadership(grant: Grant, session: Session): Leadership {
    const leadership: Leadership = new Leadership(
      grant,
      this.o.clock,
      this.termIds,
      {
        opened: (term) => {
          this.hooks.termOpened(term);
          if (leadership.reportOnOpen) {
            leadership.reportOnOpen = false;
            this.report.acquired(term, this.retry.attempt + 1);
          }
        },
        renewed: () => this.hooks.renewed(),
      },
      () => this.wake(),
      session.place.host,
    );
    // the session's death ends the term at once, before the loop has run
    session.onDeath(() => leadership.suspend('connection lost (leader work is suspended)'));
    return leadership;
  }

  /** Another configured host was promoted while this leader's server is still up (peers.ts). */
  private promoted(error: Error): void {
    const p = this.phase;
    if (p.kind !== 'leader') return;
    p.promotion = error;
    p.leadership.suspend(error.message); // leader work stops now, before the loop runs
    this.wake();
  }

  private leaveLeader(prev: Extract<Phase, { kind: 'leader' }>, input: Input, to: SpecState): void {
    prev.leadership.end(termEndReason(input, to));
    prev.peers?.stop();
    if (to !== 'releasing') {
      // leadership ended before a step-down asked for could start: nothing left to release
      this.settle(this.mail.stepDown);
      this.mail.stepDown = null;
    }
    this.lastSafety = prev.leadership.safety;
    this.lastLeaseEnd = prev.leadership.leaseExpiresAt;
    const c = this.counters;
    if (c.leaderSince !== null) c.leaderMsClosed += this.o.clock.now() - c.leaderSince;
    c.leaderSince = null;
  }

  /** Arm (or re-arm) a release's deadline: past it, the releasing phase's session is closed by force. */
  private bound(release: Release, deadline: number | null): void {
    release.deadline = deadline;
    if (release.timer !== null) this.o.clock.clearTimeout(release.timer);
    release.timer = null;
    const p = this.phase;
    if (deadline === null || p.kind !== 'releasing' || p.release !== release) return;
    release.timer = this.o.clock.setTimeout(
      () => {
        release.timer = null;
        const now = this.phase;
        if (now.kind !== 'releasing' || now.release !== release) return; // that phase is over
        const what = now.after === 'follow' ? 'stepDown' : 'shutdown';
        release.expired = new ShutdownError(
          `${what} did not finish within its timeout; the lock's session was closed by force`,
        );
        this.o.logger.warn({ event: 'forced_close', what }, 'forced_close');
        now.session.destroy(release.expired);
        this.wake();
      },
      Math.max(0, deadline - this.o.clock.now()),
    );
  }

  private settle(release: Release | null): void {
    if (!release) return;
    if (release.timer !== null) this.o.clock.clearTimeout(release.timer);
    release.timer = null;
    for (const w of release.waiters.splice(0)) w.resolve();
  }

  private async perform(effect: Effect, input: Input, prev: Phase): Promise<void> {
    const error = 'error' in input ? input.error : null;
    switch (effect) {
      case 'closeConnection':
        if (prev.kind !== 'stopped') await prev.session?.close();
        return;
      case 'emitAcquired': {
        this.counters.acquisitions += 1;
        const term = this.term;
        if (term) this.report.acquired(term, this.retry.attempt + 1);
        else if (this.phase.kind === 'leader') this.phase.leadership.reportOnOpen = true; // the grant's lease had run out
        return;
      }
      case 'emitAcquireFailed':
        return this.report.acquireFailed();
      case 'emitLost':
        return this.report.lost(error);
      case 'emitReleased':
        return this.report.released();
      case 'emitStopped':
        return this.report.stopped();
      case 'emitError':
        return this.report.error(error);
      case 'resetRetry':
        return this.retry.reset();
      case 'attemptNow':
      case 'backOff':
      case 'requeue':
        return; // carried by the follower phase's `next`
      case 'warn':
        return this.report.note('health_check_failed', error);
      case 'notice':
        return this.report.note('leadership_recovered');
    }
  }

  /** Open a session; its death wakes the loop, the `acquired` events on its channel feed onNewLeader. */
  private async open(): Promise<Session> {
    const found = await findPrimary(this.o.endpoints, this.o);
    let first: pg.Client | null = found.client;
    const take: ConnectFn = async () => {
      const c = first ?? (await found.endpoint.connect());
      first = null;
      return c;
    };
    const session = await Session.open(take, found.endpoint.connect, this.o, {
      host: found.endpoint.label,
      timeline: found.timeline,
      others: found.others,
    });
    session.onDeath(() => this.wake());
    if (session.holderAtConnect) this.leaderSeen(session.holderAtConnect);
    session.onEvent((event) => {
      if (event.kind === 'acquired') this.leaderSeen(event.id);
    });
    return session;
  }

  /** onNewLeader: another candidate leads; reported once per change. */
  private leaderSeen(id: string): void {
    if (id === this.lastLeaderSeen) return;
    this.lastLeaderSeen = id;
    if (id !== this.o.id) this.callbacks.emit('newLeader', id);
  }
}

/** Words for why a term ended, from the input that ended it. */
function termEndReason(input: Input, to: LockState): string {
  if (input.type === 'StopRequested') return 'shutdown';
  if (input.type === 'ReleaseRequested') return 'step-down';
  if (to === LockState.RECONNECTING) return 'connection lost; reconnecting (leader work is suspended)';
  return 'leadership lost';
}
