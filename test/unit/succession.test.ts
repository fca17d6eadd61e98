/**
 * Choosing who leads, piece by piece (src/core/handover.ts, succession.ts, options):
 * the events, the directive a release carries, and when a granted waiter yields.
 */
import { describe, expect, it } from 'vitest';
import { systemClock } from '../../src/core/clock.js';
import {
  type Directive,
  forwardPayload,
  HandoverLog,
  handoverTimeoutOf,
  MAX_HANDOVER_TIMEOUT_MS,
  parseEvent,
  payload,
} from '../../src/core/handover.js';
import { resolveOptions } from '../../src/core/lock-options.js';
import { LeaderLock } from '../../src/index.js';
import { Requests } from '../../src/leader/requests.js';
import type { Session } from '../../src/leader/session.js';
import type { Acquired } from '../../src/leader/session-types.js';
import { priorityOf } from '../../src/leader/sql.js';
import { Succession } from '../../src/leader/succession.js';
import { FakeClock } from './fakes.js';

const quiet = () => {};
const logger = { debug: quiet, info: quiet, warn: quiet, error: quiet };

describe('priority and handoverTo: options', () => {
  it.each([1.5, Number.NaN, '1', Number.POSITIVE_INFINITY, 2 ** 53])(
    'priority %s is refused with a RangeError naming it',
    (priority) => {
      expect(() => new LeaderLock({ key1: 1, key2: 2, priority: priority as number })).toThrow(
        /priority must be an integer, received/,
      );
      expect(() => new LeaderLock({ key1: 1, key2: 2, priority: priority as number })).toThrow(RangeError);
    },
  );

  it('priority defaults to 0; negative integers are accepted', () => {
    expect(new LeaderLock({ key1: 1, key2: 2 }).priority).toBe(0);
    expect(new LeaderLock({ key1: 1, key2: 2, priority: -3 }).priority).toBe(-3);
  });

  it('handoverTo without timeoutMs waits 5000 ms (docs/choosing-the-leader.md): the timeout LeaderLock and the fakes read', () => {
    expect(handoverTimeoutOf('b', {})).toBe(5000);
    expect(handoverTimeoutOf('b', { timeoutMs: 1 })).toBe(1);
  });

  it('handoverTo refuses a bad id or timeout before anything else', async () => {
    const lock = new LeaderLock({ key1: 1, key2: 2 });
    await expect(lock.handoverTo(42 as unknown as string)).rejects.toThrow(
      /id must be a non-empty string, received 42/,
    );
    await expect(lock.handoverTo('b', { timeoutMs: -1 })).rejects.toThrow(RangeError);
    await expect(lock.handoverTo('b', { timeoutMs: MAX_HANDOVER_TIMEOUT_MS + 1 })).rejects.toThrow(
      /timeoutMs must be between 1 and 60000, received 60001/,
    );
    await expect(lock.handoverTo('b')).rejects.toMatchObject({
      code: 'ERR_PGLEADERLOCK_HANDOVER',
      message: expect.stringContaining('not started'),
    });
  });
});

describe('events', () => {
  it('parses waiting, requests and a released directive; anything malformed is no event', () => {
    expect(parseEvent('{"e":"waiting","id":"a","s":"x","p":3}')).toEqual({
      kind: 'waiting',
      id: 'a',
      session: 'x',
      priority: 3,
    });
    expect(parseEvent('{"e":"resign"}')).toEqual({ kind: 'resign' });
    expect(parseEvent('{"e":"handover","to":"b"}')).toEqual({ kind: 'handover', to: 'b' });
    expect(parseEvent('{"e":"handover"}')).toBeNull();
    expect(parseEvent('{"e":"handover","to":""}')).toBeNull();
    expect(parseEvent('{"e":"whatever","id":"a","s":"x"}')).toBeNull();
    const d: Directive = { to: 'b', back: 'a', until: 1000, backUntil: 2000 };
    expect(parseEvent(forwardPayload('c', 'sc', d))).toEqual({
      kind: 'released',
      id: 'c',
      session: 'sc',
      directive: d,
    });
    // a directive missing a field is a plain release
    expect(parseEvent('{"e":"released","id":"a","s":"x","to":"b","until":5}')).toMatchObject({
      directive: null,
    });
    // an acquired without a priority (an older version) counts as priority 0
    expect(parseEvent('{"e":"acquired","id":"a","s":"x"}')).toMatchObject({ priority: 0 });
  });

  it('the priority a statement carries: a wait’s acquired payload, a check’s comment; none: null', () => {
    expect(priorityOf(`SELECT ... '{"e":"acquired","id":"a","s":"x","p":7}' ...`)).toBe(7);
    expect(priorityOf('/* pgleaderlock:check */ SELECT 1 /* p=-2 */')).toBe(-2);
    expect(priorityOf('SELECT 1')).toBeNull();
    expect(priorityOf(null)).toBeNull();
  });

  it('a grant right after a release with a directive carries it; after an acquired, none (an unclean handover)', () => {
    const d: Directive = { to: 'b', back: 'a', until: 1000, backUntil: 2000 };
    const l = new HandoverLog('me', () => null);
    l.see(parseEvent(payload('acquired', 'a', 'sa')) as never);
    l.see(parseEvent(forwardPayload('a', 'sa', d)) as never);
    l.see(parseEvent(payload('acquired', 'me', 'me')) as never);
    expect(l.takeProof()).toEqual({ clean: true, directive: d });
    l.see(parseEvent(forwardPayload('me', 'me', d)) as never);
    l.see(parseEvent(payload('acquired', 'x', 'sx')) as never);
    l.see(parseEvent(payload('acquired', 'me', 'me')) as never);
    expect(l.takeProof()).toEqual({ clean: false, directive: null });
  });
});

describe('a granted waiter yields while a handover to another candidate goes on', () => {
  /** A session whose candidates `connected` have a session, recording what it released. */
  function fake(connected: string[]) {
    const released: (Directive | null)[] = [];
    const session = {
      channel: {
        successor: async (id: string) => ({ holds: false, waits: false, connected: connected.includes(id) }),
      },
      release: async (_f: unknown, d: Directive | null) => {
        released.push(d);
        return true;
      },
    } as unknown as Session;
    return { session, released };
  }
  const grant = (directive: Directive | null, serverMs: number): Acquired =>
    ({ directive, serverMs, cleanHandover: true, provenAt: 0, safety: {} }) as unknown as Acquired;
  const d: Directive = { to: 'b', back: 'a', until: 10_000, backUntil: 20_000 };

  it.each([
    ['c, before until, b there', 'c', ['a', 'b'], 5_000, true],
    ['b itself', 'b', ['a', 'b'], 5_000, false],
    ['c, b gone: the next waiter leads', 'c', ['a'], 5_000, false],
    ['a (back), before until, b there', 'a', ['a', 'b'], 5_000, true],
    ['a (back), after until: takes it back', 'a', ['a', 'b'], 15_000, false],
    ['c, after until, a there: to a', 'c', ['a', 'b'], 15_000, true],
    ['c, after until, a gone', 'c', ['b'], 15_000, false],
    ['c, after backUntil', 'c', ['a', 'b'], 25_000, false],
  ] as const)('%s', async (_, id, connected, now, yields) => {
    const s = new Succession({ id, clock: systemClock, logger });
    const f = fake([...connected]);
    expect(await s.yields(f.session, grant(d, now))).toBe(yields);
    expect(f.released).toEqual(yields ? [d] : []); // a yield forwards the same directive
  });

  it('a directive whose deadline lies further ahead than twice the longest handover is forged: ignored', async () => {
    const s = new Succession({ id: 'c', clock: systemClock, logger });
    const f = fake(['a', 'b']);
    const forged: Directive = { to: 'b', back: null, until: 1e12, backUntil: 1e12 };
    expect(await s.yields(f.session, grant(forged, 5_000))).toBe(false);
    expect(await s.yields(f.session, grant(null, 5_000))).toBe(false);
  });
});

describe('the leader that handed over, watching for its successor', () => {
  const session = (
    successor: () => Promise<{ holds: boolean; waits: boolean; connected: boolean }>,
    heard: readonly string[] = [],
  ) => ({ channel: { successor }, successorTook: (id: string) => heard.includes(id) }) as unknown as Session;
  const watch = (s: Session) =>
    new Succession({ id: 'a', clock: systemClock, logger }).awaitSuccessor(
      s,
      { to: 'b', timeoutMs: 30, outcome: null },
      () => new AbortController().signal,
    );

  it('only a successor still there but not holding after timeoutMs is a timeout (the old leader is then invited back, poll mode)', async () => {
    const there = await watch(session(async () => ({ holds: false, waits: false, connected: true })));
    expect(there.timedOut).toBe(true);
    expect(String(there.outcome)).toContain('"b" did not take the lock within 30 ms');
    const taken = await watch(session(async () => ({ holds: true, waits: false, connected: true })));
    expect(taken).toEqual({ outcome: 'taken', timedOut: false });
    const gone = await watch(session(async () => ({ holds: false, waits: false, connected: false })));
    expect(gone.timedOut).toBe(false);
    expect(String(gone.outcome)).toContain('"b" left before it took the lock');
    // it took the lock and handed it on between two looks (seen in CI: to the old leader, of
    // a higher priority, which then waited 5 s for it): its `acquired`, heard since, says taken
    const handedOn = await watch(
      session(async () => ({ holds: false, waits: false, connected: true }), ['b']),
    );
    expect(handedOn).toEqual({ outcome: 'taken', timedOut: false });
    // heard taking it, but its session is gone by the first look: a backend whose client had
    // died was granted the lock and ended (the next waiter waits out its takeover delay)
    const dead = await watch(session(async () => ({ holds: false, waits: false, connected: false }), ['b']));
    expect(dead.timedOut).toBe(false);
    expect(String(dead.outcome)).toContain(
      '"b" was granted the lock, but its session had ended by the first look',
    );
    const other = await watch(session(async () => ({ holds: false, waits: false, connected: true }), ['c']));
    expect(other.timedOut).toBe(true);
    const failing = await watch(
      session(async () => {
        throw new Error('connection lost');
      }),
    );
    expect(failing.timedOut).toBe(false);
    expect(failing.outcome).toMatchObject({ code: 'ERR_PGLEADERLOCK_HANDOVER' });
  });
});

describe('a higher-priority candidate heard before the term opened (wait mode)', () => {
  /**
   * A lock (priority 0) hears `high` (priority 5) announce itself while it does not lead;
   * `high` queues `queuesAfterMs` after this lock's term opens. Returns when the lock
   * handed over to it, in fake ms after the term opened (null: not within 2 s).
   */
  async function handoverAfter(opts: {
    earlierTerm: boolean;
    queuesAfterMs: number;
    /** Its acquired is heard before the term opens: it led meanwhile. */
    ledMeanwhile?: boolean;
    /** It never queues (it left). */
    gone?: boolean;
    /** Time between its announcement and the term's opening. */
    openAfterMs?: number;
  }): Promise<{ at: number | null; reads: number }> {
    const clock = new FakeClock();
    const o = resolveOptions({ key1: 1, key2: 2, id: 'next', acquireMode: 'wait', clock, logger });
    let queue: { id: string; priority: number }[] = [];
    let reads = 0;
    const queued = async () => {
      reads++;
      return queue;
    };
    const session = { channel: { queued }, onDeath: () => () => {} } as unknown as Session;
    let leading: Session | null = null;
    let handedAt: number | null = null;
    const requests = new Requests(o, {
      state: 'leader',
      leaderSession: () => leading,
      handoverTo: async (to) => {
        if (to === 'high') handedAt ??= clock.now();
      },
      stepDown: async () => {},
      invite: () => {},
    });
    if (opts.earlierTerm) {
      leading = session; // a term before, on the same session, then back to waiting
      requests.termOpened();
      await clock.advance(1500);
      leading = null;
    }
    requests.heard({ kind: 'waiting', id: 'high', session: 'sh', priority: 5 }, session);
    if (opts.ledMeanwhile)
      requests.heard({ kind: 'acquired', id: 'high', session: 'sh', priority: 5, pid: null }, session);
    await clock.advance(opts.openAfterMs ?? 0);
    reads = 0;
    const openedAt = clock.now();
    leading = session;
    requests.termOpened();
    await clock.advance(opts.queuesAfterMs);
    if (!opts.ledMeanwhile && !opts.gone) queue = [{ id: 'high', priority: 5 }];
    await clock.advance(2000 - opts.queuesAfterMs);
    return { at: handedAt === null ? null : handedAt - openedAt, reads };
  }

  it.each([false, true])(
    'the term waits for it to queue and hands over within a queue poll of it, not at a later re-read (an earlier term on the session: %s)',
    async (earlierTerm) => {
      // 30 ms: after the term's first read, before its first re-read (100 ms)
      const { at } = await handoverAfter({ earlierTerm, queuesAfterMs: 30 });
      expect(at).not.toBeNull();
      expect(at).toBeGreaterThanOrEqual(30);
      expect(at).toBeLessThanOrEqual(40);
    },
  );

  it('one that led since (its acquired heard) is not waited for: the term reads the queue once, plus its two re-reads', async () => {
    const { at, reads } = await handoverAfter({ earlierTerm: false, queuesAfterMs: 30, ledMeanwhile: true });
    expect(at).toBeNull();
    expect(reads).toBe(3); // at the term's opening, then at 100 and 1000 ms: not every 5 ms for 1 s
  });

  it('one that left without queuing is waited for only until 1 s after it was heard: heard 1.5 s before the term, not at all; 0.5 s before, for the 0.5 s left', async () => {
    const late = await handoverAfter({
      earlierTerm: false,
      queuesAfterMs: 30,
      gone: true,
      openAfterMs: 1500,
    });
    expect(late).toEqual({ at: null, reads: 3 });
    const recent = await handoverAfter({
      earlierTerm: false,
      queuesAfterMs: 30,
      gone: true,
      openAfterMs: 500,
    });
    expect(recent.at).toBeNull();
    // every 5 ms for the 500 ms left, then the 1000 ms re-read (the 100 ms one joins the poll under way)
    expect(recent.reads).toBeGreaterThanOrEqual(95);
    expect(recent.reads).toBeLessThanOrEqual(105);
  });
});
