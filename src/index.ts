/**
 * pgleaderlock: leader election on PostgreSQL session advisory locks.
 * @packageDocumentation
 */
export type { Callback, ErrorCallback, StateChangeCallback } from './callbacks.js';
export type { Clock } from './clock.js';
export {
  CallbackError,
  ConnectionError,
  type ErrorCode,
  LockError,
  PgLeaderLockError,
  ShutdownError,
} from './errors.js';
export { type Effect, type Flags, type Input, type Transition, transition } from './fsm.js';
export { LeaderLock, type TimeoutOptions, type WaitOptions } from './leader-lock.js';
export type { LogFields, LogFn, Logger } from './logger.js';
export type { LeaderLockOptions } from './options.js';
export {
  DecorrelatedJitter,
  ExponentialBackoff,
  FixedInterval,
  type RetryContext,
  type RetryStrategy,
} from './retry.js';
export type { AppliedSettings, Safety } from './safety.js';
export { LockState } from './state.js';
