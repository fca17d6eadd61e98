/**
 * `PartitionedElection`: what code that works on partitions needs of a
 * `PartitionedLeadership`. `PartitionedLeadership` implements it, and so does
 * `FakePartitionedLeadership` (`pgleaderlock/testing`).
 */
import type { ListenerOptions } from '../core/callbacks.js';
import type { LeaderWorkHandle } from '../core/runner.js';
import type { PartitionHealth } from './health.js';
import type { PartitionWork } from './runs.js';
import type { PartitionCallbackMap } from './terms.js';

/**
 * The public surface of a `PartitionedLeadership` that needs no database of its own:
 * lifecycle, the partitions owned, their work, callbacks and probes. Type your code against
 * it to accept a `PartitionedLeadership` or a `FakePartitionedLeadership`
 * (`pgleaderlock/testing`). Each member means what it means on `PartitionedLeadership`.
 */
export interface PartitionedElection extends AsyncDisposable {
  /** This worker's id. */
  readonly id: string;
  /** The name the workers share. */
  readonly name: string;
  /** The partitions this worker owns now. */
  readonly owned: ReadonlySet<number>;
  /** Join. */
  start(): Promise<void>;
  /** Hand every partition back (runs drained) and leave. Idempotent. */
  shutdown(options?: { timeoutMs?: number }): Promise<void>;
  /** `true` once this worker owns its share and the callbacks of its terms have run; `false` on timeout or stop. */
  waitForBalance(options?: { timeoutMs?: number }): Promise<boolean>;
  /** Run `fn` for each partition while owned; its term's signal aborts when the partition is revoked or lost. */
  runForEach(fn: PartitionWork): LeaderWorkHandle;
  /** For liveness and readiness probes. */
  health(): PartitionHealth;
  /** Register a callback for a partition's term opening; it receives the partition and the term. Returns `fn`. */
  onAssigned(
    fn: PartitionCallbackMap['assigned'],
    options?: ListenerOptions,
  ): PartitionCallbackMap['assigned'];
  /** Register a callback for a partition's term ending (its signal has aborted), with the reason. Returns `fn`. */
  onRevoked(fn: PartitionCallbackMap['revoked'], options?: ListenerOptions): PartitionCallbackMap['revoked'];
  /** Register a callback for errors (nothing is ever thrown at the caller). Returns `fn`. */
  onError(fn: PartitionCallbackMap['error'], options?: ListenerOptions): PartitionCallbackMap['error'];
}
