/**
 * The promotion guard while a lock leads (fsm-actions.ts starts a `PeerWatch`, peers.ts): with
 * several hosts, a leader asks the others every `PEER_INTERVAL_MS` whether one is a newer
 * primary, and ends its leadership when one is. Fake servers (one `FakeDb` a host), manual clock.
 */
import { describe, expect, it } from 'vitest';
import { PEER_BOUND_MS } from '../../src/core/peers.js';
import { LockState } from '../../src/index.js';
import { FakeClock, FakeDb, flush } from './fakes.js';
import { makeLock } from './helpers.js';

/** Host `a` (primary, listed first) and `b` (a standby), on one clock. */
function twoHosts(): { clock: FakeClock; a: FakeDb; b: FakeDb } {
  const clock = new FakeClock();
  const a = new FakeDb(clock);
  const b = new FakeDb(clock);
  b.inRecovery = true;
  return { clock, a, b };
}

const probes = (db: FakeDb): number =>
  db.clients.flatMap((c) => c.queries).filter((q) => q.startsWith('/* pgleaderlock:peer */')).length;

describe('a leader watches the other hosts for a promotion', () => {
  it('a standby promoted while the old primary is up ends the leadership there within the peer bound', async () => {
    const { clock, a, b } = twoHosts();
    const why: unknown[] = [];
    const at = () => () => {};
    const logger = {
      debug: at(),
      info: at(),
      error: at(),
      warn: (fields: Record<string, unknown>, msg: string) => {
        if (msg === 'lock_lost') why.push(fields.err);
      },
    };
    const h = makeLock({ db: a, clock, connect: [a.connect, b.connect], autoReacquire: false, logger });
    await h.lock.start();
    await flush();
    expect(h.lock.isLeader).toBe(true);
    await clock.advance(1000);
    expect(probes(b)).toBeGreaterThan(0); // asked while leading
    const term = h.lock.term;
    b.inRecovery = false; // promoted: a newer timeline
    b.timeline = 2;
    await clock.advance(PEER_BOUND_MS);
    expect(h.lock.isLeader).toBe(false);
    expect(term?.signal.aborted).toBe(true);
    expect(h.events).toContain('lost');
    expect(why).toEqual([
      expect.objectContaining({
        code: 'ERR_PGLEADERLOCK_UNSAFE',
        message: expect.stringMatching(/timeline 2/),
      }),
    ]);
    await h.lock.shutdown();
  });

  it('a standby that stays one changes nothing', async () => {
    const { clock, a, b } = twoHosts();
    const h = makeLock({ db: a, clock, connect: [a.connect, b.connect] });
    await h.lock.start();
    await flush();
    await clock.advance(5000);
    expect(h.lock.isLeader).toBe(true);
    expect(h.errors).toEqual([]);
    await h.lock.shutdown();
  });

  it('on a server whose timeline is unknown (0) there is nothing to compare: no probes while leading', async () => {
    const { clock, a, b } = twoHosts();
    a.timeline = 0; // a server that refuses the WAL functions (primary.ts)
    const h = makeLock({ db: a, clock, connect: [a.connect, b.connect] });
    await h.lock.start();
    await flush();
    expect(h.lock.isLeader).toBe(true);
    const before = probes(b); // the one round after the grant (takeover.ts)
    await clock.advance(2000);
    expect(probes(b)).toBe(before);
    expect(h.lock.state).toBe(LockState.LEADER);
    await h.lock.shutdown();
  });
});
