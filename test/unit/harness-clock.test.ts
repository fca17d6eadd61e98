/**
 * The harness's waits keep their deadlines on the monotonic clock: this machine's wall clock
 * steps (CI run AL, 2026-12-03: forward 2.6 s and 11 s within seconds, read from /proc/stat's
 * jiffies against `date`), and a deadline on `Date.now()` then ended a 5 s wait after 2.4 s
 * (contract › an onAssigned callback that never settles).
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { eventually } from '../harness/db.js';

afterEach(() => {
  vi.restoreAllMocks();
});

describe('eventually', () => {
  it('a wall-clock step forward of 10 s does not end its 5 s wait: the condition that turns true 300 ms later is seen', async () => {
    const wall = Date.now;
    let step = 0;
    vi.spyOn(Date, 'now').mockImplementation(() => wall() + step);
    let ready = false;
    setTimeout(() => {
      step = 10_000;
    }, 50);
    setTimeout(() => {
      ready = true;
    }, 300);
    await expect(eventually(() => ready, { timeoutMs: 5000, intervalMs: 10 })).resolves.toBeUndefined();
  });
});
