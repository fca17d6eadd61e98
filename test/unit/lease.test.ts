/**
 * The lease on its own (src/core/lease.ts), on the fake clock: when it lapses, what renews
 * it, and the renewal loop while work drains. The clock starts away from zero so that a
 * timer armed at the wrong moment (from zero, or `until + now`) shows.
 */
import { describe, expect, it } from 'vitest';
import { Lease } from '../../src/core/lease.js';
import { FakeClock } from './fakes.js';

/** Timers fire up to 2 ms before their delay (never below 1 ms), as Node's can. */
class EarlyClock extends FakeClock {
  override setTimeout(fn: () => void, ms: number): unknown {
    return super.setTimeout(fn, ms > 2 ? ms - 2 : Math.min(ms, 1));
  }
}

async function leaseAt(start: number) {
  const clock = new FakeClock();
  await clock.advance(start);
  const lapses: number[] = [];
  const lease = new Lease(clock, () => lapses.push(clock.now()));
  return { clock, lease, lapses };
}

describe('Lease', () => {
  it('is valid until its end, not at it, and calls onLapse once, at the end', async () => {
    const { clock, lease, lapses } = await leaseAt(1000);
    lease.set(1100);
    expect(lease.valid()).toBe(true);
    await clock.advance(99);
    expect([lease.valid(), lapses]).toEqual([true, []]);
    await clock.advance(1);
    expect([lease.valid(), lapses]).toEqual([false, [1100]]);
    await clock.advance(5000);
    expect(lapses).toEqual([1100]);
    expect(clock.pending).toBe(0);
  });

  it('a renewal moves the lapse to the new end (the old timer is gone)', async () => {
    const { clock, lease, lapses } = await leaseAt(1000);
    lease.set(1100);
    await clock.advance(50);
    lease.set(1500);
    expect(clock.pending).toBe(1);
    await clock.advance(449);
    expect([lease.valid(), lapses, lease.until]).toEqual([true, [], 1500]);
    await clock.advance(1);
    expect(lapses).toEqual([1500]);
  });

  it('set(null) ends it at once without a lapse, and `last` keeps the last end', async () => {
    const { clock, lease, lapses } = await leaseAt(1000);
    lease.set(1100);
    lease.set(null);
    expect([lease.valid(), lease.until, lease.last, clock.pending]).toEqual([false, null, 1100, 0]);
    await clock.advance(1000);
    expect(lapses).toEqual([]);
  });

  it('an end already past lapses on the next turn; an infinite end never lapses and arms no timer', async () => {
    const { clock, lease, lapses } = await leaseAt(1000);
    lease.set(900);
    expect(lease.valid()).toBe(false);
    await clock.advance(0);
    expect(lapses).toEqual([1000]);
    lease.set(Number.POSITIVE_INFINITY);
    expect([lease.valid(), clock.pending]).toEqual([true, 0]);
    clock.freeze(1e9);
    expect(lease.valid()).toBe(true);
  });

  it('a frozen process is out of its lease the moment it wakes, before its timer runs', async () => {
    const { clock, lease, lapses } = await leaseAt(1000);
    lease.set(1100);
    clock.freeze(200);
    expect([lease.valid(), lapses]).toEqual([false, []]);
    await clock.advance(0);
    expect(lapses).toEqual([1200]);
  });

  it("a timer that fires early (as Node's can, from the loop's cached time) still ends in one lapse at the end", async () => {
    const clock = new EarlyClock();
    await clock.advance(1000);
    const lapses: number[] = [];
    const lease = new Lease(clock, () => lapses.push(clock.now()));
    lease.set(1100);
    await clock.advance(97);
    expect(lapses).toEqual([]);
    await clock.advance(3);
    expect([lease.valid(), lapses]).toEqual([false, [1100]]);
    await clock.advance(1000);
    expect([lapses, clock.pending]).toEqual([[1100], 0]);
  });

  describe('renewWhile', () => {
    it('checks every interval while the work drains, renews on a held result only, and returns the work value', async () => {
      const { clock, lease, lapses } = await leaseAt(1000);
      lease.set(1150);
      let finish: (v: string) => void = () => {};
      const drain = new Promise<string>((r) => {
        finish = r;
      });
      const checks: number[] = [];
      const answers: (number | null)[] = [1350, null, 1500];
      const out = lease.renewWhile(drain, 100, async () => {
        checks.push(clock.now());
        return answers.shift() ?? null;
      });
      await clock.advance(100);
      expect([checks, lease.until]).toEqual([[1100], 1350]);
      await clock.advance(100);
      expect([checks, lease.until]).toEqual([[1100, 1200], 1350]); // null: left to run out
      await clock.advance(100);
      expect([checks, lease.until, lapses]).toEqual([[1100, 1200, 1300], 1500, []]);
      finish('drained');
      await expect(out).resolves.toBe('drained');
      await clock.advance(1000);
      expect(checks).toHaveLength(3); // no check after the work ended
      expect(lapses).toEqual([1500]);
    });

    it('work that ends before the first interval is never checked and leaves no timer of its own', async () => {
      const { clock, lease } = await leaseAt(1000);
      const checks: number[] = [];
      const out = lease.renewWhile(Promise.resolve(7), 100, async () => {
        checks.push(clock.now());
        return 2000;
      });
      await expect(out).resolves.toBe(7);
      expect([checks, clock.pending]).toEqual([[], 0]);
    });
  });
});
