/**
 * Server restart recovery, wait mode against poll mode, interleaved (issue 41: "at least as
 * fast in wait mode as in poll mode at the defaults"):
 * `npx tsx bench/restart-modes.ts [trials] [--persist]`.
 *
 * Each trial, for each configuration in turn (the order rotates every round): two
 * `LeaderLock`s with the library's defaults but for `acquireMode` (and, in the last two, the
 * bench table's `FixedInterval(100)`), one leading and one following for 300 ms; then a fast
 * server restart, timed from the stop signal to the next `onAcquired` of either. Fresh locks
 * on new keys each trial, or with `--persist` one pair per configuration kept through all its
 * restarts (as `npm run bench`'s row "server restart (fast)" does). Prints p50 / p95 / max per
 * configuration, and the paired differences of each round so that the machine's drift
 * cancels out.
 */
import os from 'node:os';
import { FixedInterval, LeaderLock, type LeaderLockOptions } from '../src/index.js';
import { randomKeys } from '../test/harness/db.js';
import { startPgServer, stopServersOnSignals } from '../test/harness/pg-server.js';

const TRIALS = Number(process.argv[2] ?? 15);
/** `--persist`: each configuration's pair lives through all its restarts (as in `npm run bench`'s row). */
const PERSIST = process.argv.includes('--persist');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Config = { name: string; options: Partial<LeaderLockOptions> };
const CONFIGS: Config[] = [
  { name: 'wait (defaults)', options: { acquireMode: 'wait' } },
  { name: 'poll (defaults)', options: { acquireMode: 'poll' } },
  {
    name: 'poll, FixedInterval(100)',
    options: { acquireMode: 'poll', retryStrategy: new FixedInterval({ intervalMs: 100 }) },
  },
  {
    name: 'wait, FixedInterval(100)',
    options: { acquireMode: 'wait', retryStrategy: new FixedInterval({ intervalMs: 100 }) },
  },
];

const quantile = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))] ?? Number.NaN;
};

stopServersOnSignals();
const server = await startPgServer({});
const load0 = os
  .loadavg()
  .map((x) => x.toFixed(1))
  .join(' ');

type Pair = { a: LeaderLock; b: LeaderLock };
const pairs = new Map<string, Pair>();

async function pairFor(cfg: Config): Promise<Pair> {
  const kept = PERSIST ? pairs.get(cfg.name) : undefined;
  if (kept) return kept;
  const keys = randomKeys();
  const make = () =>
    new LeaderLock({ connectionString: server.url, ...keys, ...cfg.options } as LeaderLockOptions);
  const pair = { a: make(), b: make() };
  await pair.a.start();
  await pair.a.waitForLeadership();
  await pair.b.start();
  if (PERSIST) pairs.set(cfg.name, pair);
  return pair;
}

async function trial(cfg: Config): Promise<number> {
  const { a, b } = await pairFor(cfg);
  try {
    await Promise.race([a.waitForLeadership(), b.waitForLeadership()]);
    await sleep(300);
    const offs: (() => void)[] = [];
    const next = new Promise<number>((resolve) => {
      for (const l of [a, b]) offs.push(l.onAcquired(() => resolve(performance.now())));
    });
    const t0 = performance.now();
    await server.restart('fast');
    const at = await next;
    for (const off of offs) off();
    return at - t0;
  } finally {
    if (!PERSIST) await Promise.all([a.shutdown({ timeoutMs: 5000 }), b.shutdown({ timeoutMs: 5000 })]);
  }
}

const figures = new Map<string, number[]>(CONFIGS.map((c) => [c.name, []]));
for (let i = 0; i < TRIALS; i++) {
  const order = CONFIGS.map((_, k) => CONFIGS[(k + i) % CONFIGS.length] as Config);
  for (const cfg of order) figures.get(cfg.name)?.push(await trial(cfg));
}
for (const { a, b } of pairs.values())
  await Promise.all([a.shutdown({ timeoutMs: 5000 }), b.shutdown({ timeoutMs: 5000 })]);
await server.stop();

console.log(
  `server restart (fast), stop → the next onAcquired, ${TRIALS} trials each, interleaved, ${PERSIST ? 'each pair kept through its restarts' : 'fresh locks each trial'}; ${os.cpus().length} × ${os.cpus()[0]?.model.trim()}, node ${process.version}; load average ${load0} → ${os
    .loadavg()
    .map((x) => x.toFixed(1))
    .join(' ')}`,
);
console.log('| configuration | p50 ms | p95 ms | max ms |');
console.log('| --- | --- | --- | --- |');
for (const [name, xs] of figures) {
  console.log(
    `| ${name} | ${quantile(xs, 0.5).toFixed(1)} | ${quantile(xs, 0.95).toFixed(1)} | ${Math.max(...xs).toFixed(1)} |`,
  );
}
for (const [mine, other] of [
  ['wait (defaults)', 'poll (defaults)'],
  ['wait (defaults)', 'poll, FixedInterval(100)'],
  ['wait, FixedInterval(100)', 'poll, FixedInterval(100)'],
]) {
  const wait = figures.get(mine as string) ?? [];
  const poll = figures.get(other as string) ?? [];
  const diffs = wait.map((w, k) => w - (poll[k] ?? Number.NaN));
  console.log(
    `${mine} − ${other}, paired by round: p50 ${quantile(diffs, 0.5).toFixed(1)} ms (p25 ${quantile(diffs, 0.25).toFixed(1)}, p75 ${quantile(diffs, 0.75).toFixed(1)}); the first faster in ${diffs.filter((d) => d < 0).length} of ${diffs.length}`,
  );
}
