/**
 * Claims of docs/observability.md checked with the fake connection and the manual clock:
 * the blocked-loop threshold and its 10 s report window ("Probes"), and the channels that
 * publish only when something subscribes ("node:diagnostics_channel"). The logger that is
 * silent by default is checked in a process of its own (test/integration/logging-silent.test.ts).
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import { describe, expect, it, type MockInstance, vi } from 'vitest';
import { BLOCK_REPORTED_MS, HEARTBEAT_MS, LOOP_BLOCKED_MS, Vitals } from '../../src/core/vitals.js';
import { CHANNELS, FixedInterval, LockState } from '../../src/index.js';
import { FakeClock, FakeDb, flush } from './fakes.js';
import { makeLock, startLeader } from './helpers.js';

const reasonFor = (ms: number): string =>
  `the event loop was blocked for at least ${ms} ms (in the last 10 s)`;

describe('a blocked event loop (docs/observability.md, "Probes": `live`)', () => {
  it('the documented figures are the code’s: a 500 ms heartbeat, 2 s late, reported for 10 s', () => {
    expect([HEARTBEAT_MS, LOOP_BLOCKED_MS, BLOCK_REPORTED_MS]).toEqual([500, 2000, 10_000]);
  });

  it('Vitals: a heartbeat 1999 ms late is no block; 2000 ms late is, from the beat that saw it until 10 s later', async () => {
    const clock = new FakeClock();
    const v = new Vitals(clock);
    v.start();
    await clock.advance(HEARTBEAT_MS); // a beat ran: the next is due in 500 ms
    clock.freeze(HEARTBEAT_MS + 1999); // the loop blocked: the next beat runs 1999 ms late
    expect(v.blockedMs).toBeNull();
    await clock.advance(0); // it runs
    expect(v.blockedMs).toBeNull();
    await clock.advance(20_000); // beats on time for 20 s: still nothing
    expect(v.blockedMs).toBeNull();

    clock.freeze(HEARTBEAT_MS + 2000); // 2000 ms late
    expect(v.blockedMs).toBe(2000); // a probe during the block (if one could run) sees it
    await clock.advance(0); // the beat runs as the loop wakes: the block ends now
    expect(v.blockedMs).toBe(2000);
    await clock.advance(BLOCK_REPORTED_MS - 1);
    expect(v.blockedMs).toBe(2000);
    await clock.advance(1);
    expect(v.blockedMs).toBeNull();
    v.stop();
  });

  it('lock.health(): a 2499 ms block that begins right after a beat is not reported; a 2500 ms one is, and then live stays false for 10 s after the loop woke, not 1 ms more', async () => {
    const h = makeLock();
    await startLeader(h); // the heartbeat started at t = 0
    await h.clock.advance(HEARTBEAT_MS); // a beat ran at t = 500
    h.clock.freeze(2499);
    await h.clock.advance(0); // the beat, 1999 ms late
    expect(h.lock.health()).toMatchObject({ live: true, ready: true, reasons: [] });

    await h.clock.advance(HEARTBEAT_MS); // in step again: a beat just ran
    h.clock.freeze(2500);
    await h.clock.advance(0); // the beat, 2000 ms late
    const woke = h.clock.now();
    expect(h.lock.health()).toMatchObject({ live: false, ready: false, reasons: [reasonFor(2000)] });
    await h.clock.advance(9000); // 9 s later
    expect(h.lock.health()).toMatchObject({ live: false, reasons: [reasonFor(2000)] });
    await h.clock.advance(BLOCK_REPORTED_MS - 1 - 9000);
    expect(h.clock.now() - woke).toBe(BLOCK_REPORTED_MS - 1);
    expect(h.lock.health().live).toBe(false);
    await h.clock.advance(1); // 10 s after the loop woke
    expect(h.lock.health()).toMatchObject({ live: true, ready: true, reasons: [] });
    expect(h.lock.state).toBe(LockState.LEADER); // the fake server kept it leading meanwhile
    await h.lock.shutdown();
  });

  it('lock.health(): a block that begins late in the heartbeat’s period needs only 2–2.5 s: 2001 ms from 499 ms after a beat is reported, 2000 ms is not', async () => {
    const h = makeLock();
    await startLeader(h);
    await h.clock.advance(HEARTBEAT_MS); // a beat at t = 500; the next is due at 1000
    await h.clock.advance(499);
    h.clock.freeze(2000); // the beat runs 1999 ms late
    await h.clock.advance(0);
    expect(h.lock.health()).toMatchObject({ live: true, reasons: [] });

    await h.clock.advance(HEARTBEAT_MS); // a beat just ran
    await h.clock.advance(499);
    h.clock.freeze(2001); // the beat runs 2000 ms late
    await h.clock.advance(0);
    expect(h.lock.health()).toMatchObject({ live: false, reasons: [reasonFor(2000)] });
    await h.lock.shutdown();
  });
});

/** Every channel the library publishes on, with a spy on its `publish` that still delivers. */
function spyOnChannels(): { publishes: () => Record<string, number>; restore: () => void } {
  const spies = new Map<string, MockInstance>();
  for (const [kind, name] of Object.entries(CHANNELS)) {
    const ch = diagnosticsChannel.channel(name);
    // Node swaps a channel's prototype when it gains or loses subscribers: call whichever
    // publish the channel has now, so that subscribers still get the message
    const publish = ch.publish;
    const spy = vi.spyOn(ch, 'publish').mockImplementation(function (this: typeof ch, message: unknown) {
      (Object.getPrototypeOf(this) as { publish: typeof publish }).publish.call(this, message);
    });
    spies.set(kind, spy);
  }
  return {
    publishes: () => Object.fromEntries([...spies].map(([kind, spy]) => [kind, spy.mock.calls.length])),
    restore: () => {
      for (const [kind, spy] of spies) {
        spy.mockRestore();
        // publish lives on the prototype: leave no own property behind
        const ch = diagnosticsChannel.channel(CHANNELS[kind as keyof typeof CHANNELS]);
        if (Object.hasOwn(ch, 'publish')) Reflect.deleteProperty(ch, 'publish');
      }
    },
  };
}

/** A lock that leads, steps down, leads again, loses its session, fails to connect, and shuts down. */
async function everyKindOfEvent(): Promise<string[]> {
  const clock = new FakeClock();
  const db = new FakeDb(clock);
  const h = makeLock({ db, retryStrategy: new FixedInterval({ intervalMs: 100 }) });
  await startLeader(h); // state, acquired
  await h.lock.stepDown(); // state, released
  await h.clock.advance(100); // leads again
  expect(h.lock.state).toBe(LockState.LEADER);
  h.db.connectBehaviour = 'error';
  h.db.last.kill(); // lost (no grace), then a failed connection: error
  await h.clock.advance(50);
  await h.lock.shutdown();
  await flush();
  return h.events;
}

describe('node:diagnostics_channel: published only when something subscribes (docs/observability.md)', () => {
  it('with no subscriber, a lock that acquires, releases, loses, errs and stops calls publish on no channel; a subscriber to one channel turns on that channel alone', async () => {
    const names = Object.values(CHANNELS);
    // another file of this worker process may not have left a subscriber behind
    expect(names.filter((n) => diagnosticsChannel.channel(n).hasSubscribers)).toEqual([]);
    const spied = spyOnChannels();
    try {
      const events = await everyKindOfEvent();
      // the lock did report each of those to its callbacks…
      expect(events).toEqual(
        expect.arrayContaining(['acquired', 'released', 'lost', 'error:ConnectionError']),
      );
      // …and published none of them
      expect(spied.publishes()).toEqual({
        state: 0,
        acquired: 0,
        lost: 0,
        released: 0,
        error: 0,
        partitionAssigned: 0,
        partitionRevoked: 0,
      });

      const lost: unknown[] = [];
      const onLost = (m: unknown): void => {
        lost.push(m);
      };
      diagnosticsChannel.subscribe(CHANNELS.lost, onLost);
      try {
        await everyKindOfEvent();
      } finally {
        diagnosticsChannel.unsubscribe(CHANNELS.lost, onLost);
      }
      expect(spied.publishes()).toMatchObject({ state: 0, acquired: 0, lost: 1, released: 0, error: 0 });
      expect(lost).toEqual([expect.objectContaining({ key1: 1, key2: 2, error: expect.any(Error) })]);

      // unsubscribed: silent again
      await everyKindOfEvent();
      expect(spied.publishes()).toMatchObject({ state: 0, acquired: 0, lost: 1, released: 0, error: 0 });
    } finally {
      spied.restore();
    }
  });

  it('with a subscriber on every channel, the same run publishes each kind (the spy sees publishing when it happens)', async () => {
    const spied = spyOnChannels();
    const got: string[] = [];
    const subs = Object.entries(CHANNELS).map(([kind, name]) => {
      const fn = (): void => {
        got.push(kind);
      };
      diagnosticsChannel.subscribe(name, fn);
      return () => diagnosticsChannel.unsubscribe(name, fn);
    });
    let counts: Record<string, number>;
    try {
      await everyKindOfEvent();
      counts = spied.publishes();
    } finally {
      for (const off of subs) off();
      spied.restore();
    }
    expect(counts).toMatchObject({ acquired: 2, released: 1, lost: 1 });
    expect(counts.state).toBeGreaterThanOrEqual(8);
    expect(counts.error).toBeGreaterThanOrEqual(1);
    // every publish reached the subscriber
    for (const kind of ['state', 'acquired', 'lost', 'released', 'error']) {
      expect(got.filter((k) => k === kind)).toHaveLength(counts[kind] ?? -1);
    }
  });
});
