/**
 * `waitForBalance()`: the waiters for "this worker owns exactly its share", resolved after
 * a reconcile or a term opening finds it so, once the callbacks queued by then have run (a
 * waiter inside one of those callbacks does not wait for the queue it is part of).
 */
import type { Clock } from '../core/clock.js';

type Waiter = (balanced: boolean) => void;

export class Balance {
  /** Each waiter, and whether it waits from inside a callback. */
  private readonly waiters = new Map<Waiter, boolean>();

  constructor(
    private readonly clock: Clock,
    /** Owning exactly this worker's share, every term open. */
    private readonly balanced: () => boolean,
    /** Resolves when the callbacks queued so far have run (or passed their deadline). */
    private readonly callbacksDrained: () => Promise<void>,
    /** Called from inside one of those callbacks. */
    private readonly inCallback: () => boolean,
  ) {}

  /** True once balanced (false after `timeoutMs`, or when the worker stops). */
  async wait(timeoutMs: number): Promise<boolean> {
    const inCallback = this.inCallback();
    if (this.balanced()) {
      if (!inCallback) await this.callbacksDrained();
      return true;
    }
    return new Promise<boolean>((resolve) => {
      const done = (balanced: boolean): void => {
        this.clock.clearTimeout(timer);
        this.waiters.delete(done);
        resolve(balanced);
      };
      const timer = this.clock.setTimeout(() => done(false), timeoutMs);
      this.waiters.set(done, inCallback);
    });
  }

  /** After a reconcile, or a term opening: resolve the waiters if balanced. */
  check(): void {
    if (this.waiters.size === 0 || !this.balanced()) return;
    for (const [w, inCallback] of [...this.waiters]) if (inCallback) w(true);
    void this.callbacksDrained().then(() => {
      if (this.balanced()) for (const w of [...this.waiters.keys()]) w(true);
    });
  }

  /** The worker stopped (or its shutdown timed out): every waiter gets false. */
  stopped(): void {
    for (const w of [...this.waiters.keys()]) w(false);
  }
}
