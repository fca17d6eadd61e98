/**
 * The one factory for the tests' partition workers, in this process (`partitionWorker`,
 * `useWorkers`) or in a process of their own (`forkWorker`, used by
 * test/chaos/partition-cluster.ts): both start from the same option defaults
 * (worker-options.ts), and a test states only what it changes.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { afterEach, onTestFinished } from 'vitest';
import { PartitionedLeadership, type PartitionedLeadershipOptions } from '../../src/index.js';
import { assertNoSessions, databaseUrl, testTag } from './db.js';
import { fixtureScript } from './fixture-bundle.js';
import { type ChildWorkerConfig, workerOptions } from './worker-options.js';

/**
 * A worker in this process from the shared defaults and `options`, on the run's shared
 * server unless `options` says how to connect; shut down when the test ends.
 */
export function partitionWorker(options: PartitionedLeadershipOptions): PartitionedLeadership {
  const connects = options.connectionString ?? options.clientConfig ?? options.connect;
  const w = new PartitionedLeadership(
    workerOptions(connects === undefined ? { connectionString: databaseUrl(), ...options } : options),
  );
  onTestFinished(() => w.shutdown({ timeoutMs: 5000 }));
  return w;
}

/**
 * Workers for a test file whose ids carry a fresh tag per test: after each test they are
 * shut down and no session of theirs may be left on the shared server. `defaults` go over
 * the shared ones, each worker's own options over those.
 */
export function useWorkers(defaults: Partial<PartitionedLeadershipOptions> = {}): {
  worker(extra: Partial<PartitionedLeadershipOptions> & { name: string }): PartitionedLeadership;
  tag(): string;
} {
  let tag = testTag();
  let made: PartitionedLeadership[] = [];
  let n = 0;
  afterEach(async () => {
    await Promise.all(made.map((w) => w.shutdown({ timeoutMs: 5000 })));
    made = [];
    await assertNoSessions(tag);
    tag = testTag();
    n = 0;
  });
  return {
    worker(extra) {
      const w = partitionWorker({ partitions: 4, id: `${tag}-${n++}`, ...defaults, ...extra });
      made.push(w);
      return w;
    },
    tag: () => tag,
  };
}

const FIXTURE = new URL('../fixtures/partition-worker.fixture.ts', import.meta.url).pathname;

/**
 * A worker in a process of its own (test/fixtures/partition-worker.fixture.ts) from the
 * shared defaults and `config.options`; it reports its runs over IPC. The caller ends it
 * (disconnect: a clean leave; or a signal).
 */
export function forkWorker(config: ChildWorkerConfig): ChildProcess {
  const { script, execArgv } = fixtureScript(FIXTURE);
  const proc = fork(script, [JSON.stringify(config)], {
    execArgv,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  proc.on('error', () => {}); // a send to a process that has just exited (EPIPE) is no failure
  return proc;
}

/** A `partitions_taken` log line: the partitions, the delay the worker logged, when. */
export interface Take {
  readonly worker: string;
  readonly partitions: number[];
  readonly delayMs: number;
  readonly at: number;
}

/**
 * Workers (`partitionWorker`) that record each take they log and the start of each run (a
 * run lasts until its term ends), for tests that time a take to its run. `options` go to
 * every worker; `opened(take)` gives, per partition of the take, how long after it the
 * worker's run started (null: none yet).
 */
export function takeRecorder(options: Omit<PartitionedLeadershipOptions, 'id' | 'logger'>) {
  const takes: Take[] = [];
  const runs: { worker: string; p: number; start: number }[] = [];
  const worker = (id: string, extra: Partial<PartitionedLeadershipOptions> = {}): PartitionedLeadership => {
    const quiet = () => {};
    const w = partitionWorker({
      ...options,
      ...extra,
      id,
      logger: {
        debug: quiet,
        warn: quiet,
        error: quiet,
        info: (fields) => {
          if (fields.event !== 'partitions_taken') return;
          const { partitions, delayMs } = fields as unknown as { partitions: number[]; delayMs: number };
          takes.push({ worker: id, partitions, delayMs, at: performance.now() });
        },
      },
    });
    w.runForEach(async (p, term) => {
      runs.push({ worker: id, p, start: performance.now() });
      await new Promise((r) => term.signal.addEventListener('abort', r, { once: true }));
    });
    return w;
  };
  const opened = (t: Take): (number | null)[] =>
    t.partitions.map((p) => {
      const run = runs.find((r) => r.worker === t.worker && r.p === p && r.start >= t.at);
      return run ? run.start - t.at : null;
    });
  return { takes, runs, worker, opened };
}
