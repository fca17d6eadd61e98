/**
 * `pgleaderlock/otel`: OpenTelemetry metrics for a `LeaderLock` or a `PartitionedLeadership`,
 * on `@opentelemetry/api` (an optional peer dependency: install it to use this entry).
 *
 * ```ts
 * import { instrument } from 'pgleaderlock/otel';
 * const stop = instrument(lock); // the global MeterProvider, or { meterProvider }
 * ```
 *
 * Metrics (attributes `pgleaderlock.name` when the target has a name, `pgleaderlock.lock`
 * = `key1,key2` for a lock):
 * - `pgleaderlock.leader` (gauge, 1 while leading, else 0; a partition worker: 1 while it
 *   owns a partition);
 * - `pgleaderlock.terms` (counter: terms opened; a partition worker: partitions assigned);
 * - `pgleaderlock.acquisition.duration` (histogram, s: a lock's wait from following to its
 *   term opening);
 * - `pgleaderlock.handoff.duration` (histogram, s: `LockMetrics`' last failover, from the
 *   moment it last knew another held the lock to its own term opening);
 * - `pgleaderlock.errors` (counter by `error.type`, the error's code; a lock's errors, read
 *   from its diagnostics channel so that no `onError` is registered: the lock's warning for
 *   unheard errors stays on);
 * - `pgleaderlock.partitions.owned` (gauge, a partition worker).
 *
 * For a `LeaderWatch` (which leads nothing): `pgleaderlock.watch.connected` (gauge, 1 while
 * its connection is up), `pgleaderlock.watch.leader` (gauge, 1 while it knows of a leader)
 * and `pgleaderlock.watch.changes` (counter: leader changes it reported). Its errors are not
 * counted: that would take its `onError`, and so its warning for unheard errors.
 * The function returned unregisters them.
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import { type Attributes, type MeterProvider, metrics, type ObservableResult } from '@opentelemetry/api';
import {
  CHANNELS,
  type ErrorMessage,
  type LeaderLock,
  type LeaderWatch,
  LockMetrics,
  type PartitionedLeadership,
} from 'pgleaderlock';
import { systemClock } from '../core/clock.js';

/** Options of {@link instrument}. */
export interface InstrumentOptions {
  /** Where the instruments are created. Default: the global one (`metrics.getMeterProvider()`). */
  meterProvider?: MeterProvider;
}

/** Register the metrics of `target`; returns the function that unregisters them. */
export function instrument(
  target: LeaderLock | PartitionedLeadership | LeaderWatch,
  options: InstrumentOptions = {},
): () => void {
  const t = target as unknown as Record<string, unknown>;
  const isWatch = typeof t === 'object' && t !== null && typeof t.onChange === 'function' && 'connected' in t;
  if (typeof t !== 'object' || t === null || (typeof t.health !== 'function' && !isWatch)) {
    throw new TypeError('instrument needs a LeaderLock, a PartitionedLeadership or a LeaderWatch');
  }
  const provider = options.meterProvider ?? metrics.getMeterProvider();
  const meter = provider.getMeter('pgleaderlock');
  if (isWatch) return instrumentWatch(target as LeaderWatch, meter);
  const listening = new AbortController();
  const signal = listening.signal;
  const partitioned = typeof t.runForEach === 'function';
  const attrs: Attributes = {};
  if (typeof t.name === 'string') attrs['pgleaderlock.name'] = t.name;
  if (!partitioned) attrs['pgleaderlock.lock'] = `${String(t.key1)},${String(t.key2)}`;

  const leader = meter.createObservableGauge('pgleaderlock.leader', {
    description: '1 while this process leads (a partition worker: while it owns a partition), else 0',
    unit: '1',
  });
  const terms = meter.createCounter('pgleaderlock.terms', { description: 'Terms opened', unit: '{term}' });
  const errors = meter.createCounter('pgleaderlock.errors', {
    description: 'Errors reported',
    unit: '{error}',
  });
  const cleanups: (() => void)[] = [];

  if (partitioned) {
    const workers = target as PartitionedLeadership;
    const observeLeader = (r: ObservableResult): void => r.observe(workers.owned.size > 0 ? 1 : 0, attrs);
    leader.addCallback(observeLeader);
    const owned = meter.createObservableGauge('pgleaderlock.partitions.owned', {
      description: 'Partitions this worker owns',
      unit: '{partition}',
    });
    const observeOwned = (r: ObservableResult): void => r.observe(workers.owned.size, attrs);
    owned.addCallback(observeOwned);
    workers.onAssigned(() => terms.add(1, attrs), { signal });
    cleanups.push(
      () => leader.removeCallback(observeLeader),
      () => owned.removeCallback(observeOwned),
    );
  } else {
    const lock = target as LeaderLock;
    const acquisition = meter.createHistogram('pgleaderlock.acquisition.duration', {
      description: 'From following to the term opening',
      unit: 's',
    });
    const handoff = meter.createHistogram('pgleaderlock.handoff.duration', {
      description: 'From the last moment another was known to hold the lock to the term opening',
      unit: 's',
    });
    const observeLeader = (r: ObservableResult): void => r.observe(lock.isLeader ? 1 : 0, attrs);
    leader.addCallback(observeLeader);
    // registered before this function's onAcquired: its failover figure is ready by then
    const lm = new LockMetrics(lock);
    let following: number | null = lock.isLeader ? null : systemClock.now();
    lock.onStateChange(
      (_from, to) => {
        if ((to === 'follower' || to === 'acquiring') && following === null) following = systemClock.now();
      },
      { signal },
    );
    lock.onAcquired(
      () => {
        terms.add(1, attrs);
        if (following !== null) acquisition.record((systemClock.now() - following) / 1000, attrs);
        following = null;
        const failover = lm.snapshot().lastFailoverMs;
        if (failover !== null) handoff.record(failover / 1000, attrs);
      },
      { signal },
    );
    const onError = (message: unknown): void => {
      const m = message as ErrorMessage;
      if (m.id !== lock.id) return;
      const code = (m.error as { code?: unknown }).code;
      errors.add(1, { ...attrs, 'error.type': typeof code === 'string' ? code : m.error.name });
    };
    diagnosticsChannel.subscribe(CHANNELS.error, onError);
    cleanups.push(
      () => leader.removeCallback(observeLeader),
      () => lm.close(),
      () => diagnosticsChannel.unsubscribe(CHANNELS.error, onError),
    );
  }
  return () => {
    listening.abort();
    for (const c of cleanups) c();
  };
}

/** `instrument` for a `LeaderWatch`: connected, a leader known, changes. */
function instrumentWatch(watch: LeaderWatch, meter: ReturnType<MeterProvider['getMeter']>): () => void {
  const attrs: Attributes = { 'pgleaderlock.lock': `${watch.key1},${watch.key2}` };
  const connected = meter.createObservableGauge('pgleaderlock.watch.connected', {
    description: '1 while the watch is connected, else 0',
    unit: '1',
  });
  const known = meter.createObservableGauge('pgleaderlock.watch.leader', {
    description: '1 while the watch knows of a leader, else 0',
    unit: '1',
  });
  const changes = meter.createCounter('pgleaderlock.watch.changes', {
    description: 'Leader changes the watch reported',
    unit: '{change}',
  });
  const observeConnected = (r: ObservableResult): void => r.observe(watch.connected ? 1 : 0, attrs);
  const observeKnown = (r: ObservableResult): void => r.observe(watch.leader ? 1 : 0, attrs);
  connected.addCallback(observeConnected);
  known.addCallback(observeKnown);
  const listening = new AbortController();
  watch.onChange(() => changes.add(1, attrs), { signal: listening.signal });
  return () => {
    listening.abort();
    connected.removeCallback(observeConnected);
    known.removeCallback(observeKnown);
  };
}
