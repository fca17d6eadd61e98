/**
 * How early a timer may fire, measured on `performance.now()`. libuv arms and fires timers on
 * its loop clock: whole milliseconds, read from CLOCK_MONOTONIC_COARSE where that clock has
 * 1 ms resolution (Linux), and cached for the loop iteration. So a 300 ms timer can fire
 * 299.x ms after `performance.now()` read the moment it was armed (299.88 ms seen in CI).
 * Lower bounds on a span that a timer ends allow this much; what they guard against (a
 * delay skipped, a deadline cut short) is far larger.
 */
export const TIMER_EARLY_MS = 2;
