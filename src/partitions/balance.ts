/**
 * `waitForBalance()`: the waiters for "this worker owns exactly its share", resolved after
 * a reconcile or a term opening finds it so, once the callbacks queued by then have run.
 */
import type { Clock } from '../core/clock.js';

export class Balance {
  private readonly waiters = new Set<(balanced: boolean) => void>();

  constructor(
    private readonly clock: Clock,
    /** Owning exactly this worker's share, every term open. */
    private readonly balanced: () => boolean,
    /** Resolves when the callbacks queued so far have run (or passed their deadline). */
    private readonly callbacksDrained: () => Promise<void>,
  ) {}

  /** True once balanced (false after `timeoutMs`, or when the worker stops). */
  async wait(timeoutMs: number): Promise<boolean> {
    if (this.balanced()) {
      await this.callbacksDrained();
      return true;
    }
    return new Promise<boolean>((resolve) => {
      const done = (balanced: boolean): void => {
        this.clock.clearTimeout(timer);
        this.waiters.delete(done);
        resolve(balanced);
      };
      const timer = this.clock.setTimeout(() => done(false), timeoutMs);
      this.waiters.add(done);
    });
  }

  /** After a reconcile, or a term opening: resolve the waiters if balanced. */
  check(): void {
    if (this.waiters.size === 0 || !this.balanced()) return;
    void this.callbacksDrained().then(() => {
      if (this.balanced()) for (const w of [...this.waiters]) w(true);
    });
  }

  /** The worker stopped (or its shutdown timed out): every waiter gets false. */
  stopped(): void {
    for (const w of [...this.waiters]) w(false);
  }
}
