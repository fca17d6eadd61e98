/**
 * Terms (src/partitions/terms.ts) on a fake clock: a partition taken under the takeover
 * delay opens when its delay ends, or at once when a proof of drain ends it (endDelay); a
 * proof that arrives after the delay ended, for a partition no longer held, or twice,
 * changes nothing; the lease gates every opening.
 */
import { describe, expect, it } from 'vitest';
import { Callbacks } from '../../src/core/callbacks.js';
import { type PartitionCallbackMap, Terms } from '../../src/partitions/terms.js';
import { FakeClock, flush } from './fakes.js';

const quiet = { debug() {}, info() {}, warn() {}, error() {} };

function terms(leaseValid = () => true) {
  const clock = new FakeClock();
  const callbacks = new Callbacks<PartitionCallbackMap>(quiet, clock, 1000);
  const assigned: number[] = [];
  callbacks.add('assigned', (p: number) => {
    assigned.push(p);
  });
  const t = new Terms({ name: 'n', id: 'w' }, 1000, quiet, clock, callbacks, { valid: leaseValid });
  return { t, clock, assigned };
}

describe('Terms: the takeover delay and the proof of drain', () => {
  it('a delayed partition opens when its delay ends; a proof of drain opens it at once, and the delay’s timer is gone', async () => {
    const { t, clock, assigned } = terms();
    t.open([1, 2], 250, null);
    await clock.advance(100);
    expect(t.owned()).toEqual(new Set());
    t.endDelay([1]);
    await flush();
    expect(t.owned()).toEqual(new Set([1]));
    expect(assigned).toEqual([1]);
    expect(clock.pending).toBe(1); // only 2's delay is left
    await clock.advance(150);
    expect(t.owned()).toEqual(new Set([1, 2]));
    expect(assigned).toEqual([1, 2]);
  });

  it('changes nothing: a proof after the delay ended, a duplicate, a partition not held or revoked', async () => {
    const { t, clock, assigned } = terms();
    t.open([1, 2], 250, null);
    await clock.advance(250);
    t.endDelay([1, 1, 3]); // 1 is open already; 3 was never held
    t.open([4], 250, null);
    await t.revoke([4], 'rebalance');
    t.endDelay([4]); // revoked under its delay
    await flush();
    expect(assigned).toEqual([1, 2]);
    expect(t.owned()).toEqual(new Set([1, 2]));
    expect(t.termOf(4)).toBeNull();
  });

  it('a proof while the lease is not valid opens nothing (lapsed), until the lease is renewed', async () => {
    let valid = false;
    const { t, assigned } = terms(() => valid);
    t.open([1], 250, null);
    t.endDelay([1]);
    await flush();
    expect(assigned).toEqual([]);
    valid = true;
    t.reopenLapsed();
    await flush();
    expect(assigned).toEqual([1]);
  });
});

describe('Terms: a revoke that waits for a run', () => {
  it('leaves no timer once the run has returned within drainTimeoutMs (a shutdown leaves none behind)', async () => {
    const { t, clock } = terms();
    let finish = (): void => {};
    t.addWork(
      (_p, term) =>
        new Promise<void>((resolve) => {
          term.signal.addEventListener('abort', () => {
            finish = resolve;
          });
        }),
    );
    t.open([1], 0, null);
    await clock.advance(0);
    expect(t.owned()).toEqual(new Set([1]));
    const revoked = t.revokeAll('shutdown');
    await flush();
    finish(); // the run returns well within the 1000 ms drain timeout
    expect(await revoked).toEqual([1]);
    expect(clock.pending).toBe(0);
  });
});

describe('Terms: settled() after a loss', () => {
  it('waits for the runs of terms revoked earlier without waiting (a session lost just before a shutdown)', async () => {
    const { t, clock } = terms();
    let finish = (): void => {};
    t.addWork(
      (_p, term) =>
        new Promise<void>((resolve) => {
          term.signal.addEventListener('abort', () => {
            finish = resolve;
          });
        }),
    );
    t.open([1], 0, null);
    await clock.advance(0);
    void t.revokeAll('lost'); // as the member session's death does
    await flush();
    let settled = false;
    void t.settled().then(() => {
      settled = true;
    });
    await flush();
    expect(settled).toBe(false); // the run has not returned
    finish();
    await flush();
    expect(settled).toBe(true);
    expect(clock.pending).toBe(0);
  });
});
