/**
 * Wait-mode timings of docs/state-machine.md ("Wait mode") against real PostgreSQL, each
 * against a baseline measured in the same test: a waiter is granted the lock milliseconds
 * after the holder lets go, and a CancelRequest ends a wait within milliseconds (against
 * bare `pg` clients); RECONNECTING re-acquires with a try-lock, so a competitor holding the
 * lock ends the grace period at once (against a fresh lock's first refused attempt). p50
 * over rounds (a busy machine stalls single rounds).
 */
import net from 'node:net';
import pg from 'pg';
import { serialize } from 'pg-protocol';
import { describe, expect, it } from 'vitest';
import { deferred } from '../../src/core/clock.js';
import { FixedInterval, type LeaderLock } from '../../src/index.js';
import { expectNearBaseline, interleaved } from '../harness/baseline.js';
import { adminClient, databaseUrl, eventually, holderPid, lockHolders, randomKeys } from '../harness/db.js';
import { useLocks } from '../harness/locks.js';
import { median } from '../harness/stats.js';

const locks = useLocks();
const ROUNDS = 9;

const ms = (xs: number[]): string => xs.map((x) => x.toFixed(1)).join(', ');

async function bare(): Promise<pg.Client> {
  const client = new pg.Client({
    connectionString: databaseUrl(),
    application_name: 'pgleaderlock-test-bare',
  });
  client.on('error', () => {});
  await client.connect();
  return client;
}

/** Until `count` backends hold or wait for `keys` (the waiter is queued). */
const queued = (keys: { key1: number; key2: number }, count: number): Promise<void> =>
  eventually(async () => (await lockHolders(databaseUrl(), keys.key1, keys.key2)).length === count, {
    intervalMs: 5,
    what: `${count} sessions on the key`,
  });

/** A CancelRequest for `client`'s running statement, on a new socket, as libpq sends it. */
function cancelRequest(client: pg.Client): Promise<void> {
  const { processID, secretKey, host, port } = client as unknown as {
    processID: number;
    secretKey: number;
    host: string;
    port: number;
  };
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, host);
    socket.on('connect', () => socket.write(serialize.cancel(processID, secretKey)));
    socket.on('error', reject);
    socket.on('close', () => resolve());
  });
}

describe("wait mode against bare pg clients (docs/state-machine.md, 'Wait mode')", () => {
  it(`granted milliseconds after the holder lets go: stepDown() resolved (its unlock answered) → the waiter's onAcquired, p50 of ${ROUNDS} within 10 ms of a bare unlock answered → the bare waiter granted`, async () => {
    const baseline: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const keys = randomKeys();
      const holder = await bare();
      const waiter = await bare();
      try {
        await holder.query('SELECT pg_advisory_lock($1, $2)', [keys.key1, keys.key2]);
        const granted = waiter
          .query('SELECT pg_advisory_lock($1, $2)', [keys.key1, keys.key2])
          .then(() => performance.now());
        await queued(keys, 2);
        await holder.query('SELECT pg_advisory_unlock($1, $2)', [keys.key1, keys.key2]);
        const letGo = performance.now();
        baseline.push((await granted) - letGo);
      } finally {
        await holder.end();
        await waiter.end();
      }
    }

    const handover: number[] = [];
    const fromCall: number[] = [];
    const keys = randomKeys();
    const [a, b] = [0, 1].map(() => locks.make({ ...keys, acquireMode: 'wait', waitSliceMs: 60_000 })) as [
      LeaderLock,
      LeaderLock,
    ];
    await a.start();
    await a.waitForLeadership({ timeoutMs: 5000 });
    await b.start();
    for (let i = 0; i < ROUNDS; i++) {
      const [leader, follower] = a.isLeader ? [a, b] : [b, a];
      await queued(keys, 2);
      const led = deferred<number>();
      const off = new AbortController();
      follower.onAcquired(() => led.resolve(performance.now()), { signal: off.signal });
      const called = performance.now();
      await leader.stepDown(); // the old leader queues again behind the new one
      const letGo = performance.now();
      const ledAt = await led.promise;
      handover.push(ledAt - letGo);
      fromCall.push(ledAt - called);
      off.abort();
    }
    console.log(
      `[wait] bare unlock answered → bare waiter granted: ${ms(baseline)} ms (p50 ${median(baseline).toFixed(1)}); stepDown() resolved → the waiter's onAcquired: ${ms(handover)} ms (p50 ${median(handover).toFixed(1)}); from the stepDown() call: p50 ${median(fromCall).toFixed(1)} ms`,
    );
    expectNearBaseline(
      "stepDown() resolved → the waiter's onAcquired, against a bare unlock → a bare waiter granted",
      { subject: handover, baseline },
      { overMs: 10 },
    );
  });

  it(`a cancel ends the wait within milliseconds: shutdown() of a waiter (60 s slice), p50 of ${ROUNDS} within 10 ms of a bare CancelRequest ending a bare wait and closing`, async () => {
    const keys = randomKeys();
    const holder = await bare();
    await holder.query('SELECT pg_advisory_lock($1, $2)', [keys.key1, keys.key2]);
    try {
      // interleaved: a bare wait cancelled, then a waiting lock shut down (the order alternating)
      const { subject: stopped, baseline } = await interleaved(
        ROUNDS,
        async () => {
          const waiter = await bare();
          const wait = waiter.query('SELECT pg_advisory_lock($1, $2)', [keys.key1, keys.key2]).then(
            () => 'granted',
            (err: { code?: string }) => err.code,
          );
          await queued(keys, 2);
          const t0 = performance.now();
          await cancelRequest(waiter);
          expect(await wait).toBe('57014'); // query_canceled
          await waiter.end();
          return performance.now() - t0;
        },
        async () => {
          const waiter = locks.make({ ...keys, acquireMode: 'wait', waitSliceMs: 60_000 });
          await waiter.start();
          await queued(keys, 2);
          const t0 = performance.now();
          await waiter.shutdown();
          const took = performance.now() - t0;
          expect((await lockHolders(databaseUrl(), keys.key1, keys.key2)).filter((r) => !r.granted)).toEqual(
            [],
          );
          return took;
        },
      );
      console.log(
        `[wait] bare CancelRequest → the bare wait ended and closed: ${ms(baseline)} ms (p50 ${median(baseline).toFixed(1)}); shutdown() of a waiting lock: ${ms(stopped)} ms (p50 ${median(stopped).toFixed(1)})`,
      );
      expectNearBaseline(
        'shutdown() of a waiting lock, against a bare CancelRequest ending a bare wait and closing',
        { subject: stopped, baseline },
        { overMs: 10 },
      );
    } finally {
      await holder.end();
    }
  });
});

describe("RECONNECTING always re-acquires with pg_try_advisory_lock (docs/state-machine.md, 'Wait mode')", () => {
  it(`wait mode, 60 s slices, a 5 s grace: a leader whose backend is terminated while a waiter takes the lock reports onLost within twice (p50 of 5) the time a fresh lock started at the same moment takes to be refused`, async () => {
    const keys = randomKeys();
    const options = {
      ...keys,
      acquireMode: 'wait' as const,
      waitSliceMs: 60_000,
      reconnectGraceMs: 5000,
      healthIntervalMs: 5000,
    };
    const [a, b] = [0, 1].map(() => locks.make(options)) as [LeaderLock, LeaderLock];
    await a.start();
    await a.waitForLeadership({ timeoutMs: 5000 });
    await b.start();
    await using admin = await adminClient(databaseUrl());
    const ratios: number[] = [];
    const figures: string[] = [];
    const reconnect: number[] = [];
    const refusal: number[] = [];
    for (let i = 0; i < 5; i++) {
      const [leader, waiter] = a.isLeader ? [a, b] : [b, a];
      await queued(keys, 2);
      const lost = deferred<number>();
      const off = new AbortController();
      const states: string[] = [];
      leader.onLost(() => lost.resolve(performance.now()), { signal: off.signal });
      leader.onStateChange(
        (from, to) => {
          states.push(`${from}->${to}`);
        },
        { signal: off.signal },
      );
      // the baseline: a fresh poll-mode lock making the same attempt (connect, prepare,
      // try-lock) at the same moment, in the same process, refused
      const fresh = locks.make({
        ...keys,
        acquireMode: 'poll',
        retryStrategy: new FixedInterval({ intervalMs: 60_000 }),
      });
      const refused = deferred<number>();
      fresh.onAcquireFailed(() => refused.resolve(performance.now()));
      const pid = await holderPid(databaseUrl(), keys.key1, keys.key2);
      const t0 = performance.now();
      await admin.terminate(pid);
      await fresh.start();
      const [lostAt, refusedAt] = await Promise.all([lost.promise, refused.promise]);
      off.abort();
      await fresh.shutdown();
      ratios.push((lostAt - t0) / (refusedAt - t0));
      reconnect.push(lostAt - t0);
      refusal.push(refusedAt - t0);
      figures.push(`${(lostAt - t0).toFixed(0)}/${(refusedAt - t0).toFixed(0)}`);
      expect(states.slice(0, 2)).toEqual(['leader->reconnecting', 'reconnecting->follower']);
      await eventually(() => waiter.isLeader, { what: 'the waiter to lead' });
    }
    console.log(
      `[reconnect] terminate → onLost / → the fresh lock refused: ${figures.join(', ')} ms; ratios ${ratios.map((r) => r.toFixed(2)).join(', ')} (p50 ${median(ratios).toFixed(2)}; grace 5 s, slice 60 s)`,
    );
    // one reconnection, as long as a fresh lock's first attempt (its extra round trips: the
    // holder's pid, the drained notice); waiting in pg_advisory_lock would take the grace
    expectNearBaseline(
      'terminate → onLost (one reconnection), against terminate → a fresh lock refused',
      { subject: reconnect, baseline: refusal },
      { ratio: 2 },
    );
  });
});
