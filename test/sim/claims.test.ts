/**
 * Claims about the library's own timing rules, checked in simulated time (issue 36 item 7,
 * docs/testing.md "Claims checked in the simulation"): a directed scenario (a fixed profile and
 * plan on the simulated server and network, `Options.fixed`) and the times its trace records.
 * In simulated time the only slack is the network's delay (at most 1 ms each way here), so each bound is exact to a few
 * of its round trips, every run, where the real-time tests that made these claims needed
 * hundreds of milliseconds of margin for a loaded machine.
 */
import { describe, expect, it } from 'vitest';
import { type Profile, runScenario, type Step } from './scenario.js';

/** The network: each message's delay drawn up to 1 ms (net.ts), no spikes. */
const NET = { baseMs: 1, spikeP: 0, spikeMs: 0 };
const DELAY_MS = 700;

/** The trace's moments: each candidate's grants and term starts, in simulated ms. */
function moments(trace: readonly string[]) {
  const grants: { at: number; who: string }[] = [];
  const terms: { at: number; who: string }[] = [];
  for (const line of trace) {
    const at = Number(line.slice(0, line.indexOf(' ')));
    const grant = / granted to (\S+) pid /.exec(line);
    if (grant && !line.includes(' on server ')) grants.push({ at, who: grant[1] as string });
    const term = /^\S+ (\S+) body start term /.exec(line);
    if (term) terms.push({ at, who: term[1] as string });
  }
  return { grants, terms };
}

async function directed(
  mode: 'wait' | 'poll',
  plan: Step[],
  extra: Partial<Profile> = {},
  sampleReadyMs?: number,
) {
  const profile: Partial<Profile> = {
    mode,
    candidates: [
      { id: 'a', priority: 0 },
      { id: 'b', priority: 0 },
    ],
    healthIntervalMs: 200,
    queryTimeoutMs: 300,
    waitSliceMs: 1000,
    closeTimeoutMs: 100,
    takeoverDelayMs: DELAY_MS,
    retry: { kind: 'exponential', baseMs: 20, maxMs: 500 },
    net: NET,
    drainMaxMs: 0,
    chaosMs: 3000,
    ...extra,
  };
  const r = await runScenario(7, {
    trace: true,
    lockOnly: true,
    earlyTimers: false,
    fixed: sampleReadyMs === undefined ? { profile, plan } : { profile, plan, sampleReadyMs },
  });
  expect(r.violations).toEqual([]);
  return { ...moments(r.trace ?? []), trace: r.trace ?? [] };
}

/** The term a grant opened: the first term start of its candidate at or after it. */
function termAfter(terms: { at: number; who: string }[], grant: { at: number; who: string }) {
  const t = terms.find((x) => x.who === grant.who && x.at >= grant.at);
  if (!t) throw new Error(`no term after ${grant.who}'s grant at ${grant.at}`);
  return t.at - grant.at;
}

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
    const at = (l: string): number => Number(l.split(' ')[0]);
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
    const at = (l: string): number => Number(l.split(' ')[0]);
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
      const at = (l: string): number => Number(l.split(' ')[0]);
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

describe.each(['wait', 'poll'] as const)(
  'a frozen leader at the defaults, in simulated time (%s mode)',
  (mode) => {
    // the library's defaults (src/core/safety.ts, shared-options.ts, lock-options.ts, retry.ts):
    // the README's "about 7 s at the defaults" and docs/safety.md's serverReleaseMs
    const HEALTH = 1500;
    const QUERY = 2000;
    const RELEASE = 2 * (HEALTH + QUERY); // serverReleaseMs, 7,000
    const DELAY = 250;
    const RETRY_MAX = 30_000; // new ExponentialBackoff(): 100 ms doubling to 30 s
    const FREEZE = 3000;
    it(`a leader frozen (no timers, no reads) at the defaults: the server frees the key ${RELEASE} ms (serverReleaseMs) less at most one ${HEALTH} ms health interval after the freeze; ${mode === 'wait' ? `the waiting follower's term opens the ${DELAY} ms takeover delay after that, within 10 ms more` : `the polling follower's term opens at its next attempt (its retry delay, at most ${RETRY_MAX} ms) plus the ${DELAY} ms takeover delay`}; isLeader on the frozen leader reads false before the server frees the key`, async () => {
      const { grants, terms, trace } = await directed(
        mode,
        [
          { at: 0, op: 'start', who: 0 },
          { at: 100, op: 'start', who: 1 },
          { at: FREEZE, op: 'freeze', who: 0, ms: RELEASE + RETRY_MAX },
        ],
        {
          healthIntervalMs: HEALTH,
          queryTimeoutMs: QUERY,
          takeoverDelayMs: DELAY,
          waitSliceMs: 30_000,
          closeTimeoutMs: 2000,
          retry: { kind: 'exponential', baseMs: 100, maxMs: RETRY_MAX },
        },
        1,
      );
      const at = (l: string): number => Number(l.split(' ')[0]);
      const freed = trace.find((l) => / freed \(/.test(l) && at(l) >= FREEZE);
      const grant = grants.find((g) => g.at >= FREEZE);
      const term = terms.find((t) => t.at >= FREEZE);
      const lapsed = trace.find((l) => /^\S+ c0\.0 isLeader false$/.test(l) && at(l) >= FREEZE);
      if (!freed || !grant || !term || !lapsed) {
        throw new Error(`no free, grant, term or lapse after the freeze:\n${trace.join('\n')}`);
      }
      const freedMs = at(freed) - FREEZE;
      const termMs = term.at - FREEZE;
      console.log(
        `[sim claims] ${mode}: frozen at the defaults: isLeader false ${(at(lapsed) - FREEZE).toFixed(1)} ms, the key freed ${freedMs.toFixed(1)} ms, granted ${(grant.at - FREEZE).toFixed(1)} ms, the next term ${termMs.toFixed(1)} ms after the freeze (${freed})`,
      );
      expect(freedMs).toBeGreaterThanOrEqual(RELEASE - HEALTH);
      expect(freedMs).toBeLessThanOrEqual(RELEASE);
      expect(term.who).toBe('c1.0');
      expect(term.at - grant.at).toBeGreaterThanOrEqual(DELAY); // a freeze proves nothing: the full delay
      if (mode === 'wait') {
        expect(termMs).toBeGreaterThanOrEqual(RELEASE - HEALTH + DELAY);
        expect(termMs).toBeLessThan(RELEASE + DELAY + 10);
      } else {
        expect(term.at - at(freed)).toBeLessThan(RETRY_MAX + DELAY + 10);
      }
      expect(at(lapsed)).toBeLessThan(at(freed)); // the lease ended before the server let go
    });
  },
);

describe.each(['wait', 'poll'] as const)(
  'handoverTo a waiting candidate, in simulated time (%s mode)',
  (mode) => {
    it(`handoverTo(c) with b and c waiting: c's term opens within 20 ms of the call (a few round trips; in poll mode c, named, attempts every 5 ms), with no ${DELAY_MS} ms takeover delay, and b, queued before c, never opens a term`, async () => {
      const { terms, grants, trace } = await directed(
        mode,
        [
          { at: 0, op: 'start', who: 0 },
          { at: 100, op: 'start', who: 1 },
          { at: 150, op: 'start', who: 2 },
          { at: 2000, op: 'handoverTo', who: 0, to: 2 },
        ],
        {
          candidates: [
            { id: 'a', priority: 0 },
            { id: 'b', priority: 0 },
            { id: 'c', priority: 0 },
          ],
        },
      );
      const next = terms.find((t) => t.at >= 2000);
      if (!next) throw new Error(`no term after the call:\n${trace.join('\n')}`);
      const ms = next.at - 2000;
      console.log(`[sim claims] ${mode}: handoverTo(c): c's term opened ${ms.toFixed(2)} ms after the call`);
      expect(next.who).toBe('c2.0');
      expect(ms).toBeLessThan(20);
      // b may be granted the key on the way (wait mode: it queued first) and passes it on unopened
      expect(terms.filter((t) => t.who.startsWith('c1.'))).toEqual([]);
      const passed = grants.filter((g) => g.who.startsWith('c1.') && g.at < 3000);
      if (passed.length > 0)
        console.log(
          `[sim claims] ${mode}: b granted on the way at ${passed.map((g) => g.at).join(', ')}, no term`,
        );
    });
  },
);

describe.each(['wait', 'poll'] as const)(
  'a connection loss, then at once, in simulated time (%s mode)',
  (mode) => {
    it('a lone leader whose backend is terminated, the server up, the retry strategy’s first delay about 1,000 ms: it connects again at once and is granted the key within 10 ms of the terminate (then its term waits the takeover delay: nothing proves the old one drained)', async () => {
      const { grants, terms, trace } = await directed(
        mode,
        [
          { at: 0, op: 'start', who: 0 },
          { at: 2000, op: 'terminate', who: 0 },
        ],
        { retry: { kind: 'exponential', baseMs: 1000, maxMs: 30_000 } },
      );
      const again = grants.find((g) => g.at >= 2000);
      const term = terms.find((t) => t.at >= 2000);
      if (!again || !term) throw new Error(`no grant or term after the terminate:\n${trace.join('\n')}`);
      console.log(
        `[sim claims] ${mode}: terminated lone leader granted again ${(again.at - 2000).toFixed(2)} ms after, its term ${(term.at - 2000).toFixed(1)} ms after`,
      );
      expect(again.who.split('.')[0]).toBe('c0');
      expect(again.at - 2000).toBeLessThan(10);
      expect(term.at - again.at).toBeGreaterThanOrEqual(DELAY_MS);
    });
  },
);

describe('a connection loss, then at once, in simulated time (wait mode)', () => {
  it('a waiting follower whose backend is terminated, the retry strategy’s first delay about 1,000 ms: it is back in the lock’s queue at once, so a clean release 50 ms later opens its term within 60 ms of the terminate (with no delay), not after a back-off', async () => {
    const { terms, trace } = await directed(
      'wait',
      [
        { at: 0, op: 'start', who: 0 },
        { at: 100, op: 'start', who: 1 },
        { at: 2000, op: 'terminate', who: 1 },
        { at: 2050, op: 'shutdown', who: 0, ms: 0 },
      ],
      { retry: { kind: 'exponential', baseMs: 1000, maxMs: 30_000 } },
    );
    const next = terms.find((t) => t.at >= 2000);
    if (!next) throw new Error(`no term after the terminate:\n${trace.join('\n')}`);
    console.log(
      `[sim claims] wait: a terminated waiter's term opened ${(next.at - 2000).toFixed(2)} ms after the terminate`,
    );
    expect(next.who.split('.')[0]).toBe('c1');
    expect(next.at - 2000).toBeLessThan(60);
  });
});

describe.each(['wait', 'poll'] as const)('a blackholed leader, in simulated time (%s mode)', (mode) => {
  const HEALTH = 200;
  const QUERY = 300;
  const RELEASE = 2 * (HEALTH + QUERY); // serverReleaseMs at these settings, 1,000
  it(`its lock connection blackholed (no reset; health ${HEALTH} ms, query ${QUERY} ms): the leader leaves LEADER within healthIntervalMs + queryTimeoutMs (${HEALTH + QUERY} ms) and sends its proof of drain over a new connection; the server frees the key serverReleaseMs (${RELEASE} ms) less at most one health interval after the cut; the next term opens ${mode === 'wait' ? 'within 10 ms of that (the waiting follower, granted at once, holding the proof: no delay)' : 'within the next poll (the retry delay, at most 500 ms) of that, with no delay if the follower wins it (the old leader, polling again, waits the delay)'}`, async () => {
    const CUT = 2000;
    const { grants, terms, trace } = await directed(mode, [
      { at: 0, op: 'start', who: 0 },
      { at: 100, op: 'start', who: 1 },
      { at: CUT, op: 'blackhole', who: 0 },
    ]);
    const at = (l: string): number => Number(l.split(' ')[0]);
    const left = trace.find((l) => /^\S+ c0\.0 leader->/.test(l) && at(l) >= CUT);
    const drained = trace.find((l) => /NOTIFY .*"e":"drained"/.test(l) && at(l) >= CUT);
    const freed = trace.find((l) => / freed \(/.test(l) && at(l) >= CUT);
    const grant = grants.find((g) => g.at >= CUT);
    const term = terms.find((t) => t.at >= CUT);
    if (!left || !drained || !freed || !grant || !term) {
      throw new Error(`no step out, proof, free, grant or term:\n${trace.join('\n')}`);
    }
    console.log(
      `[sim claims] ${mode}: blackholed leader: left LEADER ${(at(left) - CUT).toFixed(1)} ms, proof of drain ${(at(drained) - CUT).toFixed(1)} ms, key freed ${(at(freed) - CUT).toFixed(1)} ms, granted to ${grant.who} ${(grant.at - CUT).toFixed(1)} ms, its term ${(term.at - CUT).toFixed(1)} ms after the cut (${freed})`,
    );
    expect(at(left) - CUT).toBeLessThanOrEqual(HEALTH + QUERY + 5);
    expect(at(drained)).toBeLessThan(at(freed));
    expect(at(freed) - CUT).toBeGreaterThanOrEqual(RELEASE - HEALTH);
    expect(at(freed) - CUT).toBeLessThanOrEqual(RELEASE);
    if (mode === 'wait') expect(grant.who).toBe('c1.0');
    expect(term.who).toBe(grant.who);
    // the proof: no takeover delay for the waiting follower. In poll mode the old leader, polling
    // again on a new connection, may win the key back: its new session has no record of its own
    // proof (a session keeps the drained events it heard), so it waits the delay in full (safe,
    // slower: docs/testing.md)
    const proven = grant.who === 'c1.0';
    expect(term.at - grant.at).toBeLessThan(proven ? 10 : DELAY_MS + 10);
    if (!proven) expect(term.at - grant.at).toBeGreaterThanOrEqual(DELAY_MS);
    expect(grant.at - at(freed)).toBeLessThan(mode === 'wait' ? 5 : 505);
  });
});

describe.each(['wait', 'poll'] as const)('a shutdown with no answer, in simulated time (%s mode)', (mode) => {
  it.each([500, 150])(
    'shutdown({ timeoutMs: %i }) of a leader whose lock connection is blackholed (queryTimeoutMs 300): resolves at its timeoutMs or the release’s query deadline, whichever comes first (within 5 ms), not waiting for the socket, and reports which (a ShutdownError, or a LockError: release failed); the key freed by the server later, not by an unlock',
    async (timeoutMs) => {
      const { trace } = await directed(mode, [
        { at: 0, op: 'start', who: 0 },
        { at: 100, op: 'start', who: 1 },
        { at: 2000, op: 'blackhole', who: 0 },
        { at: 2050, op: 'shutdown', who: 0, ms: timeoutMs },
      ]);
      const at = (l: string): number => Number(l.split(' ')[0]);
      const stopped = trace.find((l) => /^\S+ c0\.0 shutdown (resolved$|rejected: )/.test(l));
      const freed = trace.find((l) => / freed \(/.test(l) && at(l) >= 2000);
      if (!stopped || !freed) throw new Error(`no stop or no free:\n${trace.join('\n')}`);
      const ms = at(stopped) - 2050;
      console.log(
        `[sim claims] ${mode}: shutdown({ timeoutMs: ${timeoutMs} }) on a blackhole: resolved ${ms.toFixed(1)} ms after the call; ${freed}`,
      );
      const first = Math.min(timeoutMs, 300);
      expect(ms).toBeGreaterThanOrEqual(first);
      expect(ms).toBeLessThan(first + 5);
      // reported: the shutdown's timeout (ShutdownError), or the release's deadline (LockError, release failed)
      const reported =
        timeoutMs < 300
          ? /onError ShutdownError: shutdown did not finish within/
          : /onError LockError: release failed: query did not complete within 300 ms/;
      expect(trace.some((l) => l.startsWith(`${at(stopped).toFixed(3)} c0.0 `) && reported.test(l))).toBe(
        true,
      );
      expect(freed).not.toContain('(unlock)');
    },
  );
});

describe.each(['wait', 'poll'] as const)(
  'handoverTo a frozen candidate, in simulated time (%s mode)',
  (mode) => {
    it(
      mode === 'poll'
        ? 'handoverTo(b) while b polls but its process is frozen: the call rejects at its timeoutMs (1,000 ms), not sooner and within 10 ms more, and the old leader, invited back, leads again within 10 ms of the rejection with no takeover delay'
        : 'handoverTo(b) while b waits but its process is frozen: the server grants b’s queued backend the key, so the call resolves (b holds the lock); b’s idle session ends at serverReleaseMs (1,000 ms), and the old leader leads again after its takeover delay (b left no proof)',
      async () => {
        const { trace, terms, grants } = await directed(mode, [
          { at: 0, op: 'start', who: 0 },
          { at: 100, op: 'start', who: 1 },
          { at: 1990, op: 'freeze', who: 1, ms: 3000 },
          { at: 2000, op: 'handoverTo', who: 0, to: 1 },
        ]);
        const at = (l: string): number => Number(l.split(' ')[0]);
        const outcome = trace.find((l) => / handoverTo (rejected: |resolved$)/.test(l));
        const back = terms.find((t) => t.at >= 2000);
        if (!outcome || !back) throw new Error(`no outcome or no term after the call:\n${trace.join('\n')}`);
        console.log(
          `[sim claims] ${mode}: handoverTo a frozen successor: ${outcome}; the old leader's next term ${(back.at - 2000).toFixed(1)} ms after the call`,
        );
        expect(back.who).toBe('c0.0');
        expect(terms.filter((t) => t.who.startsWith('c1.'))).toEqual([]);
        if (mode === 'poll') {
          expect(outcome).toContain('did not take the lock within 1000 ms');
          expect(at(outcome) - 2000).toBeGreaterThanOrEqual(1000);
          expect(at(outcome) - 2000).toBeLessThan(1010);
          expect(back.at - at(outcome)).toBeLessThan(10);
        } else {
          expect(outcome).toMatch(/resolved$/);
          const taken = grants.find((g) => g.at >= 2000);
          const freed = trace.find((l) => / freed \(idle-timeout\)/.test(l) && at(l) >= 2000);
          if (!taken || !freed) throw new Error(`no grant or no idle end:\n${trace.join('\n')}`);
          expect(taken.who).toBe('c1.0');
          expect(at(outcome)).toBeLessThan(at(freed));
          expect(at(freed) - taken.at).toBeLessThanOrEqual(1000 + 5);
          expect(back.at - at(freed)).toBeGreaterThanOrEqual(DELAY_MS);
          expect(back.at - at(freed)).toBeLessThan(DELAY_MS + 10);
        }
      },
    );
  },
);
