/**
 * The lock's states: the specification's six (§3.1), whose values are the spec's strings,
 * and `pending`, which the public state adds (below).
 */
export const LockState = {
  /** Initial and terminal: no lifecycle running, no connection. */
  STOPPED: 'stopped',
  /** Running but not attempting acquisition: waiting for the next attempt. */
  FOLLOWER: 'follower',
  /** Executing an acquisition attempt. */
  ACQUIRING: 'acquiring',
  /**
   * Not one of the specification's states: the lock is held but the term is not open yet,
   * because the previous holder may not have stopped its work (the takeover delay,
   * `takeoverDelayMs`). Part of ACQUIRING in the transition table; `onStateChange` never
   * reports it (it reports ACQUIRING -> LEADER when the term opens).
   */
  PENDING: 'pending',
  /** Lock held; the health loop runs. */
  LEADER: 'leader',
  /** Grace period after a failed health check: the lock is NOT held; reconnecting to re-acquire. */
  RECONNECTING: 'reconnecting',
  /** Voluntary release in progress. */
  RELEASING: 'releasing',
} as const;

/** One of the {@link LockState} values. */
export type LockState = (typeof LockState)[keyof typeof LockState];

/** The specification's six states (all but `pending`): the ones `onStateChange` reports and the transition table uses. */
export type SpecState = Exclude<LockState, 'pending'>;
