/**
 * PartitionedLeadership with each worker in a process of its own, against PostgreSQL:
 * 1024 partitions over 8 workers; SIGKILL one worker at a time and measure how long its
 * partitions are ownerless; check no partition ever had two runs at once; connections and
 * statements per worker at steady state. Then faults (SIGKILL, pg_terminate_backend, a
 * server restart, a rolling restart), a frozen and a blackholed worker, and a join/leave
 * storm (partition-chaos.ts; the long form is `npm run chaos:partitions`).
 */
import { describe, expect, it } from 'vitest';
import { useChildren } from '../harness/children.js';
import { adminQuery, eventually, ownServer } from '../harness/db.js';
import {
  formatPartitionReport,
  PARTITION_FAULTS,
  type PartitionChaosReport,
  runPartitionChaos,
} from './partition-chaos.js';
import { findRunOverlaps, heldPartitions as held, now, partitionCluster } from './partition-cluster.js';
import { replayHint, sequenceSeeds } from './plan.js';

const track = useChildren(8000);
/** Seeded partition sequences (plan.ts; CHAOS_SEED=<seed> runs only that one), seeds from base + 4000. */
const PARTITION_SEQUENCES = 8;
const PARTITION_OFFSET = 4000;
const cluster = (url: string, name: string, partitions: number, takeoverDelayMs: number, stopMs = 0) =>
  partitionCluster({ url, name, partitions, takeoverDelayMs, stopMs, track });
/** Two runs of one partition at once, in words. */
const overlaps = (c: ReturnType<typeof cluster>): string[] =>
  findRunOverlaps(c.runs()).map(
    (o) => `partition ${o.p}: ${o.b} started while ${o.a} ran (${o.ms.toFixed(1)} ms)`,
  );

/** docs/partitions.md "Measured": statements per second per worker at rest, healthIntervalMs 1000. */
const STATEMENTS_PER_S = 1.1;
/** The quiet window: two ring-watch slices (10 s each by default). */
const IDLE_MS = 20_000;

const pct = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)] ?? Number.NaN;
};

describe('PartitionedLeadership, workers in separate processes', () => {
  it('1024 partitions over 8 workers: balanced 128 each; exactly two connections per worker (its member session and ring watch) and 1.1 statements a second per worker at rest (±30 %, 20 s, workers’ counters and pg_stat_statements); after SIGKILL of a worker its partitions run again within p99 650 ms of its exit (3 × the worst seen; not its 1 s health interval) (no takeover delay); never two runs of a partition at once', async () => {
    const P = 1024;
    const N = 8;
    const name = `pp-${Date.now()}`;
    // the chaos project has no shared server; pg_stat_statements counts what the workers send
    await using server = await ownServer({ settings: { shared_preload_libraries: 'pg_stat_statements' } });
    await adminQuery(server.url, 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    // eight processes compiling and joining on 2 cores: a new connection can take over the
    // default 1 s here (seen once: a ring watch's connect timed out and was reported)
    const c = partitionCluster({
      url: server.url,
      name,
      partitions: P,
      takeoverDelayMs: 0,
      queryTimeoutMs: 2000,
      track,
    });
    for (let i = 0; i < N; i++) await c.spawn();
    const balanced = (what: string) => c.balanced(what);
    await balanced('8 workers to own 128 partitions each');
    expect(await held(server.url, name)).toBe(P);

    // steady state: connections per worker, counted by the server: each worker's backends
    // carry its id (member session `pgleaderlock:<id>#p<P>`, ring watch `pgleaderlock:<id>#watch`)
    const connections = () =>
      adminQuery<{ id: string; kinds: string[] }>(
        server.url,
        `SELECT split_part(split_part(application_name, ':', 2), '#', 1) AS id,
                array_agg(split_part(application_name, '#', 2) ORDER BY application_name) AS kinds
           FROM pg_stat_activity WHERE application_name LIKE 'pgleaderlock:w%' GROUP BY 1 ORDER BY 1`,
      );
    const steady = (rows: { id: string; kinds: string[] }[]): boolean =>
      rows.length === N && rows.every((r) => r.kinds.join() === `p${P},watch`);
    // at rest: a session that reconnected while eight processes joined on two cores may still
    // be closing its old backend right after the balance (seen once: a worker's two member
    // sessions for a moment); then it stays at exactly two, sampled again a second later
    await eventually(async () => steady(await connections()), {
      what: 'two connections per worker',
      timeoutMs: 5000,
    });
    await new Promise((r) => setTimeout(r, 1000));
    const conns = await connections();
    expect(conns.map((r) => r.id)).toEqual([...c.procs.keys()].sort());
    for (const r of conns) expect(r.kinds, `worker ${r.id}'s connections`).toEqual([`p${P}`, 'watch']);

    // statements per worker at rest (docs/partitions.md "Measured": 1.1 per second with
    // healthIntervalMs 1000): over two ring-watch slices (10 s each, the default), from the
    // workers' own counters and from the server's pg_stat_statements (which counts a statement
    // when it succeeds: a watch slice that times out is left out there)
    const stats = async () => {
      const before = c.msgs.length;
      for (const p of c.procs.values()) if (p.connected) p.send('stats');
      await eventually(() => c.msgs.slice(before).filter((m) => m.ev === 'stats').length === c.procs.size);
      return c.msgs.slice(before).filter((m) => m.ev === 'stats');
    };
    const serverCalls = async (): Promise<number> => {
      const [row] = await adminQuery<{ n: number }>(
        server.url,
        "SELECT coalesce(sum(calls), 0)::int AS n FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%'",
      );
      return row?.n ?? 0;
    };
    await adminQuery(server.url, 'SELECT pg_stat_statements_reset()');
    const t0 = now();
    const s0 = await stats();
    await new Promise((r) => setTimeout(r, IDLE_MS)); // idle on purpose: the claim is about a quiet period
    const s1 = await stats();
    const calls = await serverCalls();
    const seconds = (now() - t0) / 1000;
    const onServer = calls / N / seconds;
    // each worker's count over the time between its own two reports
    const perSecond = s1.map((m) => {
      const m0 = s0.find((x) => x.id === m.id);
      return ((m.stats?.statements ?? 0) - (m0?.stats?.statements ?? 0)) / ((m.at - (m0?.at ?? t0)) / 1000);
    });
    console.log(
      `[partitions] steady state: ${conns.map((r) => r.kinds.length).join(',')} connections per worker; statements/s per worker over ${seconds.toFixed(1)} s: ${perSecond.map((x) => x.toFixed(2)).join(', ')} (workers' counters), ${onServer.toFixed(2)} (pg_stat_statements, mean)`,
    );
    // within ±30 % of the documented 1.1 per second, each worker and on the server
    for (const x of [...perSecond, onServer]) {
      expect(x).toBeGreaterThanOrEqual(0.7 * STATEMENTS_PER_S);
      expect(x).toBeLessThanOrEqual(1.3 * STATEMENTS_PER_S);
    }

    const gaps: number[] = [];
    const exits: number[] = [];
    const afterExit: number[] = [];
    for (let round = 0; round < 4; round++) {
      const victimId = [...c.procs.keys()][0] as string;
      const theirs = [...c.running()].filter(([, id]) => id === victimId).map(([p]) => p);
      c.kill(victimId);
      const t0 = c.killed.get(victimId) as number;
      await eventually(() => theirs.every((p) => c.running().has(p)), {
        timeoutMs: 10_000,
        intervalMs: 20, // the gaps come from the workers' own clocks: polling slower only spares the CPU
        what: 'the killed worker\u2019s partitions to run elsewhere',
      });
      // the baseline: the kernel closes a killed process's sockets (and the server frees its
      // locks) only as the process exits, tens of milliseconds after the signal on a loaded VM
      await eventually(() => c.exitedAt.has(victimId), { what: 'the killed worker to exit' });
      const exited = c.exitedAt.get(victimId) as number;
      exits.push(exited - t0);
      for (const p of theirs) {
        const first = c.msgs.find((m) => m.ev === 'start' && m.p === p && m.at >= t0);
        if (first) {
          gaps.push(first.at - t0);
          afterExit.push(first.at - exited);
        }
      }
      await c.spawn();
      await balanced(`balance again after round ${round + 1}`);
    }
    console.log(
      `[partitions] SIGKILL of a worker (P=${P}, N=${N}, 4 rounds, ${gaps.length} partitions): ownerless p50 ${pct(gaps, 0.5).toFixed(1)} ms, p99 ${pct(gaps, 0.99).toFixed(1)} ms, max ${Math.max(...gaps).toFixed(1)} ms after the kill; the process exited ${exits.map((e) => e.toFixed(0)).join(', ')} ms after it; after its exit: p50 ${pct(afterExit, 0.5).toFixed(1)} ms, p99 ${pct(afterExit, 0.99).toFixed(1)} ms`,
    );
    expect(gaps.length).toBe(4 * (P / N));
    // From the exit (the baseline, measured in this run: the server frees a killed worker's
    // locks when its sockets close, as it exits): the 7 survivors and the server share 2 cores
    // for the take-over, and the p99 is the slowest survivor's take in a round. 108–126 ms
    // when 200 was set; 112–214 in 15 runs a week later, the code before and after a change
    // elsewhere overlapping (112–179 and 135–214). A regression to the health interval (1 s)
    // fails this, and so does the 650 ms bound: 3 × the worst p99 recorded (214 ms; the
    // 200 ms bound before failed at 209 ms on a loaded run, issue 37)
    // bound: chaos/partitions-sigkill-p99
    expect(
      pct(afterExit, 0.99),
      `p99 ${pct(afterExit, 0.99).toFixed(1)} ms after the exit`,
    ).toBeLessThanOrEqual(650);
    expect(overlaps(c)).toEqual([]);
    expect(c.msgs.filter((m) => m.ev === 'error')).toEqual([]);
  }, 150_000); // 20 s of it at rest, for the statement rate

  it('faults (SIGKILL, pg_terminate_backend, a server restart) and a rolling restart, 256 partitions over 4 workers, work that takes 100 ms to stop, takeover delay 250 ms: never two runs of a partition at once, balanced after each', async () => {
    const P = 256;
    const N = 4;
    const name = `pc-${Date.now()}`;
    await using server = await ownServer();
    const c = cluster(server.url, name, P, 250, 100);
    for (let i = 0; i < N; i++) await c.spawn();
    const balanced = (what: string) => c.balanced(what);
    await balanced('the first balance');
    const live = () => [...c.procs.keys()];
    const faults: string[] = [];
    for (const fault of ['kill', 'terminate', 'restart-server', 'terminate', 'kill'] as const) {
      const id = live()[0] as string;
      const seen = c.msgs.length;
      if (fault === 'kill') {
        c.kill(id);
        await c.spawn();
      } else if (fault === 'terminate') {
        await c.terminate(id);
      } else {
        await server.restart('fast');
      }
      faults.push(fault);
      // the fault has taken effect once runs have moved (ended or started)
      await eventually(() => c.msgs.slice(seen).some((m) => m.ev === 'end' || m.ev === 'start'), {
        what: `the ${fault} to take effect`,
      });
      await balanced(`balance after ${faults.join(', ')}`);
    }

    // rolling restart: each worker in turn leaves cleanly (SIGTERM-like: disconnect) and a new one joins
    const before = c.msgs.length;
    const rollStart = now();
    for (const id of live()) {
      await c.stop(id);
      await c.spawn();
      await balanced(`balance after restarting ${id}`);
    }
    const rolled = c.msgs.slice(before);
    const moves = rolled.filter((m) => m.ev === 'start').length;
    // the longest a partition had no run, within the rolling restart
    const lastEnd = new Map<number, number>();
    let longest = 0;
    for (const m of [...rolled].sort((a, b) => a.at - b.at)) {
      if (m.p === undefined) continue;
      if (m.ev === 'end') lastEnd.set(m.p, m.at);
      else if (m.ev === 'start' && lastEnd.has(m.p))
        longest = Math.max(longest, m.at - (lastEnd.get(m.p) as number));
    }
    console.log(
      `[partitions] faults ${faults.join(', ')}: balanced after each; rolling restart of ${N} workers (P=${P}) in ${((now() - rollStart) / 1000).toFixed(1)} s: ${moves} partition moves (${(moves / P).toFixed(2)} × P), longest ownerless gap ${longest.toFixed(0)} ms`,
    );
    const ov = overlaps(c);
    if (ov.length) process.stderr.write(`OVERLAPS ${ov.length}: ${ov.slice(0, 8).join(' | ')}\n`);
    expect(ov).toEqual([]);
    // each restart moves the leaver's share away and (about) a share back to the newcomer
    expect(moves).toBeLessThanOrEqual(2.5 * P);
  }, 120_000);

  it(`${PARTITION_SEQUENCES} seeded sequences of one fault each, 128 partitions starting on 4 workers, healthIntervalMs 200, work that takes 100 ms to stop, fence 250 ms: every kind at least once (SIGKILL, pg_terminate_backend, a server restart, a blackholed worker, one frozen 2 s by SIGSTOP or a busy loop, past the server release bound 1.4 s, a clean leave, a join/leave storm of 6 joins, clean leaves and SIGKILLs 50–300 ms apart, one frozen while its takeover delays are pending): never two runs of a partition at once (a run ends at its lease end if its work stops later), no term opened past its lease; balanced after each fault (⌊P/N⌋ or ⌈P/N⌉ per live worker), every partition owned at the end`, async () => {
    const P = 128;
    const r = await runPartitionChaos({
      workers: 4,
      partitions: P,
      seeds: sequenceSeeds(PARTITION_OFFSET, PARTITION_SEQUENCES),
      track,
    });
    console.log(
      `[partitions chaos] ${r.sequences.length} sequences, ${r.faults.length} faults, ${r.runs.length} runs\n${formatPartitionReport(r)}\n${r.faults.map((f) => `  ${f.seed}: ${f.step}: ${f.target}`).join('\n')}`,
    );
    expectSafe(r, P);
    if (r.sequences.length >= PARTITION_FAULTS.length)
      for (const k of PARTITION_FAULTS)
        expect(r.faults.filter((f) => f.kind === k).length, `${k} injected`).toBeGreaterThanOrEqual(1);
    // the faults took effect: the server freed the worker's locks and the others ran its share
    for (const f of r.faults)
      if (f.kind === 'freeze' || f.kind === 'blackhole' || f.kind === 'freezeInFence')
        expect
          .soft(f.moved, `runs started after ${f.step}, sequence ${replayHint(f.seed)}`)
          .toBeGreaterThanOrEqual(P / 8);
    const n = r.workersAtEnd;
    expect(r.perWorkerAtEnd).toHaveLength(n);
    for (const k of r.perWorkerAtEnd) expect([Math.floor(P / n), Math.ceil(P / n)]).toContain(k);
  }, 120_000);
});

/** What every chaos run must show: no overlap, no term opened past its lease, balanced after each fault, all owned at the end. */
function expectSafe(r: PartitionChaosReport, P: number): void {
  const seedOf = (t: number): string => {
    const f = [...r.faults].reverse().find((x) => x.at <= t);
    return f ? `after ${f.step}, sequence ${replayHint(f.seed)}` : 'before the first fault';
  };
  expect
    .soft(
      r.overlaps.slice(0, 5).map((o) => ({ ...o, after: seedOf(o.at) })),
      `${r.overlaps.length} times two runs of one partition at once`,
    )
    .toEqual([]);
  expect
    .soft(
      r.lateStarts.map((l) => ({ ...l, after: seedOf(l.start) })),
      'terms opened past their lease',
    )
    .toEqual([]);
  for (const f of r.faults)
    expect
      .soft(f.balancedMs, `balanced again after ${f.step}, sequence ${replayHint(f.seed)}`)
      .not.toBeNull();
  expect(r.ownerlessAtEnd).toEqual([]);
  expect(r.runningAtEnd).toBe(P);
  expect(r.heldAtEnd).toBe(P);
}
