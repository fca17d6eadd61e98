/**
 * Events on `node:diagnostics_channel`, published only when someone subscribes: both
 * elections publish here.
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import type { SpecState } from '../leader/state.js';
import type { Term } from '../leader/term.js';

/** Channel names. Subscribe with `diagnostics_channel.subscribe(name, fn)`. */
export const CHANNELS = {
  state: 'pgleaderlock:state',
  acquired: 'pgleaderlock:acquired',
  lost: 'pgleaderlock:lost',
  released: 'pgleaderlock:released',
  error: 'pgleaderlock:error',
  /** PartitionedLeadership: a partition's term opened on this worker. */
  partitionAssigned: 'pgleaderlock:partition-assigned',
  /** PartitionedLeadership: a partition's term ended on this worker. */
  partitionRevoked: 'pgleaderlock:partition-revoked',
} as const;

/** Every message carries the lock's identity. */
export interface ChannelBase {
  id: string;
  key1: number;
  key2: number;
}
export interface StateMessage extends ChannelBase {
  from: SpecState;
  to: SpecState;
  input: string;
}
export interface AcquiredMessage extends ChannelBase {
  term: Term;
}
export interface LostMessage extends ChannelBase {
  /** Why, when known. */
  error: Error | null;
}
export interface ErrorMessage extends ChannelBase {
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
  name: string;
  id: string;
  partition: number;
}
export interface PartitionAssignedMessage extends PartitionMessage {
  termId: number;
}
export interface PartitionRevokedMessage extends PartitionMessage {
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
