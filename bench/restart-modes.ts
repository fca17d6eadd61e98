/**
 * Server restart recovery, wait mode against poll mode, interleaved (issue 41: "at least as
 * fast in wait mode as in poll mode at the defaults"): `npx tsx bench/restart-modes.ts [trials]`.
 *
 * Each trial, for each configuration in turn (the order rotates every round): two fresh
 * `LeaderLock`s on new keys with the library's defaults but for `acquireMode` (and, in the
 * last column, the bench table's `FixedInterval(100)`), one leading and one following for
 * 300 ms; then a fast server restart, timed from the stop signal to the next `onAcquired` of
 * either (the row "server restart (fast)" of `npm run bench`, which keeps one pair through
 * all its restarts). Prints p50 / p95 / max per configuration, and the paired differences of
 * each round (wait − poll) so that the machine's drift cancels out.
 */
import os from 'node:os';
import { FixedInterval, LeaderLock, type LeaderLockOptions } from '../src/index.js';
import { randomKeys } from '../test/harness/db.js';
import { startPgServer, stopServersOnSignals } from '../test/harness/pg-server.js';

const TRIALS = Number(process.argv[2] ?? 15);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Config = { name: string; options: Partial<LeaderLockOptions> };
const CONFIGS: Config[] = [
  { name: 'wait (defaults)', options: { acquireMode: 'wait' } },
  { name: 'poll (defaults)', options: { acquireMode: 'poll' } },
  {
    name: 'poll, FixedInterval(100)',
    options: { acquireMode: 'poll', retryStrategy: new FixedInterval({ intervalMs: 100 }) },
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

async function trial(cfg: Config): Promise<number> {
  const keys = randomKeys();
  const make = () =>
    new LeaderLock({ connectionString: server.url, ...keys, ...cfg.options } as LeaderLockOptions);
  const a = make();
  const b = make();
  try {
    await a.start();
    await a.waitForLeadership();
    await b.start();
    await sleep(300);
    const next = new Promise<number>((resolve) => {
      for (const l of [a, b]) l.onAcquired(() => resolve(performance.now()));
    });
    const t0 = performance.now();
    await server.restart('fast');
    return (await next) - t0;
  } finally {
    await Promise.all([a.shutdown({ timeoutMs: 5000 }), b.shutdown({ timeoutMs: 5000 })]);
  }
}

const figures = new Map<string, number[]>(CONFIGS.map((c) => [c.name, []]));
for (let i = 0; i < TRIALS; i++) {
  const order = CONFIGS.map((_, k) => CONFIGS[(k + i) % CONFIGS.length] as Config);
  for (const cfg of order) figures.get(cfg.name)?.push(await trial(cfg));
}
await server.stop();

console.log(
  `server restart (fast), stop → the next onAcquired, ${TRIALS} trials each, interleaved; ${os.cpus().length} × ${os.cpus()[0]?.model.trim()}, node ${process.version}; load average ${load0} → ${os
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
const wait = figures.get('wait (defaults)') ?? [];
for (const other of ['poll (defaults)', 'poll, FixedInterval(100)']) {
  const poll = figures.get(other) ?? [];
  const diffs = wait.map((w, k) => w - (poll[k] ?? Number.NaN));
  console.log(
    `wait − ${other}, paired by round: p50 ${quantile(diffs, 0.5).toFixed(1)} ms (p25 ${quantile(diffs, 0.25).toFixed(1)}, p75 ${quantile(diffs, 0.75).toFixed(1)}); wait faster in ${diffs.filter((d) => d < 0).length} of ${diffs.length}`,
  );
}
