/**
 * The lease behind a worker's `owned` and its terms (docs/partitions.md, "Safety"): each
 * ownership check that proves the worker's locks held renews it to the check's send time
 * plus the lease the session's applied settings give (safety.ts). Past it `owned` is empty
 * and `fenced()` refuses at once (both read the clock), and the lease timer's `expire()`
 * closes the session, which ends every term: a frozen worker, on waking, may run other
 * callbacks before that timer's, so work must check `owned` (or write through `fenced()`)
 * before acting.
 */
import type { Terms } from './terms.js';

export class Lease {
  private timer: NodeJS.Timeout | null = null;
  /** The end of the last lease, kept after it ends (what `leaseExpiresAt` reports then). */
  last: number | null = null;

  constructor(
    private readonly terms: Terms,
    private readonly expire: () => void,
  ) {}

  /** Renew to `until` (on performance.now()); null ends it (no term believes). */
  set(until: number | null): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.terms.leaseUntil = until;
    if (until !== null) this.last = until;
    if (until === null || !Number.isFinite(until)) return; // a server that never drops a dead session: no lapse
    this.timer = setTimeout(
      () => {
        this.timer = null;
        this.expire();
      },
      Math.max(0, until - performance.now()),
    );
    this.timer.unref();
  }

  /**
   * Wait for `drain` (runs winding down), running `check` every `intervalMs` meanwhile: it
   * returns the new lease end when every partition still run is held (else null, and the
   * lease is left to run out), and keeps the session from the server's idle_session_timeout.
   */
  async renewWhile<T>(
    drain: Promise<T>,
    intervalMs: number,
    check: () => Promise<number | null>,
  ): Promise<T> {
    const done = drain.then((value) => ({ value }));
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const tick = new Promise<null>((resolve) => {
        timer = setTimeout(() => resolve(null), intervalMs);
      });
      const first = await Promise.race([done, tick]);
      clearTimeout(timer);
      if (first) return first.value;
      const until = await check();
      if (until !== null) this.set(until);
    }
  }
}
