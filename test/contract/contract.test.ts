/**
 * The contract both elections keep: each behaviour is written once and run against
 * `LeaderLock` and `PartitionedLeadership` (adapters in subjects.ts), with the same options,
 * against a real PostgreSQL. "In charge" is `isLeader` for a LeaderLock and owning at least
 * one partition for a partition worker (alone, it owns all of them); the gained and lost
 * events are `onAcquired`/`onLost` and `onAssigned`/`onRevoked(…, 'lost')`.
 *
 * After each test every subject is shut down and no session of the test's ids may be left on
 * the server (the leak guard, as test/harness/locks.ts does for LeaderLock).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { LockMetrics } from '../../src/index.js';
import { bareTerminate, bareTimer, expectNearBaseline, interleaved } from '../harness/baseline.js';
import {
  adminClient,
  adminQuery,
  assertNoSessions,
  databaseUrl,
  eventually,
  testTag,
  within,
} from '../harness/db.js';
import { proxyTo } from '../harness/fault-proxy.js';
import { startPgBouncer } from '../harness/pgbouncer.js';
import { silentServer, stopWhileConnecting } from '../harness/silent-server.js';
import { TIMER_EARLY_MS } from '../harness/timers.js';
import { ADAPTERS, isSessionOf, LOCK_ROWS, type Subject, type SubjectOptions } from './subjects.js';

/** A fresh name per test: its locks are nobody else's. */
const uniqueName = (): string => `contract-${Date.now()}-${Math.random().toString(36).slice(2, 8)}`;

/** What `new X(options)` threw, or undefined. */
function thrownBy(build: () => unknown): Error | undefined {
  try {
    build();
  } catch (err) {
    return err as Error;
  }
  return undefined;
}

const codeOf = (e: unknown): unknown => (e as { code?: unknown } | null)?.code;
/** Wait out `ms` of real time: the claim is that nothing happens meanwhile. */
const quietFor = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe.each(ADAPTERS)('$kind', (adapter) => {
  let tag = testTag();
  let n = 0;
  let made: Subject[] = [];
  afterEach(async () => {
    const subjects = made;
    made = [];
    await Promise.all(
      subjects.map((s) => within(s.shutdown(), 10_000, `shutdown of ${s.id}`).catch(() => {})),
    );
    const done = tag;
    tag = testTag();
    n = 0;
    await assertNoSessions(done);
  });

  /** A subject of this test (id tagged for the leak guard), fast to notice things. */
  const make = (o: Partial<SubjectOptions> & { name: string }, url = databaseUrl()): Subject => {
    const s = adapter.make({
      id: `${tag}-${n++}`,
      connectionString: url,
      healthIntervalMs: 1000,
      queryTimeoutMs: 1000,
      takeoverDelayMs: 0, // the takeover delay has tests of its own
      ...o,
    });
    made.push(s);
    return s;
  };
  const inCharge = (s: Subject, timeoutMs = 10_000): Promise<void> =>
    eventually(() => s.inCharge, { timeoutMs, what: `${s.id} to be in charge` }).catch((err: Error) => {
      throw new Error(`${err.message} (${s.description})`);
    });

  /** The `pg_locks` rows of this name's advisory locks held or awaited by this subject's sessions. */
  async function rowsOf(s: Subject, name: string): Promise<{ pid: number; granted: boolean; app: string }[]> {
    const rows = await adminQuery<{ pid: number; granted: boolean; app: string }>(databaseUrl(), LOCK_ROWS, [
      adapter.classids(name),
    ]);
    return rows.filter((r) => isSessionOf(r.app, s.id));
  }

  /** The one backend holding this subject's locks, read on the server. */
  async function holderPid(s: Subject, name: string): Promise<number> {
    const rows = await rowsOf(s, name);
    const pids = [...new Set(rows.filter((r) => r.granted).map((r) => r.pid))];
    if (pids.length !== 1)
      throw new Error(`expected one backend holding ${s.id}'s locks, found ${JSON.stringify(rows)}`);
    return pids[0] as number;
  }

  describe('option validation', () => {
    it('an unknown option key (healthIntervalMS) throws a TypeError whose message names the key', () => {
      const err = thrownBy(() => adapter.construct({ healthIntervalMS: 100 }));
      expect(err, 'healthIntervalMS: 100 was accepted').toBeInstanceOf(TypeError);
      expect(err?.message).toContain('healthIntervalMS');
    });

    it.each([
      ['callbackTimeoutMs', -1, '-1'],
      ['callbackTimeoutMs', 'x', '"x"'],
      ['closeTimeoutMs', -1, '-1'],
      ['closeTimeoutMs', 'x', '"x"'],
      ['unref', 'yes', '"yes"'],
    ] as const)(
      '%s: %j throws a TypeError or RangeError naming the option and the value',
      (option, value, shown) => {
        const err = thrownBy(() => adapter.construct({ [option]: value }));
        expect(err?.name ?? `accepted ${option}: ${shown}`).toMatch(/^(TypeError|RangeError)$/);
        expect(err?.message).toContain(option);
        expect(err?.message).toContain(shown);
      },
    );

    it('the same options with valid values construct without throwing (callbackTimeoutMs 1, closeTimeoutMs 1, unref true or false)', () => {
      expect(
        thrownBy(() => adapter.construct({ callbackTimeoutMs: 1, closeTimeoutMs: 1, unref: true })),
      ).toBeUndefined();
      expect(thrownBy(() => adapter.construct({ unref: false }))).toBeUndefined();
    });
  });

  it('behind PgBouncer in transaction mode, found at start: the run ends with ERR_PGLEADERLOCK_UNSAFE naming the pooler (start() rejects with it, or onError gets it and start() resolves), reported once, never retried in 2.5 s; never in charge; not ready', async () => {
    const { hostname, port } = new URL(databaseUrl());
    await using bouncer = await startPgBouncer({
      server: { host: hostname, port: Number(port) },
      poolMode: 'transaction',
    });
    const s = make({ name: uniqueName() }, bouncer.url);
    const refusals: unknown[] = [];
    s.onError((e) => {
      refusals.push(e);
    });
    let rejected: unknown = null;
    await within(
      s.start().catch((e: unknown) => {
        rejected = e;
      }),
      10_000,
      'start() to settle',
    );
    await quietFor(2500); // the claim is that nothing more happens: no second attempt
    const reported = rejected !== null && !refusals.includes(rejected) ? [rejected, ...refusals] : refusals;
    expect(reported.map(codeOf), `what was reported (${s.description})`).toEqual(['ERR_PGLEADERLOCK_UNSAFE']);
    expect((reported[0] as Error).message).toMatch(/pooler/);
    expect(s.inCharge).toBe(false);
    expect(s.health().ready).toBe(false);
    await within(s.shutdown(), 10_000, 'shutdown()');
  });

  it(`an ${adapter.gained} callback that never settles: onError gets ERR_PGLEADERLOCK_CALLBACK_TIMEOUT at least 250 ms after its first line ran (callbackTimeoutMs 300) and within 100 ms of a bare 300 ms timer started on that line; health().live is true when it starts and false once it is past the deadline; it stays in charge`, async () => {
    const s = make({ name: uniqueName(), callbackTimeoutMs: 300 });
    let startedAt: number | null = null;
    let bare: Promise<number> | null = null;
    let liveAtStart: unknown = null;
    s.onGained(() => {
      if (startedAt === null) {
        startedAt = performance.now();
        bare = bareTimer(300); // the baseline: a timer of the deadline's length, on the same loop
        try {
          liveAtStart = s.health().live;
        } catch (err) {
          liveAtStart = err; // fails the assertion below, without keeping this callback from hanging
        }
      }
      return new Promise(() => {}); // never settles
    });
    const timeouts: number[] = [];
    const others: Error[] = [];
    s.onError((e) => {
      if (codeOf(e) === 'ERR_PGLEADERLOCK_CALLBACK_TIMEOUT') timeouts.push(performance.now());
      else others.push(e);
    });
    await s.start();
    await eventually(() => timeouts.length > 0, {
      timeoutMs: 5000,
      what: 'a callback timeout on onError',
    }).catch((err: Error) => {
      throw new Error(
        `${err.message}; the callback ${startedAt === null ? 'never ran' : `ran ${(performance.now() - startedAt).toFixed(0)} ms ago`}; ${s.description}; health ${JSON.stringify(s.health())}; other errors: ${JSON.stringify(others.map((e) => `${codeOf(e)}: ${e.message}`))}`,
      );
    });
    const health = s.health();
    expect(startedAt).not.toBeNull();
    const after = (timeouts[0] as number) - (startedAt as unknown as number);
    // `after` counts from the callback's first line, not from the moment the library started
    // it (and its deadline): on a loaded machine the process can be descheduled in between
    // (284 ms seen in CI). The exact deadline is checked with a manual clock in
    // unit/callbacks.test.ts; here, that it is the configured one and not a fraction of it,
    // nor a longer one: the library's timer started before the callback's first line, so it
    // fires before a bare timer of the same length started on that line, unless the loop is
    // late for both alike (was a fixed 700 ms)
    expect(after).toBeGreaterThanOrEqual(250 - TIMER_EARLY_MS);
    const bareMs = await (bare as unknown as Promise<number>);
    console.log(
      `[contract] ${adapter.kind}: callback timeout ${after.toFixed(1)} ms after the callback's first line; a bare 300 ms timer ${bareMs.toFixed(1)} ms`,
    );
    expectNearBaseline(
      'the callback timeout after the callback’s first line, against a bare 300 ms timer started there',
      { subject: after, baseline: bareMs },
      { overMs: 100 },
    );
    expect(liveAtStart).toBe(true);
    expect(health.live).toBe(false);
    expect(health.reasons.length).toBeGreaterThan(0);
    expect(s.inCharge).toBe(true);
  });

  it('a logger whose every method throws: it is called, and the subject still gets in charge and shuts down', async () => {
    let calls = 0;
    const boom = (): never => {
      calls += 1;
      throw new Error('logger down');
    };
    const s = make({ name: uniqueName(), logger: { debug: boom, info: boom, warn: boom, error: boom } });
    await s.start();
    await inCharge(s);
    expect(calls).toBeGreaterThan(0);
    await within(s.shutdown(), 10_000, 'shutdown()');
    expect(s.inCharge).toBe(false);
  });

  // unref: true and left out (a started subject keeps its process alive), both roles: the
  // same fixture, arguments and checks, tighter (exit within 1 s; alive 3 s), run for both
  // classes in integration/observability-claims.test.ts (tagged node-line, as this project runs
  // on every Node.js line); the copies that were here are removed (issue 37)

  describe('the close timeout: shutdown() over a blackholed network (FINs dropped too)', () => {
    it.each([
      ['while in charge', false],
      ['while one of its sessions waits in pg_advisory_lock behind another process of the name', true],
    ] as const)(
      '%s: resolves within 800 ms of a bare timer of queryTimeoutMs + closeTimeoutMs (1000 + 300) started with it, out of charge',
      async (when, behind) => {
        const name = uniqueName();
        if (behind) {
          const holder = make({ name }); // straight to the server, not through the proxy
          await holder.start();
          await inCharge(holder);
        }
        const proxy = await proxyTo(databaseUrl(), { silentFin: true });
        try {
          const s = make(
            // no health check in flight when the network goes: the shutdown's own statements are what it waits for
            { name, healthIntervalMs: 5000, queryTimeoutMs: 1000, closeTimeoutMs: 300 },
            proxy.url(databaseUrl()),
          );
          s.onError(() => {});
          await s.start();
          if (behind) {
            await eventually(async () => (await rowsOf(s, name)).some((r) => !r.granted), {
              timeoutMs: 10_000,
              what: `a session of ${s.id} to wait in pg_advisory_lock`,
            });
          } else {
            await inCharge(s);
          }
          proxy.blackhole();
          const t0 = performance.now();
          // the baseline: a bare timer of the rule's length (queryTimeoutMs + closeTimeoutMs),
          // started with the shutdown, late as the loop is late (was a fixed 1,800 ms)
          const bare = bareTimer(1000 + 300);
          await within(s.shutdown(), 10_000, 'shutdown() over the blackhole');
          const took = performance.now() - t0;
          const bareMs = await bare;
          console.log(
            `[contract] ${adapter.kind}: shutdown over a blackhole ${when} took ${took.toFixed(0)} ms; a bare 1300 ms timer ${bareMs.toFixed(0)} ms`,
          );
          // 800 ms over: a worker waiting behind another process went +518 ms over the bare
          // timer at load 24 (its shutdown's statements over the proxy, not a timer)
          expectNearBaseline(
            `shutdown() over a blackhole ${when}, against a bare queryTimeoutMs + closeTimeoutMs timer`,
            { subject: took, baseline: bareMs },
            { overMs: 800 },
          );
          expect(s.inCharge).toBe(false);
        } finally {
          await proxy.close(); // the server sees the proxy's sockets close, and frees what they held
        }
      },
    );
  });

  it('shutdown() while its first connection is under way (a server that accepts and never answers; queryTimeoutMs 1500): resolves, and the connection is closed, within 100 ms of a bare socket destroyed with the call, and no error is reported up to the attempt’s own deadline', async () => {
    const silent = await silentServer();
    try {
      const s = make({ name: uniqueName(), queryTimeoutMs: 1500 }, silent.url('postgres://nobody@x/none'));
      // a worker's start() resolves once a member: here, at the shutdown
      const {
        tookMs: took,
        closedAfterMs: closedAfter,
        bareClosedAfterMs: bareClosed,
        errors,
      } = await stopWhileConnecting(silent, 1500, {
        start: () => s.start(),
        stop: () => s.shutdown(),
        onError: (fn) => s.onError(fn),
      });
      console.log(
        `[contract] ${adapter.kind}: shutdown while connecting took ${took.toFixed(1)} ms; the connection closed ${closedAfter.toFixed(1)} ms after the call; a bare socket ${bareClosed.toFixed(1)} ms`,
      );
      // both were a fixed 100 ms: 448.0 / 448.8 recorded at load 24 (2026-12-02); against a
      // bare socket destroyed in the same tick, as the same kind of silent server sees it
      expectNearBaseline(
        'shutdown() while connecting resolved, against a bare socket destroyed with the call',
        { subject: took, baseline: bareClosed },
        { overMs: 100 },
      );
      expectNearBaseline(
        'the connection closed after shutdown(), against a bare socket destroyed with the call',
        { subject: closedAfter, baseline: bareClosed },
        { overMs: 100 },
      );
      expect(errors).toEqual([]);
    } finally {
      await silent.close();
    }
  });

  it(`pg_terminate_backend of the session holding its locks: ${adapter.lost} fires within 2 × a bare client’s socket ending after the same terminate + 100 ms (p50 of 3 interleaved rounds; each under 1.5 s, with healthIntervalMs 5000)`, async () => {
    const name = uniqueName();
    const s = make({ name, healthIntervalMs: 5000 });
    let heard: ((at: number) => void) | null = null;
    s.onLost(() => {
      const at = performance.now();
      heard?.(at);
      heard = null;
    });
    s.onError(() => {});
    await s.start();
    await using admin = await adminClient(databaseUrl()); // connected before any clock starts
    // the baseline, interleaved: a bare client terminated the same way, until its socket ends
    const { subject: latencies, baseline: bare } = await interleaved(
      3,
      async () => (await bareTerminate(databaseUrl(), admin)).ended,
      async () => {
        await inCharge(s);
        const pid = await holderPid(s, name);
        const lost = new Promise<number>((resolve) => {
          heard = resolve;
        });
        const t0 = performance.now();
        await admin.terminate(pid);
        return (await within(lost, 5000, `${adapter.lost} after the terminate`)) - t0;
      },
    );
    console.log(
      `[contract] ${adapter.kind}: terminate → ${adapter.lost} (ms): ${latencies.map((l) => l.toFixed(1)).join(', ')}; a bare client's socket ended ${bare.map((l) => l.toFixed(1)).join(', ')}`,
    );
    const sorted = [...latencies].sort((a, b) => a - b);
    // was a fixed p50 ≤ 100 ms: 69.1 recorded at load 13–21, 205.4 against a bare 75.2 at
    // load 24 (2026-12-02)
    expectNearBaseline(
      `terminate → ${adapter.lost}, against a bare client's socket ending`,
      { subject: latencies, baseline: bare },
      { ratio: 2, overMs: 100 },
    );
    // not the 5 s health tick (was 1 s: 343.6 ms recorded at load 24)
    // bound: contract/terminate-lost-max
    expect(sorted[2]).toBeLessThan(1500);
  });

  it('health(): live and not ready before start(); live and ready once started, and once in charge; live and not ready after shutdown()', async () => {
    const s = make({ name: uniqueName() });
    expect(s.health()).toMatchObject({ live: true, ready: false });
    await s.start();
    expect(s.health()).toMatchObject({ live: true, ready: true });
    await inCharge(s);
    expect(s.health()).toMatchObject({ live: true, ready: true, reasons: [] });
    await s.shutdown();
    expect(s.health()).toMatchObject({ live: true, ready: false });
  });

  it('metrics: new LockMetrics(target) reports live and ready as health() does, and counts a loss after pg_terminate_backend', async () => {
    const name = uniqueName();
    const s = make({ name });
    s.onError(() => {});
    using metrics = new LockMetrics(s.target);
    const sample = (metric: string): number => {
      const line = metrics
        .prometheus()
        .split('\n')
        .find((l) => l.startsWith(`${metric}{`));
      if (!line) throw new Error(`no ${metric} in the metrics`);
      return Number(line.slice(line.lastIndexOf(' ') + 1));
    };
    expect([sample('pgleaderlock_live'), sample('pgleaderlock_ready')]).toEqual([1, 0]);
    await s.start();
    await inCharge(s);
    expect([sample('pgleaderlock_live'), sample('pgleaderlock_ready')]).toEqual([1, 1]);
    expect(sample(s.lossesMetric)).toBe(0);
    await using admin = await adminClient(databaseUrl());
    await admin.terminate(await holderPid(s, name));
    await eventually(() => sample(s.lossesMetric) > 0, { what: `${s.lossesMetric} to count the loss` });
    await s.shutdown();
    expect(sample('pgleaderlock_ready')).toBe(0);
  });

  describe('{ signal } unregisters a handler', () => {
    it(`${adapter.gained}: a handler whose signal was aborted after registering is not called; one without a signal is`, async () => {
      const s = make({ name: uniqueName() });
      const ac = new AbortController();
      let unregisteredCalls = 0;
      s.onGained(
        () => {
          unregisteredCalls += 1;
        },
        { signal: ac.signal },
      );
      ac.abort();
      let calls = 0;
      s.onGained(() => {
        calls += 1;
      });
      await s.start();
      await inCharge(s);
      await eventually(() => calls > 0, { what: `the ${adapter.gained} handler without a signal` });
      expect(calls).toBeGreaterThan(0);
      expect(unregisteredCalls).toBe(0);
    });

    it(`${adapter.lost}: a handler whose signal was aborted after registering is not called when the session is terminated; one without a signal is`, async () => {
      const name = uniqueName();
      const s = make({ name, healthIntervalMs: 5000 });
      s.onError(() => {});
      const ac = new AbortController();
      let unregisteredCalls = 0;
      s.onLost(
        () => {
          unregisteredCalls += 1;
        },
        { signal: ac.signal },
      );
      ac.abort();
      let calls = 0;
      s.onLost(() => {
        calls += 1;
      });
      await s.start();
      await inCharge(s);
      await adminQuery(databaseUrl(), 'SELECT pg_terminate_backend($1)', [await holderPid(s, name)]);
      await eventually(() => calls > 0, { what: `the ${adapter.lost} handler without a signal` });
      expect(calls).toBeGreaterThan(0);
      expect(unregisteredCalls).toBe(0);
    });
  });
});
