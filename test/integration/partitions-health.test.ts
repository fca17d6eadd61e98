/**
 * `PartitionedLeadership.health()` against PostgreSQL, on real timers: never started,
 * running (with and without partitions), shutting down, shut down, through a database
 * outage, a blocked event loop and a loop that made no progress. The reasons one by one:
 * test/unit/partition-health.test.ts.
 */
import { describe, expect, it, vi } from 'vitest';
import { quietBoundMs } from '../../src/partitions/health.js';
import { databaseUrl, eventually, ownServer, sessionsLike, terminate } from '../harness/db.js';
import { useWorkers } from '../harness/workers.js';

const workers = useWorkers({ healthIntervalMs: 200, takeoverDelayMs: 0 });
const worker = workers.worker;

describe('PartitionedLeadership.health()', () => {
  it('never started: live, not ready ("not started"), owning nothing', () => {
    const w = worker({ name: `ph-${workers.tag()}` });
    expect(w.health()).toEqual({ live: true, ready: false, reasons: ['not started'], owned: 0, members: 0 });
  });

  it('running: live and ready from start() on, owned and members as the worker counts them, a member owning no partition included', async () => {
    const name = `ph-${workers.tag()}`;
    const a = worker({ name, partitions: 1 });
    await a.start();
    expect(a.health()).toEqual({ live: true, ready: true, reasons: [], owned: 1, members: 1 });
    const b = worker({ name, partitions: 1 });
    await b.start();
    await eventually(() => a.memberIds.length === 2 && b.memberIds.length === 2, { what: 'two members' });
    const until = performance.now() + 1000; // five health intervals
    while (performance.now() < until) {
      for (const w of [a, b]) {
        const h = w.health();
        expect(h).toMatchObject({ live: true, ready: true, reasons: [] });
        expect(h.owned).toBe(w.owned.size);
        expect(h.members).toBe(2);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(a.owned.size + b.owned.size).toBe(1);
  });

  it('while shutdown() drains its runs: live, not ready ("shutting down"); after it: live, not ready ("stopped"), owning nothing', async () => {
    const w = worker({ name: `ph-${workers.tag()}`, partitions: 2 });
    let release = (): void => {};
    const held = new Promise<void>((r) => {
      release = r;
    });
    w.runForEach(async (_p, term) => {
      await new Promise((r) => term.signal.addEventListener('abort', r, { once: true }));
      await held; // slow to stop
    });
    await w.start();
    expect(await w.waitForBalance({ timeoutMs: 5000 })).toBe(true);
    const stopping = w.shutdown();
    await new Promise((r) => setTimeout(r, 100));
    expect(w.health()).toMatchObject({ live: true, ready: false, reasons: ['shutting down'] });
    release();
    await stopping;
    expect(w.health()).toEqual({ live: true, ready: false, reasons: ['stopped'], owned: 0, members: 1 });
  });

  it('the database stopped: live, not ready, the failure as the reason and nothing owned; ready again once it is back', async () => {
    await using server = await ownServer();
    const w = worker({ name: `ph-${workers.tag()}`, connectionString: server.url, queryTimeoutMs: 500 });
    await w.start();
    expect(w.health()).toMatchObject({ live: true, ready: true, owned: 4 });
    await server.stop('fast');
    await eventually(() => !w.health().ready, { what: 'not ready during the outage' });
    const down = w.health();
    expect(down.live).toBe(true);
    expect(down.owned).toBe(0);
    expect(down.reasons).toHaveLength(1);
    expect(down.reasons[0]).toMatch(/^the last attempt failed: ./);
    // still not ready a second into the outage (attempts keep failing)
    await new Promise((r) => setTimeout(r, 1000));
    expect(w.health()).toMatchObject({ live: true, ready: false });
    expect(w.health().reasons[0]).toMatch(/^the last attempt failed: ./);
    await server.start();
    await eventually(() => w.health().ready, { timeoutMs: 15_000, what: 'ready after the restart' });
    await eventually(() => w.health().owned === 4, { what: 'all four owned again' });
    expect(w.health()).toMatchObject({ live: true, ready: true, reasons: [] });
    await w.shutdown();
  });

  it('its ring watch session terminated: not ready, the watch named as the reason, until it is back', async () => {
    const name = `ph-${workers.tag()}`;
    const [a, b] = [worker({ name }), worker({ name })];
    await Promise.all([a.start(), b.start()]);
    await eventually(
      async () => (await sessionsLike(databaseUrl(), `pgleaderlock:${a.id}#watch`)).length === 1,
      {
        what: "a's ring watch",
      },
    );
    const [watch] = await sessionsLike(databaseUrl(), `pgleaderlock:${a.id}#watch`);
    await terminate(databaseUrl(), watch?.pid as number);
    await eventually(() => !a.health().ready, { what: 'a not ready' });
    expect(a.health().reasons.join(' ')).toMatch(/ring watch/);
    await eventually(() => a.health().ready, { what: 'a ready again' });
  });

  it('an onAssigned callback that has not returned past callbackTimeoutMs turns live false, after shutdown too', async () => {
    const w = worker({ name: `ph-${workers.tag()}`, partitions: 1, callbackTimeoutMs: 300 });
    w.onAssigned(() => new Promise(() => {})); // never returns
    await w.start();
    expect(w.health().live).toBe(true);
    await new Promise((r) => setTimeout(r, 400));
    const h = w.health();
    expect(h.live).toBe(false);
    expect(h.ready).toBe(false);
    expect(h.reasons).toContainEqual(
      expect.stringMatching(
        /^an onAssigned callback has not returned after \d+ ms \(callbackTimeoutMs 300\)$/,
      ),
    );
    await w.shutdown();
    expect(w.health()).toMatchObject({ live: false, ready: false });
  });

  it('an event loop blocked for 3 s turns live false, as seen by the next probe after it', async () => {
    const w = worker({ name: `ph-${workers.tag()}` });
    await w.start();
    await new Promise((r) => setTimeout(r, 600)); // the heartbeat has run once
    const end = performance.now() + 3000;
    while (performance.now() < end) {
      // blocked: nothing else runs
    }
    await new Promise((r) => setImmediate(r)); // a probe's handler runs after the timers that were due
    const h = w.health();
    expect(h.live).toBe(false);
    expect(h.ready).toBe(false);
    expect(h.reasons.join('\n')).toMatch(/the event loop was blocked for at least (2[5-9]\d\d|3\d{3}) ms/);
  });

  it('a loop that has made no progress for longer than its steps can take is not live (the clock moved past the bound)', async () => {
    const options = { healthIntervalMs: 200, queryTimeoutMs: 1000, drainTimeoutMs: 10_000 };
    const w = worker({ name: `ph-${workers.tag()}`, ...options });
    await w.start();
    expect(w.health().live).toBe(true);
    const bound = quietBoundMs(options);
    const now = performance.now();
    const spy = vi.spyOn(performance, 'now').mockReturnValue(now + bound + 1000);
    let h: ReturnType<typeof w.health>;
    try {
      h = w.health();
    } finally {
      spy.mockRestore();
    }
    expect(h.live).toBe(false);
    expect(h.reasons).toContainEqual(
      expect.stringMatching(
        new RegExp(
          `^the worker's loop has made no progress for \\d+ ms \\(its steps take at most ${bound} ms\\)$`,
        ),
      ),
    );
  });
});
