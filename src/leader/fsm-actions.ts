/**
 * Beside the transition table (fsm.ts), what a transition does. The table says which state
 * follows `(state, input)` and which effects run; this file says, per state, what the state
 * carries when entered and what entering and leaving it does, and what each effect does.
 * Read together, they are every `(state, input) -> state + actions` of the lifecycle.
 *
 * A transition runs, in this order (`Lifecycle.apply`):
 *  1. `data`: the entered state's data (a session moves along unless the transition closes it);
 *  2. `exit`: the exit actions of the state left;
 *  3. `enter`: the entry actions of the state entered;
 *  4. the change is reported (the `state_change` log line, `onStateChange`, the `state` channel);
 *  5. `entered`: what follows once the change is reported (LEADER opens its term);
 *  6. the table's effects, in the order listed.
 * Steps 2 to 5 run only when the state changes: RELEASING --Drained--> RELEASING runs 1 and 6.
 * When the loop fails on a bug, it stops at once and runs the exit actions of the state it
 * was in (`exit`), as any transition to STOPPED would.
 */

import { earlier } from '../core/clock.js';
import type { SessionIdentity } from '../core/handover.js';
import type { ResolvedOptions } from '../core/lock-options.js';
import { PeerWatch } from '../core/peers.js';
import type { RetryCycle } from '../core/retry.js';
import type { Safety } from '../core/safety.js';
import type { SpecState } from '../core/state.js';
import type { Term } from '../core/term.js';
import type { Effect, Input } from './fsm.js';
import { type Grant, Leadership, type TermIds } from './leadership.js';
import type { MailView, Phase, PhaseOf } from './phase.js';
import { newRelease } from './phase.js';
import type { Releases } from './release.js';
import type { Reporter } from './report.js';
import type { Session } from './session.js';
import type { Counters } from './stats.js';

/** The lifecycle's parts that the actions act on. */
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

export interface ActionContext {
  readonly o: ResolvedOptions;
  readonly mail: MailView;
  readonly retry: RetryCycle;
  readonly report: Reporter;
  readonly releases: Releases;
  readonly counters: Counters;
  readonly hooks: LifecycleHooks;
  readonly termIds: TermIds;
  /** The lifecycle's phase now. */
  phase(): Phase;
  /** Wake the loop. */
  wake(): void;
  /** Another configured host was promoted while this leader's server is still up (peers.ts). */
  promoted(error: Error): void;
}

/** One state's part of every transition into or out of it (`P`: that state's phase). */
interface StateActions<P extends Phase> {
  /** The entered state's data; `session`: the one handed on (null when the transition closes it). */
  data(from: Phase, input: Input, session: Session | null, effects: readonly Effect[]): P;
  /** Entering, before the change is reported. */
  enter?(entered: P): void;
  /** Entered, once the change is reported. */
  entered?(entered: P, from: Phase): void;
  /** Leaving for `to`; `why`: the words the term (if any) ends with. */
  exit?(left: P, to: SpecState, why: string): void;
}

export class Actions {
  /** The figures and lease end of the last leadership, once it is over. */
  lastSafety: Safety | null = null;
  lastLeaseEnd: number | null = null;
  /** The session whose leadership ended uncleanly, and its host, until the next session announces its drain. */
  lost: { identity: SessionIdentity; host: string } | null = null;

  constructor(private readonly c: ActionContext) {}

  private readonly states: { readonly [K in SpecState]: StateActions<PhaseOf<K>> } = {
    stopped: { data: () => ({ kind: 'stopped' }) },

    follower: {
      data: (_from, input, session, effects) => ({
        kind: 'follower',
        session,
        next: effects.includes('attemptNow')
          ? 'now'
          : effects.includes('requeue')
            ? 'requeue'
            : effects.includes('awaitPrimary')
              ? 'primary'
              : 'backoff',
        standbys: input.type === 'NoPrimary' ? input.error.standbys : null,
      }),
      // the standbys a survey left open are asked only while following (steps.ts, awaitPrimary)
      exit: (left) => left.standbys?.close(),
    },

    acquiring: {
      data: (from, input, session) =>
        from.kind === 'acquiring'
          ? attemptData(from, input, session)
          : { kind: 'acquiring', session, delayed: null },
    },

    leader: {
      data: (_from, input, session) => this.leaderData(input, session),
      entered: (entered, from) => {
        const { counters, o } = this.c;
        counters.leaderSince = o.clock.now();
        if (from.kind === 'reconnecting') counters.recoveries += 1;
        this.c.report.leaderSeen(o.id);
        entered.leadership.begin();
        entered.peers?.start();
      },
      exit: (left, to, why) => {
        left.leadership.end(why);
        left.peers?.stop();
        // an unclean end (the session lost, not a release): once its runs have returned, the
        // next session says so (handover.ts, proof of drain)
        if (to !== 'releasing')
          this.lost = { identity: left.session.identity, host: left.session.place.host };
        this.lastSafety = left.leadership.safety;
        this.lastLeaseEnd = left.leadership.leaseExpiresAt;
        const { counters, o } = this.c;
        if (counters.leaderSince !== null) counters.leaderMsClosed += o.clock.now() - counters.leaderSince;
        counters.leaderSince = null;
      },
    },

    reconnecting: {
      data: (from, input, session) =>
        from.kind === 'reconnecting' ? attemptData(from, input, session) : this.reconnectingData(from),
      enter: () => {
        this.c.counters.reconnects += 1;
      },
    },

    releasing: {
      data: (from, input, session) => this.releasingData(from, input, session),
      enter: (entered) =>
        this.c.releases.bound(
          entered.release,
          earlier(entered.release.deadline, this.c.mail.stop?.deadline ?? null),
        ),
      exit: (left) => this.c.releases.settle(left.release),
    },
  };

  /** The data of the state `to`, entered from `from` on `input` with `effects`. */
  build(from: Phase, to: SpecState, input: Input, effects: readonly Effect[]): Phase {
    const session = effects.includes('closeConnection') || from.kind === 'stopped' ? null : from.session;
    return this.states[to].data(from, input, session, effects);
  }

  /** Steps 2 to 5 of a transition (above): exit, entry, the change reported, what follows entry. */
  change(from: Phase, to: Phase, input: Input): void {
    if (from.kind === to.kind) return;
    this.exit(from, to.kind, termEndReason(input, to.kind));
    const actions: StateActions<Phase> = this.states[to.kind];
    actions.enter?.(to);
    this.c.hooks.changed(from.kind, to.kind, input.type);
    actions.entered?.(to, from);
  }

  /** The exit actions of `left`, leaving for `to`. */
  exit(left: Phase, to: SpecState, why: string): void {
    const actions: StateActions<Phase> = this.states[left.kind];
    actions.exit?.(left, to, why);
  }

  /** Carry out one of the table's effects (fsm.ts says what each means). */
  async perform(effect: Effect, input: Input, from: Phase): Promise<void> {
    const { report } = this.c;
    const error = 'error' in input ? input.error : null;
    switch (effect) {
      case 'closeConnection':
        if (from.kind !== 'stopped') await from.session?.close();
        return;
      case 'emitAcquired': {
        this.c.counters.acquisitions += 1;
        const p = this.c.phase();
        if (p.kind !== 'leader') return;
        if (p.leadership.term) report.acquired(p.leadership.term, this.c.retry.attempt + 1);
        else p.leadership.reportOnOpen = true; // the grant's lease had run out
        return;
      }
      case 'emitAcquireFailed':
        return report.acquireFailed();
      case 'emitLost':
        return report.lost(error);
      case 'emitReleased':
        return report.released();
      case 'emitStopped':
        return report.stopped();
      case 'emitError':
        return report.error(error);
      case 'resetRetry':
        return this.c.retry.reset();
      case 'attemptNow':
        return this.c.retry.goingAtOnce(); // a failure of this attempt is paced by the strategy
      case 'backOff':
      case 'requeue':
      case 'awaitPrimary':
        return; // carried by the follower phase's `next`
      case 'warn':
        return report.note('health_check_failed', error);
      case 'notice':
        return report.note('leadership_recovered');
      case 'emitTakeoverFence':
        if (input.type === 'TakeoverDelayed')
          report.takeoverDelayed(input.delay.delayMs, input.delay.until - input.delay.delayMs);
        return;
    }
  }

  private leaderData(input: Input, session: Session | null): PhaseOf<'leader'> {
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
            this.c.o.clock,
            (error) => this.c.promoted(error),
          );
    return { kind: 'leader', session, leadership, peers, promotion: null };
  }

  private leadership(grant: Grant, session: Session): Leadership {
    const { o, hooks } = this.c;
    const leadership: Leadership = new Leadership(
      grant,
      o.clock,
      this.c.termIds,
      {
        opened: (term) => {
          hooks.termOpened(term);
          if (leadership.reportOnOpen) {
            leadership.reportOnOpen = false;
            this.c.report.acquired(term, this.c.retry.attempt + 1);
          }
        },
        renewed: () => hooks.renewed(),
      },
      () => this.c.wake(),
      session.place.host,
    );
    // the session's death ends the term at once, before the loop has run
    session.onDeath(() => leadership.suspend('connection lost (leader work is suspended)'));
    return leadership;
  }

  private reconnectingData(from: Phase): PhaseOf<'reconnecting'> {
    return {
      kind: 'reconnecting',
      session: null,
      deadline: this.c.o.clock.now() + (this.c.o.reconnectGraceMs ?? 0),
      previousPid: from.kind === 'stopped' ? 0 : (from.session?.pid ?? 0),
      delayed: null,
    };
  }

  private releasingData(from: Phase, input: Input, session: Session | null): PhaseOf<'releasing'> {
    if (from.kind === 'releasing') return { ...from, step: 'unlocking' };
    if (!session) throw new Error('RELEASING entered without a session');
    const { mail } = this.c;
    const release = mail.stepDown ?? newRelease(null);
    const after = input.type === 'ReleaseRequested' && !mail.stop ? 'follow' : 'stop';
    const epoch = from.kind === 'leader' ? from.leadership.epoch : null;
    return { kind: 'releasing', session, step: 'draining', after, release, epoch };
  }
}

/**
 * An attempt's own data changed (fsm.ts, the rows that keep ACQUIRING or RECONNECTING): the
 * session it opened (or none once closed), the takeover delay it holds the lock for. The
 * delay lasts only while its session holds the lock: a session closed (RECONNECTING goes on
 * within its grace period) or a new one holds nothing, and the state is no longer `pending`.
 */
function attemptData<P extends PhaseOf<'acquiring'> | PhaseOf<'reconnecting'>>(
  from: P,
  input: Input,
  session: Session | null,
): P {
  return {
    ...from,
    session: input.type === 'Connected' ? input.session : session,
    delayed: input.type === 'TakeoverDelayed' ? input.delay : null,
  };
}

/** Words for why a term ended, from the input that ended it. */
function termEndReason(input: Input, to: SpecState): string {
  if (input.type === 'StopRequested') return 'shutdown';
  if (input.type === 'ReleaseRequested') return 'step-down';
  if (to === 'reconnecting') return 'connection lost; reconnecting (leader work is suspended)';
  return 'leadership lost';
}
