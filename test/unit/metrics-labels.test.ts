/** docs/observability.md, "Metrics": a named lock's samples carry its name, and its keys as well. */
import { describe, expect, it } from 'vitest';
import { LeaderLock, LockMetrics } from '../../src/index.js';

const url = 'postgres://u:p@127.0.0.1:1/x'; // never connected: the locks are not started

describe('LockMetrics labels', () => {
  it('a lock created with a name: every sample is labelled name="…" first, then lock="key1,key2"', () => {
    const lock = new LeaderLock({ connectionString: url, name: 'billing "eu"\\1' });
    using metrics = new LockMetrics(lock);
    const text = metrics.prometheus();
    const samples = text.split('\n').filter((l) => l.startsWith('pgleaderlock_'));
    expect(samples.length).toBeGreaterThan(10);
    const label = `name="billing \\"eu\\"\\\\1",lock="${lock.key1},${lock.key2}"`;
    for (const sample of samples) expect(sample).toContain(`{${label}`);
    expect(text).toContain(`pgleaderlock_is_leader{${label}} 0\n`);
    expect(lock.name).toBe('billing "eu"\\1');
  });

  it('a lock given key1/key2: labelled lock="key1,key2" only', () => {
    const lock = new LeaderLock({ connectionString: url, key1: 5, key2: -6 });
    using metrics = new LockMetrics(lock);
    const samples = metrics
      .prometheus()
      .split('\n')
      .filter((l) => l.startsWith('pgleaderlock_'));
    for (const sample of samples) expect(sample).toMatch(/\{lock="5,-6"[,}]/);
    expect(lock.name).toBeNull();
  });
});
