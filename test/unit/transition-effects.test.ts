/**
 * What a transition does beside its target state (src/leader/fsm-actions.ts), as a user sees
 * it: why a term ended (`term.signal.reason`), the log lines (`logger`), the counters behind
 * `stats()`, `onAcquired`, and the proof of drain a session announces after an unclean end.
 * A fake server and a manual clock, as in transitions.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { forwardPayload } from '../../src/core/handover.js';
import { channelFor } from '../../src/core/keys.js';
import { PEER_INTERVAL_MS } from '../../src/core/peers.js';
import { FixedInterval, LockState, type Logger, type Term } from '../../src/index.js';
import { INVITE_RETRY_MS } from '../../src/leader/phase.js';
import { FakeClock, FakeDb, flush } from './fakes.js';
import { type Harness, makeLock, startLeader } from './helpers.js';

type Line = { level: string; msg: string; fields: Record<string, unknown> };
function recorder(): { logger: Logger; lines: Line[] } {
  const lines: Line[] = [];
  const at = (level: string) => (fields: Record<string, unknown>, msg: string) => {
    lines.push({ level, msg, fields });
  };
  return { logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }, lines };
}
const logged = (lines: Line[], msg: string): Line[] => lines.filter((l) => l.msg === msg);

/** The reason a term's signal aborted with: its class, code and message. */
function endOf(term: Term | null): { name: string; code: string; message: string } {
  const r = term?.signal.reason as { name: string; code: string; message: string } | undefined;
  return { name: String(r?.name), code: String(r?.code), message: String(r?.message) };
}

describe('why a term ended (term.signal.reason, TermEndedError)', () => {
  it('a check that finds the lock gone, without reconnectGraceMs: "leadership lost"', async () => {
    const h = makeLock();
    await startLeader(h);
    const term = h.lock.term;
    h.db.silentLoss = true; // the session lives; the check says the lock is not held
    await h.clock.advance(1000);
    expect(h.take().slice(0, 2)).toEqual(['leader->follower', 'lost']);
    expect(endOf(term)).toEqual({
      name: 'TermEndedError',
      code: 'ERR_PGLEADERLOCK_TERM_ENDED',
      message: 'leadership term 1 ended: leadership lost',
    });
    await h.lock.shutdown();
  });

  it('a check that fails, with reconnectGraceMs: "connection lost; reconnecting (leader work is suspended)"', async () => {
    const h = makeLock({ reconnectGraceMs: 3000 });
    await startLeader(h);
    const term = h.lock.term;
    h.db.silentLoss = true;
    await h.clock.advance(1000);
    expect(h.take()[0]).toBe('leader->reconnecting');
    expect(endOf(term)).toEqual({
      name: 'TermEndedError',
      code: 'ERR_PGLEADERLOCK_TERM_ENDED',
      message: 'leadership term 1 ended: connection lost; reconnecting (leader work is suspended)',
    });
    await h.lock.shutdown();
  });

  it('shutdown and stepDown end the term at once with their own words', async () => {
    const h = makeLock({ retryStrategy: new FixedInterval({ intervalMs: 1000 }) });
    await startLeader(h);
    const first = h.lock.term;
    const stepping = h.lock.stepDown();
    expect(endOf(first).message).toBe('leadership term 1 ended: step-down');
    await stepping;
    await h.clock.advance(1000); // backs off, then leads again
    const second = h.lock.term;
    expect(second?.id).toBe(2);
    const stopping = h.lock.shutdown();
    expect(endOf(second).message).toBe('leadership term 2 ended: shutdown');
    await stopping;
  });
});

describe('log lines and counters of the transitions', () => {
  it('lock_acquired names the attempt that won: 1 at once, 3 after two failed attempts', async () => {
    const { logger, lines } = recorder();
    const h = makeLock({ logger });
    await startLeader(h);
    await h.lock.shutdown();
    const second = recorder();
    const g = makeLock({ logger: second.logger, retryStrategy: new FixedInterval({ intervalMs: 100 }) });
    g.db.takeByOther(); // the first two attempts find it held
    await g.lock.start();
    await g.clock.advance(100);
    expect(g.events.filter((e) => e === 'acquireFailed')).toHaveLength(2);
    g.db.holder = null;
    await g.clock.advance(100);
    expect(g.lock.state).toBe(LockState.LEADER);
    expect(logged(lines, 'lock_acquired').map((l) => l.fields)).toEqual([
      expect.objectContaining({ event: 'lock_acquired', attempt: 1, term: 1 }),
    ]);
    expect(logged(second.lines, 'lock_acquired').map((l) => l.fields.attempt)).toEqual([3]);
    await g.lock.shutdown();
  });

  it('stats().recoveries counts only leadership got back from RECONNECTING, not acquisitions', async () => {
    const { logger, lines } = recorder();
    const h = makeLock({
      logger,
      reconnectGraceMs: 3000,
      retryStrategy: new FixedInterval({ intervalMs: 1000 }),
    });
    await startLeader(h);
    await h.lock.stepDown();
    await h.clock.advance(1000); // acquired again after the back-off
    expect(h.lock.state).toBe(LockState.LEADER);
    expect(h.lock.stats()).toMatchObject({ acquisitions: 2, reconnects: 0, recoveries: 0 });
    expect(logged(lines, 'leadership_recovered')).toEqual([]);
    h.db.last.kill();
    await flush();
    await h.clock.advance(0);
    expect(h.lock.state).toBe(LockState.LEADER);
    expect(h.lock.stats()).toMatchObject({ acquisitions: 2, reconnects: 1, recoveries: 1 });
    // the recovery's own log line (RECONNECTING --ReacquireSucceeded--> LEADER: `notice`)
    expect(logged(lines, 'leadership_recovered')).toEqual([
      { level: 'info', msg: 'leadership_recovered', fields: expect.objectContaining({ key1: 1, key2: 2 }) },
    ]);
    await h.lock.shutdown();
  });

  it('a survey that finds no primary logs an error, not a failed health check', async () => {
    const { logger, lines } = recorder();
    const h = makeLock({ logger });
    h.db.inRecovery = true;
    await h.lock.start();
    await flush();
    expect(h.errors[0]).toMatchObject({ code: 'ERR_PGLEADERLOCK_NO_PRIMARY' });
    expect(h.lock.state).toBe(LockState.FOLLOWER);
    expect(logged(lines, 'health_check_failed')).toEqual([]);
    await h.lock.shutdown();
  });
});

describe('the proof of drain follows an unclean end only', () => {
  it('a session lost while leading: the next session logs proof_of_drain for it', async () => {
    const { logger, lines } = recorder();
    const h = makeLock({ logger });
    await startLeader(h);
    const pid = h.db.last.backendPid;
    h.db.last.kill();
    await flush();
    expect(h.lock.state).toBe(LockState.LEADER);
    expect(logged(lines, 'proof_of_drain').map((l) => l.fields)).toEqual([
      expect.objectContaining({ event: 'proof_of_drain', lostPid: pid }),
    ]);
    await h.lock.shutdown();
  });

  it('a clean stepDown, then the session lost while following: no proof_of_drain', async () => {
    const { logger, lines } = recorder();
    const h = makeLock({ logger, retryStrategy: new FixedInterval({ intervalMs: 100 }) });
    await startLeader(h);
    await h.lock.stepDown();
    expect(h.lock.state).toBe(LockState.FOLLOWER);
    h.db.last.kill(); // the next attempt opens a new session
    await h.clock.advance(100);
    expect(h.db.clients).toHaveLength(2);
    expect(h.lock.state).toBe(LockState.LEADER);
    expect(logged(lines, 'proof_of_drain')).toEqual([]);
    await h.lock.shutdown();
  });
});

/**
 * Let the lease lapse while the lock sleeps between checks: the next check is answered only
 * after a freeze of `leaseMs - 500` ms, so the lease it grants (from the time it was sent)
 * ends 500 ms before the check that follows; then time runs to that end.
 */
async function lapse(h: Harness): Promise<void> {
  const leaseMs = h.lock.safety?.leaseMs ?? 0;
  expect(leaseMs).toBeGreaterThan(1000);
  let sent: number | null = null;
  h.db.beforeQuery = (tag) => {
    if (tag !== 'check' || sent !== null) return;
    sent = h.clock.now();
    h.clock.freeze(leaseMs - 500);
  };
  await h.clock.advance(1000); // the next check (health interval 1000 ms)
  h.db.beforeQuery = null;
  expect(sent).not.toBeNull();
  await h.clock.advance((sent ?? 0) + leaseMs - h.clock.now());
}

describe('a lapsed lease (leadership.ts) as the actions wire it', () => {
  it('the lapse wakes the loop: a check at once reopens the term, not one at the next health interval', async () => {
    const h = makeLock();
    await startLeader(h);
    const first = h.lock.term;
    const checks = h.db.last.checks;
    await lapse(h);
    expect(endOf(first).message).toBe(
      'leadership term 1 ended: lease expired before a check renewed it (leader work is suspended)',
    );
    expect(h.db.last.checks).toBe(checks + 2); // the stalled one, and the one the lapse woke
    expect([h.lock.state, h.lock.isLeader, h.lock.term?.id]).toEqual([LockState.LEADER, true, 2]);
    await h.lock.shutdown();
  });

  it('an acquisition whose lease ran out during the epoch bump: onAcquired and lock_acquired once, with the first term only', async () => {
    const { logger, lines } = recorder();
    const h = makeLock({ logger, fencing: true });
    h.db.bumpDelayMs = 100;
    const acquired: number[] = [];
    h.lock.onAcquired((term) => {
      acquired.push(term.id);
    });
    await h.lock.start();
    await flush(); // granted; the epoch bump is in flight
    h.clock.freeze(5000); // frozen past the grant's lease before the bump returns
    await h.clock.advance(0); // the check that follows opens term 1, and reports it
    expect([h.lock.state, h.lock.term?.id, acquired]).toEqual([LockState.LEADER, 1, [1]]);
    await lapse(h); // term 1 lapses; the check the lapse wakes opens term 2: no new acquisition
    expect(h.lock.term?.id).toBe(2);
    expect(acquired).toEqual([1]);
    expect(logged(lines, 'lock_acquired').map((l) => l.fields)).toEqual([
      expect.objectContaining({ attempt: 1, term: 1 }),
    ]);
    await h.lock.shutdown();
  });
});

describe('FOLLOWER backing off (the phase carries how it waits)', () => {
  it('named as successor by a handover while the lock is still held: again after a few ms, not after the back-off', async () => {
    const h = makeLock({ id: 'b', retryStrategy: new FixedInterval({ intervalMs: 10_000 }) });
    h.db.takeByOther();
    await h.lock.start();
    await flush();
    expect(h.lock.state).toBe(LockState.FOLLOWER);
    h.take();
    // the leader's `released` event naming "b" (poll mode), heard before its unlock
    const until = h.clock.now() + 1000;
    h.db.broadcast(
      channelFor(1, 2),
      forwardPayload('a', 'sa', { to: 'b', back: null, until, backUntil: until }),
    );
    await flush();
    expect(h.take()).toEqual(['follower->acquiring', 'acquiring->follower', 'acquireFailed']);
    h.db.holder = null; // the unlock
    await h.clock.advance(INVITE_RETRY_MS);
    expect(h.take()).toEqual(['follower->acquiring', 'acquiring->leader', 'acquired']);
    await h.lock.shutdown();
  });
});

describe('LEADER watches the other hosts only when there are some (peers.ts)', () => {
  /** The delays of the timers a leader arms on the injected clock during 2 s of leading. */
  async function timersWhileLeading(hosts: number): Promise<number[]> {
    const clock = new FakeClock();
    const dbs = Array.from({ length: hosts }, () => new FakeDb(clock));
    for (const d of dbs.slice(1)) d.inRecovery = true; // standbys
    const h = makeLock({ db: dbs[0], clock, connect: dbs.map((d) => d.connect) });
    await startLeader(h);
    const armed: number[] = [];
    const setTimeout = clock.setTimeout.bind(clock);
    clock.setTimeout = (fn: () => void, ms: number): unknown => {
      armed.push(ms);
      return setTimeout(fn, ms);
    };
    await clock.advance(2000);
    clock.setTimeout = setTimeout;
    await h.lock.shutdown();
    return armed;
  }

  it('one host: no peer probe is ever scheduled; with a standby beside it, one every PEER_INTERVAL_MS', async () => {
    expect((await timersWhileLeading(1)).filter((ms) => ms === PEER_INTERVAL_MS)).toEqual([]);
    const two = (await timersWhileLeading(2)).filter((ms) => ms === PEER_INTERVAL_MS);
    expect(two.length).toBeGreaterThanOrEqual(2000 / PEER_INTERVAL_MS - 1);
  });
});

describe('RECONNECTING: a re-acquisition held for the takeover delay, its session lost meanwhile', () => {
  it('the state reads pending only while the lock is held: reconnecting once that session is closed, pending again on the next grant', async () => {
    const h = makeLock({
      takeoverDelayMs: 1000,
      reconnectGraceMs: 5000,
      retryStrategy: new FixedInterval({ intervalMs: 300 }),
    });
    await h.lock.start();
    await h.clock.advance(1000);
    expect(h.lock.isLeader).toBe(true);
    h.db.last.kill();
    await flush();
    expect(h.lock.state).toBe(LockState.PENDING); // re-acquired on a new session, delayed
    h.db.last.kill(); // that session dies during the delay: the lock is not held any more
    await h.clock.advance(0);
    expect(h.db.holder).toBeNull();
    expect(h.lock.state).toBe(LockState.RECONNECTING);
    await h.clock.advance(299);
    expect(h.lock.state).toBe(LockState.RECONNECTING);
    await h.clock.advance(1); // the next attempt: granted, delayed again
    expect(h.db.holder).toBe(h.db.last);
    expect(h.lock.state).toBe(LockState.PENDING);
    await h.clock.advance(1000);
    expect(h.lock.isLeader).toBe(true);
    await h.lock.shutdown();
  });
});
