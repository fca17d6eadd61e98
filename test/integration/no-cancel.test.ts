/**
 * Behind a proxy that drops protocol CancelRequests (AWS RDS Proxy and others): a written
 * cancel is not an obeyed one. A waiting statement that has not ended `closeTimeoutMs`
 * after its cancel closes its connection instead, for both classes.
 */
import { afterEach, describe, expect, it, onTestFinished } from 'vitest';
import { LeaderLock, PartitionedLeadership } from '../../src/index.js';
import { adminQuery, databaseUrl, eventually, randomKeys, sessionsLike, testTag } from '../harness/db.js';
import { type FaultProxy, proxyTo } from '../harness/fault-proxy.js';

let proxies: FaultProxy[] = [];
afterEach(async () => {
  await Promise.all(proxies.map((p) => p.close()));
  proxies = [];
});
async function droppingProxy(): Promise<FaultProxy> {
  const proxy = await proxyTo(databaseUrl(), { dropCancels: true });
  proxies.push(proxy);
  return proxy;
}

describe('a path that drops cancel requests', () => {
  it('LeaderLock: a waiting follower’s shutdown() ends within closeTimeoutMs + 500 ms (was a whole wait slice), and its backend leaves the lock queue', async () => {
    const proxy = await droppingProxy();
    const keys = randomKeys();
    const tag = testTag();
    const leader = new LeaderLock({ connectionString: databaseUrl(), ...keys, id: `${tag}-leader` });
    onTestFinished(() => leader.shutdown());
    await leader.start();
    expect(await leader.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
    const follower = new LeaderLock({
      connectionString: proxy.url(databaseUrl()),
      ...keys,
      id: `${tag}-follower`,
      closeTimeoutMs: 500,
      waitSliceMs: 30_000,
    });
    onTestFinished(() => follower.shutdown());
    await follower.start();
    const seen = async () => (await LeaderLock.inspect({ connectionString: databaseUrl(), ...keys })).waiters;
    await eventually(async () => (await seen()).length === 1, { what: 'the follower to queue' });
    const at = performance.now();
    await follower.shutdown();
    const took = performance.now() - at;
    console.log(
      `[no cancel] LeaderLock follower shutdown: ${took.toFixed(0)} ms, ${proxy.cancelsDropped} cancel(s) dropped`,
    );
    expect(proxy.cancelsDropped).toBeGreaterThanOrEqual(1);
    expect(took).toBeLessThan(500 + 500);
    await eventually(async () => (await seen()).length === 0, {
      timeoutMs: 3000,
      what: 'the queue to empty',
    });
  });

  it('PartitionedLeadership: shutdown() ends within closeTimeoutMs + 500 ms, and a new ring-watch target costs at most closeTimeoutMs of re-sent cancels, then a new session', async () => {
    const proxy = await droppingProxy();
    const name = `nc-${testTag()}`;
    const make = (id: string, url: string) => {
      const w = new PartitionedLeadership({
        name,
        partitions: 4,
        id,
        connectionString: url,
        closeTimeoutMs: 500,
        takeoverDelayMs: 0,
      });
      onTestFinished(() => w.shutdown());
      return w;
    };
    const behind = make('m-behind', proxy.url(databaseUrl()));
    const other = make('m-other', databaseUrl());
    await Promise.all([behind.start(), other.start()]);
    const watchSessions = () => sessionsLike(databaseUrl(), 'pgleaderlock:m-behind#watch');
    await eventually(async () => (await watchSessions()).length === 1);
    const [oldWatch] = await watchSessions();
    // a member sorted between the two: `behind` retargets its watch to it (a cancel)
    const joiner = make('m-joiner', databaseUrl());
    await joiner.start();
    await eventually(() => behind.memberIds.length === 3, { what: 'the join seen' });
    await new Promise((r) => setTimeout(r, 1500)); // the re-sends stop after closeTimeoutMs
    const dropped = proxy.cancelsDropped;
    console.log(
      `[no cancel] partitions: ${dropped} cancels dropped for one retarget (closeTimeoutMs 500, one every 50 ms)`,
    );
    expect(dropped).toBeGreaterThanOrEqual(1);
    expect(dropped).toBeLessThanOrEqual(500 / 50 + 3);
    // then a new session: the old watch backend is gone, and another one queues on the server
    // for the new target's member lock
    let newWatch: { pid: number } | undefined;
    await eventually(
      async () => {
        const now = await watchSessions();
        newWatch = now.find((s) => s.pid !== oldWatch?.pid);
        if (!newWatch || now.some((s) => s.pid === oldWatch?.pid)) return false;
        const rows = await adminQuery<{ n: number }>(
          databaseUrl(),
          "SELECT count(*)::int AS n FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND NOT granted",
          [newWatch.pid],
        );
        return rows[0]?.n === 1;
      },
      { timeoutMs: 3000, what: 'a new watch session, waiting' },
    );
    expect(newWatch?.pid).not.toBe(oldWatch?.pid);
    await new Promise((r) => setTimeout(r, 500));
    expect(proxy.cancelsDropped).toBe(dropped); // and none since
    const at = performance.now();
    await behind.shutdown();
    const took = performance.now() - at;
    console.log(`[no cancel] partitions shutdown: ${took.toFixed(0)} ms`);
    expect(took).toBeLessThan(500 + 500);
  });
});
