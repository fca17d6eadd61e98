/** The timings every simulated scenario draws (lock and partition scenarios alike). */
import type { NetProfile } from './net.js';
import type { Random } from './random.js';

/**
 * The timings both kinds of scenario draw, in this order (a seed's draws must not move: older
 * seeds replay byte-identically): the health interval, the query timeout, the network's
 * delays, and how long work takes to stop after its abort.
 */
export function drawTimings(rng: Random): {
  healthIntervalMs: number;
  queryTimeoutMs: number;
  net: NetProfile;
  drainMaxMs: number;
} {
  const healthIntervalMs = rng.pick([100, 200, 500]);
  const queryTimeoutMs = rng.pick([150, 300, 500]);
  const spikeP = rng.pick([0, 0, 0.002, 0.02]);
  const net: NetProfile = {
    baseMs: rng.pick([0.3, 1, 3]),
    spikeP,
    spikeMs: spikeP === 0 ? 0 : rng.pick([10, 30, Math.floor(queryTimeoutMs / 3)]),
  };
  const drainMaxMs = rng.pick([0, 5, 30]);
  return { healthIntervalMs, queryTimeoutMs, net, drainMaxMs };
}
