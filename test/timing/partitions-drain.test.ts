/**
 * The proof of drain for PartitionedLeadership, against real PostgreSQL, workers in
 * processes of their own (test/chaos/partition-cluster.ts): a worker whose member session is
 * terminated while its process lives says, from its next session, that its runs returned,
 * and the worker that took its partitions under the takeover delay opens them at once. A
 * SIGKILLed worker says nothing: its partitions wait the full delay.
 */
import { describe, expect, it } from 'vitest';
import { findRunOverlaps, now, partitionCluster } from '../chaos/partition-cluster.js';
import { bareKill, bareTerminate, expectNearBaseline } from '../harness/baseline.js';
import { useChildren } from '../harness/children.js';
import { adminClient, adminQuery, databaseUrl, eventually } from '../harness/db.js';
import { TIMER_EARLY_MS } from '../harness/timers.js';

const track = useChildren(8000);
const DELAY = 250;
const P = 16;

/** `workers` workers sharing P partitions, work that stops 5 ms after its abort. */
async function pair(workers = 2, dropCancels = false) {
  const c = partitionCluster({
    url: databaseUrl(),
    name: `drain-${Date.now()}-${Math.random().toString(36).slice(2, 6)}`,
    partitions: P,
    takeoverDelayMs: DELAY,
    stopMs: 5,
    dropCancels,
    track,
  });
  for (let i = 0; i < workers; i++) await c.spawn();
  await c.balanced(`${workers} workers to share ${P} partitions`);
  // the ring settled: every member's lock is awaited by a ring watch, one watch each. Right
  // after the balance a watch may still wait on its old target (behind a proxy that drops
  // cancels it waits out closeTimeoutMs, 1 s, first), the member it should watch unwatched:
  // that member's death is then seen by the next reconcile instead (within
  // healthIntervalMs, 1 s here: 969 and 1,020 ms were seen when this only counted waits)
  const ids = [...c.procs.keys()];
  await eventually(
    async () => {
      const [row] = await adminQuery<{ waits: number; watched: number }>(
        databaseUrl(),
        `SELECT count(DISTINCT w.pid)::int AS waits, count(DISTINCT h.pid)::int AS watched
           FROM pg_locks w JOIN pg_stat_activity wa ON wa.pid = w.pid
           LEFT JOIN pg_locks h ON h.locktype = 'advisory' AND h.granted AND h.database = w.database
             AND h.classid = w.classid AND h.objid = w.objid AND h.objsubid = w.objsubid
             AND h.pid IN (SELECT pid FROM pg_stat_activity WHERE application_name = ANY ($2))
          WHERE w.locktype = 'advisory' AND NOT w.granted AND wa.application_name = ANY ($1)`,
        [ids.map((id) => `pgleaderlock:${id}#watch`), ids.map((id) => `pgleaderlock:${id}#p${P}`)],
      );
      return row?.waits === workers && row.watched === workers;
    },
    { what: 'every worker’s member lock awaited by one ring watch', timeoutMs: 10_000 },
  );
  return c;
}

/** When each of `partitions` first started a run after `t0`, anywhere, as ms after `t0`. */
function restarts(c: Awaited<ReturnType<typeof pair>>, partitions: number[], t0: number): number[] {
  return partitions.map((p) => {
    const first = c.msgs.find((m) => m.ev === 'start' && m.p === p && m.at >= t0);
    return first ? first.at - t0 : Number.POSITIVE_INFINITY;
  });
}

describe(`PartitionedLeadership: proof of drain (takeover delay ${DELAY} ms, work stops 5 ms after its abort)`, () => {
  it('pg_terminate_backend of a worker’s member session (its process lives): its partitions run again within 2 × a bare grant and new connection + 70 ms (p50 over 4 rounds of differences; the delay it skips is 250 ms), never while its old runs went on', async () => {
    const c = await pair();
    await using admin = await adminClient(databaseUrl()); // connected ahead: its SCRAM is not in the figure
    const took: number[] = [];
    const bare: number[] = []; // a bare waiter's grant after a terminate plus a new connection, each round
    for (let round = 0; round < 4; round++) {
      const b = await bareTerminate(databaseUrl(), admin, now);
      bare.push(b.granted + b.connectMs);
      const victim = [...c.procs.keys()][round % 2] as string;
      const theirs = [...c.running()].filter(([, id]) => id === victim).map(([p]) => p);
      const [member] = await admin.query<{ pid: number }>(
        'SELECT pid FROM pg_stat_activity WHERE application_name = $1',
        [`pgleaderlock:${victim}#p${P}`],
      );
      const t0 = now();
      await admin.terminate(member?.pid as number);
      await eventually(
        () => theirs.every((p) => c.msgs.some((m) => m.ev === 'start' && m.p === p && m.at >= t0)),
        {
          timeoutMs: 10_000,
          intervalMs: 5,
          what: 'the terminated worker’s partitions to run again',
        },
      );
      took.push(Math.max(...restarts(c, theirs, t0)));
      await c.balanced(`balanced again after round ${round + 1}`, 20_000, 300);
    }
    console.log(
      `[partitions proof of drain] terminate → its last partition runs again: ${took.map((t) => t.toFixed(0)).join(', ')} ms (delay ${DELAY} ms); a bare grant + new connection: ${bare.map((t) => t.toFixed(0)).join(', ')} ms`,
    );
    const overlaps = findRunOverlaps(c.runs());
    expect(overlaps).toEqual([]);
    // README: within 100 ms. The path holds a new SCRAM connection (16 ms here) and two
    // notifications; 50–64 ms measured on the 2-core VM, 76 ms in one loaded CI run (against a
    // fixed 100 then). Against the bare path in the same rounds: twice it (the workers are
    // processes of their own, slowed more by load) + 70 ms; the 250 ms delay still fails
    expectNearBaseline(
      'terminate → its last partition runs again, against a bare waiter granted plus a new connection',
      { subject: took, baseline: bare },
      { ratio: 2, overMs: 70, compare: 'paired' },
    );
    await c.close();
  });

  it.each([
    // 3 × the most the last partition was seen past the delay: 56 ms (270–306 ms after the
    // kill, 2026-12-02/03), and 71 behind the proxies (274–321 ms; one more hop per
    // statement, three workers; 3.8 s before the cancel follow-up)
    [170, '', 2, false],
    [215, ', three workers, each behind a proxy that drops cancel requests', 3, true],
  ] as const)(
    'a SIGKILLed worker sends nothing: its partitions wait the full delay: none runs again before the 250 ms delay (less a timer’s early firing), the last at most 2 × a bare holder’s SIGKILL → grant + %s ms past it%s',
    async (overMs, _, workers, dropCancels) => {
      const c = await pair(workers, dropCancels);
      // the baseline, before and after: a bare client's lock in a process of its own,
      // SIGKILLed, and a bare waiter granted (the process's death, the server hearing it)
      const bare = [await bareKill(databaseUrl(), now)];
      const victim = [...c.procs.keys()][0] as string;
      const theirs = [...c.running()].filter(([, id]) => id === victim).map(([p]) => p);
      c.kill(victim);
      const t0 = c.killed.get(victim) as number;
      await eventually(() => theirs.every((p) => c.running().has(p)), {
        timeoutMs: 10_000,
        intervalMs: 5,
        what: 'the killed worker’s partitions to run elsewhere',
      });
      const times = restarts(c, theirs, t0);
      bare.push(await bareKill(databaseUrl(), now));
      console.log(
        `[partitions proof of drain] SIGKILL → its partitions run again: first ${Math.min(...times).toFixed(0)} ms, last ${Math.max(...times).toFixed(0)} ms (delay ${DELAY} ms); a bare holder's SIGKILL → grant: ${bare.map((t) => t.toFixed(1)).join(', ')} ms`,
      );
      expect(Math.min(...times)).toBeGreaterThanOrEqual(DELAY - TIMER_EARLY_MS);
      // docs/partitions.md: 265–309 ms after the kill here, 274–321 behind cancel-dropping
      // proxies; the bare failover measured beside it (5–7 ms here) is the server's part of
      // the path, the margin the library's own (a fixed 325 / 400 before, under 3 × 56 / 71);
      // a second delay (+250) still fails
      expectNearBaseline(
        'SIGKILL → the last of its partitions runs again, past the takeover delay, against a bare holder’s SIGKILL → grant',
        { subject: Math.max(...times) - DELAY, baseline: bare },
        { ratio: 2, overMs },
      );
      await c.close();
    },
  );
});
