/**
 * What the partition assignment costs (docs/partitions.md). A file of its own so that mutation
 * testing (vitest.stryker.config.ts), whose instrumented code is slower by design, leaves it out.
 */
import { describe, expect, it } from 'vitest';
import { assign } from '../../src/partitions/assign.js';

describe('the assignment (src/partitions/assign.ts)', () => {
  // CPU time (process.cpuUsage): what the call costs, whatever else runs on the machine's two
  // cores meanwhile (beside other test files a warm call's wall time was 1.5–40 ms)
  it('1,024 partitions over 8 members: p50 of 21 warm calls ≤ 14 ms of CPU (docs: 2–7 ms)', () => {
    const ids = Array.from({ length: 8 }, (_, i) => `host-${4000 + i}-k3j9x${i}`);
    // a membership change each call, as a join or a leave gives
    const memberships = Array.from({ length: 8 }, (_, i) => [
      ...ids.filter((_, j) => j !== i),
      `joiner-${i}`,
    ]);
    const cpuMs = (since: NodeJS.CpuUsage): number => {
      const used = process.cpuUsage(since);
      return (used.user + used.system) / 1000;
    };
    const cold = process.cpuUsage();
    assign(ids, 1024);
    const coldMs = cpuMs(cold);
    for (let i = 0; i < 10; i++) assign(memberships[i % 8] as string[], 1024); // warm up the JIT
    const cpu: number[] = [];
    const wall: number[] = [];
    for (let i = 0; i < 21; i++) {
      const c0 = process.cpuUsage();
      const t0 = performance.now();
      const a = assign(memberships[i % 8] as string[], 1024);
      wall.push(performance.now() - t0);
      cpu.push(cpuMs(c0));
      expect(a.size).toBe(8);
    }
    const p50 = (xs: number[]): number => [...xs].sort((a, b) => a - b)[10] as number;
    console.log(
      `[assign] 1,024 × 8, 21 warm calls: CPU p50 ${p50(cpu).toFixed(2)} ms (${Math.min(...cpu).toFixed(2)}–${Math.max(...cpu).toFixed(2)}), wall p50 ${p50(wall).toFixed(2)} ms (${Math.min(...wall).toFixed(2)}–${Math.max(...wall).toFixed(2)}); the first call ${coldMs.toFixed(1)} ms of CPU`,
    );
    expect(p50(cpu)).toBeLessThanOrEqual(14);
  });
});
