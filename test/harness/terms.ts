/**
 * Terms as they open and end, for the one overlap detector (overlaps.ts): every lock and
 * partition term of this process, recorded the moment it opens and ends from the library's
 * own synchronous `node:diagnostics_channel` events (`pgleaderlock:acquired` and the term's
 * signal; `pgleaderlock:partition-assigned` and `-revoked`), on one clock
 * (`performance.now()`). Not sampled: a term that overlaps another for a microsecond counts.
 * Registers an afterEach that stops recording.
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import { performance } from 'node:perf_hooks';
import { afterEach } from 'vitest';
import {
  type AcquiredMessage,
  CHANNELS,
  type PartitionAssignedMessage,
  type PartitionRevokedMessage,
} from '../../src/core/channels.js';
import { type Overlap, overlapsOf, type Span } from './overlaps.js';

export interface TermSpan extends Span {
  /** The lock's or worker's id. */
  readonly owner: string;
  /** What the term is of: `key1,key2`, or `name#partition`. */
  readonly key: string;
  end: number | null;
}

export interface TermRecorder {
  /** Every term seen since recording began, in opening order. */
  readonly spans: TermSpan[];
  /** Terms of different owners on the same key that shared an instant (none, if the election is safe). */
  overlaps(): Overlap<TermSpan>[];
  /** Terms opened so far by `owner` (on any key). */
  opened(owner: string): number;
}

/** Start recording every term of this process; the afterEach of the calling test file stops it. */
export function useTermRecorder(): () => TermRecorder {
  const stops: (() => void)[] = [];
  afterEach(() => {
    for (const stop of stops.splice(0)) stop();
  });
  return () => {
    const spans: TermSpan[] = [];
    const open = new Map<string, TermSpan>();
    const onAcquired = (message: unknown): void => {
      const m = message as AcquiredMessage;
      const span: TermSpan = { owner: m.id, key: `${m.key1},${m.key2}`, start: performance.now(), end: null };
      spans.push(span);
      const signal = m.term.signal;
      if (signal.aborted) span.end = span.start;
      else signal.addEventListener('abort', () => (span.end = performance.now()), { once: true });
    };
    const partitionKey = (m: { name: string; partition: number }): string => `${m.name}#${m.partition}`;
    const onAssigned = (message: unknown): void => {
      const m = message as PartitionAssignedMessage;
      const span: TermSpan = { owner: m.id, key: partitionKey(m), start: performance.now(), end: null };
      spans.push(span);
      open.set(`${m.id}/${span.key}`, span);
    };
    const onRevoked = (message: unknown): void => {
      const m = message as PartitionRevokedMessage;
      const id = `${m.id}/${partitionKey(m)}`;
      const span = open.get(id);
      if (span) span.end = performance.now();
      open.delete(id);
    };
    diagnosticsChannel.subscribe(CHANNELS.acquired, onAcquired);
    diagnosticsChannel.subscribe(CHANNELS.partitionAssigned, onAssigned);
    diagnosticsChannel.subscribe(CHANNELS.partitionRevoked, onRevoked);
    stops.push(() => {
      diagnosticsChannel.unsubscribe(CHANNELS.acquired, onAcquired);
      diagnosticsChannel.unsubscribe(CHANNELS.partitionAssigned, onAssigned);
      diagnosticsChannel.unsubscribe(CHANNELS.partitionRevoked, onRevoked);
    });
    return {
      spans,
      overlaps: () =>
        overlapsOf(
          spans,
          (s) => s.owner,
          (s) => s.key,
        ),
      opened: (owner) => spans.filter((s) => s.owner === owner).length,
    };
  };
}
