/**
 * The user-visible contract of `LeaderElection` and `PartitionedElection`, written once and
 * run against the real classes (a real PostgreSQL) and against the fakes of
 * `pgleaderlock/testing` (no database), so that the fakes cannot drift from what they stand
 * in for. Each candidate is driven through the same moves:
 *
 *  - LeaderLock: `elect()` frees the key it waits for (an admin session's lock at first,
 *    then a rival lock's); `lose()` terminates its backend while a rival waits in the queue
 *    (so the rival, not the lock again, takes it); the rival's id is the new leader.
 *  - FakeLeaderLock: `elect()`, `lose()`, `newLeader(rival)`.
 *  - PartitionedLeadership (4 partitions): alone, it is assigned all four; `lose()`
 *    terminates its member session; `rebalance()` starts a second worker, which takes two.
 *  - FakePartitionedLeadership: `assign([0, 1, 2, 3])`, `revoke(owned, 'lost')`,
 *    `revoke([2, 3], 'rebalance')`.
 */
import { afterEach, describe, expect, it } from 'vitest';
import {
  CallbackError,
  type LeaderElection,
  type LeaderLock,
  LeaderWorkError,
  type PartitionedElection,
  PartitionedLeadership,
  type PartitionTerm,
  type Term,
  TermEndedError,
} from '../../src/index.js';
import { FakeLeaderLock, FakePartitionedLeadership } from '../../src/testing/index.js';
import {
  type AdminClient,
  adminClient,
  adminQuery,
  assertNoSessions,
  databaseUrl,
  eventually,
  lockHolders,
  randomKeys,
  testTag,
  within,
} from '../harness/db.js';
import { lockFactory } from '../harness/locks.js';

/** A leader candidate and the moves that make it lead or lose. */
interface Candidate {
  readonly lock: LeaderElection;
  /** The id of the candidate that takes over on `lose()`. */
  readonly rivalId: string;
  /** Become leader; resolves once `isLeader`. */
  elect(): Promise<void>;
  /** An involuntary loss to the rival; resolves once the lock no longer leads. */
  lose(): Promise<void>;
  /** The rival waits for the lock (a real rival queues behind the lock; a fake's needs nothing). */
  queueRival(): Promise<void>;
  dispose(): Promise<void>;
}

interface CandidateKind {
  readonly kind: string;
  make(): Promise<Candidate>;
}

const realLock: CandidateKind = {
  kind: 'LeaderLock',
  async make() {
    const factory = lockFactory();
    const keys = randomKeys();
    const admin: AdminClient = await adminClient(databaseUrl());
    // the key is held by another session at first: the lock follows until elect()
    await admin.query('SELECT pg_advisory_lock($1, $2)', [keys.key1, keys.key2]);
    let adminHolds = true;
    const lock = factory.make({ ...keys, id: `${factory.tag}-lock` });
    const rivalId = `${factory.tag}-rival`;
    let rival: LeaderLock | null = null;
    const url = databaseUrl();
    const queueRival = async (): Promise<void> => {
      const before = await waiting();
      rival = factory.make({ ...keys, id: rivalId });
      await rival.start();
      await eventually(async () => (await waiting()) > before, { what: 'the rival to wait for the key' });
    };
    const waiting = async (): Promise<number> =>
      (await lockHolders(url, keys.key1, keys.key2)).filter((r) => !r.granted).length;
    return {
      lock,
      rivalId,
      async elect() {
        if (adminHolds) {
          await admin.query('SELECT pg_advisory_unlock($1, $2)', [keys.key1, keys.key2]);
          adminHolds = false;
        }
        await rival?.shutdown();
        rival = null;
        if (!(await lock.waitForLeadership({ timeoutMs: 10_000 }))) throw new Error('the lock did not lead');
      },
      queueRival,
      async lose() {
        // the rival queues behind the lock, so that it (not the lock again) takes the key
        await queueRival();
        const [holder] = (await lockHolders(url, keys.key1, keys.key2)).filter((r) => r.granted);
        if (!holder) throw new Error('nobody holds the key');
        await admin.terminate(holder.pid);
        await eventually(() => !lock.isLeader && rival?.isLeader === true, {
          timeoutMs: 10_000,
          what: 'the rival to lead',
        });
      },
      async dispose() {
        await factory.cleanup();
        await admin[Symbol.asyncDispose]();
        await assertNoSessions(lock.id.slice(0, lock.id.lastIndexOf('-')));
      },
    };
  },
};

const fakeLock: CandidateKind = {
  kind: 'FakeLeaderLock',
  async make() {
    const lock = new FakeLeaderLock({ id: 'lock' });
    return {
      lock,
      rivalId: 'rival',
      elect: async () => {
        await lock.elect();
      },
      // newLeader() while leading loses first (as lose()), then announces the rival
      lose: () => lock.newLeader('rival'),
      queueRival: async () => {},
      dispose: () => lock.shutdown(),
    };
  },
};

/** Lets queued callbacks and runs go on (the real lock's take a few milliseconds more). */
const settle = (ms = 50): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe.each([realLock, fakeLock])('LeaderElection: $kind', ({ make }) => {
  let made: Candidate[] = [];
  afterEach(async () => {
    const all = made;
    made = [];
    for (const c of all) await within(c.dispose(), 15_000, 'dispose');
  });
  const candidate = async (): Promise<Candidate> => {
    const c = await make();
    made.push(c);
    return c;
  };

  /** Every callback of `lock`, in the order they ran, as short strings. */
  function record(lock: LeaderElection): string[] {
    const log: string[] = [];
    lock.onStateChange((from, to) => {
      log.push(`state ${from}->${to}`);
    });
    lock.onAcquired((term) => {
      log.push(`acquired ${term.id}`);
    });
    lock.onLost(() => {
      log.push('lost');
    });
    lock.onReleased(() => {
      log.push('released');
    });
    lock.onStopped(() => {
      log.push('stopped');
    });
    lock.onNewLeader((id) => {
      log.push(`newLeader ${id}`);
    });
    lock.onError((e) => {
      log.push(`error ${e.name}`);
    });
    return log;
  }

  it('before start(): stopped, not leader, no term; waitForLeadership() resolves false at once; health() live, not ready', async () => {
    const { lock } = await candidate();
    expect([lock.state, lock.isLeader, lock.term]).toEqual(['stopped', false, null]);
    expect(await within(lock.waitForLeadership(), 100, 'waitForLeadership() before start()')).toBe(false);
    expect(lock.health()).toMatchObject({ live: true, ready: false });
  });

  it("start() behind another holder: following ('acquiring' or 'follower'), not leader; health() live and ready; waitForLeadership({ timeoutMs: 100 }) resolves false; onStateChange('stopped', 'follower') first", async () => {
    const { lock } = await candidate();
    const log = record(lock);
    await lock.start();
    expect(['acquiring', 'follower']).toContain(lock.state);
    expect([lock.isLeader, lock.term]).toEqual([false, null]);
    expect(lock.health()).toMatchObject({ live: true, ready: true });
    expect(await lock.waitForLeadership({ timeoutMs: 100 })).toBe(false);
    expect(log[0]).toBe('state stopped->follower');
  });

  it("elected: onStateChange(…, 'leader') then onAcquired(term) with lock.term; isLeader; a pending waitForLeadership() resolves true; runWhileLeader's run gets the term's id, its signal not aborted", async () => {
    const c = await candidate();
    const { lock } = c;
    const log = record(lock);
    const runs: Term[] = [];
    lock.runWhileLeader(async (term) => {
      runs.push(term);
      await new Promise((r) => term.signal.addEventListener('abort', r, { once: true }));
    });
    let acquired: Term | null = null;
    lock.onAcquired((term) => {
      acquired = term;
    });
    await lock.start();
    const waiting = lock.waitForLeadership({ timeoutMs: 10_000 });
    await c.elect();
    expect(await waiting).toBe(true);
    await eventually(() => acquired !== null && runs.length === 1, { what: 'onAcquired and the run' });
    const term = lock.term;
    expect(lock.isLeader).toBe(true);
    expect(term).not.toBeNull();
    expect((acquired as Term | null)?.id).toBe(term?.id);
    expect(runs[0]?.id).toBe(term?.id);
    expect(runs[0]?.signal.aborted).toBe(false);
    const toLeader = log.findIndex((l) => /^state \w+->leader$/.test(l));
    expect(toLeader).toBeGreaterThanOrEqual(0);
    expect(log.indexOf(`acquired ${term?.id}`)).toBeGreaterThan(toLeader);
  });

  it('runWhileLeader registered while leading starts at once in the current term', async () => {
    const c = await candidate();
    await c.lock.start();
    await c.elect();
    const ids: number[] = [];
    c.lock.runWhileLeader((term) => {
      ids.push(term.id);
    });
    await eventually(() => ids.length === 1, { what: 'the run' });
    expect(ids).toEqual([c.lock.term?.id]);
  });

  it("an involuntary loss: when onLost runs, the term's signal has aborted with a TermEndedError and isLeader is false; onStateChange('leader', …) before onLost; no onReleased, no onError", async () => {
    const c = await candidate();
    const { lock } = c;
    const log = record(lock);
    let seen: { aborted: boolean; reason: unknown; isLeader: boolean } | null = null;
    await lock.start();
    await c.elect();
    const term = lock.term as Term;
    lock.onLost(() => {
      seen = { aborted: term.signal.aborted, reason: term.signal.reason, isLeader: lock.isLeader };
    });
    await c.lose();
    await eventually(() => seen !== null, { what: 'onLost' });
    await settle();
    expect(seen).toMatchObject({ aborted: true, isLeader: false });
    expect((seen as { reason: unknown } | null)?.reason).toBeInstanceOf(TermEndedError);
    const fromLeader = log.findIndex((l) => /^state leader->\w+$/.test(l));
    expect(fromLeader).toBeGreaterThanOrEqual(0);
    expect(log.indexOf('lost')).toBeGreaterThan(fromLeader);
    expect(log).not.toContain('released');
    expect(log.filter((l) => l.startsWith('error'))).toEqual([]);
  });

  it('after a loss to another candidate: onNewLeader(its id), after onLost', async () => {
    const c = await candidate();
    const log = record(c.lock);
    await c.lock.start();
    await c.elect();
    await c.lose();
    await eventually(() => log.includes(`newLeader ${c.rivalId}`), { what: `onNewLeader(${c.rivalId})` });
    expect(log.indexOf(`newLeader ${c.rivalId}`)).toBeGreaterThan(log.indexOf('lost'));
  });

  it("never two runs at once: a run of the lost term that ignores its abort for 1 s delays the next term's run, open meanwhile, until it returns", async () => {
    const c = await candidate();
    const { lock } = c;
    const spans: { id: number; start: number; end: number | null }[] = [];
    lock.runWhileLeader(async (term) => {
      const span = { id: term.id, start: performance.now(), end: null as number | null };
      spans.push(span);
      await new Promise((r) => term.signal.addEventListener('abort', r, { once: true }));
      if (span.id === spans[0]?.id) await new Promise((r) => setTimeout(r, 1000)); // the first run ignores its abort
      span.end = performance.now();
    });
    await lock.start();
    await c.elect();
    await c.lose();
    await c.elect();
    const reelectedAt = performance.now();
    await eventually(() => spans.length === 2, { what: 'the second run' });
    const [first, second] = spans as [(typeof spans)[0], (typeof spans)[0]];
    expect(second.id).toBeGreaterThan(first.id);
    expect(first.end).not.toBeNull();
    expect(reelectedAt).toBeLessThan(first.end as number); // the next term opened while the first run still ran
    expect(second.start).toBeGreaterThanOrEqual(first.end as number);
  });

  it("stepDown(): on its return isLeader is false and the term's signal has aborted; it resolves only after the run returned; onReleased, not onLost", async () => {
    const c = await candidate();
    const { lock } = c;
    const log = record(lock);
    let returnedAt: number | null = null;
    lock.runWhileLeader(async (term) => {
      await new Promise((r) => term.signal.addEventListener('abort', r, { once: true }));
      await new Promise((r) => setTimeout(r, 100)); // winding down
      returnedAt = performance.now();
    });
    await lock.start();
    await c.elect();
    const term = lock.term as Term;
    const stepping = lock.stepDown();
    expect([lock.isLeader, term.signal.aborted]).toEqual([false, true]);
    await stepping;
    const resolvedAt = performance.now();
    expect(returnedAt).not.toBeNull();
    expect(resolvedAt).toBeGreaterThanOrEqual(returnedAt as unknown as number);
    expect(log).toContain('state leader->releasing');
    expect(log).toContain('released');
    expect(log).not.toContain('lost');
  });

  it("handoverTo(rival): resolves after the term's signal aborted and the run returned, not leader; onReleased and onNewLeader(rival) follow; no onLost", async () => {
    const c = await candidate();
    const { lock } = c;
    const log = record(lock);
    let returnedAt: number | null = null;
    lock.runWhileLeader(async (term) => {
      await new Promise((r) => term.signal.addEventListener('abort', r, { once: true }));
      await new Promise((r) => setTimeout(r, 100)); // winding down
      returnedAt = performance.now();
    });
    await lock.start();
    await c.elect();
    await c.queueRival();
    const term = lock.term as Term;
    await within(lock.handoverTo(c.rivalId), 10_000, 'handoverTo()');
    const resolvedAt = performance.now();
    expect([lock.isLeader, term.signal.aborted]).toEqual([false, true]);
    expect(returnedAt).not.toBeNull();
    expect(resolvedAt).toBeGreaterThanOrEqual(returnedAt as unknown as number);
    await eventually(() => log.includes('released') && log.includes(`newLeader ${c.rivalId}`), {
      what: `onReleased and onNewLeader(${c.rivalId})`,
    });
    expect(log).not.toContain('lost');
  });

  it('handoverTo() while following rejects with ERR_PGLEADERLOCK_HANDOVER, and changes nothing', async () => {
    const c = await candidate();
    await c.lock.start();
    const state = c.lock.state;
    await expect(c.lock.handoverTo(c.rivalId)).rejects.toMatchObject({ code: 'ERR_PGLEADERLOCK_HANDOVER' });
    expect(c.lock.state).toBe(state);
  });

  it("bad arguments are refused before the lock's state is looked at, naming the value, following and leading alike: handoverTo's id (TypeError) and a timeoutMs outside 1–60000 (RangeError), waitForLeadership's signal (TypeError); no callback runs and the state stays", async () => {
    const c = await candidate();
    const { lock } = c;
    const refused = async (): Promise<void> => {
      for (const id of [42, '']) {
        await expect(lock.handoverTo(id as unknown as string)).rejects.toThrow(
          new TypeError(`handoverTo: id must be a non-empty string, received ${JSON.stringify(id)}`),
        );
      }
      for (const timeoutMs of [0, 60_001]) {
        await expect(lock.handoverTo(c.rivalId, { timeoutMs })).rejects.toThrow(
          new RangeError(`handoverTo: timeoutMs must be between 1 and 60000, received ${timeoutMs}`),
        );
      }
      await expect(lock.waitForLeadership({ signal: 'soon' as unknown as AbortSignal })).rejects.toThrow(
        new TypeError('waitForLeadership signal must be an AbortSignal, received "soon"'),
      );
    };
    await lock.start();
    const log = record(lock);
    const following = lock.state;
    // following, a well-formed handoverTo is refused for the state (ERR_PGLEADERLOCK_HANDOVER)
    await refused();
    expect(lock.state).toBe(following);
    await c.elect();
    const term = lock.term;
    await eventually(() => log.includes(`acquired ${term?.id}`), { what: 'onAcquired' });
    log.length = 0;
    await refused();
    await settle();
    expect([lock.isLeader, lock.term]).toEqual([true, term]);
    expect(log).toEqual([]);
  });

  it('stepDown() while not leader resolves at once, and changes nothing', async () => {
    const { lock } = await candidate();
    await lock.start();
    const state = lock.state;
    await within(lock.stepDown(), 100, 'stepDown() while following');
    expect(lock.state).toBe(state);
  });

  it("shutdown() while leading: on its return the term's signal has aborted; it resolves after the run returned, with onReleased then onStopped run; state 'stopped'", async () => {
    const c = await candidate();
    const { lock } = c;
    const log = record(lock);
    let returned = false;
    lock.runWhileLeader(async (term) => {
      await new Promise((r) => term.signal.addEventListener('abort', r, { once: true }));
      await new Promise((r) => setTimeout(r, 100));
      returned = true;
    });
    await lock.start();
    await c.elect();
    const term = lock.term as Term;
    const stopping = lock.shutdown();
    expect([lock.isLeader, term.signal.aborted]).toEqual([false, true]);
    await stopping;
    expect(returned).toBe(true);
    expect(lock.state).toBe('stopped');
    expect(log.slice(-3)).toEqual(['state releasing->stopped', 'released', 'stopped']);
  });

  it("shutdown() while following: a pending waitForLeadership() resolves false; onStopped has run; state 'stopped'; a second shutdown() resolves too", async () => {
    const { lock } = await candidate();
    const log = record(lock);
    await lock.start();
    const waiting = lock.waitForLeadership();
    await lock.shutdown();
    expect(await within(waiting, 1000, 'waitForLeadership() after shutdown()')).toBe(false);
    expect(lock.state).toBe('stopped');
    expect(log.at(-1)).toBe('stopped');
    await within(lock.shutdown(), 1000, 'a second shutdown()');
  });

  it('shutdown() called from inside onLost resolves, and the lock stops', async () => {
    const c = await candidate();
    const { lock } = c;
    let stopped: Promise<void> | null = null;
    lock.onLost(() => {
      stopped = lock.shutdown();
    });
    await lock.start();
    await c.elect();
    await c.lose();
    await eventually(() => stopped !== null, { what: 'onLost' });
    await within(stopped as unknown as Promise<void>, 5000, 'shutdown() from onLost');
    expect(lock.state).toBe('stopped');
  });

  it('errors go to onError: a run that throws as a LeaderWorkError with its term id, a callback that throws as a CallbackError; a run that ends by its abort is no error', async () => {
    const c = await candidate();
    const { lock } = c;
    const errors: Error[] = [];
    lock.onError((e) => {
      errors.push(e);
    });
    lock.onAcquired(() => {
      throw new Error('callback failed');
    });
    lock.runWhileLeader(() => {
      throw new Error('work failed');
    });
    lock.runWhileLeader(async (term) => {
      await new Promise((r) => term.signal.addEventListener('abort', r, { once: true }));
      term.signal.throwIfAborted();
    });
    await lock.start();
    await c.elect();
    const termId = lock.term?.id;
    await eventually(() => errors.length >= 2, { what: 'two errors' });
    await lock.stepDown(); // the second run ends by its abort (a real lock may lead again after its back-off)
    await settle();
    const ofTerm = errors.filter((e) => e instanceof LeaderWorkError && e.termId === termId);
    expect(ofTerm.map((e) => (e.cause as Error).message)).toEqual(['work failed']);
    expect(errors.filter((e) => !(e instanceof LeaderWorkError || e instanceof CallbackError))).toEqual([]);
    expect(errors.find((e) => e instanceof CallbackError)).toMatchObject({ event: 'acquired' });
  });

  it("waitForLeadership({ signal }): rejects with the signal's reason when it aborts", async () => {
    const { lock } = await candidate();
    await lock.start();
    const ac = new AbortController();
    const waiting = lock.waitForLeadership({ signal: ac.signal });
    const reason = new Error('gave up');
    ac.abort(reason);
    await expect(within(waiting, 1000, 'the rejection')).rejects.toBe(reason);
  });
});

/** A partition worker and the moves that assign and revoke its partitions. */
interface Worker {
  readonly workers: PartitionedElection;
  /** Be assigned every partition; resolves once all four are owned. */
  assignAll(): Promise<void>;
  /** Lose every partition involuntarily. */
  lose(): Promise<void>;
  /** Hand partitions to a new worker; resolves once two are revoked. */
  rebalance(): Promise<void>;
  dispose(): Promise<void>;
}

const PARTITIONS = 4;

const realWorker = {
  kind: 'PartitionedLeadership',
  async make(): Promise<Worker> {
    const tag = testTag();
    const name = `election-${tag}`;
    const url = databaseUrl();
    const options = { name, partitions: PARTITIONS, connectionString: url, takeoverDelayMs: 0 };
    const workers = new PartitionedLeadership({ ...options, id: `${tag}-w1`, healthIntervalMs: 1000 });
    const others: PartitionedLeadership[] = [];
    return {
      workers,
      async assignAll() {
        await workers.start();
        await eventually(() => workers.owned.size === PARTITIONS, {
          timeoutMs: 10_000,
          what: 'all partitions',
        });
      },
      async lose() {
        const [member] = await adminQuery<{ pid: number }>(
          url,
          'SELECT pid FROM pg_stat_activity WHERE application_name = $1',
          [`pgleaderlock:${workers.id}#p${PARTITIONS}`], // the member session (the ring watch's ends in #watch)
        );
        if (!member) throw new Error('no member session');
        await adminQuery(url, 'SELECT pg_terminate_backend($1)', [member.pid]);
      },
      async rebalance() {
        const second = new PartitionedLeadership({ ...options, id: `${tag}-w2` });
        others.push(second);
        await second.start();
        await eventually(() => workers.owned.size === PARTITIONS / 2, {
          timeoutMs: 10_000,
          what: 'the rebalance',
        });
      },
      async dispose() {
        await Promise.all([workers, ...others].map((w) => w.shutdown({ timeoutMs: 10_000 })));
        await assertNoSessions(tag);
      },
    };
  },
};

const fakeWorker = {
  kind: 'FakePartitionedLeadership',
  async make(): Promise<Worker> {
    const workers = new FakePartitionedLeadership({ partitions: PARTITIONS });
    return {
      workers,
      async assignAll() {
        await workers.start();
        await workers.assign([0, 1, 2, 3]);
      },
      lose: () => workers.revoke([...workers.owned], 'lost'),
      rebalance: () => workers.revoke([2, 3], 'rebalance'),
      dispose: () => workers.shutdown(),
    };
  },
};

describe.each([realWorker, fakeWorker])('PartitionedElection: $kind', ({ make }) => {
  let made: Worker[] = [];
  afterEach(async () => {
    const all = made;
    made = [];
    for (const w of all) await within(w.dispose(), 20_000, 'dispose');
  });
  const worker = async (): Promise<Worker> => {
    const w = await make();
    made.push(w);
    return w;
  };

  it('before start(): owns nothing; health() live, not ready. Assigned: onAssigned(p, term) with term.partition p, its signal live, p in owned; one runForEach run per partition, in that term; health() live and ready', async () => {
    const w = await worker();
    const { workers } = w;
    expect(workers.owned.size).toBe(0);
    expect(workers.health()).toMatchObject({ live: true, ready: false });
    const assigned = new Map<number, PartitionTerm>();
    const runs = new Map<number, number>();
    workers.onAssigned((p, term) => {
      assigned.set(p, term);
    });
    workers.runForEach(async (p, term) => {
      runs.set(p, term.id);
      await new Promise((r) => term.signal.addEventListener('abort', r, { once: true }));
    });
    await w.assignAll();
    await eventually(() => assigned.size === PARTITIONS && runs.size === PARTITIONS, {
      what: 'the callbacks and runs',
    });
    expect([...workers.owned].sort()).toEqual([0, 1, 2, 3]);
    for (const [p, term] of assigned) {
      expect(term.partition).toBe(p);
      expect(term.signal.aborted).toBe(false);
      expect(runs.get(p)).toBe(term.id);
    }
    expect(workers.health()).toMatchObject({ live: true, ready: true });
  });

  it("lost: when onRevoked(p, 'lost') runs, p's term signal has aborted and p is no longer owned", async () => {
    const w = await worker();
    const { workers } = w;
    const terms = new Map<number, PartitionTerm>();
    workers.onAssigned((p, term) => {
      if (!terms.has(p)) terms.set(p, term);
    });
    const seen: { p: number; aborted: boolean; owned: boolean }[] = [];
    workers.onRevoked((p, reason) => {
      if (reason === 'lost')
        seen.push({ p, aborted: terms.get(p)?.signal.aborted ?? false, owned: workers.owned.has(p) });
    });
    await w.assignAll();
    await eventually(() => terms.size === PARTITIONS, { what: 'onAssigned' });
    await w.lose();
    await eventually(() => seen.length === PARTITIONS, { what: "onRevoked(…, 'lost') for each partition" });
    expect(seen.map((s) => s.p).sort()).toEqual([0, 1, 2, 3]);
    expect(seen.every((s) => s.aborted && !s.owned)).toBe(true);
  });

  it("rebalance: the partitions handed on get onRevoked(p, 'rebalance') with their signal aborted; the others stay owned with their term live", async () => {
    const w = await worker();
    const { workers } = w;
    const terms = new Map<number, PartitionTerm>();
    workers.onAssigned((p, term) => {
      terms.set(p, term);
    });
    const revoked: { p: number; reason: string; aborted: boolean }[] = [];
    workers.onRevoked((p, reason) => {
      revoked.push({ p, reason, aborted: terms.get(p)?.signal.aborted ?? false });
    });
    await w.assignAll();
    await eventually(() => terms.size === PARTITIONS, { what: 'onAssigned' });
    await w.rebalance();
    await eventually(() => revoked.length === PARTITIONS / 2, { what: 'two revocations' });
    expect(revoked.every((r) => r.reason === 'rebalance' && r.aborted)).toBe(true);
    const kept = [...workers.owned];
    expect(kept).toHaveLength(PARTITIONS / 2);
    for (const p of kept) expect(terms.get(p)?.signal.aborted).toBe(false);
    expect(kept.some((p) => revoked.some((r) => r.p === p))).toBe(false);
  });

  it("shutdown(): every partition revoked with 'shutdown', its signal aborted; resolves after the runs returned; owns nothing; health() not ready", async () => {
    const w = await worker();
    const { workers } = w;
    const revoked: string[] = [];
    workers.onRevoked((_p, reason) => {
      revoked.push(reason);
    });
    let running = 0;
    let returned = 0;
    workers.runForEach(async (_p, term) => {
      running += 1;
      await new Promise((r) => term.signal.addEventListener('abort', r, { once: true }));
      await new Promise((r) => setTimeout(r, 50)); // winding down
      returned += 1;
    });
    await w.assignAll();
    await eventually(() => running === PARTITIONS, { what: 'the runs' });
    await workers.shutdown();
    expect(returned).toBe(PARTITIONS);
    expect(workers.owned.size).toBe(0);
    expect(workers.health()).toMatchObject({ ready: false });
    await eventually(() => revoked.length === PARTITIONS, { what: 'onRevoked' });
    expect(revoked.every((r) => r === 'shutdown')).toBe(true);
  });
});
