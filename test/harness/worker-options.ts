/**
 * The options every test's partition worker starts from, whether it runs in the test's
 * process (workers.ts `partitionWorker`) or in a process of its own
 * (test/fixtures/partition-worker.fixture.ts, forked by workers.ts `forkWorker`): one set of
 * defaults, so that a figure measured with workers in processes of their own and one measured
 * in-process come from the same settings. No vitest here: the fixture loads this file.
 */
import type { PartitionedLeadershipOptions } from '../../src/index.js';

/**
 * Shorter than the library's (5 s each) so that a test sees reconciles and timeouts within
 * seconds. The takeover delay stays the library's (250 ms) unless a test sets it.
 */
export const WORKER_DEFAULTS = {
  healthIntervalMs: 1000,
  queryTimeoutMs: 1000,
} as const satisfies Partial<PartitionedLeadershipOptions>;

/** A test's options over the defaults. */
export function workerOptions(options: PartitionedLeadershipOptions): PartitionedLeadershipOptions {
  return { ...WORKER_DEFAULTS, ...options };
}

/** The options a worker in a process of its own can be given (they travel as JSON: no functions). */
export type ChildWorkerOptions = Pick<
  PartitionedLeadershipOptions,
  | 'name'
  | 'partitions'
  | 'connectionString'
  | 'id'
  | 'healthIntervalMs'
  | 'queryTimeoutMs'
  | 'serverReleaseMs'
  | 'takeoverDelayMs'
  | 'closeTimeoutMs'
  | 'callbackTimeoutMs'
  | 'drainTimeoutMs'
  | 'watchSliceMs'
  | 'fencing'
>;

/** A worker in a process of its own: its options, and how its work behaves. */
export interface ChildWorkerConfig {
  options: ChildWorkerOptions & { id: string };
  /** How long a partition's work takes to stop after its signal aborts. */
  stopMs: number;
}

/** What the test sends the fixture: 'stats', 'shutdown' (a clean leave, then exit), a freeze (busy loop). */
export type ChildWorkerCommand = 'stats' | 'shutdown' | { type: 'freeze'; ms: number };
