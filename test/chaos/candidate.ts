/**
 * One chaos candidate (a child process). Reports its leadership intervals to the parent
 * over IPC, on the machine's monotonic clock (process.hrtime), so that intervals of
 * different processes compare. An interval ends when the state leaves LEADER or when the
 * lease lapsed before that, whichever is earlier: that is when the process stops believing.
 * Commands from the parent: stepDown, freeze (busy loop), shutdown.
 */
import { type Clock, FixedInterval, LeaderLock } from '../../src/index.js';

export interface CandidateConfig {
  url: string;
  key1: number;
  key2: number;
  id: string;
  healthIntervalMs: number;
  queryTimeoutMs: number;
  pollMs: number;
  acquireMode: 'wait' | 'poll';
  /** The work stops this long after its term's signal aborts. */
  workStopMs: number;
  takeoverDelayMs: number;
}

export type CandidateMessage =
  | { type: 'start'; id: string; at: number }
  | { type: 'end'; id: string; start: number; end: number }
  | { type: 'runStart'; id: string; at: number }
  | { type: 'run'; id: string; start: number; end: number }
  | { type: 'ready'; id: string };

export type ParentCommand = { type: 'stepDown' } | { type: 'freeze'; ms: number } | { type: 'shutdown' };

const cfg = JSON.parse(process.argv[2] ?? '{}') as CandidateConfig;
const hrtimeMs = (): number => Number(process.hrtime.bigint()) / 1e6;
const clock: Clock = {
  now: hrtimeMs,
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
};
const send = (m: CandidateMessage): void => {
  if (process.connected) process.send?.(m);
};

const lock = new LeaderLock({
  connectionString: cfg.url,
  key1: cfg.key1,
  key2: cfg.key2,
  id: cfg.id,
  healthIntervalMs: cfg.healthIntervalMs,
  queryTimeoutMs: cfg.queryTimeoutMs,
  retryStrategy: new FixedInterval({ intervalMs: cfg.pollMs }),
  acquireMode: cfg.acquireMode,
  takeoverDelayMs: cfg.takeoverDelayMs,
  clock,
});

let start: number | null = null;
lock.onStateChange((from, to) => {
  const now = hrtimeMs();
  if (to === 'leader') {
    start = now;
    send({ type: 'start', id: cfg.id, at: now });
  } else if (from === 'leader' && start !== null) {
    send({ type: 'end', id: cfg.id, start, end: Math.min(now, lock.leaseExpiresAt ?? now) });
    start = null;
  }
});

// leader work: a run lasts from its start until `workStopMs` after its term's signal
// aborted, or until its lease ended if that came first (a frozen process does nothing while
// frozen; on waking it must not act: it checks lock.isLeader before each side effect)
lock.runWhileLeader(async (term) => {
  const start = hrtimeMs();
  send({ type: 'runStart', id: cfg.id, at: start });
  await new Promise((resolve) => term.signal.addEventListener('abort', resolve, { once: true }));
  await new Promise((resolve) => setTimeout(resolve, cfg.workStopMs));
  send({
    type: 'run',
    id: cfg.id,
    start,
    end: Math.min(hrtimeMs(), lock.leaseExpiresAt ?? Number.POSITIVE_INFINITY),
  });
});

process.on('message', (cmd: ParentCommand) => {
  if (cmd.type === 'stepDown') void lock.stepDown();
  else if (cmd.type === 'freeze') {
    const until = hrtimeMs() + cmd.ms;
    while (hrtimeMs() < until) {
      // frozen: no timer, no I/O
    }
  } else if (cmd.type === 'shutdown') {
    void lock.shutdown({ timeoutMs: 3000 }).then(() => {
      // nothing may keep the process alive now: it must exit by itself
      process.disconnect();
    });
  }
});

await lock.start();
send({ type: 'ready', id: cfg.id });
