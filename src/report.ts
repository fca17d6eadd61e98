/**
 * What the lifecycle tells the outside world about an event: the log line, the counter
 * behind `stats()`, the diagnostics_channel message and the user's callbacks, always
 * together and in that order. Reporting never changes what the lifecycle does.
 */
import type { Callbacks } from './callbacks.js';
import { PgLeaderLockError } from './errors.js';
import { type Counters, publish } from './observe.js';
import type { ResolvedOptions } from './options.js';
import type { Term } from './term.js';

export class Reporter {
  constructor(
    private readonly o: ResolvedOptions,
    private readonly callbacks: Callbacks,
    private readonly counters: Counters,
  ) {}

  private get who(): { id: string; key1: number; key2: number } {
    return { id: this.o.id, key1: this.o.key1, key2: this.o.key2 };
  }

  acquired(term: Term, attempt: number): void {
    const { key1, key2 } = this.o;
    this.o.logger.info({ event: 'lock_acquired', key1, key2, attempt, term: term.id }, 'lock_acquired');
    publish('acquired', { ...this.who, term });
    this.callbacks.emit('acquired', term);
  }

  acquireFailed(): void {
    this.counters.failedAttempts += 1;
    this.callbacks.emit('acquireFailed');
  }

  lost(error: Error | null): void {
    const { key1, key2 } = this.o;
    this.o.logger.warn({ event: 'lock_lost', key1, key2, error: error?.message }, 'lock_lost');
    this.counters.losses += 1;
    publish('lost', { ...this.who, error });
    this.callbacks.emit('lost');
  }

  released(): void {
    const { key1, key2 } = this.o;
    this.o.logger.info({ event: 'lock_released', key1, key2 }, 'lock_released');
    this.counters.releases += 1;
    publish('released', this.who);
    this.callbacks.emit('released');
  }

  /** A grant not proven clean: the lock is held, the term waits for the takeover fence. */
  fenced(delayMs: number): void {
    const { key1, key2 } = this.o;
    this.o.logger.info({ event: 'takeover_fence', key1, key2, delayMs }, 'takeover_fence');
    this.counters.takeoverFences += 1;
    this.callbacks.emit('takeoverFence', { delayMs });
  }

  stopped(): void {
    this.callbacks.emit('stopped');
  }

  error(error: Error | null): void {
    const err = error ?? new PgLeaderLockError('unknown error');
    const { key1, key2 } = this.o;
    const code = (err as { code?: unknown }).code;
    this.o.logger.error({ event: 'error', key1, key2, code, error: err.message }, 'error');
    this.counters.lastError = err;
    publish('error', { ...this.who, error: err });
    this.callbacks.emit('error', err);
  }

  /** A log line only: `health_check_failed` (warn) or `leadership_recovered` (info). */
  note(event: 'health_check_failed' | 'leadership_recovered', error: Error | null = null): void {
    const { key1, key2 } = this.o;
    if (event === 'health_check_failed')
      this.o.logger.warn({ event, key1, key2, error: error?.message }, event);
    else this.o.logger.info({ event, key1, key2 }, event);
  }
}
