/**
 * Model-based tests of the `LeaderLock` API (fast-check `fc.commands`, shrunk to a minimal
 * failing sequence): random sequences of start, shutdown and stepDown (with and without
 * `timeoutMs`), handoverTo, waitForLeadership, a terminated leader's session, and pauses,
 * over 2–3 candidates with priorities, in wait and poll mode, run by real locks on the
 * deterministic simulation. After each call the lock must have done what the call
 * promises (the model below); after every simulated event the simulation's invariants hold
 * (test/sim/checker.ts: isLeader only while the server grants the key, never two open
 * terms or two running bodies); after a quiet period the highest priority started leads;
 * at the end every lock shuts down leaving no connection, timer or body. `FC_SEED` replays.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { LockError } from '../../src/core/errors.js';
import { type Settled, SimGroup } from './harness.js';
import { params } from './seed.js';

interface Model {
  /** started and not shut down (nor stopped by a step-down's timeout) */
  started: boolean[];
}

type Cmd = fc.AsyncCommand<Model, SimGroup>;

/** -1: whoever leads when the command runs (else c0). */
const pick = (g: SimGroup, who: number): number => (who >= 0 ? who : (g.leaders()[0] ?? 0));
const name = (who: number): string => (who >= 0 ? `c${who}` : 'leader');

const ok = (g: SimGroup): void => expect(g.checker.violations).toEqual([]);

/** The call settled by resolving. */
function resolved(r: Settled<unknown>): void {
  expect(r.done, 'the call settled').toBe(true);
  expect(r.error, 'the call resolved').toBeUndefined();
}

class Start implements Cmd {
  constructor(readonly i: number) {}
  check = () => true;
  async run(m: Model, g: SimGroup): Promise<void> {
    const i = pick(g, this.i);
    const r = await g.call(i, (l) => l.start());
    resolved(r);
    expect(g.lock(i).state).not.toBe('stopped');
    m.started[i] = true;
    ok(g);
  }
  toString = () => `start(${name(this.i)})`;
}

class Shutdown implements Cmd {
  constructor(
    readonly i: number,
    readonly timeoutMs: number | undefined,
  ) {}
  check = () => true;
  async run(m: Model, g: SimGroup): Promise<void> {
    const i = pick(g, this.i);
    const opts = this.timeoutMs === undefined ? {} : { timeoutMs: this.timeoutMs };
    let leading = false;
    const r = await g.call(i, (l) => {
      leading = l.isLeader;
      return l.shutdown(opts);
    });
    // resolves (never rejects), within its timeout when given one
    resolved(r);
    // within its timeout, give or take a message: past the timeout it still waits for one
    // reply (seen: 5 ms → 7.5 ms, 3 ms messages; FC_SEED=2 FC_RUNS_SCALE=5 without this slack)
    const message = g.profile.net.baseMs + g.profile.net.spikeMs;
    if (this.timeoutMs !== undefined) expect(r.tookMs).toBeLessThanOrEqual(this.timeoutMs + 2 * message + 1);
    const lock = g.lock(i);
    expect(lock.state).toBe('stopped');
    expect(lock.isLeader).toBe(false);
    // its session's lock is gone from the server by the time the close reaches it (a
    // clean release unlocked before; a forced close frees it when the FIN arrives)
    if (g.holder() === i) {
      // a leader's shutdown without timeout unlocks before it resolves; a lock not leading at
      // the call whose session an earlier stepDown's timeout closed by force (seed 96381113:
      // stepDown 0 ms, then shutdown) has nothing left to unlock: the server frees the key as
      // the close reaches it, as after a timeout
      if (leading)
        expect(this.timeoutMs, 'a shutdown without timeout unlocks before it resolves').toBeDefined();
      await g.run(() => g.holder() !== i, g.profile.net.baseMs + g.profile.net.spikeMs + 5);
      expect(g.holder()).not.toBe(i);
    }
    // its connection closed
    const c = g.cands[i];
    expect(c?.clients.filter((x) => !x.ended).length).toBe(0);
    m.started[i] = false;
    ok(g);
  }
  toString = () => `shutdown(${name(this.i)}${this.timeoutMs === undefined ? '' : `, ${this.timeoutMs} ms`})`;
}

class StepDown implements Cmd {
  constructor(
    readonly i: number,
    readonly timeoutMs: number | undefined,
  ) {}
  check = () => true;
  async run(m: Model, g: SimGroup): Promise<void> {
    const i = pick(g, this.i);
    let wasLeader = false;
    let before = '';
    const opts = this.timeoutMs === undefined ? {} : { timeoutMs: this.timeoutMs };
    const r = await g.call(i, (l) => {
      wasLeader = l.isLeader;
      before = l.state;
      return l.stepDown(opts);
    });
    resolved(r);
    const lock = g.lock(i);
    expect(lock.isLeader).toBe(false);
    if (!wasLeader) {
      // does nothing unless leader
      expect(lock.state === 'stopped').toBe(before === 'stopped');
    } else if (this.timeoutMs === undefined) {
      // autoReacquire: a follower again (after one back-off delay it attempts)
      expect(lock.state).toBe('follower');
    } else {
      // the timeout may cut the release: then STOPPED
      expect(['follower', 'stopped']).toContain(lock.state);
      if (lock.state === 'stopped') m.started[i] = false;
    }
    ok(g);
  }
  toString = () => `stepDown(${name(this.i)}${this.timeoutMs === undefined ? '' : `, ${this.timeoutMs} ms`})`;
}

class HandoverTo implements Cmd {
  constructor(
    readonly i: number,
    readonly j: number,
  ) {}
  check = () => true;
  async run(m: Model, g: SimGroup): Promise<void> {
    const i = pick(g, this.i);
    let wasLeader = false;
    const to = g.cands[this.j]?.id as string;
    const r = await g.call(i, (l) => {
      wasLeader = l.isLeader;
      return l.handoverTo(to, { timeoutMs: 2000 });
    });
    expect(r.done).toBe(true);
    if (r.error === undefined) {
      // resolved: the successor holds the lock (the server grants it the key)
      expect(wasLeader).toBe(true);
      expect(this.j).not.toBe(i);
      expect(m.started[this.j]).toBe(true);
      // the successor holds the lock, unless a started candidate outranks it: then it hands
      // the lock on as soon as its term opens (docs/choosing-the-leader.md), and may have
      // unlocked by the time the call resolves (the holder is then nobody, or that candidate)
      const pj = g.cands[this.j]?.priority ?? 0;
      const above = g.cands
        .filter((c, k) => m.started[k] && k !== this.j && c.priority > pj)
        .map((c) => c.index);
      const holder = g.holder();
      if (above.length === 0) expect(holder).toBe(this.j);
      else expect([this.j, null, ...above]).toContain(holder);
      expect(g.lock(i).isLeader).toBe(false);
    } else {
      expect(r.error).toBeInstanceOf(LockError);
      expect((r.error as LockError).code).toBe('ERR_PGLEADERLOCK_HANDOVER');
      // refused at once when not leading: leadership left as it is
      if (!wasLeader) expect(r.tookMs).toBeLessThan(1);
    }
    ok(g);
  }
  toString = () => `handoverTo(${name(this.i)} -> c${this.j})`;
}

class WaitForLeadership implements Cmd {
  constructor(
    readonly i: number,
    readonly timeoutMs: number,
  ) {}
  check = () => true;
  async run(m: Model, g: SimGroup): Promise<void> {
    const i = pick(g, this.i);
    let leading = false;
    const r = await g.call(i, (l) => {
      leading = l.isLeader;
      return l.waitForLeadership({ timeoutMs: this.timeoutMs });
    });
    resolved(r);
    const lock = g.lock(i);
    if (!m.started[i]) {
      // not started: false at once
      expect(r.value).toBe(false);
      expect(r.tookMs).toBeLessThan(1);
    } else if (r.value === true) {
      expect(lock.isLeader).toBe(true);
      if (leading) expect(r.tookMs).toBeLessThan(1);
    } else {
      // false: only after the timeout (it cannot stop meanwhile: nothing else runs)
      expect(leading).toBe(false);
      // (less a float's rounding: simulated time is a sum of drawn delays, 499.99999999999955 seen)
      expect(r.tookMs).toBeGreaterThanOrEqual(this.timeoutMs - 1e-6);
      expect(r.tookMs).toBeLessThanOrEqual(this.timeoutMs + 1);
    }
    ok(g);
  }
  toString = () => `waitForLeadership(${name(this.i)}, ${this.timeoutMs} ms)`;
}

/** A fault: the leader's session is terminated by the server (pg_terminate_backend). */
class TerminateLeader implements Cmd {
  check = () => true;
  async run(_m: Model, g: SimGroup): Promise<void> {
    const h = g.holder();
    const c = h === null ? undefined : g.cands[h];
    const link = c ? [...c.clients].reverse().find((x) => !x.ended)?.link : undefined;
    if (link?.backend) g.server.terminate(link.backend.pid);
    await g.run(() => false, 10);
    ok(g);
  }
  toString = () => 'terminateLeader()';
}

/** Time passes with no call: the invariants hold meanwhile. */
class Pause implements Cmd {
  constructor(readonly ms: number) {}
  check = () => true;
  async run(_m: Model, g: SimGroup): Promise<void> {
    await g.run(() => false, this.ms);
    ok(g);
  }
  toString = () => `pause(${this.ms} ms)`;
}

/**
 * Quiet for the simulation's bound (and a hold after it): if any candidate is started, one
 * leads, the server grants it the key, and no started candidate has a higher priority.
 */
class Settle implements Cmd {
  check = () => true;
  async run(m: Model, g: SimGroup): Promise<void> {
    await g.run(() => false, g.boundMs + 1000);
    ok(g);
    const contenders = g.cands.filter((c) => c.lock?.state !== 'stopped').map((c) => c.index);
    expect(contenders.sort()).toEqual(m.started.flatMap((s, i) => (s ? [i] : [])));
    const leaders = g.leaders();
    if (contenders.length === 0) {
      expect(leaders).toEqual([]);
      return;
    }
    expect(leaders.length).toBe(1);
    const leader = leaders[0] as number;
    expect(g.holder()).toBe(leader);
    const top = Math.max(...contenders.map((i) => g.cands[i]?.priority ?? 0));
    expect(g.cands[leader]?.priority).toBe(top);
  }
  toString = () => 'settle()';
}

function commands(n: number): fc.Arbitrary<Iterable<Cmd>> {
  const to = fc.integer({ min: 0, max: n - 1 });
  const who = fc.integer({ min: -1, max: n - 1 });
  const timeout = fc.option(fc.constantFrom(0, 5, 30, 200), { nil: undefined });
  return fc.commands(
    [
      who.map((i) => new Start(i)),
      who.map((i) => new Start(i)),
      fc.tuple(who, timeout).map(([i, t]) => new Shutdown(i, t)),
      fc.tuple(who, timeout).map(([i, t]) => new StepDown(i, t)),
      fc.tuple(who, to).map(([i, j]) => new HandoverTo(i, j)),
      fc.tuple(fc.constant(-1), to).map(([i, j]) => new HandoverTo(i, j)),
      fc.tuple(who, fc.constantFrom(0, 50, 500, 3000)).map(([i, t]) => new WaitForLeadership(i, t)),
      fc.tuple(who, fc.constantFrom(0, 50, 500, 3000)).map(([i, t]) => new WaitForLeadership(i, t)),
      fc.constant(new TerminateLeader()),
      fc.constantFrom(1, 20, 300).map((ms) => new Pause(ms)),
      fc.constant(new Settle()),
      fc.constant(new Settle()),
    ],
    { maxCommands: 16, size: 'medium' },
  );
}

const group = fc.record({
  seed: fc.integer({ min: 0, max: 2 ** 31 - 1 }),
  mode: fc.constantFrom('wait' as const, 'poll' as const),
  priorities: fc.array(fc.integer({ min: 0, max: 2 }), { minLength: 2, maxLength: 3 }),
});

describe('LeaderLock against a model of its API, on the simulation', () => {
  it('random call sequences do what each call promises; every lock shuts down clean (60 runs)', async () => {
    await fc.assert(
      fc.asyncProperty(
        group.chain((g) =>
          fc.tuple(fc.constant(g), fc.subarray([...g.priorities.keys()]), commands(g.priorities.length)),
        ),
        async ([{ seed, mode, priorities }, first, cmds]) => {
          const g = new SimGroup(seed, priorities, mode);
          const model: Model = { started: priorities.map(() => false) };
          // most sequences begin with some candidates started and a leader settled
          for (const i of first) {
            const r = await g.call(i, (l) => l.start());
            resolved(r);
            model.started[i] = true;
          }
          if (first.length > 0) await g.run(() => false, g.boundMs);
          await fc.asyncModelRun(() => ({ model, real: g }), cmds);
          // the end: everything shuts down and leaves nothing
          for (let i = 0; i < priorities.length; i++) {
            const r = await g.call(i, (l) => l.shutdown());
            resolved(r);
          }
          await g.run(() => false, 100);
          g.checker.leaks();
          ok(g);
        },
      ),
      params(60),
    );
  });
});
