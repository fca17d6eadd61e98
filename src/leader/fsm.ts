/**
 * The transition table of spec §3.3, in one place: `(state, input) -> state + effects`.
 * Pure: no I/O. The lifecycle (lifecycle.ts) produces the inputs (each phase's own work,
 * steps.ts: e.g. ACQUIRING runs the try-lock) and carries the transition out: beside this
 * file, fsm-actions.ts holds each state's data and entry and exit actions, and what each
 * effect does, run in the order listed.
 *
 * Footnotes of the spec, applied here:
 *  ¹ with `autoReacquire: false` the FOLLOWER target becomes STOPPED;
 *  ² RELEASING -> FOLLOWER instead of STOPPED when the release came from `stepDown()`
 *    and `autoReacquire` is on;
 *  ³ with no `reconnectGraceMs`, LEADER -> FOLLOWER¹ with `onLost` instead of RECONNECTING.
 *
 * Rows the spec implies but does not list (docs/state-machine.md says why):
 *  ACQUIRING --ConnectFailed--> FOLLOWER (onError, back off);
 *  ACQUIRING --NoPrimary--> FOLLOWER (onError; the follower waits for a standby's promotion,
 *    not a back-off: refusals by standbys during a failover must not delay finding the new
 *    primary);
 *  FOLLOWER  --RetryExhausted--> STOPPED (onError, onStopped);
 *  ACQUIRING --Refused--> STOPPED (onError, onStopped): a pooler that shares backends, found
 *    before the run's first session: it never works, so it is not retried (core/errors.ts);
 *  RELEASING --Drained--> RELEASING: RELEASING starts by draining (the term has ended;
 *    the loop waits for `runWhileLeader` runs to settle), then unlocks.
 *
 * Rows that change an attempt's data, not its state (ACQUIRING and RECONNECTING alike): the
 * attempt's step goes on after the loop applied them (steps.ts, `StepContext.advance`):
 *  --Connected--> the session opened for the attempt is the phase's;
 *  --SessionClosed--> the phase's session is closed (dead, failed, or on an old primary);
 *  --TakeoverDelayed--> the lock is held for the takeover delay (`pending`, onTakeoverFence).
 *
 * In `acquireMode: 'wait'`, ACQUIRING is a server-side wait of one slice, and
 * `AcquireFailed` (the slice ended with the lock still held elsewhere) re-queues at once
 * instead of backing off (the wait itself was the delay); the retry strategy is still
 * asked, so that a strategy that gives up is obeyed.
 */

import type { NoPrimaryError } from '../core/primary.js';
import { LockState, type SpecState } from '../core/state.js';
import type { Grant } from './leadership.js';
import type { TakeoverDelay } from './phase.js';
import type { Session } from './session.js';

/** Inputs of spec §3.2 (plus the implied ones above), each carrying what its effects need. */
export type Input =
  | { readonly type: 'Start' }
  | { readonly type: 'StopRequested' }
  /** `invitation`: the attempt answers a handover that named this candidate (the invitation is taken). */
  | { readonly type: 'AcquireAttempt'; readonly invitation?: true }
  | { readonly type: 'AcquireSucceeded'; readonly grant: Grant }
  | { readonly type: 'AcquireFailed' }
  | { readonly type: 'ConnectFailed'; readonly error: Error }
  | { readonly type: 'NoPrimary'; readonly error: NoPrimaryError }
  | { readonly type: 'DbError'; readonly error: Error }
  | { readonly type: 'HealthOk' }
  | { readonly type: 'HealthFailed'; readonly error: Error }
  | { readonly type: 'ReacquireSucceeded'; readonly grant: Grant }
  | { readonly type: 'ReacquireFailed'; readonly error: Error }
  | { readonly type: 'GraceExpired'; readonly error: Error | null }
  | { readonly type: 'ReleaseRequested' }
  | { readonly type: 'Drained' }
  /**
   * `handover`: how a handover to a named successor went (succession.ts); `invite`: the
   * successor did not take the lock in time and this lock, queuing again in poll mode, is
   * invited to attempt at once (phase.ts, `Mailbox.invite`).
   */
  | {
      readonly type: 'ReleaseSucceeded';
      readonly handover: 'taken' | Error | null;
      readonly invite: boolean;
    }
  | { readonly type: 'ReleaseFailed'; readonly error: Error }
  | { readonly type: 'RetryExhausted'; readonly error: Error }
  /** A definite refusal before the run's first session (core/errors.ts, `endsTheRun`). */
  | { readonly type: 'Refused'; readonly error: Error }
  | { readonly type: 'Connected'; readonly session: Session }
  | { readonly type: 'SessionClosed' }
  | { readonly type: 'TakeoverDelayed'; readonly delay: TakeoverDelay };

export type InputType = Input['type'];

/** A stop was asked for: the input every step returns when it sees one. */
export const STOP: Input = { type: 'StopRequested' };

/** Every input type, in the spec's order (the table test enumerates these). */
export const INPUT_TYPES: readonly InputType[] = [
  'Start',
  'StopRequested',
  'AcquireAttempt',
  'AcquireSucceeded',
  'AcquireFailed',
  'ConnectFailed',
  'NoPrimary',
  'DbError',
  'HealthOk',
  'HealthFailed',
  'ReacquireSucceeded',
  'ReacquireFailed',
  'GraceExpired',
  'ReleaseRequested',
  'Drained',
  'ReleaseSucceeded',
  'ReleaseFailed',
  'RetryExhausted',
  'Refused',
  'Connected',
  'SessionClosed',
  'TakeoverDelayed',
];

/**
 * Side effects, carried out in order on the transition.
 *  - `closeConnection`: close the session of the state left (frees the lock server-side if held).
 *  - `emit*`: run the user's callbacks of that event (`emitError` reports the input's error).
 *  - `resetRetry`: start a new retry cycle (attempt 1).
 *  - `attemptNow` / `backOff` / `requeue` / `awaitPrimary`: when FOLLOWER next attempts: at
 *    once; after the retry strategy's delay; at once, but only if the strategy does not give
 *    up; once a standby of a cluster with no primary is promoted (asked every 100 ms).
 *  - `warn` / `notice`: log lines "health_check_failed" / "leadership_recovered".
 *  - `emitTakeoverFence`: run `onTakeoverFence` (a takeover delay began).
 */
export type Effect =
  | 'closeConnection'
  | 'emitAcquired'
  | 'emitAcquireFailed'
  | 'emitLost'
  | 'emitReleased'
  | 'emitError'
  | 'emitStopped'
  | 'resetRetry'
  | 'attemptNow'
  | 'backOff'
  | 'requeue'
  | 'awaitPrimary'
  | 'warn'
  | 'notice'
  | 'emitTakeoverFence';

export interface Transition {
  readonly to: SpecState;
  readonly effects: readonly Effect[];
}

/** What the table needs to know besides state and input. */
export interface Flags {
  readonly autoReacquire: boolean;
  /** `reconnectGraceMs` is set (flap damping on). */
  readonly graceEnabled: boolean;
  /** While RELEASING: what follows the release (`'follow'` after `stepDown()`, else `'stop'`). */
  readonly releaseThen: 'follow' | 'stop';
  /** `acquireMode: 'wait'`. */
  readonly waitMode: boolean;
}

const { STOPPED, FOLLOWER, ACQUIRING, LEADER, RECONNECTING, RELEASING } = LockState;

const stop = (...effects: Effect[]): Transition => ({ to: STOPPED, effects: [...effects, 'emitStopped'] });

/** Footnote ¹: go to FOLLOWER, or to STOPPED (closing the connection) without auto-reacquire. */
function followerOrStop(f: Flags, effects: Effect[], next: 'attemptNow' | 'backOff'): Transition {
  if (f.autoReacquire) return { to: FOLLOWER, effects: [...effects, next] };
  const closing: Effect[] = effects.includes('closeConnection') ? effects : [...effects, 'closeConnection'];
  return stop(...closing);
}

/** The rows that change an attempt's data, not its state (ACQUIRING and RECONNECTING alike). */
function attemptData(from: SpecState, input: InputType): Transition | undefined {
  if (input === 'Connected') return { to: from, effects: [] };
  if (input === 'SessionClosed') return { to: from, effects: ['closeConnection'] };
  if (input === 'TakeoverDelayed') return { to: from, effects: ['emitTakeoverFence'] };
  return undefined;
}

/**
 * The table. Returns undefined for a pair the table does not list: the input is ignored
 * (e.g. `ReleaseRequested` while FOLLOWER: there is nothing to release).
 */
export function transition(from: SpecState, input: InputType, f: Flags): Transition | undefined {
  switch (from) {
    case STOPPED:
      if (input === 'Start') return { to: FOLLOWER, effects: ['resetRetry', 'attemptNow'] };
      return undefined;

    case FOLLOWER:
      if (input === 'AcquireAttempt') return { to: ACQUIRING, effects: [] };
      if (input === 'StopRequested') return stop('closeConnection');
      if (input === 'RetryExhausted') return stop('closeConnection', 'emitError');
      return undefined;

    case ACQUIRING:
      if (input === 'AcquireSucceeded') return { to: LEADER, effects: ['emitAcquired', 'resetRetry'] };
      if (input === 'AcquireFailed') {
        return { to: FOLLOWER, effects: ['emitAcquireFailed', f.waitMode ? 'requeue' : 'backOff'] };
      }
      if (input === 'DbError')
        return followerOrStop(f, ['emitLost', 'emitError', 'closeConnection'], 'backOff');
      if (input === 'ConnectFailed') return { to: FOLLOWER, effects: ['emitError', 'backOff'] };
      if (input === 'NoPrimary') return { to: FOLLOWER, effects: ['emitError', 'awaitPrimary'] };
      if (input === 'StopRequested') return stop('closeConnection');
      if (input === 'Refused') return stop('closeConnection', 'emitError');
      return attemptData(from, input);

    case LEADER:
      if (input === 'HealthOk') return undefined; // no transition
      if (input === 'HealthFailed' || input === 'DbError') {
        if (f.graceEnabled) return { to: RECONNECTING, effects: ['warn', 'closeConnection', 'resetRetry'] };
        return followerOrStop(f, ['warn', 'closeConnection', 'emitLost', 'resetRetry'], 'attemptNow');
      }
      if (input === 'StopRequested' || input === 'ReleaseRequested') return { to: RELEASING, effects: [] };
      return undefined;

    case RECONNECTING:
      if (input === 'ReacquireSucceeded') return { to: LEADER, effects: ['notice', 'resetRetry'] };
      if (input === 'ReacquireFailed') return followerOrStop(f, ['closeConnection', 'emitLost'], 'backOff');
      if (input === 'GraceExpired') return followerOrStop(f, ['closeConnection', 'emitLost'], 'attemptNow');
      if (input === 'StopRequested') return stop('closeConnection');
      return attemptData(from, input);

    case RELEASING:
      if (input === 'Drained') return { to: RELEASING, effects: [] };
      if (input === 'ReleaseSucceeded') {
        if (f.releaseThen === 'follow' && f.autoReacquire) {
          // the session is kept: the next attempt queues on it and sees its own `released`
          return { to: FOLLOWER, effects: ['emitReleased', 'resetRetry', 'backOff'] };
        }
        return stop('emitReleased', 'closeConnection');
      }
      if (input === 'ReleaseFailed' || input === 'DbError') {
        // footnote ² for a failed release too (the spec's step_down: on a timeout it "cycles the
        // connection" and, with auto_reacquire, "resumes acquisition attempts"): a lock that was
        // to follow (stepDown, a handover, a resign) stays a candidate when its session is lost
        // or closed by force before the release completed; only a shutdown stops it
        if (f.releaseThen === 'follow' && f.autoReacquire) {
          return { to: FOLLOWER, effects: ['emitError', 'closeConnection', 'resetRetry', 'backOff'] };
        }
        return stop('emitError', 'closeConnection');
      }
      return undefined;
  }
}
