/**
 * `pgleaderlock demo --partitions P`: partitioned leadership you can watch. N workers (each
 * a `pgleaderlock partition-worker` child running a PartitionedLeadership) share P
 * partitions; once they are balanced, one is killed with SIGKILL, and the demo prints how
 * long until its partitions were owned again and how many moved; then a new worker joins
 * and takes its share. Times are from the kill (or the joiner's `joining` line) to the
 * `assigned` line that completes the new assignment, read on this process's monotonic clock.
 */
import { assign } from '../partitions/assign.js';
import type { PartitionedLeadershipOptions } from '../partitions/options.js';
import { PartitionedLeadership } from '../partitions/partitioned.js';
import {
  type Dsn,
  type Keys,
  type OptionSpec,
  optionalDuration,
  partitionCount,
  positiveInt,
  scrub,
  UsageError,
  type Values,
} from './args.js';
import { connectionOptions, EXIT, explain, humanMs, Output } from './common.js';
import { type Child, type ChildEvent, clock, DemoHost, demoName, spread } from './demo-common.js';
import { LOCK_OPTIONS, onSignals } from './run.js';

/** The workers did not rebalance in time, or one exited by itself. */
const FAILED = 1;
/** How long the workers may take to reach the assignment before the demo gives up. */
const SETTLE_MS = 30_000;

export const PARTITION_WORKER_OPTIONS: OptionSpec[] = [
  { name: 'partitions', type: 'string', value: 'P', help: 'how many partitions (1 to 4096)' },
  ...LOCK_OPTIONS,
];

/**
 * The hidden `pgleaderlock partition-worker` that `demo --partitions` runs: joins as a
 * worker and prints, one JSON object a line, `joining`, `member`, `assigned` and `revoked`
 * (the partitions of one turn of the event loop together), and `error`, until SIGINT,
 * SIGTERM or its parent going away; then it hands its partitions back and exits 0.
 */
export async function partitionWorker(values: Values, dsn: Dsn, keys: Keys): Promise<number> {
  if (keys.name === undefined) throw new UsageError('partition-worker needs --name');
  const options: PartitionedLeadershipOptions = {
    ...connectionOptions(dsn),
    name: keys.name,
    partitions: partitionCount(values),
    healthIntervalMs: optionalDuration(values, 'health-interval') ?? 1000,
  };
  if (typeof values.id === 'string') options.id = values.id;
  const delay = optionalDuration(values, 'takeover-delay');
  if (delay !== undefined) options.takeoverDelayMs = delay;
  let worker: PartitionedLeadership;
  try {
    worker = new PartitionedLeadership(options);
  } catch (err) {
    if (err instanceof TypeError || err instanceof RangeError) throw new UsageError(err.message);
    throw err;
  }
  const out = new Output(true);
  let batch: { event: string; reason?: string; partitions: number[] } | null = null;
  const flush = (): void => {
    if (!batch) return;
    const { event, reason, partitions } = batch;
    batch = null;
    out.event(event, `${event} ${partitions.length} partitions`, { partitions, reason });
  };
  const record = (event: 'assigned' | 'revoked', p: number, reason?: string): void => {
    if (batch && (batch.event !== event || batch.reason !== reason)) flush();
    if (!batch) {
      batch = { event, ...(reason === undefined ? {} : { reason }), partitions: [] };
      setImmediate(flush);
    }
    batch.partitions.push(p);
  };
  worker.onAssigned((p) => record('assigned', p));
  worker.onRevoked((p, reason) => record('revoked', p, reason));
  worker.onError((err) => out.event('error', scrub(explain(err), dsn.url)));
  // the work: it runs until its partition is revoked
  worker.runForEach(
    (_p, term) =>
      new Promise<void>((resolve) => term.signal.addEventListener('abort', () => resolve(), { once: true })),
  );
  let requested: () => void = () => {};
  const stopRequested = new Promise<void>((resolve) => {
    requested = resolve;
  });
  void stopRequested.then(() => worker.shutdown({ timeoutMs: 5000 }));
  const removeSignals = onSignals(() => requested());
  // started by the demo (an IPC channel): leave when it goes away
  if (process.channel) {
    process.channel.unref();
    process.once('disconnect', requested);
  }
  try {
    out.event('joining', `joining "${keys.name}" as ${worker.id}`, { id: worker.id });
    await worker.start();
    out.event('member', 'a member');
    await stopRequested;
    await worker.shutdown({ timeoutMs: 5000 });
  } finally {
    removeSignals();
    process.off('disconnect', requested);
    flush();
  }
  return EXIT.OK;
}

interface Worker extends Child {
  member: boolean;
  killed: boolean;
}

/** What the demo waits for; `before` is each worker's count when it began (for the deltas). */
type Phase =
  | { kind: 'starting'; at: number }
  | { kind: 'idle' }
  | {
      kind: 'leave';
      at: number;
      /** The dead worker's partitions. */
      lost: readonly number[];
      recoveredMs: number | null;
      moves: number;
      before: Map<string, number>;
    }
  | { kind: 'join'; at: number | null; joiner: string; moves: number; before: Map<string, number> };

export async function demoPartitions(values: Values, write: (line: string) => void): Promise<number> {
  const partitions = partitionCount(values);
  const count = positiveInt(values, 'candidates', 3);
  if (count < 2) throw new UsageError(`--candidates must be at least 2 for a failover, received ${count}`);
  if (values['acquire-mode'] !== undefined) {
    throw new UsageError('--acquire-mode is for the election demo, not with --partitions');
  }
  const intervalMs = optionalDuration(values, 'interval') ?? 3000;
  const failovers = values.failovers === undefined ? Infinity : positiveInt(values, 'failovers', 1);
  const name = demoName(values);
  const delayMs = optionalDuration(values, 'takeover-delay') ?? 250;
  const host = await DemoHost.open(values, write);

  /** Who owns each partition, from the workers' lines. */
  const owner: (string | null)[] = new Array(partitions).fill(null);
  /** The workers spawned and not killed, oldest first. */
  const live = new Map<string, Worker>();
  /** The owner of each partition once balanced (the workers compute the same). */
  let target: (string | undefined)[] = [];
  let phase: Phase = { kind: 'starting', at: performance.now() };
  let nextNumber = 1;
  let killTimer: NodeJS.Timeout | undefined;
  let settleTimer: NodeJS.Timeout | undefined;
  const times: number[] = [];
  const moved = { kills: 0, killMin: 0, joins: 0, joinMin: 0 };

  const retarget = (): void => {
    target = new Array(partitions);
    for (const [id, ps] of assign([...live.keys()], partitions)) for (const p of ps) target[p] = id;
  };
  const counts = (): Map<string, number> => {
    const n = new Map([...live.keys()].map((id) => [id, 0]));
    for (const id of owner) if (id !== null && n.has(id)) n.set(id, (n.get(id) ?? 0) + 1);
    return n;
  };
  const balanced = (): boolean =>
    [...live.values()].every((w) => w.member) && owner.every((id, p) => id === target[p]);
  const distribution = (before?: Map<string, number>): void => {
    const width = Math.max(...[...live.keys()].map((id) => id.length));
    for (const [id, n] of counts()) {
      const was = before?.get(id);
      const delta =
        was === undefined ? (before ? '  (new)' : '') : n === was ? '' : `  ${n > was ? '+' : ''}${n - was}`;
      write(`${' '.repeat(14)}${id.padEnd(width)} ${String(n).padStart(5)} partitions${delta}`);
    }
  };
  const settle = (): void => {
    host.cancel(settleTimer);
    settleTimer = host.later(SETTLE_MS, () => {
      const ownerless = owner.filter((id) => id === null).length;
      write(`${clock()}  not balanced after ${humanMs(SETTLE_MS)} (${ownerless} ownerless); stopping`);
      distribution();
      void host.finish(FAILED);
    });
  };

  const spawnWorker = (): Worker => {
    const id = `worker-${nextNumber++}`;
    const args = ['partition-worker', '--name', name, '--partitions', String(partitions), '--id', id];
    args.push('--health-interval', '1s', '--takeover-delay', `${delayMs}ms`);
    const w: Worker = Object.assign(
      host.spawn(
        id,
        args,
        (e) => onEvent(w, e),
        (code, signal) => {
          if (host.finishing || w.killed) return;
          write(`${clock()}  ${id} exited by itself (${signal ?? `code ${code}`}); stopping`);
          void host.finish(FAILED);
        },
      ),
      { member: false, killed: false },
    );
    live.set(id, w);
    retarget();
    return w;
  };

  const onEvent = (w: Worker, e: ChildEvent): void => {
    if (w.killed || host.finishing) return;
    const ps = Array.isArray(e.partitions) ? (e.partitions as number[]) : [];
    if (e.event === 'member') w.member = true;
    else if (e.event === 'joining' && phase.kind === 'join' && phase.joiner === w.id)
      phase.at = performance.now();
    else if (e.event === 'error') write(`${clock()}  ${w.id}: ${String(e.message)}`);
    else if (e.event === 'revoked') {
      for (const p of ps) if (owner[p] === w.id) owner[p] = null;
    } else if (e.event === 'assigned') {
      for (const p of ps) {
        if (owner[p] === w.id) continue;
        owner[p] = w.id;
        if (phase.kind === 'leave' || phase.kind === 'join') phase.moves += 1;
      }
    }
    progress();
  };

  const progress = (): void => {
    const now = performance.now();
    if (phase.kind === 'leave' && phase.recoveredMs === null && phase.lost.every((p) => owner[p] !== null)) {
      phase.recoveredMs = now - phase.at;
    }
    if (phase.kind === 'idle' || !balanced()) return;
    host.cancel(settleTimer);
    if (phase.kind === 'starting') {
      write(`${clock()}  balanced, ${humanMs(now - phase.at)} after the start: every partition owned once`);
      distribution();
    } else if (phase.kind === 'leave') {
      const ms = phase.recoveredMs ?? now - phase.at;
      times.push(ms);
      moved.kills += phase.moves;
      moved.killMin += phase.lost.length;
      const delay = delayMs > 0 ? ` (${humanMs(delayMs)} of it the takeover delay)` : '';
      const rest =
        now - phase.at - ms >= 0.1 ? `, balanced after ${(now - phase.at).toFixed(1)} ms` : ', balanced';
      write(
        `${clock()}  its ${phase.lost.length} partitions owned again ${ms.toFixed(1)} ms after the kill${delay}${rest}; ${phase.moves} moved (the minimum: ${phase.lost.length})`,
      );
      distribution(phase.before);
      const before = counts();
      const joiner = spawnWorker();
      write(`${clock()}  ${joiner.id} joins`);
      phase = { kind: 'join', at: null, joiner: joiner.id, moves: 0, before };
      settle();
      return;
    } else {
      const { joiner, at, moves, before } = phase;
      const share = target.filter((id) => id === joiner).length;
      moved.joins += moves;
      moved.joinMin += share;
      write(
        `${clock()}  ${joiner} owns its ${share} partitions ${(now - (at ?? now)).toFixed(1)} ms after it started joining; ${moves} moved (the minimum: ${share})`,
      );
      distribution(before);
      if (times.length >= failovers) {
        void host.finish(EXIT.OK);
        return;
      }
    }
    phase = { kind: 'idle' };
    killTimer = host.later(intervalMs, kill);
  };

  const kill = (): void => {
    if (host.finishing || phase.kind !== 'idle') return;
    host.cancel(killTimer);
    const victim = [...live.values()][0];
    if (!victim) return;
    const before = counts();
    const lost = owner.flatMap((id, p) => (id === victim.id ? [p] : []));
    victim.killed = true;
    live.delete(victim.id);
    for (const p of lost) owner[p] = null;
    retarget();
    write(`${clock()}  SIGKILL ${victim.id} (pid ${victim.proc.pid}), owner of ${lost.length} partitions`);
    phase = {
      kind: 'leave',
      at: performance.now(),
      lost,
      recoveredMs: null,
      moves: 0,
      before,
    };
    victim.proc.kill('SIGKILL');
    settle();
    progress();
  };

  const summary = (): void => {
    if (times.length === 0) return;
    write(
      `${times.length} kill${times.length === 1 ? '' : 's'}, kill -> its partitions owned again: ${spread(times)}; partitions moved: ${moved.kills} on kills (the minimum: ${moved.killMin}), ${moved.joins} on joins (the minimum: ${moved.joinMin})`,
    );
  };

  const interactive = host.listen({ k: kill }, summary);
  const repeat = Number.isFinite(failovers) ? `, ${failovers} time${failovers === 1 ? '' : 's'}` : '';
  write(
    `${count} workers share ${partitions} partitions of "${name}"; ${humanMs(intervalMs)} after each rebalance one is killed with SIGKILL and a new one joins${repeat}.${interactive ? ' Keys: [k] kill a worker now, [q] quit.' : ' Ctrl-C stops.'}`,
  );
  try {
    for (let i = 0; i < count; i++) spawnWorker();
    settle();
  } catch (err) {
    await host.finish(EXIT.USAGE);
    throw err;
  }
  return host.done;
}
