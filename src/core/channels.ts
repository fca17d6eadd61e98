/**
 * Events on `node:diagnostics_channel`, published only when someone subscribes: both
 * elections publish here.
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import type { SpecState } from './state.js';
import type { Term } from './term.js';

/** Channel names. Subscribe with `diagnostics_channel.subscribe(name, fn)`. */
export const CHANNELS = {
  /** A lock's state changed ({@link StateMessage}). */
  state: 'pgleaderlock:state',
  /** A lock became leader ({@link AcquiredMessage}). */
  acquired: 'pgleaderlock:acquired',
  /** A lock lost leadership involuntarily ({@link LostMessage}). */
  lost: 'pgleaderlock:lost',
  /** A lock released leadership voluntarily ({@link ChannelBase}). */
  released: 'pgleaderlock:released',
  /** A lock reported an error ({@link ErrorMessage}). */
  error: 'pgleaderlock:error',
  /** PartitionedLeadership: a partition's term opened on this worker. */
  partitionAssigned: 'pgleaderlock:partition-assigned',
  /** PartitionedLeadership: a partition's term ended on this worker. */
  partitionRevoked: 'pgleaderlock:partition-revoked',
} as const;

/** Every message carries the lock's identity. */
export interface ChannelBase {
  /** The lock's candidate id (`lock.id`). */
  id: string;
  /** The lock's first advisory lock key. */
  key1: number;
  /** The lock's second advisory lock key. */
  key2: number;
}
/** A message of {@link CHANNELS}.state: one transition. */
export interface StateMessage extends ChannelBase {
  /** The state left. */
  from: SpecState;
  /** The state entered. */
  to: SpecState;
  /** The input of the transition table that caused it (docs/state-machine.md). */
  input: string;
}
/** A message of {@link CHANNELS}.acquired. */
export interface AcquiredMessage extends ChannelBase {
  /** The term that opened. */
  term: Term;
}
/** A message of {@link CHANNELS}.lost. */
export interface LostMessage extends ChannelBase {
  /** Why, when known. */
  error: Error | null;
}
/** A message of {@link CHANNELS}.error. */
export interface ErrorMessage extends ChannelBase {
  /** The error, as `onError` receives it. */
  error: Error;
}

const channels = {
  state: diagnosticsChannel.channel(CHANNELS.state),
  acquired: diagnosticsChannel.channel(CHANNELS.acquired),
  lost: diagnosticsChannel.channel(CHANNELS.lost),
  released: diagnosticsChannel.channel(CHANNELS.released),
  error: diagnosticsChannel.channel(CHANNELS.error),
  partitionAssigned: diagnosticsChannel.channel(CHANNELS.partitionAssigned),
  partitionRevoked: diagnosticsChannel.channel(CHANNELS.partitionRevoked),
};

/** PartitionedLeadership messages: the worker's name and id, the partition. */
export interface PartitionMessage {
  /** The group's name (the `name` option). */
  name: string;
  /** The worker's id. */
  id: string;
  /** The partition, from 0. */
  partition: number;
}
/** A message of {@link CHANNELS}.partitionAssigned. */
export interface PartitionAssignedMessage extends PartitionMessage {
  /** The id of the partition's term that opened on this worker. */
  termId: number;
}
/** A message of {@link CHANNELS}.partitionRevoked. */
export interface PartitionRevokedMessage extends PartitionMessage {
  /** Why the term ended: handed to another worker, lost, or this worker shut down. */
  reason: 'rebalance' | 'lost' | 'shutdown';
}

/** The message type of each channel. */
export interface ChannelMessages {
  state: StateMessage;
  acquired: AcquiredMessage;
  lost: LostMessage;
  released: ChannelBase;
  error: ErrorMessage;
  partitionAssigned: PartitionAssignedMessage;
  partitionRevoked: PartitionRevokedMessage;
}

export function publish<K extends keyof typeof CHANNELS>(name: K, message: ChannelMessages[K]): void {
  const ch = channels[name];
  if (ch.hasSubscribers) ch.publish(message);
}
