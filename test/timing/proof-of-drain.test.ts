/**
 * What ends or avoids the takeover delay, against real PostgreSQL: the proof of drain from a
 * live old leader (candidates in processes of their own), and a lock's own step-down and
 * re-acquisition on the session it keeps.
 */
import { describe, expect, it } from 'vitest';
import { FixedInterval, LeaderLock } from '../../src/index.js';
import { bareTerminate, expectNearBaseline } from '../harness/baseline.js';
import { type Report, runOverlaps, useCandidates } from '../harness/candidates.js';
import { adminClient, databaseUrl, eventually, holderPid, randomKeys } from '../harness/db.js';
import { useLocks } from '../harness/locks.js';
import { median } from '../harness/stats.js';
import { TIMER_EARLY_MS } from '../harness/timers.js';

const locks = useLocks();
const candidates = useCandidates(() => locks.tag);

describe('proof of drain: a live old leader ends the next leader’s takeover delay (wait mode, delay 250 ms)', () => {
  const now = (): number => Number(process.hrtime.bigint()) / 1e6;

  it('pg_terminate_backend of a leader whose work stops 5 ms after its abort: the old work stops within 20 ms p50 of a bare client hearing its socket end (+ 5 ms), the next leader’s work within 2 × a bare grant plus a new connection + 45 ms (p50) (6 rounds, a bare round before each), never before the old work stopped', async () => {
    const c = candidates('wait', 250, 2, true, 5); // autoReacquire: the old leader reconnects and says it drained
    await using admin = await adminClient(databaseUrl());
    const took: number[] = [];
    /** When the old leader's work had stopped, after the fault (its detection + the 5 ms stop). */
    const oldStopped: number[] = [];
    // the baselines, one per round: bare clients on a key of their own, a holder terminated
    // (when its socket ended, plus the 5 ms stop) and a waiter granted, plus a new connection
    // and a statement (the old leader's reconnection to say it drained)
    const bareStopped: number[] = [];
    const bareNext: number[] = [];
    for (let round = 0; round < 6; round++) {
      const bare = await bareTerminate(databaseUrl(), admin, now);
      bareStopped.push(bare.ended + 5);
      bareNext.push(bare.granted + bare.connectMs);
      await eventually(() => c.runs('run-start').length === round + 1, {
        timeoutMs: 10_000,
        what: `leader ${round + 1}`,
      });
      // both candidates connected, the follower queued
      await eventually(async () => {
        const seen = await LeaderLock.inspect({ connectionString: databaseUrl(), ...c.keys });
        return seen.waiters.length === 1 && seen.pending === false;
      });
      const old = c.runs('run-start')[round] as Report;
      const pid = await holderPid(databaseUrl(), c.keys.key1, c.keys.key2);
      const faultAt = now();
      await admin.terminate(pid);
      await eventually(() => c.runs('run-start').length === round + 2, {
        timeoutMs: 10_000,
        intervalMs: 2,
        what: `leader ${round + 2}`,
      });
      const next = c.runs('run-start')[round + 1] as Report;
      expect(next.id).not.toBe(old.id);
      const oldEnd = c.runs('run-end').find((r) => r.id === old.id && r.term === old.term);
      expect(oldEnd, 'the old leader reported its work stopped').toBeDefined();
      expect(runOverlaps(c.reports)).toEqual([]); // no overlap
      took.push(next.at - faultAt);
      oldStopped.push((oldEnd?.at ?? Number.POSITIVE_INFINITY) - faultAt);
    }
    const p50 = median(took);
    const stoppedP50 = median(oldStopped);
    console.log(
      `[proof of drain] terminate → next leader's work: ${took.map((t) => t.toFixed(0)).join(', ')} ms; p50 ${p50.toFixed(1)} ms (delay 250 ms); ` +
        `the old work had stopped ${oldStopped.map((t) => t.toFixed(0)).join(', ')} ms after the fault, p50 ${stoppedP50.toFixed(1)} ms; ` +
        `bare clients: the holder's socket ended + 5 ms p50 ${median(bareStopped).toFixed(1)} ms, the waiter granted + a new connection p50 ${median(bareNext).toFixed(1)} ms`,
    );
    // docs/safety.md: "the old work had stopped about 12 ms after the fault" (detection, then the 5 ms stop)
    expectNearBaseline(
      'terminate → the old work stopped, against a bare client hearing its socket end (+ the 5 ms stop)',
      { subject: oldStopped, baseline: bareStopped },
      { overMs: 20, compare: 'paired' },
    );
    expect(c.reports.filter((r) => r.ev === 'delayed').length).toBeGreaterThanOrEqual(6); // each was delayed, then proven
    // the proof of drain in place of the 250 ms delay: the library's statements and reports
    // over a bare grant and reconnection (37–45 ms against a fixed 60 before: docs/testing.md)
    expectNearBaseline(
      'terminate → the next leader’s work, against a bare waiter granted plus a new connection',
      { subject: took, baseline: bareNext },
      // twice the baseline: the candidates are processes of their own, whose reports a loaded
      // machine delays more than this process's bare clients (+78 ms over 1× at load 20)
      { ratio: 2, overMs: 45, compare: 'paired' },
    );
  });

  it('a SIGKILLed leader sends nothing: the next leader waits the full delay after the kill, 250–350 ms (the killed process exits 20–90 ms after the signal here)', async () => {
    const c = candidates('wait', 250, 2, true, 5);
    await eventually(() => c.runs('run-start').length === 1, { timeoutMs: 10_000, what: 'a leader' });
    await eventually(async () => {
      const seen = await LeaderLock.inspect({ connectionString: databaseUrl(), ...c.keys });
      return seen.waiters.length === 1 && seen.pending === false;
    });
    const old = c.runs('run-start')[0] as Report;
    const killedAt = now();
    c.procs.get(old.id)?.kill('SIGKILL');
    await eventually(() => c.runs('run-start').length === 2, { timeoutMs: 10_000, intervalMs: 2 });
    const next = c.runs('run-start')[1] as Report;
    console.log(
      `[proof of drain] SIGKILL → next leader's work: ${(next.at - killedAt).toFixed(0)} ms (delay 250 ms)`,
    );
    expect(next.at - killedAt).toBeGreaterThanOrEqual(250 - TIMER_EARLY_MS);
    // docs/safety.md: "about a quarter of a second" (279–281 ms measured)
    // bound: timing/proof-of-drain-sigkill
    expect(next.at - killedAt).toBeLessThanOrEqual(350);
  });
});

describe('a lock’s own step-down and re-acquisition', () => {
  it.each(['wait', 'poll'] as const)(
    '%s mode, nobody else waiting: 20 cycles of stepDown() then leading again on the same session (same backend pid), never delayed, p50 within 15 ms of a bare 20 ms timer and try-lock measured between them, each within 3 × its bare cycle + 40 ms',
    async (acquireMode) => {
      const lock = locks.make({
        ...randomKeys(),
        acquireMode,
        takeoverDelayMs: 250,
        retryStrategy: new FixedInterval({ intervalMs: 20 }),
      });
      let delays = 0;
      lock.onTakeoverFence(() => {
        delays += 1;
      });
      await lock.start();
      expect(await lock.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
      await using admin = await adminClient(databaseUrl());
      const pidOf = () =>
        admin.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [
          `pgleaderlock:${lock.id}`,
        ]);
      const first = (await pidOf()).map((r) => r.pid);
      expect(first).toHaveLength(1);
      delays = 0; // the very first acquisition has no proof; what follows must
      const cycles: number[] = [];
      // the baseline, interleaved: a bare timer of the back-off's 20 ms, then a bare client's
      // try-lock of a key of its own (the one round trip a re-acquisition needs)
      const bareKeys = randomKeys();
      const bare: number[] = [];
      const bareCycle = async (): Promise<number> => {
        const at = performance.now();
        await new Promise((r) => setTimeout(r, 20));
        await admin.query('SELECT pg_try_advisory_lock($1, $2)', [bareKeys.key1, bareKeys.key2]);
        return performance.now() - at;
      };
      for (let i = 0; i < 20; i++) {
        if (i % 2 === 0) bare.push(await bareCycle());
        await lock.stepDown();
        const at = performance.now();
        expect(await lock.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
        cycles.push(performance.now() - at);
        if (i % 2 === 1) bare.push(await bareCycle());
      }
      expect((await pidOf()).map((r) => r.pid)).toEqual(first); // no reconnect
      expect(delays).toBe(0);
      const sorted = [...cycles].sort((a, b) => a - b);
      console.log(
        `[own step-down ${acquireMode}] stepDown → leading again: p50 ${sorted[10]?.toFixed(1)} ms, max ${sorted[19]?.toFixed(1)} ms (back-off 20 ms); a bare 20 ms timer and try-lock: p50 ${median(bare).toFixed(1)} ms`,
      );
      // one cycle may wait behind something else on the session: in wait mode the first
      // term's queue re-read 100 ms after its grant (requests.ts) lands in a later cycle
      // (31.5 and 35.5 ms seen, the second as a child process of the previous test died).
      // 19 of 20 within 15 ms of the back-off still fails a change that costs every cycle,
      // or every few, a round trip or more
      const what = `${acquireMode} mode: stepDown → leading again, against a bare 20 ms timer and try-lock`;
      // the p50 of the rounds' differences within 15 ms: a timer or a wait added to every
      // cycle fails; each within 3 × its bare cycle + 40 ms. (19 of 20 within 15 ms of the
      // bare cycle failed at load 20 by 66–85 ms while the p50 differences were 2–6 ms.)
      expectNearBaseline(what, { subject: cycles, baseline: bare }, { overMs: 15, compare: 'paired' });
      expectNearBaseline(
        what,
        { subject: cycles, baseline: bare },
        { ratio: 3, overMs: 40, compare: 'each' },
      );
    },
  );
});
