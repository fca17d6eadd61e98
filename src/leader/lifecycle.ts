import { deferred, earlier, keepAlive, Wake } from '../core/clock.js';
import { PgLeaderLockError, type ShutdownError, toError } from '../core/errors.js';
import type { SessionIdentity } from '../core/handover.js';
import type { LockCallbacks } from '../core/lock-callbacks.js';
import type { ResolvedOptions } from '../core/lock-options.js';
import { PEER_INTERVAL_MS, splitBrainDelayMs } from '../core/peers.js';
import { pgpoolEvent } from '../core/pgpool.js';
import { connectFound, type Found, findPrimary, settingUp } from '../core/primary.js';
import { RetryCycle } from '../core/retry.js';
import type { Runners } from '../core/runner.js';
import type { Safety } from '../core/safety.js';
import { LockState } from '../core/state.js';
import type { Term } from '../core/term.js';
import { Vitals } from '../core/vitals.js';
import { type Effect, type Input, transition } from './fsm.js';
import type { LifecycleHooks } from './fsm-actions.js';
import { Actions } from './fsm-actions.js';
import { HandingOver } from './handing-over.js';
import type { TermIds } from './leadership.js';
import { Mailbox, newRelease, type Phase } from './phase.js';
import { Releases } from './release.js';
import { Reporter } from './report.js';
import { Requests, type RequestTarget } from './requests.js';
import { Session } from './session.js';
import type { Counters } from './stats.js';
import { Steps } from './steps.js';

export class Lifecycle implements RequestTarget {
  private phase: Phase = { kind: 'stopped' };
  /** A pgpool-II front was logged (once per lock). */
  private pgpoolSeen = false;
  private readonly mail = new Mailbox();
  /** Woken by news (a request, a notice, a death, a shutdown); armed before each wait (core/clock.ts). */
  private readonly waker = new Wake(() => this.vitals.progress());
  private readonly retry: RetryCycle;
  private readonly steps: Steps;
  private readonly report: Reporter;
  private readonly releases: Releases;
  private readonly actions: Actions;
  private running: Promise<void> | null = null;
  private readonly requests: Requests;
  private readonly handing: HandingOver;
  /** The loop's pulse, for `lock.health()`. */
  readonly vitals: Vitals;

  constructor(
    private readonly o: ResolvedOptions,
    callbacks: LockCallbacks,
    private readonly hooks: LifecycleHooks,
    private readonly runners: Runners<Term>,
    termIds: TermIds,
    counters: Counters,
  ) {
    // after a connection loss the first reconnect goes at once, then the strategy paces
    this.retry = new RetryCycle(o.retryStrategy, () => o.clock.now(), { atOnceAfterLoss: true });
    this.vitals = new Vitals(o.clock);
    this.report = new Reporter(o, callbacks, counters);
    const phase = (): Phase => this.phase;
    const wake = (): void => this.waker.wake();
    this.releases = new Releases(o, phase, wake);
    this.requests = new Requests(o, this);
    this.handing = new HandingOver(o, {
      phase,
      state: () => this.state,
      mail: this.mail,
      release: (release) => {
        this.mail.stepDown = release;
        this.waker.wake();
      },
    });
    this.actions = new Actions({
      o,
      mail: this.mail,
      retry: this.retry,
      report: this.report,
      releases: this.releases,
      counters,
      hooks: {
        ...hooks,
        termOpened: (term) => {
          hooks.termOpened(term);
          this.requests.termOpened();
        },
      },
      termIds,
      phase,
      wake,
      promoted: (error) => this.promoted(error),
    });
    this.steps = new Steps(o, this.mail, this.retry, runners, {
      arm: () => this.waker.arm(),
      open: (signal) => this.open(signal),
      advance: (phase, input) => this.advance(phase, input),
    });
  }

  /** The phase's state; `pending` while an attempt holds the lock for the takeover delay. */
  get state(): LockState {
    const p = this.phase;
    if ((p.kind === 'acquiring' || p.kind === 'reconnecting') && p.delayed) return LockState.PENDING;
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
    return this.phase.kind === 'leader' ? this.phase.leadership.leaseExpiresAt : this.actions.lastLeaseEnd;
  }

  get safety(): Safety | null {
    return this.phase.kind === 'leader' ? this.phase.leadership.safety : this.actions.lastSafety;
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
        splitBrainDelayMs(o.takeoverDelayMs, PEER_INTERVAL_MS),
        o.closeTimeoutMs,
      ) +
      // an acquisition is a chain of round trips (survey, set-up, LISTEN with the holder
      // read, behind a pooler the probe and the settings, lock, epoch, peers), each
      // bounded by queryTimeoutMs
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
    this.mail.stop = { deadline: earlier(this.mail.stop?.deadline ?? null, deadline) };
    this.mail.stopped.abort();
    const p = this.phase;
    // leader work stops now, not at the loop's next step; nothing can reopen the term
    if (p.kind === 'leader') p.leadership.end('shutdown');
    if (p.kind === 'releasing') {
      p.after = 'stop';
      this.releases.bound(p.release, earlier(p.release.deadline, deadline));
    }
    this.waker.wake();
  }

  /** A stop has been asked for: the run is ending. */
  get stopping(): boolean {
    return this.mail.stop !== null;
  }

  /**
   * Close the current session by force (a shutdown past its deadline); the loop then ends
   * promptly. A release under way reports `error` as its own failure (once, and not as a
   * connection gone): true then, and the caller reports nothing.
   */
  forceClose(error: ShutdownError): boolean {
    const p = this.phase;
    const releasing = p.kind === 'releasing';
    if (releasing) {
      p.release.expired ??= error;
      p.session.destroy(p.release.expired);
    } else if (p.kind !== 'stopped') p.session?.destroy();
    this.waker.wake();
    return releasing;
  }

  /** ReleaseRequested (stepDown): resolves when the release is over; at once when not leader. */
  stepDown(deadline: number | null): Promise<void> {
    // a handover not yet under way (its candidate is being checked): it goes first
    const checking = this.handing.checking;
    if (checking) return checking.done.then(() => this.stepDown(deadline));
    const p = this.phase;
    if (p.kind === 'releasing') {
      const d = deferred<void>();
      p.release.waiters.push(d);
      if (deadline !== null) this.releases.bound(p.release, earlier(p.release.deadline, deadline));
      return d.promise;
    }
    if (p.kind !== 'leader') return Promise.resolve();
    p.leadership.end('step-down');
    this.mail.stepDown ??= newRelease(deadline);
    const release = this.mail.stepDown;
    release.deadline = earlier(release.deadline, deadline);
    const d = deferred<void>();
    release.waiters.push(d);
    this.waker.wake();
    return d.promise;
  }

  /** Hand leadership to the waiting candidate `to` (handing-over.ts). */
  handoverTo(to: string, timeoutMs: number, queueWithinMs = 0): Promise<void> {
    return this.handing.handoverTo(to, timeoutMs, queueWithinMs);
  }

  /** The leader's session while a term is open, else null. */
  leaderSession(): Session | null {
    const p = this.phase;
    return p.kind === 'leader' && p.leadership.term !== null ? p.session : null;
  }

  /**
   * Poll mode: a handover by `from` named this candidate: attempt at once, as a follower or
   * while acquiring. While releasing only in one case: this lock's own handover, watching for
   * its successor, when that successor (`from`) hands the lock straight back (a lower
   * priority) and this lock queues again; it then attempts as soon as it follows, not at the
   * end of its back-off. Any other `released` naming it while it leads or releases (forged, or
   * stale: it still holds the lock) invites nothing.
   */
  invite(from: string): void {
    const p = this.phase;
    const handedBack =
      p.kind === 'releasing' &&
      p.step === 'unlocking' &&
      p.after === 'follow' &&
      this.o.autoReacquire &&
      p.release.handover?.to === from;
    if (p.kind !== 'follower' && p.kind !== 'acquiring' && !handedBack) return;
    this.mail.invite(this.o.clock.now());
    this.waker.wake();
  }

  private async loop(): Promise<void> {
    // a started lock keeps the process alive until it stops (unless `unref`)
    const release = keepAlive(!this.o.unref);
    this.vitals.start();
    try {
      await this.apply({ type: 'Start' });
      while (this.phase.kind !== 'stopped') await this.apply(await this.steps.step(this.phase));
    } catch (err) {
      this.crash(err);
    } finally {
      this.releases.settle(this.mail.stepDown);
      this.mail.stepDown = null;
      release();
      this.vitals.stop();
    }
  }

  /**
   * A bug, not a database condition: stop at once, leaving no session, term or waiter
   * behind: the exit actions of the state left run as on any transition.
   */
  private crash(err: unknown): void {
    const error = toError(err);
    this.o.logger.error({ event: 'lifecycle_failed', err: error }, 'lifecycle_failed');
    const p = this.phase;
    this.phase = { kind: 'stopped' };
    this.actions.exit(p, 'stopped', 'internal error');
    if (p.kind !== 'stopped') p.session?.destroy(error);
    this.report.error(new PgLeaderLockError(`internal error: ${error.message}`, { cause: error }));
    if (p.kind !== 'stopped') this.hooks.changed(p.kind, 'stopped', 'StopRequested');
    this.report.stopped();
  }

  /** Another configured host was promoted while this leader's server is up (core/peers.ts). */
  private promoted(error: Error): void {
    const p = this.phase;
    if (p.kind !== 'leader') return;
    p.promotion = error;
    p.leadership.suspend(error.message); // leader work stops now, before the loop runs
    this.waker.wake();
  }

  /** A step's input that keeps its state (step-context.ts), applied. */
  private async advance<P extends Phase>(phase: P, input: Input): Promise<P> {
    if (this.phase !== phase) throw new Error(`${input.type} from a step whose phase is over`);
    await this.apply(input);
    if (this.phase.kind !== phase.kind) throw new Error(`${input.type} left ${phase.kind}`);
    return this.phase as P;
  }

  /** The table's transition for `input`, carried out (fsm-actions.ts gives the order). */
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
    const next = this.actions.build(prev, t.to, input, t.effects);
    this.phase = next;
    this.post(prev, next, input, t.effects);
    this.actions.change(prev, next, input);
    for (const effect of t.effects) await this.actions.perform(effect, input, prev);
  }

  /** What a transition writes in the request box and the phase left. */
  private post(prev: Phase, next: Phase, input: Input, effects: readonly Effect[]): void {
    const mail = this.mail;
    if (input.type === 'AcquireAttempt' && input.invitation) mail.invited = false;
    if (input.type === 'ReleaseSucceeded' && prev.kind === 'releasing') {
      if (prev.release.handover) prev.release.handover.outcome = input.handover;
      if (input.invite) mail.invite(this.o.clock.now());
    }
    if (prev.kind === 'leader') {
      if (next.kind !== 'releasing') this.releases.settle(mail.stepDown);
      mail.stepDown = null;
    }
    // no quick retries once leading, or after a failure that is not a held lock
    if ((next.kind === 'leader' && prev.kind !== 'leader') || effects.includes('emitError')) mail.uninvite();
  }

  /** Open a session; its death wakes the loop, the `acquired` events on its channel feed onNewLeader. */
  private async open(signal: AbortSignal): Promise<Session> {
    const { clock, queryTimeoutMs } = this.o;
    const connectTimeoutMs = this.retry.connectTimeoutMs(queryTimeoutMs);
    const found = await findPrimary(this.o.endpoints, { clock, queryTimeoutMs, connectTimeoutMs, signal });
    return settingUp(found, signal, (f) => this.openOn(f, signal));
  }

  /** The session on the primary found, announcing the proof of drain there if it is due. */
  private async openOn(found: Found, signal: AbortSignal | undefined): Promise<Session> {
    const lost = this.actions.lost;
    const host = found.endpoint.label;
    // on the same server only: a drain announced on another host proves nothing there
    const drained = lost && lost.host === host ? this.drained(lost.identity) : null;
    const session = await Session.open(
      connectFound(found),
      found.endpoint.connect,
      this.o,
      { host, timeline: found.timeline, others: found.others },
      drained,
      signal,
    ); // a refusal on a known pooled endpoint names the endpoint to use (settingUp, core/primary.ts)
    this.actions.lost = null; // announced, or no proof to give (kept while no session opens)
    if (session.pgpool && !this.pgpoolSeen) {
      this.pgpoolSeen = true;
      const { level, fields } = pgpoolEvent(session.pgpool);
      this.o.logger[level]({ event: 'pgpool', host, ...fields }, 'pgpool');
    }
    if (lost) {
      const fields = {
        event: 'proof_of_drain',
        sent: drained !== null,
        host,
        lostHost: lost.host,
        lostPid: lost.identity.pid,
      };
      this.o.logger.info(fields, 'proof_of_drain');
    }
    session.onDeath(() => this.waker.wake());
    if (session.holderAtConnect) this.report.leaderSeen(session.holderAtConnect);
    session.channel.onEvent((event) => {
      if (event.kind === 'acquired') this.report.leaderSeen(event.id);
      if (event.kind === 'drained') this.waker.wake(); // may end a takeover delay early
      this.requests.heard(event, session);
    });
    return session;
  }

  /**
   * Proof of drain (handover.ts): the lost session to announce drained, if the runs of its
   * term have returned. Runs still going when the next session opens are not waited for
   * (the lock would queue late): nothing is announced, and the next holder's takeover delay
   * applies.
   */
  private drained(lost: SessionIdentity): SessionIdentity | null {
    return this.runners.busy ? null : lost;
  }
}
