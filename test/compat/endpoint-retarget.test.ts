/**
 * Stand-in for an endpoint whose address moves on failover while the old primary keeps
 * running for a while (docs/deploy.md, "What can be reproduced here"): Aurora's cluster
 * (writer) endpoint, an RDS instance endpoint, a Kubernetes service, a VIP. Every candidate
 * reaches the cluster through one TCP proxy, the "endpoint", in front of the primary of a
 * real replicated cluster (test/harness/cluster.ts). A leader holds the lock; the standby is
 * promoted, the old primary keeps running as a primary, and the endpoint sends new
 * connections to the promoted server. What happens to the connections already open decides
 * what the lock guarantees, so each case has its test:
 *
 * - kept open (a proxy or VIP that only moves new connections, a DNS change alone): the old
 *   leader keeps leading on the old primary while a candidate that connects after the move
 *   leads on the promoted one, for as long as the old primary's connections live: two
 *   leaders, for a time the lock does not bound (one endpoint gives the multi-host guard
 *   nothing to compare);
 * - reset (Aurora drops the old writer's connections at failover): the old leader's term ends
 *   at once and one candidate leads on the promoted server; no two terms overlap;
 * - fenced off the network (AWS's account of Aurora: the old writer stops answering, its
 *   connections hear nothing): the old leader's term ends at its health check's deadline, at
 *   most `healthIntervalMs + queryTimeoutMs` after the fence, while a candidate that connects
 *   after the move leads after `takeoverDelayMs`: the terms overlap unless `takeoverDelayMs`
 *   covers that bound.
 *
 * Terms are timed by the leader work each lock runs (`runWhileLeader`: from its start to its
 * term's abort, performance.now()); which server holds the lock is read in each server's
 * own pg_locks.
 */
import { describe, expect, it, onTestFinished } from 'vitest';
import { FixedInterval, LeaderLock, type LeaderLockOptions, LockState } from '../../src/index.js';
import { type ClusterNode, promoteNow, startCluster } from '../harness/cluster.js';
import { eventually, lockHolders, randomKeys, testTag } from '../harness/db.js';
import { type FaultProxy, startFaultProxy } from '../harness/fault-proxy.js';
import { overlapsOf } from '../harness/overlaps.js';
import { TIMER_EARLY_MS } from '../harness/timers.js';

const HEALTH_MS = 100;
const QUERY_TIMEOUT_MS = 2000;
/** The lock's default takeover delay. */
const DEFAULT_TAKEOVER_MS = 250;
/**
 * The most a candidate may lead after the move beyond its takeover delay (the rule): 3 × the
 * most a figure went past the delay. Seen in seven runs on the shared 2-core machine
 * (2026-12-02): 416–840 ms with the default delay (at most 590 ms beyond it), 2496–2689 ms with
 * 2300 ms (at most 389 beyond); docs/testing.md, `compat/endpoint-retarget-*`.
 */
const LEAD_MARGIN_MS = 1800;

/** One term's leader work (performance.now()). */
interface Run {
  readonly id: string;
  readonly start: number;
  end: number | null;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A primary, a streaming standby and the endpoint in front of the primary; candidates through the endpoint. */
async function endpointCluster() {
  const cluster = await startCluster({ standbys: 1 });
  const [standby] = cluster.standbys;
  if (!standby) throw new Error('no standby');
  const endpoint: FaultProxy = await startFaultProxy({
    host: cluster.primary.host,
    port: cluster.primary.port,
  });
  const keys = randomKeys();
  const tag = testTag();
  const locks: LeaderLock[] = [];
  const runs: Run[] = [];
  const errors: string[] = [];
  onTestFinished(async () => {
    await Promise.all(locks.map((l) => l.shutdown({ timeoutMs: 5000 })));
    await endpoint.close();
    await cluster.dispose();
  });
  const url = endpoint.url(cluster.primary.url);
  return {
    old: cluster.primary,
    standby,
    endpoint,
    runs,
    /** A candidate through the endpoint, started now; its terms are recorded in `runs`. */
    candidate(name: string, extra: Partial<LeaderLockOptions> = {}): LeaderLock {
      const lock = new LeaderLock({
        connectionString: url,
        id: `${tag}-${name}`,
        ...keys,
        healthIntervalMs: HEALTH_MS,
        queryTimeoutMs: QUERY_TIMEOUT_MS,
        retryStrategy: new FixedInterval({ intervalMs: 50 }),
        ...extra,
      });
      lock.onError((err) => {
        errors.push(`${name}: ${err.message}`);
      });
      lock.runWhileLeader(async (term) => {
        const run: Run = { id: name, start: performance.now(), end: null };
        runs.push(run);
        await new Promise((resolve) => term.signal.addEventListener('abort', resolve, { once: true }));
        run.end = performance.now();
      });
      locks.push(lock);
      void lock.start();
      return lock;
    },
    /** The first term of `name` that started after `after`, once it has. */
    async runOf(name: string, after = 0, timeoutMs = 15_000): Promise<Run> {
      const find = () => runs.find((r) => r.id === name && r.start >= after);
      await eventually(() => find() !== undefined, {
        timeoutMs,
        intervalMs: 2,
        what: `a term of ${name}`,
      }).catch((err: Error) => {
        throw new Error(`${err.message}; errors: ${JSON.stringify(errors)}`);
      });
      return find() as Run;
    },
    /** Backends holding (granted) the test's key on `node`. */
    async holders(node: ClusterNode): Promise<number> {
      return (await lockHolders(node.url, keys.key1, keys.key2)).filter((r) => r.granted).length;
    },
    /** Backends waiting for the test's key on `node`. */
    async waiters(node: ClusterNode): Promise<number> {
      return (await lockHolders(node.url, keys.key1, keys.key2)).filter((r) => !r.granted).length;
    },
  };
}

type Setup = Awaited<ReturnType<typeof endpointCluster>>;

/** `a` leads on the old primary through the endpoint and `b` waits there; then the standby is promoted (the old primary stays up). */
async function leaderThenPromotion(s: Setup): Promise<{ a: LeaderLock; aRun: Run }> {
  const a = s.candidate('a');
  const aRun = await s.runOf('a');
  s.candidate('b');
  await eventually(async () => (await s.waiters(s.old)) === 1, { what: 'b waiting on the old primary' });
  await promoteNow(s.standby);
  expect(await s.old.role()).toBe('primary'); // both servers are primaries now
  return { a, aRun };
}

describe('an endpoint whose address moves while the old primary keeps running (Aurora cluster endpoint, a DNS name, a VIP): one address for every candidate', () => {
  it('existing connections kept open: the old leader keeps leading on the old primary while a candidate connecting after the move leads on the promoted one; the overlap lasts until the old connections end (2 s held here), not bounded by the lock', async () => {
    const s = await endpointCluster();
    const { a, aRun } = await leaderThenPromotion(s);
    s.endpoint.retarget({ host: s.standby.host, port: s.standby.port });
    const movedAt = performance.now();
    s.candidate('c'); // a new replica, a restarted process: connects after the move
    const cRun = await s.runOf('c');
    const cIn = cRun.start - movedAt;
    // bound: compat/endpoint-retarget-kept-lead
    expect(cIn - DEFAULT_TAKEOVER_MS).toBeLessThanOrEqual(LEAD_MARGIN_MS);
    // "for a while": the old primary and the connections to it stay up 2 s more
    await sleep(2000);
    expect(a.state).toBe(LockState.LEADER); // still leading on the old primary
    expect(cRun.end).toBeNull();
    expect(await s.holders(s.old)).toBe(1); // a, on the old primary
    expect(await s.holders(s.standby)).toBe(1); // c, on the promoted one
    expect(await s.waiters(s.old)).toBe(1); // b still waits behind a there
    // at last the old primary goes (fenced, stopped): a's session ends with it
    const stoppedAt = performance.now();
    await s.old.stop('fast');
    // a's leadership on the old primary, whatever terms it came in (a lease that lapsed
    // under load and was renewed opens another term of the same leadership)
    const aTerms = () => s.runs.filter((r) => r.id === 'a');
    await eventually(() => aTerms().every((r) => r.end !== null), {
      timeoutMs: 10_000,
      what: "a's terms to end",
    });
    const aOut = Math.max(...aTerms().map((r) => r.end as number)) - stoppedAt;
    const overlaps = overlapsOf(s.runs, (r) => r.id);
    expect(overlaps.map((o) => [o.a.id, o.b.id].sort().join('+'))).toEqual(overlaps.map(() => 'a+c'));
    expect(overlaps[0]?.a).toBe(aRun); // a led when c's term began
    const twoLeadersMs = overlaps.reduce((sum, o) => sum + o.ms, 0);
    expect(twoLeadersMs).toBeGreaterThanOrEqual(2000);
    // b (its wait ended with the old primary) reconnects through the endpoint and follows c
    await eventually(async () => (await s.waiters(s.standby)) >= 1, {
      what: 'b waiting on the promoted server',
    });
    expect(cRun.end).toBeNull();
    expect(s.runs.filter((r) => r.end === null).map((r) => r.id)).toEqual(['c']);
    console.log(
      `[endpoint-retarget] kept: c led ${cIn.toFixed(0)} ms after the move; two leaders for ${twoLeadersMs.toFixed(0)} ms (${aTerms().length} term(s) of a); a out ${aOut.toFixed(0)} ms after the old primary's stop was called`,
    );
  });

  it('existing connections reset at the move (Aurora drops the old writer’s connections): the old leader’s term ends first and one candidate leads on the promoted server; no two terms overlap', async () => {
    const s = await endpointCluster();
    const { aRun } = await leaderThenPromotion(s);
    s.endpoint.retarget({ host: s.standby.host, port: s.standby.port });
    s.endpoint.reset();
    const movedAt = performance.now();
    await eventually(() => s.runs.some((r) => r.start > movedAt), {
      timeoutMs: 15_000,
      intervalMs: 2,
      what: 'a new leader',
    });
    const next = s.runs.find((r) => r.start > movedAt) as Run;
    const inMs = next.start - movedAt;
    // bound: compat/endpoint-retarget-reset-lead
    expect(inMs - DEFAULT_TAKEOVER_MS).toBeLessThanOrEqual(LEAD_MARGIN_MS);
    await sleep(1000); // the old primary still up meanwhile
    expect(aRun.end).not.toBeNull();
    const aOut = (aRun.end as number) - movedAt;
    expect(aRun.end as number).toBeLessThanOrEqual(next.start);
    expect(overlapsOf(s.runs, (r) => r.id)).toEqual([]);
    expect(s.runs.filter((r) => r.end === null)).toEqual([next]);
    expect(await s.old.role()).toBe('primary');
    expect(await s.holders(s.old)).toBe(0);
    expect(await s.holders(s.standby)).toBe(1);
    console.log(
      `[endpoint-retarget] reset: a out ${aOut.toFixed(0)} ms after the move; ${next.id} led ${inMs.toFixed(0)} ms after it`,
    );
  });

  for (const takeoverDelayMs of [DEFAULT_TAKEOVER_MS, HEALTH_MS + QUERY_TIMEOUT_MS + 200]) {
    const overlapExpected = takeoverDelayMs < HEALTH_MS + QUERY_TIMEOUT_MS;
    it(`existing connections fenced off (the old writer answers nothing more), takeoverDelayMs ${takeoverDelayMs}: the old leader's term ends within healthIntervalMs + queryTimeoutMs (${HEALTH_MS} + ${QUERY_TIMEOUT_MS}) of the fence; a candidate connecting after the move leads after the takeover delay: ${overlapExpected ? 'the terms overlap' : 'no overlap'}`, async () => {
      const s = await endpointCluster();
      const a = s.candidate('a', { takeoverDelayMs });
      const aRun = await s.runOf('a');
      await promoteNow(s.standby);
      s.endpoint.retarget({ host: s.standby.host, port: s.standby.port });
      s.endpoint.silenceCurrent();
      const fencedAt = performance.now();
      s.candidate('c', { takeoverDelayMs });
      const cRun = await s.runOf('c');
      const cIn = cRun.start - fencedAt;
      await eventually(() => aRun.end !== null, { timeoutMs: 10_000, what: "a's term to end" });
      const aOut = (aRun.end as number) - fencedAt;
      const overlaps = overlapsOf(s.runs, (r) => r.id);
      console.log(
        `[endpoint-retarget] fenced, takeoverDelayMs ${takeoverDelayMs}: a out ${aOut.toFixed(0)} ms after the fence; c led ${cIn.toFixed(0)} ms after it; overlap ${overlaps[0]?.ms.toFixed(0) ?? 0} ms`,
      );
      // the rule: out at its next check's deadline (healthIntervalMs + queryTimeoutMs)
      // bound: compat/endpoint-retarget-fenced-out
      expect(aOut).toBeLessThanOrEqual(HEALTH_MS + QUERY_TIMEOUT_MS + 600);
      expect(cIn).toBeGreaterThanOrEqual(takeoverDelayMs - TIMER_EARLY_MS);
      // bound: compat/endpoint-retarget-fenced-lead
      expect(cIn - takeoverDelayMs).toBeLessThanOrEqual(LEAD_MARGIN_MS);
      if (overlapExpected) {
        expect(overlaps.map((o) => [o.a.id, o.b.id])).toEqual([['a', 'c']]);
      } else {
        expect(overlaps).toEqual([]);
      }
      // a reconnects through the endpoint and follows c on the promoted server
      await eventually(async () => (await s.waiters(s.standby)) >= 1, {
        what: 'a waiting on the promoted server',
      });
      expect(a.isLeader).toBe(false);
      expect(s.runs.filter((r) => r.end === null).map((r) => r.id)).toEqual(['c']);
    });
  }
});
