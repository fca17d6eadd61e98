/**
 * What a liveness and a readiness probe need (`lock.health()`, docs/observability.md,
 * "Probes"). Liveness: is this process's lock still working, or wedged (restart it)?
 * Readiness: is it taking part in the election normally? A follower is ready: probes that
 * fail on non-leaders make Kubernetes restart-loop every follower.
 */
import type { Clock } from './clock.js';
import type { LockState } from './state.js';

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

/** The answer of `lock.health()`. */
export interface LockHealth extends Health {
  /**
   * False when the lock is wedged and a restart would help: its loop has made no progress
   * for longer than any of its steps can take, a callback has not returned past
   * `callbackTimeoutMs`, leader work is still running `callbackTimeoutMs` after its term
   * ended, the event loop was blocked for 2 s or more in the last 10 s, or the lock stopped
   * on its own (an internal error, a retry strategy that gave up, a loss without
   * `autoReacquire`). True before `start()` and after `shutdown()` (unless a callback
   * started before is still hung).
   */
  readonly live: boolean;
  /**
   * True when started, live, and leading or following normally: a follower is ready, from
   * `start()` on. False before `start()`, after a stop, while RECONNECTING, and while the
   * last attempt failed (the database unreachable, a refusal) until an attempt is under way
   * on a live connection again.
   */
  readonly ready: boolean;
  readonly state: LockState;
  readonly isLeader: boolean;
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

/** What assessHealth reads; each field from its owner (lock, lifecycle, callbacks, runs). */
export interface HealthInputs {
  readonly state: LockState;
  readonly isLeader: boolean;
  /** A lifecycle is running (between start() and its end). */
  readonly running: boolean;
  /** shutdown() was called on the running lifecycle. */
  readonly stopping: boolean;
  /** The last run ended without shutdown(): why. */
  readonly stoppedOnItsOwn: Error | null;
  /** The running lifecycle's pulse, and the longest any of its steps may take. */
  readonly quietMs: number | null;
  readonly quietBoundMs: number;
  readonly blockedMs: number | null;
  readonly hungCallback: { readonly event: string; readonly ms: number } | null;
  readonly overdueRun: { readonly termId: number; readonly ms: number } | null;
  readonly callbackTimeoutMs: number;
  /** The last attempt failed (a follower retrying), with this error. */
  readonly failing: Error | null;
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

export function assessHealth(i: HealthInputs): LockHealth {
  const notLive: string[] = [];
  if (i.stoppedOnItsOwn) notLive.push(`the lock stopped on its own: ${i.stoppedOnItsOwn.message}`);
  if (i.running && !i.stopping && i.quietMs !== null && i.quietMs > i.quietBoundMs) {
    notLive.push(
      `the lock's loop has made no progress for ${Math.round(i.quietMs)} ms in state ${i.state} (its steps take at most ${i.quietBoundMs} ms)`,
    );
  }
  if (i.blockedMs !== null) notLive.push(loopBlocked(i.blockedMs));
  if (i.hungCallback) notLive.push(hungCallback(i.hungCallback, i.callbackTimeoutMs));
  if (i.overdueRun && i.overdueRun.ms > i.callbackTimeoutMs) {
    notLive.push(
      `leader work (runWhileLeader) of term ${i.overdueRun.termId} is still running ${Math.round(i.overdueRun.ms)} ms after its term ended`,
    );
  }
  const notReady: string[] = [];
  if (!i.running) notReady.push(i.stoppedOnItsOwn ? 'stopped' : 'not started');
  else if (i.stopping) notReady.push('shutting down');
  else if (i.state === 'reconnecting') notReady.push('reconnecting: leadership is suspended');
  else if (i.failing && !i.isLeader) notReady.push(`the last attempt failed: ${i.failing.message}`);
  const live = notLive.length === 0;
  return {
    live,
    ready: live && notReady.length === 0,
    state: i.state,
    isLeader: i.isLeader,
    reasons: [...notLive, ...notReady],
  };
}
