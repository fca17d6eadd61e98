/**
 * pgleaderlock: leader election on PostgreSQL session advisory locks.
 * @packageDocumentation
 */
export type { ListenerOptions } from './core/callbacks.js';
export {
  type AcquiredMessage,
  CHANNELS,
  type ChannelBase,
  type ErrorMessage,
  type LostMessage,
  type PartitionAssignedMessage,
  type PartitionRevokedMessage,
  type StateMessage,
} from './core/channels.js';
export type { Clock } from './core/clock.js';
export type { LeaderElection } from './core/election.js';
export {
  CallbackError,
  ConnectionError,
  type ErrorCode,
  LockError,
  PgLeaderLockError,
  ShutdownError,
} from './core/errors.js';
export { FencedError } from './core/fencing.js';
export type {
  AcquiredCallback,
  Callback,
  ErrorCallback,
  EventName,
  NewLeaderCallback,
  StateChangeCallback,
  TakeoverFence,
  TakeoverFenceCallback,
} from './core/lock-callbacks.js';
export type { LockHealth } from './core/lock-health.js';
export type { LeaderLockOptions } from './core/lock-options.js';
export type { LogFields, LogFn, Logger } from './core/logger.js';
export { NoPrimaryError } from './core/primary.js';
export {
  DecorrelatedJitter,
  ExponentialBackoff,
  FixedInterval,
  type RetryContext,
  type RetryStrategy,
} from './core/retry.js';
export type { AppliedSettings, Safety } from './core/safety.js';
export { LockState, type SpecState } from './core/state.js';
export { type Term, TermEndedError } from './core/term.js';
export type { Health } from './core/vitals.js';
export { type LeaderWork, LeaderWorkError, type LeaderWorkHandle } from './core/work.js';
export type { Candidate, InspectOptions, LockInspection } from './leader/inspect.js';
export { LeaderLock, type TimeoutOptions, type WaitOptions } from './leader/leader-lock.js';
export type { LockStats } from './leader/stats.js';
export {
  LockMetrics,
  type LockMetricsSnapshot,
  type MetricsSnapshotOf,
  type MetricsTarget,
  type PartitionMetricsSnapshot,
} from './ops/metrics.js';
export { type ProbesListener, type ProbesOptions, probes } from './ops/probes.js';
export type { PartitionedElection } from './partitions/election.js';
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
export { type LeaderChangeCallback, LeaderWatch } from './watch/leader-watch.js';
export type { LeaderWatchOptions } from './watch/options.js';
export type { WatchedLeader } from './watch/view.js';
