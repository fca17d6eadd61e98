/**
 * Claims about the library's own timing rules, checked in simulated time (issue 36 item 7,
 * docs/testing.md "Claims checked in the simulation"): a directed scenario (a fixed profile and
 * plan on the simulated server and network, `Options.fixed`) and the times its trace records.
 * In simulated time the only slack is the network's delay (at most 1 ms each way here), so each bound is exact to a few
 * of its round trips, every run, where the real-time tests that made these claims needed
 * hundreds of milliseconds of margin for a loaded machine.
 */ import { describe, expect, it } from 'vitest';
import { at, DELAY_MS, directed, termAfter } from './directed.js';

describe.each(['wait', 'poll'] as const)('the takeover delay, in simulated time (%s mode)', (mode) => {
  it(`a clean handover (the leader's shutdown) opens the next term within 10 ms of its grant (5 round trips at most 1 ms each way), never the ${DELAY_MS} ms delay; an unclean one (the leader's process crashed) opens it ${DELAY_MS} ms after the grant, not sooner, and within 10 ms more`, async () => {
    const { grants, terms, trace } = await directed(mode, [
      { at: 0, op: 'start', who: 0 },
      { at: 100, op: 'start', who: 1 },
      { at: 2000, op: 'shutdown', who: 0, ms: 0 },
      { at: 3000, op: 'start', who: 0 },
      { at: 5000, op: 'crash', who: 1 },
    ]);
    const clean = grants.find((g) => g.at >= 2000 && g.at < 5000);
    const unclean = grants.find((g) => g.at >= 5000);
    if (!clean || !unclean) throw new Error(`grants: ${JSON.stringify(grants)}\n${trace.join('\n')}`);
    expect([clean.who, unclean.who].map((w) => w.split('.')[0])).toEqual(['c1', 'c0']);
    // the clean handover: b, granted as a shut down; no delay (docs/safety.md)
    const cleanMs = termAfter(terms, clean);
    expect(cleanMs, `clean handover: term ${cleanMs} ms after the grant`).toBeLessThan(10);
    // the crash: a, started again, granted as the server frees b's lock
    const uncleanMs = termAfter(terms, unclean);
    console.log(
      `[sim claims] ${mode}: clean handover ${cleanMs.toFixed(2)} ms, crash ${uncleanMs.toFixed(2)} ms after the grant`,
    );
    expect(uncleanMs).toBeGreaterThanOrEqual(DELAY_MS);
    expect(uncleanMs, `crash: term ${uncleanMs} ms after the grant`).toBeLessThan(DELAY_MS + 10);
  });
});

describe.each(['wait', 'poll'] as const)('a connection loss heard, in simulated time (%s mode)', (mode) => {
  it('pg_terminate_backend of the leader: it leaves LEADER within 5 ms of the terminate (its connection hears the close after the network delay, at most 1 ms), not at its next health check 5,000 ms later', async () => {
    const { trace } = await directed(
      mode,
      [
        { at: 0, op: 'start', who: 0 },
        { at: 100, op: 'start', who: 1 },
        { at: 2000, op: 'terminate', who: 0 },
      ],
      { healthIntervalMs: 5000 },
    );
    const kill = trace.find((l) => l.includes(' do {"at":2000,"op":"terminate"'));
    const killAt = kill ? Number(kill.split(' ')[0]) : Number.NaN;
    const left = trace.find((l) => / leader->/.test(l) && Number(l.split(' ')[0]) >= killAt);
    if (!kill || !left) throw new Error(`no terminate or no step out of LEADER:\n${trace.join('\n')}`);
    const ms = Number(left.split(' ')[0]) - killAt;
    console.log(`[sim claims] ${mode}: left LEADER ${ms.toFixed(2)} ms after the terminate (${left})`);
    expect(ms, left).toBeLessThan(5);
  });

  it('a server stop under the leader: it leaves LEADER within 5 ms of the stop (its connection hears the close after the network delay, at most 1 ms), not at its next health check 5,000 ms later', async () => {
    const { trace } = await directed(
      mode,
      [
        { at: 0, op: 'start', who: 0 },
        { at: 100, op: 'start', who: 1 },
        { at: 2000, op: 'restart', ms: 300 },
      ],
      { healthIntervalMs: 5000 },
    );
    const stop = trace.find((l) => l.includes(' do {"at":2000,"op":"restart"'));
    const stopAt = stop ? Number(stop.split(' ')[0]) : Number.NaN;
    const left = trace.find((l) => / leader->/.test(l) && Number(l.split(' ')[0]) >= stopAt);
    if (!stop || !left) throw new Error(`no stop or no step out of LEADER:\n${trace.join('\n')}`);
    const ms = Number(left.split(' ')[0]) - Number(stop.split(' ')[0]);
    console.log(`[sim claims] ${mode}: left LEADER ${ms.toFixed(2)} ms after the server stopped (${left})`);
    expect(left.split(' ')[1]).toBe('c0.0'); // the leader that was stopped under
    expect(ms, left).toBeLessThan(5);
  });
});

describe.each(['wait', 'poll'] as const)('handoverTo to nobody, in simulated time (%s mode)', (mode) => {
  it('handoverTo a candidate that does not wait rejects within 5 ms of the call (a look at the lock queue: a round trip, at most 1 ms each way), not at its timeoutMs of 1,000 ms; the leader keeps leading', async () => {
    const { trace, terms } = await directed(mode, [
      { at: 0, op: 'start', who: 0 },
      { at: 2000, op: 'handoverTo', who: 0, to: 1 }, // b never started: nobody waits as "b"
      // nothing (b has no lock): the run's quiet phase starts here, so it runs past the
      // handover's timeoutMs
      { at: 4000, op: 'stepDown', who: 1 },
    ]);
    const call = trace.find((l) => l.includes(' do {"at":2000,"op":"handoverTo"'));
    const rejected = trace.find((l) => l.includes(' handoverTo rejected: '));
    if (!call || !rejected) throw new Error(`no call or no rejection:\n${trace.join('\n')}`);
    const ms = Number(rejected.split(' ')[0]) - Number(call.split(' ')[0]);
    console.log(
      `[sim claims] ${mode}: handoverTo nobody rejected ${ms.toFixed(2)} ms after the call (${rejected})`,
    );
    expect(rejected).toContain('"b"');
    expect(ms).toBeLessThan(5);
    expect(terms.map((t) => t.who)).toEqual(['c0.0']); // one term, kept
    // still leading past the handover's 1,000 ms timeoutMs and more (the run goes on to its end)
    expect(at(trace[trace.length - 1] ?? '0')).toBeGreaterThan(3500);
    const firstLeft = trace.find((l) => / leader->/.test(l));
    expect(firstLeft ? at(firstLeft) : Number.POSITIVE_INFINITY).toBeGreaterThan(3500);
  });
});

describe.each(['wait', 'poll'] as const)('priorities, in simulated time (%s mode)', (mode) => {
  it(`a higher-priority candidate that joins during the next leader's ${DELAY_MS} ms takeover delay: that leader hands over as soon as its term opens (its body ends within 5 ms of starting), and the higher-priority one's term opens within 20 ms of that, with no delay of its own`, async () => {
    const { terms, trace } = await directed(
      mode,
      [
        { at: 0, op: 'start', who: 0 },
        { at: 100, op: 'start', who: 1 },
        { at: 2000, op: 'crash', who: 0 }, // b granted at once, holds the delay (a crash proves nothing)
        { at: 2300, op: 'start', who: 2 }, // c, priority 5, joins during b's delay
      ],
      {
        candidates: [
          { id: 'a', priority: 0 },
          { id: 'b', priority: 0 },
          { id: 'c', priority: 5 },
        ],
      },
    );
    const bStart = terms.find((t) => t.who.startsWith('c1.') && t.at >= 2000);
    const cStart = terms.find((t) => t.who.startsWith('c2.'));
    const bEnd = trace.find(
      (l) => /^\S+ c1\.\d+ body end /.test(l) && bStart !== undefined && at(l) >= bStart.at,
    );
    if (!bStart || !cStart || !bEnd) throw new Error(`terms: ${JSON.stringify(terms)}\n${trace.join('\n')}`);
    const held = at(bEnd) - bStart.at;
    const next = cStart.at - bStart.at;
    console.log(
      `[sim claims] ${mode}: b's term opened ${(bStart.at - 2000).toFixed(1)} ms after the crash, its body ended ${held.toFixed(2)} ms later, c's term opened ${next.toFixed(2)} ms after b's`,
    );
    expect(bStart.at - 2000).toBeGreaterThanOrEqual(DELAY_MS); // b waited its delay
    expect(held).toBeLessThan(5);
    expect(next).toBeLessThan(20);
  });
});

describe.each(['wait', 'poll'] as const)(
  'readiness when the network goes silent, in simulated time (%s mode)',
  (mode) => {
    const HEALTH = 500;
    const QUERY = 500;
    const SLICE = 2000;
    it(`every connection of the leader and of a follower silently dropped (new ones hang): the leader turns unready within healthIntervalMs + 2 × queryTimeoutMs (${HEALTH + 2 * QUERY} ms), a ${mode === 'wait' ? `waiting follower within waitSliceMs × 1.1 + 2 × queryTimeoutMs (${SLICE * 1.1 + 2 * QUERY} ms)` : 'polling follower within the same as the leader'}; ready before that, and ready again once the network is back`, async () => {
      const CUT = 3000;
      const { trace } = await directed(
        mode,
        [
          { at: 0, op: 'start', who: 0 },
          { at: 100, op: 'start', who: 1 },
          { at: CUT, op: 'partition', who: 0, ms: 8000 },
          { at: CUT, op: 'partition', who: 1, ms: 8000 },
        ],
        { healthIntervalMs: HEALTH, queryTimeoutMs: QUERY, waitSliceMs: SLICE, takeoverDelayMs: 0 },
        1,
      );
      const readiness = (who: string) =>
        trace
          .filter((l) => new RegExp(`^\\S+ ${who} ready (true|false)$`).test(l))
          .map((l) => ({ at: at(l), ready: l.endsWith('true') }));
      const a = readiness('c0.0');
      const b = readiness('c1.0');
      const unready = (xs: { at: number; ready: boolean }[]) => xs.find((x) => x.at >= CUT && !x.ready);
      const back = (xs: { at: number; ready: boolean }[]) => xs.find((x) => x.at >= CUT + 8000 && x.ready);
      const ua = unready(a);
      const ub = unready(b);
      if (!ua || !ub) throw new Error(`no unready: ${JSON.stringify({ a, b })}\n${trace.join('\n')}`);
      const leaderMs = ua.at - CUT;
      const followerMs = ub.at - CUT;
      console.log(
        `[sim claims] ${mode}: unready after the cut: leader ${leaderMs.toFixed(1)} ms, follower ${followerMs.toFixed(1)} ms; ready again ${((back(a)?.at ?? Number.NaN) - CUT - 8000).toFixed(1)} / ${((back(b)?.at ?? Number.NaN) - CUT - 8000).toFixed(1)} ms after the network came back`,
      );
      // ready from its start until the cut (a follower's first attempt counts as ready)
      expect(a.filter((x) => x.at > 200 && x.at < CUT && !x.ready)).toEqual([]);
      expect(b.filter((x) => x.at > 200 && x.at < CUT && !x.ready)).toEqual([]);
      // each: the deadline of the statement in flight, then a new connection's (sampled every 1 ms)
      expect(leaderMs).toBeLessThanOrEqual(HEALTH + 2 * QUERY + 5);
      expect(leaderMs).toBeGreaterThanOrEqual(2 * QUERY); // not before its check and a connect missed their deadlines
      expect(followerMs).toBeLessThanOrEqual((mode === 'wait' ? SLICE * 1.1 : HEALTH) + 2 * QUERY + 5);
      expect(back(a)).toBeDefined();
      expect(back(b)).toBeDefined();
    });
  },
);
