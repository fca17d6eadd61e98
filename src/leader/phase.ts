/**
 * The lifecycle's state as data: each phase carries what that state owns, so that no
 * combination the table does not allow can be represented. The public `LockState` is a
 * phase's `kind`.
 *
 *  - `follower`: an idle session may be kept for the next attempt; `next` says when that
 *    attempt is due: at once, after the retry strategy's delay, or at once if the
 *    strategy does not give up (wait mode, after a slice ended).
 *  - `acquiring`: one attempt; its session is opened by the attempt if needed. When the
 *    lock is granted but the handover is not proven clean, the attempt holds it for the
 *    takeover delay (`delayed`, public state `pending`) before it ends. RECONNECTING likewise.
 *  - `leader`: the session that holds the lock and the {@link Leadership} (term, lease,
 *    epoch) that only exists here.
 *  - `reconnecting`: flap damping; the lock is not held; re-acquire before `deadline`.
 *  - `releasing`: the voluntary end of leadership. The term has ended; `draining` waits
 *    for `runWhileLeader` runs, then `unlocking` unlocks; `after` says what follows. Its
 *    {@link Release} (release.ts) carries the deadline, whose timer acts on this phase only.
 *
 * What entering and leaving each phase does is in fsm-actions.ts.
 */

import type { Deferred } from '../core/clock.js';
import type { ShutdownError } from '../core/errors.js';
import type { PeerWatch } from '../core/peers.js';
import type { StandbyWatch } from '../core/standby-watch.js';
import type { Leadership } from './leadership.js';
import type { Session } from './session.js';

/** A voluntary release (`stepDown()`, or `shutdown()` while leader), carried by the releasing phase (release.ts arms and settles it). */
export interface Release {
  /** Clock time by which the release must be over, or null for no limit. */
  deadline: number | null;
  /** Settled when the releasing phase ends, however it ends. */
  readonly waiters: Deferred<void>[];
  /** The deadline passed and the session was closed by force. */
  expired: ShutdownError | null;
  /** The deadline's timer, armed while the releasing phase lives. */
  timer: unknown;
  /** A handover to a named successor (`handoverTo`, succession.ts), and how it went once known. */
  handover: Handover | null;
}

/** A release that hands over to `to`: taken if `to` held the lock within `timeoutMs` of the unlock. */
export interface Handover {
  readonly to: string;
  readonly timeoutMs: number;
  outcome: 'taken' | Error | null;
}

export function newRelease(deadline: number | null, handover: Handover | null = null): Release {
  return { deadline, waiters: [], expired: null, timer: null, handover };
}

/**
 * A takeover delay in progress (`takeoverDelayMs`, docs/safety.md): the lock is held, the
 * term opens at `until` (clock time).
 */
export interface TakeoverDelay {
  readonly until: number;
  readonly delayMs: number;
}

export type Phase =
  | { readonly kind: 'stopped' }
  | {
      readonly kind: 'follower';
      readonly session: Session | null;
      readonly next: 'now' | 'backoff' | 'requeue' | 'primary';
      /** With `next: 'primary'`: the standbys asked whether one was promoted. */
      readonly standbys: StandbyWatch | null;
    }
  | {
      readonly kind: 'acquiring';
      readonly session: Session | null;
      readonly delayed: TakeoverDelay | null;
    }
  | {
      readonly kind: 'leader';
      readonly session: Session;
      readonly leadership: Leadership;
      /** With several hosts: the watch for a promotion of another one (peers.ts), and what it saw (the lifecycle writes it). */
      readonly peers: PeerWatch | null;
      promotion: Error | null;
    }
  | {
      readonly kind: 'reconnecting';
      readonly session: Session | null;
      readonly deadline: number;
      /** The backend that held the lock before: its close may not have reached the server yet. */
      readonly previousPid: number;
      readonly delayed: TakeoverDelay | null;
    }
  | {
      readonly kind: 'releasing';
      readonly session: Session;
      readonly step: 'draining' | 'unlocking';
      /** Written by the lifecycle alone: a `shutdown()` during a step-down's release makes it `stop`. */
      after: 'follow' | 'stop';
      readonly release: Release;
      /** Fencing: the epoch of the leadership being released (marked released with it). */
      readonly epoch: bigint | null;
    };

export type PhaseOf<K extends Phase['kind']> = Extract<Phase, { kind: K }>;

/**
 * Requests from outside the loop (`shutdown()`, `stepDown()`, a handover's invitation),
 * read by the phase that can act on them; written by the lifecycle alone ({@link MailView}).
 */
export class Mailbox {
  /** A stop was asked for, with the earliest deadline given (null: none). */
  stop: { deadline: number | null } | null = null;
  /** Aborted with the first stop (never again): abandons a peer probe under way. */
  readonly stopped = new AbortController();
  /** A step-down was asked for while leader; the releasing phase takes it. */
  stepDown: Release | null = null;
  /** Poll mode: a handover named this candidate while it was backing off: attempt at once. */
  invited = false;
  /**
   * Poll mode: until then (clock time), an attempt that finds the lock still held is made
   * again every {@link INVITE_RETRY_MS}, not after the retry strategy's delay: the `released`
   * event that names this candidate can arrive before the unlock that follows it.
   */
  invitedUntil = Number.NEGATIVE_INFINITY;

  /** A handover named this candidate (or gives the lock back to it), heard at `now`. */
  invite(now: number): void {
    this.invited = true;
    this.invitedUntil = now + INVITE_WINDOW_MS;
  }

  /**
   * An invitation is over: the lock leads (a later step-down backs off as usual), or an
   * attempt failed for another reason than the lock being held (a connection or query
   * error backs off as usual).
   */
  uninvite(): void {
    this.invited = false;
    this.invitedUntil = Number.NEGATIVE_INFINITY;
  }
}

/**
 * The box as everything but the lifecycle sees it: read only. Only the lifecycle
 * (lifecycle.ts) writes it: from the outside calls, and when it applies a transition.
 */
export type MailView = Readonly<Omit<Mailbox, 'invite' | 'uninvite' | 'stopped'>> & {
  readonly stopped: { readonly signal: AbortSignal };
};

/** How long a candidate named as successor keeps attempting, and how often (poll mode). */
export const INVITE_WINDOW_MS = 1000;
export const INVITE_RETRY_MS = 5;
