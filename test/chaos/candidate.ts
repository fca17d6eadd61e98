/**
 * One chaos candidate (a child process). Reports its leadership intervals to the parent
 * over IPC, on the machine's monotonic clock (process.hrtime), so that intervals of
 * different processes compare. An interval ends when the state leaves LEADER or when the
 * lease lapsed before that, whichever is earlier: that is when the process stops believing.
 * The process boots (`booted`), then waits for `start` (its configuration, lock id and
 * priority: a process booted ahead, while the server starts or as a spare, joins at once). Commands from the parent: stepDown, freeze (busy loop; the parent also freezes it with SIGSTOP),
 * handoverTo (answered by `handoverResult`), shutdown; SIGTERM shuts down too.
 */
import { writeFileSync } from 'node:fs';
import { type Clock, FixedInterval, LeaderLock } from '../../src/index.js';
import { Random } from '../sim/random.js';

export interface CandidateConfig {
  url: string;
  key1: number;
  key2: number;
  healthIntervalMs: number;
  queryTimeoutMs: number;
  pollMs: number;
  acquireMode: 'wait' | 'poll';
  /** The work stops this long after its term's signal aborts. */
  workStopMs: number;
  takeoverDelayMs: number;
  /** Seeds the lock's `random` option (its session marker token, the wait slice's ±10 %). Default: the library's own. */
  randomSeed?: number;
}

export type CandidateMessage =
  | { type: 'booted' }
  | { type: 'start'; id: string; at: number }
  | { type: 'end'; id: string; start: number; end: number }
  | { type: 'runStart'; id: string; at: number }
  | { type: 'run'; id: string; start: number; end: number }
  | { type: 'fence'; id: string; at: number; delayMs: number }
  | { type: 'handoverResult'; id: string; to: string; error: string | null }
  | { type: 'ready'; id: string };

export type ParentCommand =
  | { type: 'start'; cfg: CandidateConfig; id: string; priority: number }
  | { type: 'stepDown' }
  | { type: 'freeze'; ms: number }
  | { type: 'handoverTo'; to: string; timeoutMs: number }
  | { type: 'shutdown' };

const hrtimeMs = (): number => Number(process.hrtime.bigint()) / 1e6;
const clock: Clock = {
  now: hrtimeMs,
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
};
const send = (m: CandidateMessage): void => {
  if (process.connected) process.send?.(m);
};

/**
 * PGLEADERLOCK_CHAOS_LOG=1: the lock's log events on stderr, on the run's clock (to read a
 * failure). PGLEADERLOCK_CHAOS_LOG=<folder>: the same lines kept in memory and written to
 * `<folder>/<id>-<pid>.log` as the process exits (a killed one's are lost): writing each line
 * as it happens changed the timing enough that a failure seen without the log did not recur.
 */
function chaosLogger(id: string, to: string) {
  const lines: string[] = [];
  if (to !== '1')
    process.on('exit', () =>
      writeFileSync(`${to}/${id.replaceAll('/', '_')}-${process.pid}.log`, lines.join('')),
    );
  const line = (fields: Record<string, unknown>, event: string): void => {
    const text = `${hrtimeMs().toFixed(1)} ${id} ${event} ${JSON.stringify(fields)}\n`;
    if (to === '1') process.stderr.write(text);
    else lines.push(text);
  };
  return { debug: line, info: line, warn: line, error: line };
}

function seededRandom(seed: number): () => number {
  const r = new Random(seed);
  return () => r.next();
}

function startLock(cfg: CandidateConfig, id: string, priority: number): LeaderLock {
  const logTo = process.env.PGLEADERLOCK_CHAOS_LOG;
  const log = logTo ? chaosLogger(id, logTo) : null;
  const lock = new LeaderLock({
    connectionString: cfg.url,
    key1: cfg.key1,
    key2: cfg.key2,
    id,
    priority,
    healthIntervalMs: cfg.healthIntervalMs,
    queryTimeoutMs: cfg.queryTimeoutMs,
    retryStrategy: new FixedInterval({ intervalMs: cfg.pollMs }),
    acquireMode: cfg.acquireMode,
    takeoverDelayMs: cfg.takeoverDelayMs,
    clock,
    ...(cfg.randomSeed === undefined ? {} : { random: seededRandom(cfg.randomSeed) }),
    ...(log ? { logger: log } : {}),
  });

  let start: number | null = null;
  lock.onStateChange((from, to) => {
    const now = hrtimeMs();
    log?.info({ from, to, leaseExpiresAt: lock.leaseExpiresAt }, 'chaos.state');
    if (to === 'leader') {
      start = now;
      send({ type: 'start', id, at: now });
    } else if (from === 'leader' && start !== null) {
      send({ type: 'end', id, start, end: Math.min(now, lock.leaseExpiresAt ?? now) });
      start = null;
    }
  });
  lock.onTakeoverFence(({ delayMs }) => {
    send({ type: 'fence', id, at: hrtimeMs(), delayMs });
  });

  // leader work: a run lasts from its start until `workStopMs` after its term's signal
  // aborted, or until its lease ended if that came first (a frozen process does nothing while
  // frozen; on waking it must not act: it checks lock.isLeader before each side effect)
  lock.runWhileLeader(async (term) => {
    const runStart = hrtimeMs();
    send({ type: 'runStart', id, at: runStart });
    log?.info({ term: term.id }, 'chaos.run.start');
    await new Promise((resolve) => term.signal.addEventListener('abort', resolve, { once: true }));
    log?.info({ term: term.id }, 'chaos.run.aborted');
    await new Promise((resolve) => setTimeout(resolve, cfg.workStopMs));
    log?.info({ term: term.id, leaseExpiresAt: lock.leaseExpiresAt }, 'chaos.run.end');
    send({
      type: 'run',
      id,
      start: runStart,
      end: Math.min(hrtimeMs(), lock.leaseExpiresAt ?? Number.POSITIVE_INFINITY),
    });
  });
  void lock.start().then(() => send({ type: 'ready', id }));
  return lock;
}

let lock: LeaderLock | null = null;
const shutdown = (): void => {
  const stopped = lock === null ? Promise.resolve() : lock.shutdown({ timeoutMs: 3000 });
  void stopped.then(() => {
    // nothing may keep the process alive now: it must exit by itself
    if (process.connected) process.disconnect();
  });
};
process.on('SIGTERM', shutdown);

process.on('message', (cmd: ParentCommand) => {
  if (cmd.type === 'start') {
    if (lock === null) lock = startLock(cmd.cfg, cmd.id, cmd.priority);
  } else if (cmd.type === 'shutdown') shutdown();
  else if (lock === null) return;
  else if (cmd.type === 'stepDown') void lock.stepDown();
  else if (cmd.type === 'freeze') {
    const until = hrtimeMs() + cmd.ms;
    while (hrtimeMs() < until) {
      // frozen: no timer, no I/O
    }
  } else if (cmd.type === 'handoverTo') {
    const id = lock.id;
    lock.handoverTo(cmd.to, { timeoutMs: cmd.timeoutMs }).then(
      () => send({ type: 'handoverResult', id, to: cmd.to, error: null }),
      (err: unknown) =>
        send({
          type: 'handoverResult',
          id,
          to: cmd.to,
          error: err instanceof Error ? err.message : String(err),
        }),
    );
  }
});

send({ type: 'booted' });
