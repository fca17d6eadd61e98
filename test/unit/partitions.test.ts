/** The partition assignment (src/partitions/assign.ts): balanced, deterministic, stable. */
import { describe, expect, it } from 'vitest';
import { assign } from '../../src/partitions/assign.js';

const ids = (n: number, from = 0): string[] => Array.from({ length: n }, (_, i) => `worker-${from + i}`);
const owners = (a: Map<string, number[]>): Map<number, string> => {
  const out = new Map<number, string>();
  for (const [id, ps] of a) for (const p of ps) out.set(p, id);
  return out;
};
const moved = (a: Map<string, number[]>, b: Map<string, number[]>, P: number): number => {
  const oa = owners(a);
  const ob = owners(b);
  let n = 0;
  for (let p = 0; p < P; p++) if (oa.get(p) !== ob.get(p)) n++;
  return n;
};

describe('assign', () => {
  it.each([
    [1024, 8],
    [1024, 7],
    [10, 3],
    [3, 5],
    [4096, 64],
    [1, 1],
  ])('%i partitions over %i members: each exactly once, every member ⌊P/N⌋ or ⌈P/N⌉', (P, N) => {
    const a = assign(ids(N), P);
    const all = [...a.values()].flat().sort((x, y) => x - y);
    expect(all).toEqual([...Array(P).keys()]);
    for (const list of a.values()) {
      expect(list.length).toBeGreaterThanOrEqual(Math.floor(P / N));
      expect(list.length).toBeLessThanOrEqual(Math.ceil(P / N));
    }
  });

  it('is a function of the member set: order and duplicates do not matter', () => {
    const a = assign(['b', 'a', 'c'], 100);
    const b = assign(['c', 'a', 'b', 'a'], 100);
    expect(b).toEqual(a);
    expect(assign([], 10).size).toBe(0);
  });

  it('is stable: a join or a leave moves little more than one share (1024 partitions, 8 workers)', () => {
    const P = 1024;
    for (let trial = 0; trial < 5; trial++) {
      const eight = ids(8, trial * 10);
      const base = assign(eight, P);
      const joined = assign([...eight, `new-${trial}`], P);
      const left = assign(eight.slice(1), P);
      // ideal: the newcomer's 113–114, the leaver's 128
      expect(moved(base, joined, P)).toBeLessThanOrEqual(Math.ceil(1.25 * Math.ceil(P / 9)));
      expect(moved(base, left, P)).toBeLessThanOrEqual(
        Math.ceil(1.25 * (base.get(eight[0] as string)?.length ?? 0)),
      );
    }
  });
});
