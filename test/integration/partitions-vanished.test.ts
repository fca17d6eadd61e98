/**
 * The split-brain fence when the old primary vanishes without a reset (docs/partitions.md,
 * "Primary failover"): a host that answered as a primary keeps counting as one through the
 * rounds it does not answer in, until it answers as a standby or refuses connections. On a
 * replicated cluster of its own: a standby promoted while the old primary runs, two workers
 * on the promoted one listing the old primary through a proxy, which then goes silent (a
 * blackhole: connections accepted, nothing answered). Before, one missed answer dropped the
 * fence, and a clean hand-over opened at once while the old primary was up.
 */
import { expect, it } from 'vitest';
import { type ClusterNode, promoteNow, startCluster } from '../harness/cluster.js';
import { eventually } from '../harness/db.js';
import { proxyTo } from '../harness/fault-proxy.js';
import { TIMER_EARLY_MS } from '../harness/timers.js';
import { takeRecorder } from '../harness/workers.js';

const P = 4;
const HEALTH_MS = 500;
const TAKEOVER_MS = 200;
const FENCE_MS = TAKEOVER_MS + HEALTH_MS + 250;
/** A clean hand-over waits the whole fence too (core/peers.ts splitBrainDelayMs). */
const CLEAN_FENCE_MS = FENCE_MS;
const SILENT_ROUNDS = 6;

it(`an old primary that answered, then went silent without a reset, keeps the fence: ${SILENT_ROUNDS} health intervals into its silence a clean hand-over still opens ${CLEAN_FENCE_MS} ms after its take (takeoverDelayMs ${TAKEOVER_MS} + healthIntervalMs ${HEALTH_MS} + 250; fails below ${CLEAN_FENCE_MS - TIMER_EARLY_MS}, and at 0, what one missed answer gave before)`, async () => {
  await using cluster = await startCluster();
  const [p, s] = [cluster.primary, cluster.standbys[0] as ClusterNode];
  await promoteNow(s); // p stays up: a split brain
  await using proxy = disposable(await proxyTo(p.url));
  // the workers list the promoted server and, through the proxy, the old primary
  const listed = cluster
    .url([s])
    .replace(`${s.host}:${s.port}/`, `${s.host}:${s.port},127.0.0.1:${proxy.port}/`);
  expect(listed).toContain(`,127.0.0.1:${proxy.port}/`);
  const {
    takes,
    runs,
    worker,
    opened: openedAfter,
  } = takeRecorder({
    name: 'vanished',
    partitions: P,
    connectionString: listed,
    healthIntervalMs: HEALTH_MS,
    takeoverDelayMs: TAKEOVER_MS,
  });
  const a = worker('a');
  await a.start();
  await eventually(() => runs.filter((r) => r.worker === 'a').length === P, {
    what: 'a to run every partition',
    timeoutMs: 10_000,
  });
  const b = worker('b');
  await b.start();
  await eventually(() => a.owned.size === P / 2 && b.owned.size === P / 2, { what: 'a 2/2 split' });
  await eventually(() => runs.filter((r) => r.worker === 'b').length === P / 2, {
    what: 'b to run its share',
  });
  // both heard the old primary answer: their takes so far were fenced
  expect(new Set(takes.map((t) => t.delayMs))).toEqual(new Set([FENCE_MS, CLEAN_FENCE_MS]));

  proxy.blackhole(); // the old primary vanishes for them: no answer, no reset; it still runs
  await new Promise((r) => setTimeout(r, SILENT_ROUNDS * HEALTH_MS));
  expect(await p.role()).toBe('primary');
  const leftAt = performance.now();
  await a.shutdown(); // a clean hand-over of its two partitions to b
  await eventually(() => b.owned.size === P, { what: 'b to take a’s share', timeoutMs: 10_000 });
  await eventually(() => runs.filter((r) => r.worker === 'b' && r.start >= leftAt).length === P / 2, {
    what: 'b to run a’s share',
    timeoutMs: 5000,
  });
  await b.shutdown();
  const handed = takes.filter((t) => t.worker === 'b' && t.at >= leftAt);
  const opened = handed.flatMap((t) => openedAfter(t).map((ms) => ({ logged: t.delayMs, ms })));
  console.log(
    `[partitions vanished old primary] ${SILENT_ROUNDS * HEALTH_MS} ms silent: a's share handed to b with ${opened.map((x) => `${x.logged} ms logged, ${x.ms?.toFixed(1)} measured`).join('; ')}`,
  );
  expect(opened).toHaveLength(P / 2);
  for (const x of opened) {
    expect(x.logged).toBe(CLEAN_FENCE_MS);
    expect(x.ms).toBeGreaterThanOrEqual(CLEAN_FENCE_MS - TIMER_EARLY_MS);
  }
}, 60_000);

/** `await using` for a proxy. */
function disposable<T extends { close(): Promise<void> }>(x: T): T & AsyncDisposable {
  return Object.assign(x, { [Symbol.asyncDispose]: () => x.close() });
}
