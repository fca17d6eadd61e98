/**
 * The transition table itself (src/fsm.ts), row by row: every pair the specification lists
 * (with its footnote variants) gives the listed state and effects, and every other pair is
 * rejected (the input is ignored) under every combination of flags. The behaviour of each
 * row through the public API is in transitions.test.ts.
 */
import { describe, expect, it } from 'vitest';
import type { SpecState } from '../../src/core/state.js';
import { LockState } from '../../src/index.js';
import { type Effect, type Flags, INPUT_TYPES, type InputType, transition } from '../../src/leader/fsm.js';

const DEFAULT: Flags = { autoReacquire: true, graceEnabled: false, releaseThen: 'stop', waitMode: false };

type Row = [from: SpecState, input: InputType, flags: Partial<Flags>, to: SpecState, effects: Effect[]];

const { STOPPED, FOLLOWER, ACQUIRING, LEADER, RECONNECTING, RELEASING } = LockState;

const ROWS: Row[] = [
  [STOPPED, 'Start', {}, FOLLOWER, ['resetRetry', 'attemptNow']],
  [FOLLOWER, 'AcquireAttempt', {}, ACQUIRING, []],
  [FOLLOWER, 'StopRequested', {}, STOPPED, ['closeConnection', 'emitStopped']],
  [FOLLOWER, 'RetryExhausted', {}, STOPPED, ['closeConnection', 'emitError', 'emitStopped']],
  [ACQUIRING, 'Refused', {}, STOPPED, ['closeConnection', 'emitError', 'emitStopped']],
  [ACQUIRING, 'AcquireSucceeded', {}, LEADER, ['emitAcquired', 'resetRetry']],
  [ACQUIRING, 'AcquireFailed', {}, FOLLOWER, ['emitAcquireFailed', 'backOff']],
  [ACQUIRING, 'AcquireFailed', { waitMode: true }, FOLLOWER, ['emitAcquireFailed', 'requeue']],
  [ACQUIRING, 'DbError', {}, FOLLOWER, ['emitLost', 'emitError', 'closeConnection', 'backOff']],
  [
    ACQUIRING,
    'DbError',
    { autoReacquire: false },
    STOPPED,
    ['emitLost', 'emitError', 'closeConnection', 'emitStopped'],
  ],
  [ACQUIRING, 'ConnectFailed', {}, FOLLOWER, ['emitError', 'backOff']],
  [ACQUIRING, 'ConnectFailed', { autoReacquire: false }, FOLLOWER, ['emitError', 'backOff']],
  [ACQUIRING, 'NoPrimary', {}, FOLLOWER, ['emitError', 'awaitPrimary']],
  [ACQUIRING, 'NoPrimary', { autoReacquire: false }, FOLLOWER, ['emitError', 'awaitPrimary']],
  [ACQUIRING, 'StopRequested', {}, STOPPED, ['closeConnection', 'emitStopped']],
  [LEADER, 'HealthFailed', { graceEnabled: true }, RECONNECTING, ['warn', 'closeConnection', 'resetRetry']],
  [LEADER, 'DbError', { graceEnabled: true }, RECONNECTING, ['warn', 'closeConnection', 'resetRetry']],
  [LEADER, 'HealthFailed', {}, FOLLOWER, ['warn', 'closeConnection', 'emitLost', 'resetRetry', 'attemptNow']],
  [LEADER, 'DbError', {}, FOLLOWER, ['warn', 'closeConnection', 'emitLost', 'resetRetry', 'attemptNow']],
  [
    LEADER,
    'HealthFailed',
    { autoReacquire: false },
    STOPPED,
    ['warn', 'closeConnection', 'emitLost', 'resetRetry', 'emitStopped'],
  ],
  [
    LEADER,
    'DbError',
    { autoReacquire: false },
    STOPPED,
    ['warn', 'closeConnection', 'emitLost', 'resetRetry', 'emitStopped'],
  ],
  [LEADER, 'StopRequested', {}, RELEASING, []],
  [LEADER, 'ReleaseRequested', {}, RELEASING, []],
  [RECONNECTING, 'ReacquireSucceeded', {}, LEADER, ['notice', 'resetRetry']],
  [RECONNECTING, 'ReacquireFailed', {}, FOLLOWER, ['closeConnection', 'emitLost', 'backOff']],
  [
    RECONNECTING,
    'ReacquireFailed',
    { autoReacquire: false },
    STOPPED,
    ['closeConnection', 'emitLost', 'emitStopped'],
  ],
  [RECONNECTING, 'GraceExpired', {}, FOLLOWER, ['closeConnection', 'emitLost', 'attemptNow']],
  [
    RECONNECTING,
    'GraceExpired',
    { autoReacquire: false },
    STOPPED,
    ['closeConnection', 'emitLost', 'emitStopped'],
  ],
  [RECONNECTING, 'StopRequested', {}, STOPPED, ['closeConnection', 'emitStopped']],
  [RELEASING, 'Drained', {}, RELEASING, []],
  [RELEASING, 'ReleaseSucceeded', {}, STOPPED, ['emitReleased', 'closeConnection', 'emitStopped']],
  [
    RELEASING,
    'ReleaseSucceeded',
    { releaseThen: 'follow' },
    FOLLOWER,
    ['emitReleased', 'resetRetry', 'backOff'], // the session is kept: it queues again on it
  ],
  [
    RELEASING,
    'ReleaseSucceeded',
    { releaseThen: 'follow', autoReacquire: false },
    STOPPED,
    ['emitReleased', 'closeConnection', 'emitStopped'],
  ],
  [RELEASING, 'ReleaseFailed', {}, STOPPED, ['emitError', 'closeConnection', 'emitStopped']],
  [RELEASING, 'DbError', {}, STOPPED, ['emitError', 'closeConnection', 'emitStopped']],
  // footnote ² for a failed release too: a stepDown, handover or resign stays a candidate
  [
    RELEASING,
    'ReleaseFailed',
    { releaseThen: 'follow', autoReacquire: true },
    FOLLOWER,
    ['emitError', 'closeConnection', 'resetRetry', 'backOff'],
  ],
  [
    RELEASING,
    'ReleaseFailed',
    { releaseThen: 'follow', autoReacquire: false },
    STOPPED,
    ['emitError', 'closeConnection', 'emitStopped'],
  ],
  [
    RELEASING,
    'DbError',
    { releaseThen: 'follow', autoReacquire: true },
    FOLLOWER,
    ['emitError', 'closeConnection', 'resetRetry', 'backOff'],
  ],
  [
    RELEASING,
    'DbError',
    { releaseThen: 'follow', autoReacquire: false },
    STOPPED,
    ['emitError', 'closeConnection', 'emitStopped'],
  ],
  // an attempt's own data, its state kept (the step goes on: steps.ts, `advance`)
  [ACQUIRING, 'Connected', {}, ACQUIRING, []],
  [ACQUIRING, 'SessionClosed', {}, ACQUIRING, ['closeConnection']],
  [ACQUIRING, 'TakeoverDelayed', {}, ACQUIRING, ['emitTakeoverFence']],
  [RECONNECTING, 'Connected', {}, RECONNECTING, []],
  [RECONNECTING, 'SessionClosed', {}, RECONNECTING, ['closeConnection']],
  [RECONNECTING, 'TakeoverDelayed', {}, RECONNECTING, ['emitTakeoverFence']],
];

/** LEADER --HealthOk--> LEADER is listed, as "no transition". */
const LISTED = new Set([...ROWS.map(([from, input]) => `${from}/${input}`), `${LEADER}/HealthOk`]);

function allFlags(): Flags[] {
  const out: Flags[] = [];
  for (const autoReacquire of [true, false])
    for (const graceEnabled of [true, false])
      for (const releaseThen of ['follow', 'stop'] as const)
        for (const waitMode of [true, false])
          out.push({ autoReacquire, graceEnabled, releaseThen, waitMode });
  return out;
}

describe('transition()', () => {
  it.each(ROWS)('%s --%s (%o)--> %s with effects %o', (from, input, flags, to, effects) => {
    expect(transition(from, input, { ...DEFAULT, ...flags })).toEqual({ to, effects });
  });

  it('LEADER --HealthOk--> no transition, whatever the flags', () => {
    for (const f of allFlags()) expect(transition(LEADER, 'HealthOk', f)).toBeUndefined();
  });

  it('every pair the table does not list is rejected under every combination of flags', () => {
    const states = Object.values(LockState).filter((s): s is SpecState => s !== LockState.PENDING);
    let rejected = 0;
    for (const from of states) {
      for (const input of INPUT_TYPES) {
        if (LISTED.has(`${from}/${input}`)) continue;
        for (const f of allFlags()) expect(transition(from, input, f), `${from}/${input}`).toBeUndefined();
        rejected += 1;
      }
    }
    expect(rejected).toBe(states.length * INPUT_TYPES.length - LISTED.size);
    expect(rejected).toBeGreaterThan(60);
  });
});
