import { LeaderLock, type LeaderLockOptions, LockState } from '../../src/index.js';
import { FakeClock, FakeDb, flush } from './fakes.js';

export interface Harness {
  lock: LeaderLock;
  db: FakeDb;
  clock: FakeClock;
  /** Callbacks and state changes in the order they ran, e.g. `acquired`, `follower->acquiring`. */
  events: string[];
  errors: Error[];
  /** Events since the last call. */
  take(): string[];
}

/** A lock on a fake server; pass `db` (and its `clock`) to put several locks on one server. */
export function makeLock(
  options: Partial<LeaderLockOptions> & { db?: FakeDb; clock?: FakeClock } = {},
): Harness {
  const { db: shared, clock: sharedClock, ...rest } = options;
  const clock = sharedClock ?? shared?.clock ?? new FakeClock();
  const db = shared ?? new FakeDb(clock);
  const lock = new LeaderLock({
    key1: 1,
    key2: 2,
    acquireMode: 'poll', // the specification's mode; wait mode has its own tests
    connect: db.connect,
    clock,
    healthIntervalMs: 1000,
    queryTimeoutMs: 500,
    closeTimeoutMs: 100,
    takeoverDelayMs: 0, // the takeover delay has tests of its own
    ...rest,
  });
  const events: string[] = [];
  const errors: Error[] = [];
  lock.onStateChange((from, to) => {
    events.push(`${from}->${to}`);
  });
  lock.onAcquired(() => {
    events.push('acquired');
  });
  lock.onReleased(() => {
    events.push('released');
  });
  lock.onLost(() => {
    events.push('lost');
  });
  lock.onAcquireFailed(() => {
    events.push('acquireFailed');
  });
  lock.onStopped(() => {
    events.push('stopped');
  });
  lock.onError((e) => {
    events.push(`error:${e.name}`);
    errors.push(e);
  });
  let seen = 0;
  return {
    lock,
    db,
    clock,
    events,
    errors,
    take() {
      const out = events.slice(seen);
      seen = events.length;
      return out;
    },
  };
}

/** Start and let the first attempt run; expects leadership when the fake lock is free. */
export async function startLeader(h: Harness): Promise<void> {
  await h.lock.start();
  await flush();
  if (h.lock.state !== LockState.LEADER) throw new Error(`expected leader, state is ${h.lock.state}`);
  h.take();
}
