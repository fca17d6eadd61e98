/**
 * pgleaderlock: leader election on PostgreSQL session advisory locks.
 * @packageDocumentation
 */
export type {
  AcquiredCallback,
  Callback,
  ErrorCallback,
  EventName,
  ListenerOptions,
  NewLeaderCallback,
  StateChangeCallback,
  TakeoverFence,
  TakeoverFenceCallback,
} from './callbacks.js';
export type { Clock } from './clock.js';
export {
  CallbackError,
  ConnectionError,
  type ErrorCode,
  LockError,
  PgLeaderLockError,
  ShutdownError,
} from './errors.js';
export { FencedError } from './fencing.js';
export type { Health, LockHealth } from './health.js';
export type { Candidate, InspectOptions, LockInspection } from './inspect.js';
export { LeaderLock, type TimeoutOptions, type WaitOptions } from './leader-lock.js';
export type { LogFields, LogFn, Logger } from './logger.js';
export {
  LockMetrics,
  type LockMetricsSnapshot,
  type MetricsSnapshotOf,
  type MetricsTarget,
  type PartitionMetricsSnapshot,
} from './metrics.js';
export {
  type AcquiredMessage,
  CHANNELS,
  type ChannelBase,
  type ErrorMessage,
  type LockStats,
  type LostMessage,
  type PartitionAssignedMessage,
  type PartitionRevokedMessage,
  type StateMessage,
} from './observe.js';
export type { LeaderLockOptions } from './options.js';
export { MAX_PARTITIONS, type PartitionedLeadershipOptions } from './partitions/options.js';
export {
  PartitionedLeadership,
  type PartitionHealth,
  type PartitionInspection,
  type PartitionInspectOptions,
  PartitionMismatchError,
  type PartitionStats,
  type PartitionTerm,
  type PartitionWork,
  type RevokeReason,
} from './partitions/partitioned.js';
export { type ProbesListener, type ProbesOptions, probes } from './probes.js';
export {
  DecorrelatedJitter,
  ExponentialBackoff,
  FixedInterval,
  type RetryContext,
  type RetryStrategy,
} from './retry.js';
export { type LeaderWork, LeaderWorkError, type LeaderWorkHandle } from './runner.js';
export type { AppliedSettings, Safety } from './safety.js';
export { LockState, type SpecState } from './state.js';
export { type Term, TermEndedError } from './term.js';
