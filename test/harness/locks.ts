/** Build real LeaderLocks against a test server, tagged for the leak guard. */
import pg from 'pg';
import { afterEach } from 'vitest';
import { FixedInterval, LeaderLock, type LeaderLockOptions } from '../../src/index.js';
import { assertNoSessions, databaseUrl, testTag } from './db.js';

export interface LockFactory {
  /** The tag shared by this test's lock ids (leak guard prefix). */
  readonly tag: string;
  make(options: Partial<LeaderLockOptions> & { key1: number; key2: number }): LeaderLock;
  /** Shut down every lock made since the last cleanup. */
  cleanup(): Promise<void>;
}

/**
 * Locks for one test file. After each test every lock made is shut down, then the leak
 * guard checks that no session of this test's tag is left on the server.
 */
export function useLocks(url: () => string = databaseUrl): LockFactory {
  const factory = lockFactory(url);
  afterEach(async () => {
    const tag = factory.tag;
    await factory.cleanup();
    await assertNoSessions(tag, url());
  });
  return factory;
}

export function lockFactory(url: () => string = databaseUrl): LockFactory {
  let tag = testTag();
  let made: LeaderLock[] = [];
  let n = 0;
  return {
    get tag() {
      return tag;
    },
    make(options) {
      const lock = new LeaderLock({
        connectionString: options.connect ? undefined : url(),
        id: `${tag}-${n++}`,
        healthIntervalMs: 100,
        retryStrategy: new FixedInterval({ intervalMs: 25 }),
        waitSliceMs: 200, // so onAcquireFailed fires quickly in wait mode (the default is 30 s)
        queryTimeoutMs: 2000,
        takeoverDelayMs: 0, // the takeover delay has tests of its own
        ...options,
      });
      made.push(lock);
      return lock;
    },
    async cleanup() {
      const locks = made;
      made = [];
      await Promise.all(locks.map((l) => l.shutdown({ timeoutMs: 5000 })));
      tag = testTag();
      n = 0;
    },
  };
}

/** A `connect` that opens tagged clients and lets a test hold back selected attempts. */
export function gatedConnect(url: string, appName: string) {
  let attempts = 0;
  const gates = new Map<number, Promise<void>>();
  return {
    /** Attempt number `n` (1-based) waits for `gate` before connecting. */
    holdAttempt(n: number, gate: Promise<void>) {
      gates.set(n, gate);
    },
    get attempts() {
      return attempts;
    },
    connect: async (): Promise<pg.Client> => {
      attempts += 1;
      await gates.get(attempts);
      const client = new pg.Client({ connectionString: url, application_name: appName });
      client.on('error', () => {});
      await client.connect();
      return client;
    },
  };
}
