import { describe, expect, it } from 'vitest';
import { LeaderLock } from '../../src/index.js';

describe('keysFromName', () => {
  it('is pinned: these vectors must never change', () => {
    expect(LeaderLock.keysFromName('billing-scheduler')).toEqual(VECTORS['billing-scheduler']);
    expect(LeaderLock.keysFromName('a')).toEqual(VECTORS.a);
    expect(LeaderLock.keysFromName('nightly-report')).toEqual(VECTORS['nightly-report']);
    expect(LeaderLock.keysFromName('ünïcødé ✓')).toEqual(VECTORS['ünïcødé ✓']);
  });

  it('gives 32-bit signed integers, different for different names', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 1000; i++) {
      const [k1, k2] = LeaderLock.keysFromName(`job-${i}`);
      for (const k of [k1, k2]) {
        expect(Number.isInteger(k)).toBe(true);
        expect(k).toBeGreaterThanOrEqual(-(2 ** 31));
        expect(k).toBeLessThan(2 ** 31);
      }
      seen.add(`${k1},${k2}`);
    }
    expect(seen.size).toBe(1000);
  });

  it('the constructor takes name instead of keys, and rejects both or neither', () => {
    const lock = new LeaderLock({
      name: 'billing-scheduler',
      connectionString: 'postgres://x@127.0.0.1:1/db',
    });
    expect([lock.key1, lock.key2]).toEqual(VECTORS['billing-scheduler']);
    expect(() => new LeaderLock({ name: 'x', key1: 1, key2: 2 })).toThrow(/either name or key1 and key2/);
    expect(() => new LeaderLock({ name: '' })).toThrow(/name must be a non-empty string/);
    expect(() => new LeaderLock({})).toThrow(/key1 must be an integer, received undefined/);
  });
});

/** Computed independently (Python: struct.unpack('>ii', sha256(b'pgleaderlock:' + name)[:8])). */
const VECTORS: Record<string, [number, number]> = {
  'billing-scheduler': [-1819974758, 1587610645],
  a: [1057905802, -1792016839],
  'nightly-report': [-276437935, -1328494439],
  'ünïcødé ✓': [123522171, -306929844],
};
