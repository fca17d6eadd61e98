/**
 * Waits on a lock's outcome, shared by `LeaderLock` (leader/control.ts) and its test double
 * (testing/fake-leader-lock.ts): the calls of `waitForLeadership()` in progress, and
 * awaiting a promise up to a deadline. Time comes from the lock's clock.
 */
import type { Clock } from './clock.js';

/** The `waitForLeadership()` calls in progress: told `true` when a term opens, `false` when the run ends. */
export class LeadershipWaiters {
  private readonly waiting = new Set<(leading: boolean) => void>();

  constructor(private readonly clock: Clock) {}

  /** Calls waiting now. */
  get size(): number {
    return this.waiting.size;
  }

  /** Settle every call waiting now with `leading`. */
  tell(leading: boolean): void {
    for (const w of [...this.waiting]) w(leading);
  }

  /**
   * Wait to be told: true once a term opens, false when the run ends or after `timeoutMs`;
   * rejects with the signal's reason if it aborts first. Leaves no timer or listener behind.
   */
  wait(timeoutMs: number | undefined, signal: AbortSignal | undefined): Promise<boolean> {
    const { clock } = this;
    return new Promise<boolean>((resolve, reject) => {
      let timer: unknown;
      const finish = (): void => {
        this.waiting.delete(onLeading);
        signal?.removeEventListener('abort', onAbort);
        if (timer !== undefined) clock.clearTimeout(timer);
      };
      const onLeading = (leading: boolean): void => {
        finish();
        resolve(leading);
      };
      const onAbort = (): void => {
        finish();
        reject(signal?.reason);
      };
      this.waiting.add(onLeading);
      signal?.addEventListener('abort', onAbort, { once: true });
      if (timeoutMs !== undefined) timer = clock.setTimeout(() => onLeading(false), timeoutMs);
    });
  }
}

/** Await `work` until `deadline` (clock time; null: no limit). True if it settled in time. */
export async function within(clock: Clock, work: Promise<void>, deadline: number | null): Promise<boolean> {
  if (deadline === null) {
    await work;
    return true;
  }
  let timer: unknown;
  const timeout = new Promise<false>((resolve) => {
    timer = clock.setTimeout(() => resolve(false), Math.max(0, deadline - clock.now()));
  });
  try {
    return await Promise.race([work.then(() => true as const), timeout]);
  } finally {
    clock.clearTimeout(timer);
  }
}
