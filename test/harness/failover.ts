/**
 * Primary failover on a real replicated cluster (cluster.ts): candidates whose leader work
 * records each run, and the scenarios more than one project runs
 * (integration/failover.test.ts, timing/promotion.test.ts).
 */

import pg from 'pg';
import { afterEach, expect } from 'vitest';
import { LeaderLock, type LeaderLockOptions, type Term } from '../../src/index.js';
import { bareTimer } from './baseline.js';
import { type ClusterNode, promoteNow, startCluster } from './cluster.js';
import { eventually, randomKeys, testTag } from './db.js';
import { overlapsOf } from './overlaps.js';

/** One run of leader work: which lock, on which server, from when to when (performance.now()). */
export interface Run {
  readonly lock: LeaderLock;
  readonly host: string;
  readonly epoch: bigint | null;
  readonly start: number;
  end: number | null;
}

export type Options = Partial<LeaderLockOptions> & Pick<LeaderLockOptions, 'key1' | 'key2'>;

/** Candidates whose leader work records each run; all shut down after each test. */
export function useCandidates() {
  const locks: LeaderLock[] = [];
  const runs: Run[] = [];
  const errors: Error[] = [];
  /** The proof-of-drain log lines of each lock (where a lost session's drain was announced, if anywhere). */
  const drains: { lock: LeaderLock; sent: boolean; host: string; lostHost: string }[] = [];
  let tag = testTag();
  afterEach(async () => {
    await Promise.all(locks.splice(0).map((l) => l.shutdown({ timeoutMs: 5000 })));
    runs.length = 0;
    errors.length = 0;
    drains.length = 0;
    tag = testTag();
  });
  return {
    runs,
    errors,
    drains,
    get tag() {
      return tag;
    },
    add(options: Options): LeaderLock {
      const quiet = () => {};
      const logger = {
        debug: quiet,
        warn: quiet,
        error: quiet,
        info: (fields: Record<string, unknown>) => {
          if (fields.event === 'proof_of_drain') {
            const { sent, host, lostHost } = fields as { sent: boolean; host: string; lostHost: string };
            drains.push({ lock, sent, host, lostHost });
          }
        },
      };
      const lock: LeaderLock = new LeaderLock({ id: `${tag}-${locks.length}`, logger, ...options });
      lock.onError((e) => {
        errors.push(e);
      });
      lock.runWhileLeader(async (term: Term) => {
        const run: Run = { lock, host: term.host, epoch: term.epoch, start: performance.now(), end: null };
        runs.push(run);
        await new Promise((resolve) => term.signal.addEventListener('abort', resolve, { once: true }));
        run.end = performance.now();
      });
      locks.push(lock);
      void lock.start();
      return lock;
    },
    /** Runs still going, optionally those of `among` only. */
    open(among?: readonly LeaderLock[]): Run[] {
      return runs.filter((r) => r.end === null && (!among || among.includes(r.lock)));
    },
  };
}
export type Candidates = ReturnType<typeof useCandidates>;

export const hostOf = (node: ClusterNode): string => `127.0.0.1:${node.port}`;

export function spread(samples: number[]): string {
  const s = [...samples].sort((a, b) => a - b);
  const p50 = s[Math.floor((s.length - 1) / 2)] ?? Number.NaN;
  return `p50 ${p50.toFixed(0)} ms, max ${(s.at(-1) ?? Number.NaN).toFixed(0)} ms (n=${s.length})`;
}

/** Wait until a run of `among` is open on `host`; then exactly one of theirs is open. */
export async function leaderOn(
  c: Candidates,
  host: string,
  what: string,
  among?: LeaderLock[],
): Promise<Run> {
  await eventually(() => c.open(among).some((r) => r.host === host), {
    timeoutMs: 15_000,
    intervalMs: 2,
    what,
  });
  const open = c.open(among);
  expect(open).toHaveLength(1);
  return open[0] as Run;
}

/** Pairs of runs (of `among`) that were open at the same time. */
export function overlaps(runs: readonly Run[], among?: readonly LeaderLock[]): [Run, Run][] {
  const mine = runs.filter((r) => !among || among.includes(r.lock));
  return overlapsOf(mine, (r) => r.lock).map(({ a, b }) => [a, b]);
}

/** Stop `standby` streaming: what its primary commits from now on is never replicated. */
export async function cutReplication(standby: ClusterNode): Promise<void> {
  await standby.query("ALTER SYSTEM SET primary_conninfo = ''");
  await standby.query('SELECT pg_reload_conf()');
  await eventually(async () => (await standby.query('SELECT 1 FROM pg_stat_wal_receiver')).length === 0, {
    what: `${standby.name}'s WAL receiver to stop`,
  });
}

/**
 * `rounds` times: two candidates with every host and fencing lead on the primary; replication
 * is cut, the leader steps down (the next epoch is never replicated); the primary is
 * SIGKILLed and the standby promoted. Checks one leader on the promoted server, epochs
 * growing, no overlapping runs. Returns, per round, the time from the promoted server
 * leaving recovery to the new leader's work starting (ms).
 */
export async function promotionRounds(
  c: Candidates,
  mode: 'poll' | 'wait',
  rounds: number,
  baseline?: number[],
): Promise<number[]> {
  await using cluster = await startCluster();
  let primary = cluster.primary;
  let standby = cluster.standbys[0] as ClusterNode;
  const samples: number[] = [];
  const keys = randomKeys();
  for (let round = 0; round < rounds; round++) {
    // every host the cluster ever had, the dead ones included (they refuse connections)
    const options: Options = { connectionString: cluster.url(), ...keys, acquireMode: mode, fencing: true };
    c.add(options);
    c.add(options);
    const first = await leaderOn(c, hostOf(primary), `a leader on ${primary.name}`);
    // epochs bumped on the primary after replication stopped: lost with it
    await cutReplication(standby);
    await first.lock.stepDown();
    const second = await leaderOn(c, hostOf(primary), 'the next leader on the old primary');
    expect(second.epoch).toBeGreaterThan(first.epoch ?? 0n);

    await primary.kill();
    const writable = await promoteNow(standby);
    const next = await leaderOn(c, hostOf(standby), `a leader on the promoted ${standby.name}`);
    samples.push(next.start - writable);
    // the round's baseline (timing/promotion.test.ts): the 250 ms takeover delay as a bare
    // timer, and two bare connections with a statement each (the survey's and the session's)
    if (baseline)
      baseline.push((await bareTimer(250)) + (await bareConnectMs(standby)) + (await bareConnectMs(standby)));
    expect(next.epoch).toBeGreaterThan(second.epoch ?? 0n);
    expect(overlaps(c.runs)).toEqual([]);

    await Promise.all(c.runs.map((r) => r.lock.shutdown()));
    primary = standby;
    standby = await cluster.addStandby({ from: primary });
  }
  return samples;
}

/** A new connection to `node` and one statement on it, then closed: its milliseconds. */
async function bareConnectMs(node: ClusterNode): Promise<number> {
  const client = new pg.Client({ connectionString: node.url, application_name: 'pgleaderlock-test-bare' });
  client.on('error', () => {});
  const t0 = performance.now();
  try {
    await client.connect();
    await client.query('SELECT 1');
    return performance.now() - t0;
  } finally {
    await client.end().catch(() => {});
  }
}
