/**
 * Candidates on one key, made with `useLocks()`, that record who opened a term, their runs
 * and log events, and how their work stops: for tests that choose who leads (succession)
 * or ask a leader to step down or hand over from outside (the CLI's `resign` and
 * `handover`).
 */
import { performance } from 'node:perf_hooks';
import { afterEach } from 'vitest';
import { applicationName } from '../../src/core/identity.js';
import type { LeaderLock, LeaderLockOptions } from '../../src/index.js';
import { databaseUrl, eventually, listening, lockHolders, randomKeys, sessionsLike } from './db.js';
import type { LockFactory } from './locks.js';
import { overlapsOf, type Span } from './overlaps.js';

export type Mode = 'wait' | 'poll';

/** One run of a candidate's work: from its start to its return after the term's abort. */
export interface Run extends Span {
  owner: string;
  end: number | null;
}

export interface Team {
  readonly mode: Mode;
  /** Every run of every candidate's work, in start order. */
  readonly runs: Run[];
  /** Every log event of every candidate, in order. */
  readonly logs: { id: string; event: string }[];
  /**
   * How long work takes to return after its term's abort (read at the abort): 0 by default;
   * null: not until `letGo()`.
   */
  stopMs: number | null;
  /** Runs of two candidates that overlapped (none, if the election is safe). */
  overlaps(): ReturnType<typeof overlapsOf>;
  readonly keys: { key1: number; key2: number };
  /** `--dsn … --key1 … --key2 …` for the CLI. */
  args(): string[];
  /** A candidate; `ignoreAbort`: its work keeps running after its term ends, until `letGo()` (whatever `stopMs`). */
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
    const runs: Run[] = [];
    const logs: { id: string; event: string }[] = [];
    let stopMs: number | null = 0;
    let n = 0;
    const terms = new Map<string, number>();
    const fences = new Map<string, number>();
    const bump = (m: Map<string, number>, id: string): void => {
      m.set(id, (m.get(id) ?? 0) + 1);
    };
    const queued = async (id: string): Promise<boolean> => {
      const [session] = await sessionsLike(databaseUrl(), applicationName(id));
      const waits = (await lockHolders(databaseUrl(), keys.key1, keys.key2)).filter((h) => !h.granted);
      return session !== undefined && waits.some((h) => h.pid === session.pid);
    };
    // poll mode: set up, so it LISTENs (db.ts `listening`)
    const attempted = async (lock: LeaderLock): Promise<boolean> => {
      const sessions = await sessionsLike(databaseUrl(), applicationName(lock.id));
      return sessions.length === 1 && sessions.some(listening) && !lock.isLeader;
    };
    return {
      mode,
      keys,
      runs,
      logs,
      get stopMs() {
        return stopMs;
      },
      set stopMs(ms: number | null) {
        stopMs = ms;
      },
      overlaps: () => overlapsOf(runs, (r) => r.owner),
      args: () => ['--dsn', databaseUrl(), '--key1', String(keys.key1), '--key2', String(keys.key2)],
      make({ ignoreAbort = false, ...extra } = {}) {
        const name = `${locks.tag}-${n++}`;
        const at = (_fields: Record<string, unknown>, event: string): void => {
          logs.push({ id: name, event });
        };
        const lock = locks.make({
          ...keys,
          id: name,
          acquireMode: mode,
          waitSliceMs: 30_000,
          logger: { debug: at, info: at, warn: at, error: at },
          ...extra,
        });
        lock.onAcquired(() => bump(terms, lock.id));
        lock.onTakeoverFence(() => bump(fences, lock.id));
        lock.runWhileLeader(async (term) => {
          const run: Run = { owner: lock.id, start: performance.now(), end: null };
          runs.push(run);
          await new Promise<void>((resolve) =>
            term.signal.addEventListener('abort', () => resolve(), { once: true }),
          );
          const ms = ignoreAbort ? null : stopMs;
          if (ms === null) await new Promise<void>((resolve) => release.push(resolve));
          else if (ms > 0) await new Promise((r) => setTimeout(r, ms));
          run.end = performance.now();
        });
        return lock;
      },
      terms: (lock) => terms.get(lock.id) ?? 0,
      fences: (lock) => fences.get(lock.id) ?? 0,
      waiting: (lock) =>
        eventually(async () => (mode === 'poll' ? await attempted(lock) : await queued(lock.id)), {
          what: `${lock.id} to wait`,
        }),
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
