/**
 * What both elections' `health()` share (docs/observability.md, "Probes"): the answer's
 * shape, the loop's pulse and the event-loop heartbeat (`Vitals`), and the words for the
 * reasons both give.
 */
import type { Clock } from './clock.js';

/**
 * What every `health()` answers (`LeaderLock`, `PartitionedLeadership`), and what `probes()`
 * serves: `/healthz` follows `live`, `/readyz` follows `ready`.
 */
export interface Health {
  /** False when the process is wedged and a restart would help. */
  readonly live: boolean;
  /** True when it takes part normally (see each class for when). */
  readonly ready: boolean;
  /** Why `live` or `ready` is false, one line each; empty when both are true. */
  readonly reasons: readonly string[];
}

/** Event-loop heartbeat period; a beat LOOP_BLOCKED_MS late or more means the loop was blocked. */
export const HEARTBEAT_MS = 500;
export const LOOP_BLOCKED_MS = 2000;
/**
 * How long a block is reported after the loop woke. A probe that arrives during a block is
 * answered only after it, and the heartbeat timer runs before the probe's I/O callback: the
 * block must still be reported then.
 */
export const BLOCK_REPORTED_MS = 10_000;

/**
 * The lifecycle's pulse: when its loop last made progress (every step and every wait
 * re-arms the loop's wake-up signal, which counts), and an event-loop heartbeat.
 */
export class Vitals {
  private progressAt: number;
  private beatAt: number;
  private timer: unknown = null;
  private lastBlock: { ms: number; endedAt: number } | null = null;

  constructor(private readonly clock: Clock) {
    this.progressAt = clock.now();
    this.beatAt = clock.now();
  }

  progress(): void {
    this.progressAt = this.clock.now();
  }

  /** Start the heartbeat (a timer on the lock's clock; the real clock's timers are unref'd). */
  start(): void {
    this.beatAt = this.clock.now();
    const beat = (): void => {
      const now = this.clock.now();
      const late = now - this.beatAt - HEARTBEAT_MS;
      if (late >= LOOP_BLOCKED_MS) this.lastBlock = { ms: late, endedAt: now };
      this.beatAt = now;
      this.timer = this.clock.setTimeout(beat, HEARTBEAT_MS);
    };
    this.timer = this.clock.setTimeout(beat, HEARTBEAT_MS);
  }

  stop(): void {
    if (this.timer !== null) this.clock.clearTimeout(this.timer);
    this.timer = null;
  }

  /** How long the loop has made no progress. */
  get quietMs(): number {
    return this.clock.now() - this.progressAt;
  }

  /**
   * How long the event loop was blocked: the heartbeat overdue by LOOP_BLOCKED_MS or more
   * now, or a block that ended less than BLOCK_REPORTED_MS ago. Null if neither.
   */
  get blockedMs(): number | null {
    if (this.timer === null) return null;
    const now = this.clock.now();
    const late = now - this.beatAt - HEARTBEAT_MS;
    if (late >= LOOP_BLOCKED_MS) return late;
    const b = this.lastBlock;
    return b && now - b.endedAt < BLOCK_REPORTED_MS ? b.ms : null;
  }
}

/** The reason for a blocked event loop (`Vitals.blockedMs`), the same for every class. */
export function loopBlocked(ms: number): string {
  return `the event loop was blocked for at least ${Math.round(ms)} ms (in the last ${BLOCK_REPORTED_MS / 1000} s)`;
}

/** The reason for a callback past its deadline (`Callbacks.hung()`), the same for every class. */
export function hungCallback(hung: { event: string; ms: number }, callbackTimeoutMs: number): string {
  const name = `on${hung.event[0]?.toUpperCase()}${hung.event.slice(1)}`;
  return `an ${name} callback has not returned after ${Math.round(hung.ms)} ms (callbackTimeoutMs ${callbackTimeoutMs})`;
}
