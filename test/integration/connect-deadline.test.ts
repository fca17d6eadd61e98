/**
 * How long a connect is given after missed deadlines depends on what answered it
 * (core/retry.ts `MAX_CONNECT_STRETCH`): a server that accepted the TCP connection but did
 * not finish the start-up (busy) gets up to 16 × `queryTimeoutMs`, a path where nothing
 * answered up to 4 ×. Against real sockets, with the default `connect` (pg.Client): a TCP
 * server that accepts and never speaks stands in for a server too busy to finish a start-up.
 * The bounds are lower bounds, 3/4 of each deadline: load makes the attempts longer, not shorter.
 */
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { afterEach, describe, expect, it } from 'vitest';
import { abandonedAfterAccept, defaultConnect } from '../../src/core/connect.js';
import { FixedInterval, LeaderLock } from '../../src/index.js';

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

/** A TCP server that accepts every connection and never answers; the moments it accepted. */
async function silentServer(): Promise<{ port: number; accepts: number[] }> {
  const accepts: number[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((s) => {
    accepts.push(performance.now());
    sockets.add(s);
    s.on('error', () => {});
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanup.push(
    () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  );
  return { port: (server.address() as net.AddressInfo).port, accepts };
}

describe('the connect deadline after misses, by what answered', () => {
  it('the default connect tells an attempt abandoned after the server accepted it from one abandoned before', async () => {
    const { port, accepts } = await silentServer();
    const connect = defaultConnect({ host: '127.0.0.1', port, user: 'u', database: 'd' }, 'x', 60_000);
    const afterAccept = new AbortController();
    const attempt = connect(undefined, afterAccept.signal).catch(() => 'abandoned');
    while (accepts.length === 0) await new Promise((r) => setTimeout(r, 5));
    await new Promise((r) => setTimeout(r, 20)); // the client's side has seen the connect too
    afterAccept.abort();
    expect(await attempt).toBe('abandoned');
    expect(abandonedAfterAccept(afterAccept.signal)).toBe(true);

    const before = new AbortController();
    const early = connect(undefined, before.signal).catch(() => 'abandoned');
    before.abort(); // the TCP connect is still under way
    expect(await early).toBe('abandoned');
    expect(abandonedAfterAccept(before.signal)).toBe(false);
  });

  it('a server that accepts and never finishes the start-up: the deadline keeps doubling past 4 × queryTimeoutMs (the attempts 100, 200, 400, 800, 1600 ms long)', async () => {
    const { port, accepts } = await silentServer();
    const lock = new LeaderLock({
      connectionString: `postgres://u:p@127.0.0.1:${port}/d`,
      key1: 1,
      key2: 2,
      healthIntervalMs: 100,
      queryTimeoutMs: 100,
      retryStrategy: new FixedInterval({ intervalMs: 20 }),
    });
    lock.onError(() => {}); // each missed deadline is reported; expected here
    cleanup.push(() => lock.shutdown());
    await lock.start();
    while (accepts.length < 6) await new Promise((r) => setTimeout(r, 20));
    const gaps = accepts.slice(1).map((t, i) => t - (accepts[i] as number));
    console.log(`[connect deadline] gaps between accepts: ${gaps.map((g) => g.toFixed(0)).join(', ')} ms`);
    // each gap is about its attempt's deadline plus the strategy's 20 ms (give or take the
    // lag between arming a deadline and the server's accept: 3/4 of the deadline asserted);
    // with the 4 × cap of a silent path the fourth and fifth attempts would get 400 ms each
    expect(gaps[3]).toBeGreaterThanOrEqual(600);
    expect(gaps[4]).toBeGreaterThanOrEqual(1200);
  });
});
