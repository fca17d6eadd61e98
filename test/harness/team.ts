/**
 * Candidates on one key, made with `useLocks()`, that record who opened a term and how
 * their work stops: for tests that ask a leader to step down or hand over from outside
 * (the CLI's `resign` and `handover`).
 */
import { afterEach } from 'vitest';
import type { LeaderLock, LeaderLockOptions } from '../../src/index.js';
import { databaseUrl, eventually, lockHolders, randomKeys, sessionsLike } from './db.js';
import type { LockFactory } from './locks.js';

export type Mode = 'wait' | 'poll';

export interface Team {
  readonly mode: Mode;
  readonly keys: { key1: number; key2: number };
  /** `--dsn … --key1 … --key2 …` for the CLI. */
  args(): string[];
  /** A candidate; `ignoreAbort`: its work keeps running after its term ends, until `letGo()`. */
  make(extra?: Partial<LeaderLockOptions> & { ignoreAbort?: boolean }): LeaderLock;
  /** Terms opened per id. */
  terms(lock: LeaderLock): number;
  /** Takeover delays per id (none after a clean handover). */
  fences(lock: LeaderLock): number;
  /** The candidate waits: queued in pg_locks (wait mode), or has its session and does not lead (poll mode). */
  waiting(lock: LeaderLock): Promise<void>;
  /** Started and leading. */
  leading(lock: LeaderLock): Promise<void>;
  /** Let work that ignores its abort return. */
  letGo(): void;
}

/**
 * A team for one test: waits of 30 s slices (a slice that ends re-queues the waiter, which
 * would change the queue order under test).
 */
export function useTeam(locks: LockFactory): (mode: Mode) => Team {
  const release: (() => void)[] = [];
  afterEach(() => {
    for (const r of release.splice(0)) r();
  });
  return (mode) => {
    const keys = randomKeys();
    const terms = new Map<string, number>();
    const fences = new Map<string, number>();
    const bump = (m: Map<string, number>, id: string): void => {
      m.set(id, (m.get(id) ?? 0) + 1);
    };
    const queued = async (id: string): Promise<boolean> => {
      const [session] = await sessionsLike(databaseUrl(), `pgleaderlock:${id}`);
      const waits = (await lockHolders(databaseUrl(), keys.key1, keys.key2)).filter((h) => !h.granted);
      return session !== undefined && waits.some((h) => h.pid === session.pid);
    };
    return {
      mode,
      keys,
      args: () => ['--dsn', databaseUrl(), '--key1', String(keys.key1), '--key2', String(keys.key2)],
      make({ ignoreAbort = false, ...extra } = {}) {
        const lock = locks.make({ ...keys, acquireMode: mode, waitSliceMs: 30_000, ...extra });
        lock.onAcquired(() => bump(terms, lock.id));
        lock.onTakeoverFence(() => bump(fences, lock.id));
        lock.runWhileLeader(async (term) => {
          await new Promise<void>((resolve) =>
            term.signal.addEventListener('abort', () => resolve(), { once: true }),
          );
          if (ignoreAbort) await new Promise<void>((resolve) => release.push(resolve));
        });
        return lock;
      },
      terms: (lock) => terms.get(lock.id) ?? 0,
      fences: (lock) => fences.get(lock.id) ?? 0,
      waiting: (lock) =>
        eventually(
          async () =>
            mode === 'poll'
              ? (await sessionsLike(databaseUrl(), `pgleaderlock:${lock.id}`)).length === 1 && !lock.isLeader
              : await queued(lock.id),
          { what: `${lock.id} to wait` },
        ),
      async leading(lock) {
        await lock.start();
        if (!(await lock.waitForLeadership({ timeoutMs: 5000 }))) throw new Error(`${lock.id} did not lead`);
      },
      letGo() {
        for (const r of release.splice(0)) r();
      },
    };
  };
}
