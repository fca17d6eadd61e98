/**
 * Primary failover against a real replicated cluster (test/harness/cluster.ts): candidates
 * given every host follow the promoted primary, the guard ends an old primary's leadership
 * when a standby is promoted while it still runs, fencing epochs keep growing across the
 * promotion, and a standby-only list waits quietly. Both acquire modes, default timings.
 * Prints the figures docs/safety.md quotes ("Primary failover").
 */

import { describe, expect, it } from 'vitest';
import { ExponentialBackoff, type LeaderLock } from '../../src/index.js';
import { type ClusterNode, promoteNow, startCluster } from '../harness/cluster.js';
import { adminClient, eventually, ownServer, randomKeys } from '../harness/db.js';
import { hostOf, leaderOn, overlaps, promotionRounds, spread, useCandidates } from '../harness/failover.js';
import { TEST_PASSWORD } from '../harness/pg-server.js';

const MODES = ['poll', 'wait'] as const;
/**
 * Rounds of the timed tests (more for the figures in docs/safety.md). One here: the
 * promotion's rounds run the same checks (one leader, on the promoted server, epochs growing,
 * no overlap) three times per mode in timing/promotion.test.ts (`npm run test:timing`, CI),
 * on the same harness (promotionRounds), beside their timing.
 */
const ROUNDS = Number(process.env.PGLEADERLOCK_FAILOVER_ROUNDS ?? 1);
const ROUNDS_SPLIT = Number(process.env.PGLEADERLOCK_FAILOVER_ROUNDS ?? 1);

describe.each(MODES)('primary failover (%s mode, default timings)', (mode) => {
  const c = useCandidates();

  it(`SIGKILL the primary, promote the standby: one leader, on the promoted server; epochs grow though the last bumps were never replicated (${ROUNDS} failover(s); 3 more, and how soon: timing/promotion.test.ts)`, async () => {
    const samples = await promotionRounds(c, mode, ROUNDS);
    console.log(`[failover ${mode}] SIGKILL + promote -> leader on the promoted server: ${spread(samples)}`);
  });

  it('promoted while the old primary runs: with every host listed the old leader ends its term within 350 ms and the new one starts after it, and announces no drain on the promoted server; with one host each, both lead', async () => {
    await using cluster = await startCluster();
    let [node1, node2] = [cluster.primary, cluster.standbys[0] as ClusterNode];
    const ends: number[] = [];
    const starts: number[] = [];
    for (let round = 0; round < ROUNDS_SPLIT; round++) {
      const guardedKeys = randomKeys();
      const guarded = [0, 1].map(() =>
        c.add({ connectionString: cluster.url([node1, node2]), ...guardedKeys, acquireMode: mode }),
      );
      const loneKeys = randomKeys();
      const lone = [
        c.add({ connectionString: cluster.url([node1]), ...loneKeys, acquireMode: mode }),
        c.add({ connectionString: cluster.url([node2]), ...loneKeys, acquireMode: mode }),
      ];
      const old = await leaderOn(c, hostOf(node1), `a guarded leader on ${node1.name}`, guarded);
      const oldLone = await leaderOn(c, hostOf(node1), `the one-host leader on ${node1.name}`, lone);

      const promotedAt = await promoteNow(node2);
      const next = await leaderOn(
        c,
        hostOf(node2),
        `a guarded leader on the promoted ${node2.name}`,
        guarded,
      );
      ends.push((old.end as number) - promotedAt);
      starts.push(next.start - promotedAt);
      expect(overlaps(c.runs, guarded)).toEqual([]);
      // docs/safety.md: within 350 ms plus a round trip (PEER_BOUND_MS: one 100 ms interval and
      // a 250 ms probe deadline); the margin for the round trip and the machine's load
      // bound: integration/failover-promotion-seen
      expect((old.end as number) - promotedAt).toBeLessThanOrEqual(350 + 150);
      // the old leader's next session is on the promoted server: the drain of its session on
      // the old primary is not announced there (it would prove nothing about that server)
      await eventually(() => c.drains.some((d) => d.lock === old.lock), {
        what: 'the old leader to open its next session',
      });
      const its = c.drains.filter((d) => d.lock === old.lock);
      expect(its[0]).toEqual({ lock: old.lock, sent: false, host: hostOf(node2), lostHost: hostOf(node1) });
      // (a later loss on node2 itself, under load, may be announced there)
      for (const d of c.drains) if (d.host !== d.lostHost) expect(d.sent).toBe(false);

      const loneNext = await leaderOn(c, hostOf(node2), `the one-host candidate on ${node2.name}`, [
        lone[1] as LeaderLock,
      ]);
      // both one-host leaders lead, each on its own primary, until one is stopped
      await new Promise((r) => setTimeout(r, 1000));
      expect(oldLone.end).toBeNull();
      expect(c.open(lone)).toHaveLength(2);
      console.log(
        `[failover ${mode}] promoted, old primary up: guarded old leader's term ended ${ends.at(-1)?.toFixed(0)} ms after the promoted server left recovery, ` +
          `the new leader started ${starts.at(-1)?.toFixed(0)} ms after it: overlap 0; ` +
          `one host each: both leading after ${(performance.now() - loneNext.start).toFixed(0)} ms of overlap, until stopped`,
      );
      await Promise.all([...guarded, ...lone].map((l) => l.shutdown()));
      if (round + 1 < ROUNDS_SPLIT) {
        await node1.kill();
        [node1, node2] = [node2, await cluster.addStandby({ from: node2 })];
      }
    }
    console.log(
      `[failover ${mode}] promoted, old primary up: old term ended ${spread(ends)}; new leader started ${spread(starts)} after the promotion`,
    );
  });

  it('a candidate given only a standby waits quietly (one connection at a time, about 10 statements a second, a new survey only after each back-off delay), then leads within 1 s of its promotion, not paced by its back-off (2 s or more by then)', async () => {
    await using cluster = await startCluster();
    const standby = cluster.standbys[0] as ClusterNode;
    const url = cluster.url([standby]);
    const keys = randomKeys();
    // the back-off of before 2026-12-02 (1 s doubling; the default now starts at 100 ms): a
    // survey paced by it is what the window below counts, and a promotion must not wait for it
    const retryStrategy = new ExponentialBackoff({ baseMs: 1000 });
    const lock = c.add({ connectionString: url, ...keys, acquireMode: mode, retryStrategy });
    await eventually(() => c.errors.length > 0, { what: 'the no-primary error' });
    expect(c.errors[0]?.message).toContain(`${hostOf(standby)}: standby (in recovery)`);
    expect(lock.state).toBe('follower');

    // watch its backends on the standby for 2 s, on one connection opened beforehand: a new
    // connection per sample (a backend forked each time) took over 100 ms on a loaded CI
    // machine, and the samples missed statements (9 seen)
    await using watcher = await adminClient(standby.url);
    const app = `pgleaderlock:${c.tag}`;
    const pids = new Set<number>();
    const statements = new Set<string>();
    let most = 0;
    const until = performance.now() + 2000;
    while (performance.now() < until) {
      // query_start is null on a backend that has connected but not yet run a statement
      const rows = await watcher.query<{ pid: number; query_start: Date | null }>(
        'SELECT pid, query_start FROM pg_stat_activity WHERE application_name LIKE $1',
        [`${app}%`],
      );
      most = Math.max(most, rows.length);
      for (const r of rows) {
        pids.add(r.pid);
        if (r.query_start) statements.add(`${r.pid}/${r.query_start.getTime()}`);
      }
      await new Promise((r) => setTimeout(r, 5));
    }
    // one connection at a time; a new survey (a new connection, another error) only after
    // each back-off delay (jittered since 2026-12-02: 0.5–1 s, then 1–2 s, so up to three
    // surveys in the window where the unjittered 1 s and 2 s gave two)
    expect(most).toBe(1);
    expect(pids.size).toBeLessThanOrEqual(3);
    expect(c.errors.length).toBeLessThanOrEqual(3);
    expect(statements.size).toBeGreaterThanOrEqual(10);
    expect(statements.size).toBeLessThanOrEqual(30);

    const writable = await promoteNow(standby);
    const run = await leaderOn(c, hostOf(standby), 'the candidate to lead on the promoted standby');
    // not paced by the back-off: its next delay is 2 s or more by now (1 s, then 2 s, …), and
    // the candidate leads within 1 s of the promotion: the next survey (≤ 100 ms away), the
    // takeover delay (250 ms: nothing proves who led before), and the survey's and the
    // session's connections. 328–507 ms measured alone; 691 ms in a compat run beside two
    // other files on two cores, which failed the earlier 500 ms + 4 bare connects
    console.log(
      `[failover ${mode}] standby-only candidate: ${statements.size} statements in 2 s on ${pids.size} connection(s), one at a time, while waiting; led ${(run.start - writable).toFixed(0)} ms after its promotion`,
    );
    expect(run.start - writable).toBeLessThan(1000);
  });
});

describe('host lists that cannot work', () => {
  const c = useCandidates();

  it('hosts of two different clusters: refused, naming both hosts and their system identifiers', async () => {
    await using a = await ownServer();
    await using b = await ownServer({ initdb: true }); // copies of the template share one system identifier
    const url = `postgres://postgres:${TEST_PASSWORD}@127.0.0.1:${a.port},127.0.0.1:${b.port}/postgres`;
    const lock = c.add({ connectionString: url, ...randomKeys() });
    await eventually(() => c.errors.length > 0, { what: 'an error' });
    const [error] = c.errors;
    expect(error).toMatchObject({ code: 'ERR_PGLEADERLOCK_UNSAFE' });
    expect(error?.message).toMatch(
      new RegExp(`127\\.0\\.0\\.1:${a.port} has system identifier \\d+, 127\\.0\\.0\\.1:${b.port} has \\d+`),
    );
    expect(lock.isLeader).toBe(false);
  });

  it('every host down: the error names each host, never the password, and the lock keeps retrying', async () => {
    await using a = await ownServer();
    await using b = await ownServer();
    const ports = [a.port, b.port];
    await Promise.all([a.stop(), b.stop()]);
    const secret = 'hunter2-secret';
    const url = `postgres://postgres:${secret}@127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}/postgres`;
    const lock = c.add({ connectionString: url, ...randomKeys() });
    await eventually(() => c.errors.length >= 2, { what: 'two failed attempts' });
    for (const error of c.errors) {
      expect(error.message).toContain(`127.0.0.1:${ports[0]}: connection refused`);
      expect(error.message).toContain(`127.0.0.1:${ports[1]}: connection refused`);
      expect(error.message).not.toContain(secret);
    }
    expect(lock.state).not.toBe('stopped');
  });
});
