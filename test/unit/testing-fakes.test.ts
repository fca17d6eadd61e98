/**
 * The fakes of `pgleaderlock/testing`: their controls (`elect`, `lose`, `newLeader`;
 * `assign`, `revoke`), what they refuse, and the claims of docs/testing-your-code.md. The
 * behaviours they share with the real classes are in test/contract/election.test.ts, run
 * against both.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CallbackError, ShutdownError, TermEndedError } from '../../src/index.js';
import { FakeLeaderLock, FakePartitionedLeadership } from '../../src/testing/index.js';
import { FakeClock, flush } from './fakes.js';

const codeOf = (e: unknown): unknown => (e as { code?: unknown }).code;

describe('FakeLeaderLock', () => {
  it('elect() resolves once onStateChange and onAcquired have run, with the term of lock.term', async () => {
    const lock = new FakeLeaderLock();
    const seen: string[] = [];
    lock.onStateChange((from, to) => {
      seen.push(`${from}->${to}`);
    });
    lock.onAcquired(async (term) => {
      await flush(2);
      seen.push(`acquired ${term.id}`);
    });
    await lock.start();
    const term = await lock.elect();
    expect(term).toBe(lock.term);
    expect(seen).toEqual([
      'stopped->follower',
      'follower->acquiring',
      'acquiring->leader',
      `acquired ${term.id}`,
    ]);
    expect(lock.isLeader).toBe(true);
  });

  it("lose(): the term's signal has aborted, and isLeader is false, at once: when lose() returns, before any callback", async () => {
    const lock = new FakeLeaderLock();
    let lostRan = false;
    lock.onLost(() => {
      lostRan = true;
    });
    await lock.start();
    const term = await lock.elect();
    const losing = lock.lose(new Error('connection reset'));
    expect([term.signal.aborted, lock.isLeader, lock.term, lostRan]).toEqual([true, false, null, false]);
    expect(term.signal.reason).toBeInstanceOf(TermEndedError);
    expect((term.signal.reason as Error).message).toContain('connection reset');
    await losing;
    expect(lostRan).toBe(true);
    expect(lock.state).toBe('acquiring'); // with autoReacquire (the default), following again
  });

  it('lose() with autoReacquire: false stops the lock: onStopped, and health() not live, naming why', async () => {
    const lock = new FakeLeaderLock({ autoReacquire: false });
    const events: string[] = [];
    lock.onLost(() => {
      events.push('lost');
    });
    lock.onStopped(() => {
      events.push('stopped');
    });
    await lock.start();
    await lock.elect();
    await lock.lose();
    expect(lock.state).toBe('stopped');
    expect(events).toEqual(['lost', 'stopped']);
    const health = lock.health();
    expect(health.live).toBe(false);
    expect(health.reasons.join(' ')).toContain('stopped on its own');
    expect(await lock.waitForLeadership()).toBe(false);
  });

  it('newLeader(id): onNewLeader(id) once per change of leader; while leading, it loses first (onLost before onNewLeader)', async () => {
    const lock = new FakeLeaderLock();
    const events: string[] = [];
    lock.onLost(() => {
      events.push('lost');
    });
    lock.onNewLeader((id) => {
      events.push(`newLeader ${id}`);
    });
    await lock.start();
    await lock.newLeader('b');
    await lock.newLeader('b'); // the same leader again: no callback
    await lock.newLeader('c');
    expect(events).toEqual(['newLeader b', 'newLeader c']);
    await lock.elect();
    await lock.newLeader('c'); // c leads again after this lock's term: a change
    expect(events).toEqual(['newLeader b', 'newLeader c', 'lost', 'newLeader c']);
    expect(lock.isLeader).toBe(false);
  });

  it('the controls refuse what cannot happen: elect() before start() or while leading, lose() unless leading, newLeader() with its own id or before start()', async () => {
    const lock = new FakeLeaderLock({ id: 'me' });
    await expect(lock.elect()).rejects.toThrow(/not started/);
    await expect(lock.newLeader('b')).rejects.toThrow(/not started/);
    await lock.start();
    await expect(lock.lose()).rejects.toThrow(/not leader/);
    await expect(lock.newLeader('me')).rejects.toThrow(/own id/);
    await lock.elect();
    await expect(lock.elect()).rejects.toThrow(/leader/);
    await lock.shutdown();
    await expect(lock.elect()).rejects.toThrow(/not started/);
  });

  it('onAcquireFailed and onTakeoverFence can be registered and never fire', async () => {
    const lock = new FakeLeaderLock();
    let calls = 0;
    lock.onAcquireFailed(() => {
      calls += 1;
    });
    lock.onTakeoverFence(() => {
      calls += 1;
    });
    await lock.start();
    await lock.newLeader('b');
    await lock.elect();
    await lock.lose();
    await lock.elect();
    await lock.stepDown();
    await lock.shutdown();
    expect(calls).toBe(0);
  });

  it('stepDown({ timeoutMs: 100 }) with leader work that ignores its abort: resolves at the deadline (fake clock), a ShutdownError goes to onError, the lock stops', async () => {
    const clock = new FakeClock();
    const lock = new FakeLeaderLock({ clock });
    const errors: Error[] = [];
    lock.onError((e) => {
      errors.push(e);
    });
    lock.runWhileLeader(() => new Promise(() => {})); // never returns
    await lock.start();
    await lock.elect();
    let done = false;
    const stepping = lock.stepDown({ timeoutMs: 100 }).then(() => {
      done = true;
    });
    await clock.advance(99);
    expect(done).toBe(false);
    await clock.advance(1);
    await stepping;
    expect(lock.state).toBe('stopped');
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(ShutdownError);
  });

  it('shutdown({ timeoutMs: 100 }) with leader work that ignores its abort: resolves at the deadline (fake clock), and onError gets ShutdownErrors naming runWhileLeader', async () => {
    const clock = new FakeClock();
    const lock = new FakeLeaderLock({ clock });
    const errors: Error[] = [];
    lock.onError((e) => {
      errors.push(e);
    });
    lock.runWhileLeader(() => new Promise(() => {}));
    await lock.start();
    await lock.elect();
    let done = false;
    const stopping = lock.shutdown({ timeoutMs: 100 }).then(() => {
      done = true;
    });
    await clock.advance(99);
    expect(done).toBe(false);
    await clock.advance(1);
    await stopping;
    expect(lock.state).toBe('stopped');
    expect(errors.length).toBeGreaterThan(0);
    expect(errors.every((e) => codeOf(e) === 'ERR_PGLEADERLOCK_SHUTDOWN')).toBe(true);
    expect(errors.some((e) => e.message.includes('runWhileLeader'))).toBe(true);
  });

  it('a callback that has not settled after callbackTimeoutMs (fake clock): CallbackError to onError at the deadline, health() not live while it hangs', async () => {
    const clock = new FakeClock();
    const lock = new FakeLeaderLock({ clock, callbackTimeoutMs: 1000 });
    const errors: Error[] = [];
    lock.onError((e) => {
      errors.push(e);
    });
    lock.onAcquired(() => new Promise(() => {}));
    await lock.start();
    const electing = lock.elect(); // resolves once the hung callback is past its deadline
    await clock.advance(999);
    expect(errors).toEqual([]);
    expect(lock.health().live).toBe(true);
    await clock.advance(1);
    await electing;
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(CallbackError);
    expect(codeOf(errors[0])).toBe('ERR_PGLEADERLOCK_CALLBACK_TIMEOUT');
    expect(lock.health().live).toBe(false);
  });

  it('handoverTo(id): refused (ERR_PGLEADERLOCK_HANDOVER, nothing changes) unless leading, or to its own id; otherwise onReleased then onNewLeader(id), and it follows', async () => {
    const lock = new FakeLeaderLock({ id: 'me' });
    const events: string[] = [];
    lock.onReleased(() => {
      events.push('released');
    });
    lock.onNewLeader((id) => {
      events.push(`newLeader ${id}`);
    });
    await expect(lock.handoverTo('b')).rejects.toMatchObject({ code: 'ERR_PGLEADERLOCK_HANDOVER' });
    await lock.start();
    await expect(lock.handoverTo('b')).rejects.toMatchObject({ code: 'ERR_PGLEADERLOCK_HANDOVER' });
    const term = await lock.elect();
    await expect(lock.handoverTo('me')).rejects.toMatchObject({ code: 'ERR_PGLEADERLOCK_HANDOVER' });
    expect([lock.isLeader, term.signal.aborted]).toEqual([true, false]);
    await lock.handoverTo('b');
    expect(term.signal.aborted).toBe(true);
    expect(events).toEqual(['released', 'newLeader b']);
    expect(lock.state).toBe('follower');
  });

  it('handoverTo(id) with leader work that ignores its abort: past callbackTimeoutMs (fake clock) it rejects with ERR_PGLEADERLOCK_HANDOVER, a ShutdownError goes to onError, the lock stops', async () => {
    const clock = new FakeClock();
    const lock = new FakeLeaderLock({ clock, callbackTimeoutMs: 300 });
    const errors: Error[] = [];
    lock.onError((e) => {
      errors.push(e);
    });
    lock.runWhileLeader(() => new Promise(() => {}));
    await lock.start();
    await lock.elect();
    const outcome = lock.handoverTo('b').then(
      () => null,
      (e: unknown) => e,
    );
    await clock.advance(299);
    expect(lock.state).toBe('releasing');
    await clock.advance(1);
    expect(await outcome).toMatchObject({ code: 'ERR_PGLEADERLOCK_HANDOVER' });
    expect(lock.state).toBe('stopped');
    expect(errors.map((e) => e.name)).toEqual(['ShutdownError']);
  });

  it('start() during a shutdown starts again once that shutdown is over', async () => {
    const lock = new FakeLeaderLock();
    let release: () => void = () => {};
    const released = new Promise<void>((r) => {
      release = r;
    });
    lock.runWhileLeader(async (term) => {
      await new Promise((r) => term.signal.addEventListener('abort', r, { once: true }));
      await released; // winding down until the test lets it return
    });
    await lock.start();
    await lock.elect();
    const stopping = lock.shutdown();
    const starting = lock.start();
    expect(lock.state).toBe('releasing');
    release();
    await stopping;
    await starting;
    expect(lock.state).toBe('acquiring');
    await lock.shutdown();
  });

  it('options are checked: an unknown key, a bad callbackTimeoutMs or autoReacquire throw, naming them', () => {
    expect(() => new FakeLeaderLock({ timeoutMs: 1 } as never)).toThrow(/"timeoutMs"/);
    expect(() => new FakeLeaderLock({ callbackTimeoutMs: -1 })).toThrow(/callbackTimeoutMs/);
    expect(() => new FakeLeaderLock({ autoReacquire: 'yes' as never })).toThrow(/autoReacquire/);
  });
});

describe('FakePartitionedLeadership', () => {
  it('assign() resolves once onAssigned has run for each; revoke() once the runs have returned and onRevoked has run', async () => {
    const workers = new FakePartitionedLeadership({ partitions: 4 });
    const events: string[] = [];
    workers.onAssigned((p) => {
      events.push(`assigned ${p}`);
    });
    workers.onRevoked((p, reason) => {
      events.push(`revoked ${p} ${reason}`);
    });
    workers.runForEach(async (p, term) => {
      await new Promise((r) => term.signal.addEventListener('abort', r, { once: true }));
      await flush(2);
      events.push(`returned ${p}`);
    });
    await workers.start();
    await workers.assign([0, 1]);
    expect(events).toEqual(['assigned 0', 'assigned 1']);
    expect([...workers.owned]).toEqual([0, 1]);
    await workers.revoke([1], 'lost');
    expect(events.slice(2).sort()).toEqual(['returned 1', 'revoked 1 lost']);
    expect([...workers.owned]).toEqual([0]);
    await workers.shutdown();
    expect(events).toContain('revoked 0 shutdown');
    expect(workers.owned.size).toBe(0);
  });

  it('revoke() waits for a run that ignores its abort up to drainTimeoutMs (fake clock), not longer', async () => {
    const clock = new FakeClock();
    const workers = new FakePartitionedLeadership({ partitions: 2, clock, drainTimeoutMs: 500 });
    workers.runForEach(() => new Promise(() => {}));
    await workers.start();
    await workers.assign([0]);
    let done = false;
    const revoking = workers.revoke([0], 'rebalance').then(() => {
      done = true;
    });
    await clock.advance(499);
    expect(done).toBe(false);
    await clock.advance(1);
    await revoking;
    expect(workers.owned.size).toBe(0);
  });

  it('the controls refuse what cannot happen: assign() before start(), twice, or out of range; revoke() of a partition not owned, or with an unknown reason', async () => {
    const workers = new FakePartitionedLeadership({ partitions: 4 });
    await expect(workers.assign([0])).rejects.toThrow(/not started/);
    await workers.start();
    await expect(workers.assign([4])).rejects.toThrow(RangeError);
    await expect(workers.assign([1, 1])).rejects.toThrow(/twice/);
    await workers.assign([0]);
    await expect(workers.assign([0])).rejects.toThrow(/owned already/);
    await expect(workers.revoke([1], 'lost')).rejects.toThrow(/not owned/);
    await expect(workers.revoke([0], 'gone' as never)).rejects.toThrow(/reason/);
    await workers.shutdown();
  });

  it('waitForBalance(): true once started (the test decides the share), false after shutdown', async () => {
    const workers = new FakePartitionedLeadership({ partitions: 4 });
    const waiting = workers.waitForBalance({ timeoutMs: 1000 });
    await workers.start();
    expect(await waiting).toBe(true);
    expect(await workers.waitForBalance()).toBe(true);
    const later = workers.waitForBalance({ timeoutMs: 1000 });
    await workers.shutdown();
    expect(await workers.waitForBalance({ timeoutMs: 10 })).toBe(false);
    expect(await later).toBe(true); // it was balanced when asked
  });

  it('options are checked: partitions required, an unknown key throws', () => {
    expect(() => new FakePartitionedLeadership({} as never)).toThrow(/partitions/);
    expect(() => new FakePartitionedLeadership({ partitions: 2, partition: 1 } as never)).toThrow(
      /"partition"/,
    );
  });
});

describe('docs/testing-your-code.md', () => {
  const root = path.resolve(import.meta.dirname, '../..');
  it.each(['examples/outbox.ts', 'examples/outbox.test.ts'])('quotes %s verbatim', (file) => {
    const doc = fs.readFileSync(path.join(root, 'docs/testing-your-code.md'), 'utf8');
    expect(doc).toContain(fs.readFileSync(path.join(root, file), 'utf8').trim());
  });
});
