/**
 * What the lifecycle tells the outside world about an event: the log line, the counter
 * behind `stats()`, the diagnostics_channel message and the user's callbacks, always
 * together and in that order. Reporting never changes what the lifecycle does.
 */

import { publish } from '../core/channels.js';
import { PgLeaderLockError } from '../core/errors.js';
import { EventLog } from '../core/event-log.js';
import type { CallbackMap, LockCallbacks } from '../core/lock-callbacks.js';
import type { ResolvedOptions } from '../core/lock-options.js';
import type { Term } from '../core/term.js';
import type { Counters } from './stats.js';

export class Reporter {
  private lastLeaderSeen: string | null = null;
  private readonly events: EventLog<CallbackMap>;

  constructor(
    private readonly o: ResolvedOptions,
    private readonly callbacks: LockCallbacks,
    private readonly counters: Counters,
  ) {
    this.events = new EventLog(o.logger, { key1: o.key1, key2: o.key2 }, callbacks);
  }

  private get who(): { id: string; key1: number; key2: number } {
    return { id: this.o.id, key1: this.o.key1, key2: this.o.key2 };
  }

  acquired(term: Term, attempt: number): void {
    this.events.log('info', 'lock_acquired', { attempt, term: term.id });
    publish('acquired', { ...this.who, term });
    this.callbacks.emit('acquired', term);
  }

  acquireFailed(): void {
    this.counters.failedAttempts += 1;
    this.callbacks.emit('acquireFailed');
  }

  lost(error: Error | null): void {
    this.events.log('warn', 'lock_lost', { err: error ?? undefined });
    this.counters.losses += 1;
    publish('lost', { ...this.who, error });
    this.callbacks.emit('lost');
  }

  released(): void {
    this.events.log('info', 'lock_released');
    this.counters.releases += 1;
    publish('released', this.who);
    this.callbacks.emit('released');
  }

  /** A grant not proven clean: the lock is held, the term waits for the takeover delay. */
  takeoverDelayed(delayMs: number, since: number): void {
    this.events.log('info', 'takeover_delay', { delayMs });
    this.counters.takeoverDelays += 1;
    this.callbacks.emit('takeoverFence', { delayMs, since });
  }

  /** Who leads, as learned (this lock's own id when it leads): onNewLeader once per change to another. */
  leaderSeen(id: string): void {
    if (id === this.lastLeaderSeen) return;
    this.lastLeaderSeen = id;
    if (id !== this.o.id) this.callbacks.emit('newLeader', id);
  }

  stopped(): void {
    this.callbacks.emit('stopped');
  }

  error(error: Error | null): void {
    const err = error ?? new PgLeaderLockError('unknown error');
    this.counters.lastError = err;
    publish('error', { ...this.who, error: err });
    this.events.error(err);
  }

  /** A log line only: `health_check_failed` (warn) or `leadership_recovered` (info). */
  note(event: 'health_check_failed' | 'leadership_recovered', error: Error | null = null): void {
    if (event === 'health_check_failed') this.events.log('warn', event, { err: error ?? undefined });
    else this.events.log('info', event);
  }
}
