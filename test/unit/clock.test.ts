/**
 * The system clock (clock.ts): a deadline computed as `until - now()` can come out a hair
 * below 0. Node 26 prints a TimeoutNegativeWarning on stderr for such a timer (seen in CI
 * from the partition watch's re-sent cancels); the clock clamps it to 0. Node 20 and 22 print
 * none either way: this test can fail only on the newer Node lines the compat suite runs
 * (checked by hand on 26.10.0: it fails without the clamp).
 */
import { expect, it } from 'vitest';
import { systemClock } from '../../src/core/clock.js';

it('systemClock.setTimeout with a slightly negative delay fires, and Node prints no TimeoutNegativeWarning', async () => {
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(w.name);
  process.on('warning', onWarning);
  try {
    await new Promise<void>((resolve) => systemClock.setTimeout(resolve, -0.005));
    await new Promise((r) => setImmediate(r)); // warnings are emitted on the next tick
  } finally {
    process.off('warning', onWarning);
  }
  expect(warnings.filter((n) => n === 'TimeoutNegativeWarning')).toEqual([]);
});
