/**
 * The spread of 100 candidates' reconnects after a server restart, on the unit tests' fake
 * server and clock (simulated time: no real server, so the figures are the lock's own
 * scheduling). 100 wait-mode candidates (one leader, 99 queued) run for 65 s; then every
 * session is killed and connections are refused for DOWN_MS; then the server accepts again.
 * Prints, per candidate, when its first successful connection after the restart came
 * (from the moment the server accepted again), the attempts made at the moment of the loss,
 * and the busiest 10 ms of connection attempts after it. `npx tsx bench/reconnect-spread.ts [downMs] [seed]` (docs/safety.md).
 */
import { LeaderLock } from '../src/index.js';
import { FakeClock, FakeDb } from '../test/unit/fakes.js';

const N = 100;
const RUN_BEFORE_MS = 65_000;
const DOWN_MS = Number(process.argv[2] ?? 2000);
let seed = Number(process.argv[3] ?? 1);
// Math.random seeded (mulberry32), so a run is replayable: the default strategy draws from it
Math.random = () => {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};

const clock = new FakeClock();
const db = new FakeDb(clock);
const attempts: number[][] = Array.from({ length: N }, () => []);
const locks = Array.from({ length: N }, (_, i) => {
  const lock = new LeaderLock({
    key1: 1,
    key2: 2,
    id: `c${i}`,
    acquireMode: 'wait',
    clock,
    takeoverDelayMs: 0,
    closeTimeoutMs: 100,
    connect: () => {
      attempts[i]?.push(clock.now());
      return db.connect();
    },
  });
  lock.onError(() => {});
  return lock;
});

for (const lock of locks) await lock.start();
await clock.advance(RUN_BEFORE_MS);
const lostAt = clock.now();
db.connectBehaviour = 'error';
for (const c of db.open) c.kill();
await clock.advance(DOWN_MS);
db.connectBehaviour = 'normal';
const upAt = clock.now();
await clock.advance(40_000);

const after = attempts.map((a) => (a.find((t) => t >= upAt) ?? Number.NaN) - upAt);
const sorted = [...after].sort((a, b) => a - b);
const q = (p: number): number => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] as number;
const during = attempts.map((a) => a.filter((t) => t >= lostAt && t < upAt).length);
// the busiest 10 ms after the moment of the loss (at that moment every candidate that
// reconnects at once tries, and is refused by the server that is down)
const all = attempts.flat().filter((t) => t > lostAt);
let peak = 0;
for (const t of all) peak = Math.max(peak, all.filter((u) => u >= t && u < t + 10).length);
const atLoss = attempts.flat().filter((t) => t === lostAt).length;
const leaders = locks.filter((l) => l.isLeader).length;
console.log(
  JSON.stringify({
    candidates: N,
    downMs: DOWN_MS,
    reconnectAfterUpMs: { min: sorted[0], p50: q(0.5), p90: q(0.9), max: sorted.at(-1) },
    spreadMs: (sorted.at(-1) as number) - (sorted[0] as number),
    distinctReconnectTimes: new Set(after).size,
    attemptsWhileDown: { min: Math.min(...during), max: Math.max(...during) },
    attemptsAtTheLoss: atLoss,
    busiest10msAttemptsAfter: peak,
    leaders,
  }),
);
await Promise.all(locks.map((l) => l.shutdown()));
