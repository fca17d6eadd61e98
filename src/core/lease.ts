/**
 * A lease: valid until the send time of the last ownership check that succeeded plus the
 * lease the session's applied settings give (safety.ts, docs/safety.md). `valid()` reads
 * the clock at each call, so it is false the moment a frozen process wakes past the end;
 * a timer calls `onLapse` when the lease runs out unrenewed.
 */
import { type Clock, sleep } from './clock.js';

export class Lease {
  private end: number | null = null;
  private timer: unknown = null;
  /** The end of the last lease, kept after it ends (what `leaseExpiresAt` reports then). */
  last: number | null = null;

  constructor(
    private readonly clock: Clock,
    private readonly onLapse: () => void,
  ) {}

  /** Renew to `until` (on the clock); null ends it. */
  set(until: number | null): void {
    if (this.timer !== null) this.clock.clearTimeout(this.timer);
    this.timer = null;
    this.end = until;
    if (until !== null) this.last = until;
    if (until === null || !Number.isFinite(until)) return; // a server that never drops a dead session: no lapse
    this.arm(until);
  }

  /**
   * The lapse timer for `until`. Node's timers count from the event loop's cached time, so
   * one can fire a millisecond or two before `now()` reaches `until` (measured: up to 1.5 ms
   * after a busy turn): then it is armed again for the rest, or the lease would run out with
   * no `onLapse` at all.
   */
  private arm(until: number): void {
    this.timer = this.clock.setTimeout(
      () => {
        this.timer = null;
        if (this.valid()) this.arm(until);
        else this.onLapse();
      },
      Math.max(0, until - this.clock.now()),
    );
  }

  /** True while the lease runs. */
  valid(): boolean {
    return this.end !== null && this.clock.now() < this.end;
  }

  /** When the current lease ends, or null when there is none. */
  get until(): number | null {
    return this.end;
  }

  /**
   * Wait for `drain` (work winding down), running `check` every `intervalMs` meanwhile: it
   * returns the new lease end when everything still run is held (else null, and the lease
   * is left to run out), and keeps the session from the server's idle_session_timeout.
   */
  async renewWhile<T>(
    drain: Promise<T>,
    intervalMs: number,
    check: () => Promise<number | null>,
  ): Promise<T> {
    const done = drain.then((value) => ({ value }));
    for (;;) {
      const tick = new AbortController();
      const first = await Promise.race([done, sleep(this.clock, intervalMs, tick.signal).then(() => null)]);
      tick.abort();
      if (first) return first.value;
      const until = await check();
      if (until !== null) this.set(until);
    }
  }
}
