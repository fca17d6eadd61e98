/**
 * `PartitionedLeadership.health()`: liveness and readiness of a partition worker, with the
 * meaning `LeaderLock.health()` gives them (docs/observability.md, "Probes"). A pure
 * function of a snapshot, so the worker's sessions, its callbacks and its loop each
 * contribute their part without knowing about probes.
 */
import { type Health, loopBlocked } from '../core/vitals.js';
import type { RevokeReason } from './terms.js';

/** A snapshot from `workers.stats()`. */
export interface PartitionStats {
  /** Partitions this worker owns now (`workers.owned.size`). */
  owned: number;
  /** Members seen at the last reconcile, this worker included. */
  members: number;
  /** Partition terms opened on this worker. */
  acquisitions: number;
  /** Open partition terms that ended, whatever the reason. */
  revocations: number;
  /** Open partition terms lost involuntarily. */
  losses: number;
  /** Revocations of open terms by reason (they add up to `revocations`; `lost` is `losses`). */
  revocationsByReason: Record<RevokeReason, number>;
  /** Reconciles: each compares the members and the owned partitions with the assignment. */
  reconciles: number;
  /** Statements sent on both sessions. */
  statements: number;
}

/** The answer of `workers.health()`. */
export interface PartitionHealth extends Health {
  /**
   * False when the worker is wedged and a restart would help: its loop has made no progress
   * for longer than any of its steps can take, a callback (`onAssigned`, `onRevoked`,
   * `onError`) has not returned past `callbackTimeoutMs`, or the event loop was blocked for
   * 2 s or more in the last 10 s. True before `start()` and after `shutdown()` (unless a
   * callback started before is still hung).
   */
  readonly live: boolean;
  /**
   * True when started, live, and a member on an open member session (owning partitions
   * or not). False before `start()`, after `shutdown()`, while shutting down, while the
   * member session is not open (connecting, reconnecting, the database unreachable).
   */
  readonly ready: boolean;
  /** The partitions this worker owns now (`owned.size`). */
  readonly owned: number;
  /** The members seen at the last reconcile, this worker included (`memberIds.length`). */
  readonly members: number;
}

/** Where the worker's loop is (its member session, not its partitions). */
export type WorkerPhase =
  /** No run: before `start()`, or after the run ended. */
  | 'stopped'
  /** Started, but no open member session: the first connection, or after one ended. */
  | 'connecting'
  /** A member on an open member session. */
  | 'running'
  /** `shutdown()` was called and the run has not ended yet. */
  | 'stopping';

/** What `assessPartitionHealth` reads, taken by `PartitionedLeadership.health()`. */
export interface PartitionHealthSnapshot {
  /** `start()` was called (this run or an earlier one). */
  readonly started: boolean;
  readonly phase: WorkerPhase;
  /**
   * Why the last member session ended, or the last attempt to open one failed (this
   * run); read only while `connecting`.
   */
  readonly lastError: Error | null;
  /** One line per callback (or run) past its deadline, e.g. "an onAssigned callback … has not returned after 12000 ms". */
  readonly hung: readonly string[];
  /** `Vitals.blockedMs`: how long the event loop was blocked, if it was lately. */
  readonly loopBlockedMs: number | null;
  /** `Vitals.quietMs` of the running loop (null when not running), and the longest any of its steps may take. */
  readonly quietMs: number | null;
  readonly quietBoundMs: number;
  readonly owned: number;
  readonly members: number;
  /** Running: why the ring watch's session is down (it cannot see deaths), or null. */
  readonly watchDown?: Error | null;
}

/**
 * The longest the worker's loop may go between two steps (a generous bound): a reconcile
 * or a failed session drains runs (up to `drainTimeoutMs`, at most three drains in a row:
 * lost, handed back, and lost again when the session then ends), sends a chain of
 * statements each bounded by `queryTimeoutMs`, and waits up to a health interval or a
 * back-off (at most 5 s) before the next step.
 */
export function quietBoundMs(o: {
  healthIntervalMs: number;
  queryTimeoutMs: number;
  drainTimeoutMs: number;
}): number {
  return Math.max(o.healthIntervalMs, 5000) + 3 * o.drainTimeoutMs + 20 * o.queryTimeoutMs + 1000;
}

export function assessPartitionHealth(s: PartitionHealthSnapshot): PartitionHealth {
  const notLive: string[] = [];
  if (
    (s.phase === 'connecting' || s.phase === 'running') &&
    s.quietMs !== null &&
    s.quietMs > s.quietBoundMs
  ) {
    notLive.push(
      `the worker's loop has made no progress for ${Math.round(s.quietMs)} ms (its steps take at most ${s.quietBoundMs} ms)`,
    );
  }
  if (s.loopBlockedMs !== null) notLive.push(loopBlocked(s.loopBlockedMs));
  notLive.push(...s.hung);
  const notReady: string[] = [];
  if (s.phase === 'stopped') notReady.push(s.started ? 'stopped' : 'not started');
  else if (s.phase === 'stopping') notReady.push('shutting down');
  else if (s.phase === 'connecting') {
    notReady.push(
      s.lastError
        ? `the last attempt failed: ${s.lastError.message}`
        : 'connecting: the member session is not open yet',
    );
  } else if (s.phase === 'running' && s.watchDown) {
    notReady.push(`the ring watch's session is down (deaths are seen late): ${s.watchDown.message}`);
  }
  const live = notLive.length === 0;
  return {
    live,
    ready: live && notReady.length === 0,
    reasons: [...notLive, ...notReady],
    owned: s.owned,
    members: s.members,
  };
}

/** The reason for a run still going past its deadline after its partition was revoked. */
export function stuckRun(run: { partition: number; ms: number }): string {
  return `runForEach work of partition ${run.partition} is still running ${Math.round(run.ms)} ms after its term ended`;
}
