/** The shared baseline check (test/harness/baseline.ts) fails when it should, and says by how much. */
import { describe, expect, it } from 'vitest';
import { bareTimer, expectNearBaseline, interleaved } from '../harness/baseline.js';

describe('expectNearBaseline', () => {
  it('p50s: passes within baseline × ratio + overMs, fails past it with both figures, the difference and the ratio', () => {
    expect(
      expectNearBaseline('x', { subject: [12, 14, 30], baseline: [5, 6, 7] }, { overMs: 10 }).difference,
    ).toBe(8);
    expect(() =>
      expectNearBaseline('x', { subject: [20, 21, 22], baseline: [5, 6, 7] }, { overMs: 10 }),
    ).toThrow(
      /x \(p50\): 21\.0 ms against a baseline of 6\.0 ms \(difference \+15\.0 ms, ratio 3\.50×; allowed 10 ms over it: 16\.0 ms\)/,
    );
    expect(() => expectNearBaseline('x', { subject: 20, baseline: 6 }, { ratio: 3, overMs: 1 })).toThrow(
      /allowed 3× \+ 1 ms/,
    );
    expectNearBaseline('x', { subject: 20, baseline: 6 }, { ratio: 3, overMs: 2 });
  });

  it("'each': one round over its own baseline fails, naming the round", () => {
    expect(() =>
      expectNearBaseline(
        'x',
        { subject: [10, 10, 60], baseline: [5, 5, 5] },
        { overMs: 40, compare: 'each' },
      ),
    ).toThrow(/x \(round 3\): 60\.0 ms/);
  });

  it("'paired': a quantile of the rounds' differences; a round that waited behind load in both passes", () => {
    const baseline = [20, 20, 200, 20, 20];
    expectNearBaseline('x', { subject: [25, 24, 210, 26, 23], baseline }, { overMs: 10, compare: 'paired' });
    expect(() =>
      expectNearBaseline(
        'x',
        { subject: [45, 44, 210, 46, 43], baseline },
        { overMs: 10, compare: 'paired' },
      ),
    ).toThrow(/p50 of the rounds' differences \+24\.0 ms/);
    const twenty = Array.from({ length: 20 }, () => 20);
    const slow = [...Array.from({ length: 18 }, () => 21), 100, 100]; // two slow rounds: the 19th smallest is slow
    expect(() =>
      expectNearBaseline(
        'x',
        { subject: slow, baseline: twenty },
        { overMs: 15, compare: 'paired', quantile: 0.95 },
      ),
    ).toThrow(/quantile 0\.95/);
    const one = [...Array.from({ length: 19 }, () => 21), 100]; // one may wait behind something
    expectNearBaseline(
      'x',
      { subject: one, baseline: twenty },
      { overMs: 15, compare: 'paired', quantile: 0.95 },
    );
    expect(() => expectNearBaseline('x', { subject: [1, 2], baseline: [1] }, { compare: 'paired' })).toThrow(
      /2 samples against 1/,
    );
  });

  it('interleaved alternates which goes first; bareTimer measures a timer of that length', async () => {
    const order: string[] = [];
    const r = await interleaved(
      3,
      async (i) => {
        order.push(`b${i}`);
        return 1;
      },
      async (i) => {
        order.push(`s${i}`);
        return 2;
      },
    );
    expect(order).toEqual(['b0', 's0', 's1', 'b1', 'b2', 's2']);
    expect(r).toEqual({ subject: [2, 2, 2], baseline: [1, 1, 1] });
    expect(await bareTimer(5)).toBeGreaterThanOrEqual(4);
  });
});
