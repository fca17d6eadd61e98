/**
 * What decides the takeover delay beyond one server (takeover.ts): with several hosts, the
 * other hosts asked after the grant (a newer primary: move there; another primary up: the
 * split-brain delay, `takeoverDelayMs` + the peer watch's bound, whatever was proven on this
 * server), the clean-handover log, the proof of drain ending the delay early, and the
 * ownership checks while it runs. Fake servers (one `FakeDb` a host) and a manual clock.
 */
import { describe, expect, it } from 'vitest';
import { PEER_BOUND_MS } from '../../src/core/peers.js';
import { LockState, type Logger } from '../../src/index.js';
import { FakeClock, FakeDb, flush } from './fakes.js';
import { type Harness, makeLock } from './helpers.js';

const DELAY = 1000;
/** The split-brain delay of a `LeaderLock` (peers.ts `splitBrainDelayMs`). */
const SPLIT = DELAY + PEER_BOUND_MS;
const WAIT = { acquireMode: 'wait', waitSliceMs: 60_000 } as const;

type Line = { level: string; msg: string; fields: Record<string, unknown> };
function recorder(): { logger: Logger; lines: Line[] } {
  const lines: Line[] = [];
  const at = (level: string) => (fields: Record<string, unknown>, msg: string) => {
    lines.push({ level, msg, fields });
  };
  return { logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }, lines };
}
const logged = (lines: Line[], msg: string): Record<string, unknown>[] =>
  lines.filter((l) => l.msg === msg).map((l) => l.fields);

/** Two hosts on one clock: `a` listed first. */
function twoHosts(): { clock: FakeClock; a: FakeDb; b: FakeDb } {
  const clock = new FakeClock();
  return { clock, a: new FakeDb(clock), b: new FakeDb(clock) };
}

/** When the lock's term opened (clock time), and which host held the lock then. */
function watchTerm(h: Harness, a: FakeDb, b: FakeDb): { at: number | null; on: string | null } {
  const seen: { at: number | null; on: string | null } = { at: null, on: null };
  h.lock.onAcquired(() => {
    seen.at ??= h.clock.now();
    seen.on ??= a.holder !== null ? 'a' : b.holder !== null ? 'b' : 'none';
  });
  return seen;
}

/** Let the first attempt run, then time pass up to `ms` after it. */
async function startAndWait(h: Harness, ms: number): Promise<void> {
  await h.lock.start();
  await flush();
  await h.clock.advance(ms);
}

describe('several hosts: what the other hosts say after the grant', () => {
  it('a host promoted since the survey (a newer timeline) is where the term opens, not on the old primary', async () => {
    const { clock, a, b } = twoHosts();
    b.inRecovery = true; // a standby at the survey
    a.beforeQuery = (tag) => {
      if (tag !== 'try-lock') return;
      b.inRecovery = false; // promoted between the survey and the grant on a
      b.timeline = 2;
    };
    const h = makeLock({ db: a, clock, connect: [a.connect, b.connect] });
    const term = watchTerm(h, a, b);
    await startAndWait(h, 0);
    expect(h.lock.isLeader).toBe(false); // no term on the old primary
    expect(a.holder).toBeNull(); // its session closed, the lock there freed
    const unsafe = h.errors.find((e) => (e as { code?: string }).code === 'ERR_PGLEADERLOCK_UNSAFE');
    expect(unsafe?.message).toContain(
      'another configured host is a primary on timeline 2, newer than connect[0] (timeline 1)',
    );
    await h.clock.advance(10_000); // the back-off, then the next survey finds the new primary
    expect(h.lock.isLeader).toBe(true);
    expect(term.on).toBe('b');
    await h.lock.shutdown();
  });

  it.each([
    ['on the same timeline (a split brain)', 1, 1],
    ['on an older timeline', 2, 1],
  ])(
    'another primary %s: the term waits takeoverDelayMs + the peer bound, on this host',
    async (_n, ta, tb) => {
      const { clock, a, b } = twoHosts();
      a.timeline = ta;
      b.timeline = tb;
      const h = makeLock({ db: a, clock, connect: [a.connect, b.connect], takeoverDelayMs: DELAY });
      const fences: { delayMs: number; since: number }[] = [];
      h.lock.onTakeoverFence((f) => {
        fences.push(f);
      });
      const term = watchTerm(h, a, b);
      await startAndWait(h, SPLIT - 1);
      expect(h.lock.state).toBe(LockState.PENDING);
      expect(a.holder).not.toBeNull();
      await h.clock.advance(1);
      expect(term).toEqual({ at: SPLIT, on: 'a' });
      expect(fences).toEqual([{ delayMs: SPLIT, since: 0 }]);
      expect(h.errors).toEqual([]);
      await h.lock.shutdown();
    },
  );

  it('takeoverDelayMs: 0 does not remove the bound while another primary is up', async () => {
    const { clock, a, b } = twoHosts();
    const h = makeLock({ db: a, clock, connect: [a.connect, b.connect], takeoverDelayMs: 0 });
    const term = watchTerm(h, a, b);
    await startAndWait(h, PEER_BOUND_MS - 1);
    expect(h.lock.state).toBe(LockState.PENDING);
    await h.clock.advance(1);
    expect(term).toEqual({ at: PEER_BOUND_MS, on: 'a' });
    await h.lock.shutdown();
  });

  it('a primary at the survey that does not answer the probe still counts as up (no answer proves nothing)', async () => {
    const { clock, a, b } = twoHosts();
    a.timeline = 2;
    a.beforeQuery = (tag) => {
      if (tag === 'try-lock') b.connectBehaviour = 'error'; // gone for the probe
    };
    const h = makeLock({ db: a, clock, connect: [a.connect, b.connect], takeoverDelayMs: DELAY });
    const term = watchTerm(h, a, b);
    await startAndWait(h, SPLIT);
    expect(term).toEqual({ at: SPLIT, on: 'a' });
    await h.lock.shutdown();
  });

  it('a standby at the survey that answers the probe as a primary (not newer) counts as up', async () => {
    const { clock, a, b } = twoHosts();
    a.timeline = 2;
    b.inRecovery = true;
    a.beforeQuery = (tag) => {
      if (tag === 'try-lock') b.inRecovery = false; // a primary on timeline 1: not a promotion
    };
    const h = makeLock({ db: a, clock, connect: [a.connect, b.connect], takeoverDelayMs: DELAY });
    const term = watchTerm(h, a, b);
    await startAndWait(h, SPLIT);
    expect(term).toEqual({ at: SPLIT, on: 'a' });
    await h.lock.shutdown();
  });

  it('this server’s timeline unknown (0): a primary elsewhere is not taken for newer, but is up', async () => {
    const { clock, a, b } = twoHosts();
    a.timeline = 0; // a server that refuses the WAL functions (primary.ts)
    b.inRecovery = true;
    a.beforeQuery = (tag) => {
      if (tag !== 'try-lock') return;
      b.inRecovery = false;
      b.timeline = 2;
    };
    const h = makeLock({ db: a, clock, connect: [a.connect, b.connect], takeoverDelayMs: DELAY });
    const term = watchTerm(h, a, b);
    await startAndWait(h, SPLIT);
    expect(term).toEqual({ at: SPLIT, on: 'a' });
    expect(h.errors).toEqual([]);
    await h.lock.shutdown();
  });

  it.each([
    [0, 0],
    [DELAY, DELAY],
  ])('a standby among the hosts adds nothing: takeoverDelayMs %i opens the term at %i', async (delay, at) => {
    const { clock, a, b } = twoHosts();
    b.inRecovery = true;
    const h = makeLock({ db: a, clock, connect: [a.connect, b.connect], takeoverDelayMs: delay });
    const term = watchTerm(h, a, b);
    await startAndWait(h, at === 0 ? 0 : at - 1);
    if (at > 0) {
      expect(term.at).toBeNull();
      await h.clock.advance(1);
    }
    expect(term).toEqual({ at, on: 'a' });
    expect(h.errors).toEqual([]);
    await h.lock.shutdown();
  });
});

describe('the clean handover and the proof of drain', () => {
  /** A leader `x` on host a (alone), and `y` queued behind it (on `hosts`), both waiting in the server. */
  async function queued(
    a: FakeDb,
    clock: FakeClock,
    hosts: FakeDb[],
    extra: { fencing?: boolean } = {},
  ): Promise<{ x: Harness; y: Harness; lines: Line[] }> {
    const { logger, lines } = recorder();
    const x = makeLock({ ...WAIT, ...extra, db: a, clock, takeoverDelayMs: DELAY, reconnectGraceMs: 5000 });
    await x.lock.start();
    await clock.advance(DELAY); // x's own first start is delayed
    expect(x.lock.isLeader).toBe(true);
    const y = makeLock({
      ...WAIT,
      ...extra,
      db: a,
      clock,
      logger,
      takeoverDelayMs: DELAY,
      connect: hosts.map((d) => d.connect),
    });
    await y.lock.start();
    await flush();
    expect(y.lock.state).toBe(LockState.ACQUIRING);
    return { x, y, lines };
  }

  it('a clean release opens the next term at once, and says so in the debug log', async () => {
    const { clock, a } = twoHosts();
    const { x, y, lines } = await queued(a, clock, [a]);
    await x.lock.stepDown();
    await flush();
    expect(y.lock.isLeader).toBe(true);
    expect(logged(lines, 'takeover_clean')).toEqual([
      { event: 'takeover_clean', released: true, fencing: false },
    ]);
    await Promise.all([x.lock.shutdown(), y.lock.shutdown()]);
  });

  it('with fencing, the epoch row alone proves the release (the log says which proof)', async () => {
    const { logger, lines } = recorder();
    const db = new FakeDb(new FakeClock());
    const x = makeLock({ db, fencing: true, takeoverDelayMs: DELAY });
    await x.lock.start();
    await x.clock.advance(DELAY);
    await x.lock.shutdown(); // epoch 1 marked released; y, not yet connected, hears no event
    const y = makeLock({ db, fencing: true, takeoverDelayMs: DELAY, logger });
    await y.lock.start();
    await flush();
    expect(y.lock.isLeader).toBe(true);
    expect(logged(lines, 'takeover_clean')).toEqual([
      { event: 'takeover_clean', released: false, fencing: true },
    ]);
    await y.lock.shutdown();
  });

  it('a crash (the holder’s session terminated) gets the delay, and no clean-handover log', async () => {
    const { clock, a } = twoHosts();
    const { x, y, lines } = await queued(a, clock, [a]);
    a.holder?.kill();
    await flush();
    expect(y.lock.state).toBe(LockState.PENDING);
    await clock.advance(DELAY - 1);
    expect(y.lock.isLeader).toBe(false);
    await clock.advance(1);
    expect(y.lock.isLeader).toBe(true);
    expect(logged(lines, 'takeover_clean')).toEqual([]);
    await Promise.all([x.lock.shutdown(), y.lock.shutdown()]);
  });

  it('a clean release on this server does not shorten the split-brain delay while another primary is up', async () => {
    const { clock, a, b } = twoHosts();
    a.timeline = 2; // b: an old primary still up
    const { x, y, lines } = await queued(a, clock, [a, b]);
    const took = watchTerm(y, a, b);
    await x.lock.stepDown();
    const from = clock.now();
    await clock.advance(SPLIT - 1);
    expect(y.lock.isLeader).toBe(false);
    await clock.advance(1);
    expect(took).toEqual({ at: from + SPLIT, on: 'a' });
    expect(logged(lines, 'takeover_clean')).toEqual([]);
    await Promise.all([x.lock.shutdown(), y.lock.shutdown()]);
  });

  it('the crashed holder’s proof of drain ends the delay early (logged)', async () => {
    const { clock, a } = twoHosts();
    a.deliverDrained = true;
    const { x, y, lines } = await queued(a, clock, [a]);
    const lost = a.holder?.backendPid;
    a.holder?.kill(); // x reconnects, and announces its lost session drained (it ran nothing)
    await clock.advance(100);
    expect(y.lock.isLeader).toBe(true);
    const [drained] = logged(lines, 'takeover_drained');
    expect(drained).toMatchObject({ event: 'takeover_drained', drained: { pid: lost } });
    expect(drained?.leftMs).toBeGreaterThan(DELAY - 100);
    await Promise.all([x.lock.shutdown(), y.lock.shutdown()]);
  });

  it('no proof of drain ends the split-brain delay (it says nothing about the other primary)', async () => {
    const { clock, a, b } = twoHosts();
    a.timeline = 2;
    a.deliverDrained = true;
    const { x, y, lines } = await queued(a, clock, [a, b]);
    const took = watchTerm(y, a, b);
    a.holder?.kill();
    const from = clock.now();
    await clock.advance(SPLIT - 1);
    expect(y.lock.isLeader).toBe(false);
    expect(a.events.some((e) => e.includes('"e":"drained"'))).toBe(true); // it was sent
    await clock.advance(1);
    expect(took).toEqual({ at: from + SPLIT, on: 'a' });
    expect(logged(lines, 'takeover_drained')).toEqual([]);
    await Promise.all([x.lock.shutdown(), y.lock.shutdown()]);
  });
});

describe('while the delay runs', () => {
  it('a delay shorter than the health interval ends on time', async () => {
    const h = makeLock({ takeoverDelayMs: 300, healthIntervalMs: 1000 });
    await startAndWait(h, 299);
    expect(h.lock.state).toBe(LockState.PENDING);
    const ownership = (): string[] =>
      h.db.last.queries.filter((q) => /^\/\* pgleaderlock:(check|pending) /.test(q));
    const checks = ownership();
    expect(checks.length).toBeGreaterThan(0);
    expect(checks.every((q) => q.startsWith('/* pgleaderlock:pending'))).toBe(true); // inspect: `pending`
    await h.clock.advance(1);
    expect(h.lock.isLeader).toBe(true);
    // the check the lease counts from, and every one after, shows a leader, not `pending`
    const last = ownership().at(-1);
    expect(last).toMatch(/^\/\* pgleaderlock:check \*\//);
    await h.lock.shutdown();
  });

  it('ownership is checked every health interval: a loss is seen within one, not at the end of the delay', async () => {
    const h = makeLock({ takeoverDelayMs: 3500, healthIntervalMs: 1000, autoReacquire: false });
    await startAndWait(h, 1500);
    expect(h.lock.state).toBe(LockState.PENDING);
    h.db.silentLoss = true;
    await h.clock.advance(499);
    expect(h.events).not.toContain('lost');
    await h.clock.advance(1); // the check at 2000
    expect(h.events).toContain('lost');
    expect(h.events).not.toContain('acquired');
    expect(h.errors.map((e) => (e as { code?: string }).code)).toEqual(['ERR_PGLEADERLOCK_LOST']);
  });

  it('a check that fails while pending opens no term and is reported; the next attempt goes on', async () => {
    const h = makeLock({ takeoverDelayMs: 3000, healthIntervalMs: 1000 });
    await startAndWait(h, 0);
    h.db.behaviour.check = 'error';
    await h.clock.advance(1000);
    expect(h.events).not.toContain('acquired');
    expect(h.lock.state).toBe(LockState.FOLLOWER);
    expect(h.errors.map((e) => e.message)).toEqual([expect.stringContaining('simulated query failure')]);
    h.db.behaviour.check = 'normal';
    await h.clock.advance(10_000);
    expect(h.lock.isLeader).toBe(true);
    await h.lock.shutdown();
  });

  it('a session that dies during the delay: its check says the lock is lost, and no term opens', async () => {
    const h = makeLock({ takeoverDelayMs: 3000, healthIntervalMs: 1000 });
    h.db.beforeQuery = (tag, client) => {
      if (tag === 'pending' && h.clock.now() >= 1000) client.kill(); // as the check is sent
    };
    await startAndWait(h, 1000);
    expect(h.events).not.toContain('acquired');
    expect(h.lock.state).toBe(LockState.FOLLOWER);
    expect(h.errors.map((e) => (e as { code?: string }).code)).toEqual(['ERR_PGLEADERLOCK_LOST']);
    h.db.beforeQuery = null;
    await h.lock.shutdown();
  });

  it('a session that dies as the delay ends opens no term, though the server has not freed the lock yet', async () => {
    const h = makeLock({ takeoverDelayMs: DELAY, healthIntervalMs: 1000 });
    h.db.releaseDelayMs = 5000; // the server notices the closed session late: the check still says held
    h.db.beforeQuery = (tag, client) => {
      if (tag === 'check' && h.clock.now() >= DELAY) client.kill(); // the last check, as it is sent
    };
    await startAndWait(h, DELAY);
    expect(h.events).not.toContain('acquired');
    expect(h.lock.state).toBe(LockState.FOLLOWER);
    expect(h.errors.map((e) => [(e as { code?: string }).code, e.message])).toEqual([
      ['ERR_PGLEADERLOCK_CONNECTION', 'the connection ended after the grant, before the term could open'],
    ]);
    expect(h.errors[0]?.cause).toBeInstanceOf(Error);
    h.db.beforeQuery = null;
    await h.lock.shutdown();
  });

  it('with fencing, a failed epoch bump opens no term on that session and is reported; the next attempt leads', async () => {
    const h = makeLock({ fencing: true });
    let fail = true;
    h.db.beforeQuery = (tag) => {
      if (tag !== 'bump' || !fail) return;
      fail = false;
      throw Object.assign(new Error('permission denied for table fencing'), { code: '42501' });
    };
    await h.lock.start();
    await flush();
    expect(h.lock.state).toBe(LockState.FOLLOWER); // not stopped: it tries again
    expect(h.errors.map((e) => e.message)).toEqual([expect.stringContaining('permission denied for table')]);
    expect(h.db.holder).toBeNull();
    await h.clock.advance(10_000);
    expect(h.lock.isLeader).toBe(true);
    expect(h.events.filter((e) => e === 'acquired')).toHaveLength(1);
    await h.lock.shutdown();
  });

  it('a shutdown while the other hosts are asked opens no term', async () => {
    const { clock, a, b } = twoHosts();
    b.inRecovery = true;
    a.beforeQuery = (tag) => {
      if (tag === 'try-lock') b.connectBehaviour = 'hang'; // the probe waits for its deadline
    };
    const h = makeLock({ db: a, clock, connect: [a.connect, b.connect] });
    await h.lock.start();
    await flush();
    expect(h.lock.state).toBe(LockState.ACQUIRING);
    await h.lock.shutdown();
    await h.clock.advance(1000);
    expect(h.events).not.toContain('acquired');
    expect(h.lock.state).toBe(LockState.STOPPED);
    expect(a.holder).toBeNull();
  });

  it('a shutdown while the epoch is bumped opens no term', async () => {
    const h = makeLock({ fencing: true });
    h.db.bumpDelayMs = 500;
    await h.lock.start();
    await flush();
    const stopping = h.lock.shutdown();
    await h.clock.advance(1000);
    await stopping;
    expect(h.events).not.toContain('acquired');
    expect(h.lock.state).toBe(LockState.STOPPED);
    expect(h.db.holder).toBeNull();
  });
});
