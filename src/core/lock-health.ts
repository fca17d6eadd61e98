/**
 * What a liveness and a readiness probe need (`lock.health()`, docs/observability.md,
 * "Probes"). Liveness: is this process's lock still working, or wedged (restart it)?
 * Readiness: is it taking part in the election normally? A follower is ready: probes that
 * fail on non-leaders make Kubernetes restart-loop every follower.
 */

import type { LockState } from './state.js';
import { type Health, hungCallback, loopBlocked } from './vitals.js';

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
  /** `lock.state`. */
  readonly state: LockState;
  /** `lock.isLeader`. */
  readonly isLeader: boolean;
  /** Why `live` or `ready` is false, one line each; empty when both are true. */
  readonly reasons: readonly string[];
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
