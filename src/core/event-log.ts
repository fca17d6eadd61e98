/**
 * Reporting, the same for both elections: a log line carrying who reports it, and an error
 * that is logged, counted as the last error, and passed to the `error` callbacks (which
 * never throw at the caller: callbacks.ts). Each election adds its own events on top
 * (report.ts for `LeaderLock`, terms.ts for partitions).
 */
import type { Callbacks, EventMap } from './callbacks.js';
import type { Logger } from './logger.js';

export class EventLog<M extends EventMap<M>> {
  /** The last error reported, or null. */
  lastError: Error | null = null;

  constructor(
    private readonly logger: Logger,
    /** Fields every line carries: who reports (a lock's keys, a worker's name and id). */
    private readonly who: Readonly<Record<string, unknown>>,
    private readonly callbacks: Callbacks<M>,
  ) {}

  /** One log line: `{ event, ...who, ...fields }`, with the event as its message. */
  log(level: 'info' | 'warn' | 'error', event: string, fields: Record<string, unknown> = {}): void {
    this.logger[level]({ event, ...this.who, ...fields }, event);
  }

  /** An error: logged (`event: 'error'` with its `code`), kept as `lastError`, passed to onError. */
  error(error: Error): void {
    const code = (error as { code?: unknown }).code;
    this.log('error', 'error', { code, err: error });
    this.lastError = error;
    (this.callbacks as unknown as Callbacks<{ error: (e: Error) => void }>).emit('error', error);
  }
}
