/**
 * The lease behind `isLeader`: valid until `t0 + leaseMs`, t0 being when the last
 * successful check was sent. A timer calls `onLapse` when it runs out unrenewed.
 */
import type { Clock } from './clock.js';
import type { Safety } from './safety.js';

export class Lease {
  private end = Number.NEGATIVE_INFINITY;
  private timer: unknown = null;
  /** Figures of the session that last renewed the lease. */
  safety: Safety | null = null;

  constructor(
    private readonly clock: Clock,
    private readonly onLapse: () => void,
  ) {}

  /** Renew from a check (or acquisition) sent at `sentAt` under `safety`. */
  renew(safety: Safety, sentAt: number): void {
    this.safety = safety;
    this.end = sentAt + safety.leaseMs;
    this.cancel();
    this.timer = this.clock.setTimeout(
      () => {
        this.timer = null;
        if (!this.valid()) this.onLapse();
      },
      Math.max(0, this.end - this.clock.now()),
    );
  }

  /** Read from the clock at each call: false the moment a frozen process wakes past it. */
  valid(): boolean {
    return this.clock.now() < this.end;
  }

  /** When it ends (or ended), on the lock's clock; null if never renewed. */
  get expiresAt(): number | null {
    return Number.isFinite(this.end) ? this.end : null;
  }

  /** Stop the lapse timer (leaving LEADER, or stopping). */
  cancel(): void {
    if (this.timer !== null) this.clock.clearTimeout(this.timer);
    this.timer = null;
  }
}
