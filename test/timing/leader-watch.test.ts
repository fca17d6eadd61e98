/**
 * LeaderWatch's figures (docs/choosing-the-leader.md, "Watching who leads"), against real
 * PostgreSQL, the watched LeaderLocks in processes of their own in both acquire modes:
 *  - a watch hears each new leader within 100 ms of its grant (every trial; p50 and max
 *    printed), by the grant's announcement: the watch reads `pg_locks` only every 5 s here
 *    (the default), so a watch that learnt by reading would miss the budget by seconds;
 *  - at rest it holds one connection and runs at most one statement per `healthIntervalMs`
 *    (every statement of its session seen in `pg_stat_activity.query_start`), and never more
 *    than one connection, a reconnection included.
 */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { parseEvent } from '../../src/core/handover.js';
import { channelFor } from '../../src/core/keys.js';
import { FixedInterval, LeaderLock, LeaderWatch } from '../../src/index.js';
import { expectNearBaseline } from '../harness/baseline.js';
import { type Report, useCandidates } from '../harness/candidates.js';
import { adminClient, databaseUrl, eventually, randomKeys, testTag } from '../harness/db.js';
import { useLocks } from '../harness/locks.js';
import { median } from '../harness/stats.js';

const locks = useLocks();
const candidates = useCandidates(() => locks.tag);

const hrNow = (): number => Number(process.hrtime.bigint()) / 1e6;
const fmt = (xs: number[]): string => xs.map((x) => x.toFixed(1)).join(', ');

const TRIALS = 5;
const BUDGET_MS = 100;
/**
 * After the successor's own grant report (its clock, another process): 3 × the worst figure
 * seen (112.3 ms, poll mode, load average about 30, 2026-12-02; docs/testing.md). The watch's
 * 5 s read of pg_locks, which it would wait for without the announcement, still fails it; the
 * bare LISTEN comparison holds the watch to BUDGET_MS over the announcement itself.
 */
const GRANT_BOUND_MS = 350;

/** A bare connection LISTENing on the key's channel: when the server delivered each grant's announcement. */
async function bareListener(keys: { key1: number; key2: number }) {
  const client = new pg.Client({
    connectionString: databaseUrl(),
    application_name: 'pgleaderlock-test-listener',
  });
  client.on('error', () => {});
  const grants: { id: string; at: number }[] = [];
  const channel = channelFor(keys.key1, keys.key2);
  client.on('notification', (n) => {
    const event = n.channel === channel && n.payload !== undefined ? parseEvent(n.payload) : null;
    if (event?.kind === 'acquired') grants.push({ id: event.id, at: hrNow() });
  });
  await client.connect();
  await client.query(`LISTEN ${channel}`);
  return { grants, [Symbol.asyncDispose]: () => client.end().catch(() => {}) };
}

/**
 * Each trial ends the leader (`how`) and times when the watch heard its successor against:
 *  - the successor's own report of its grant (its takeover fence after a kill, its term's
 *    opening after a clean release), on the machine's monotonic clock: the grant came before
 *    that report, so this is a lower bound of the watch's delay;
 *  - a bare LISTEN connection's receipt of the grant's announcement in this process: what the
 *    watch adds to the server's delivery;
 *  - the cause, which came before the grant (an upper bound): the SIGKILL, or, for a
 *    step-down, the old leader's report that its work returned (its release follows).
 */
describe.each(['wait', 'poll'] as const)(
  'a watch hears each new leader within 100 ms of its grant (%s mode)',
  (mode) => {
    it.each(['SIGKILL', 'stepDown'] as const)(
      `%s of the leader, ${TRIALS} trials, takeover delay 250 ms, the watch reading pg_locks every 5 s: every trial within ${BUDGET_MS} ms of a bare LISTEN and ${GRANT_BOUND_MS} ms of the grant`,
      async (how) => {
        const c = candidates(mode, 250, TRIALS + 1);
        await using listener = await bareListener(c.keys);
        const watch = new LeaderWatch({ connectionString: databaseUrl(), ...c.keys, id: testTag() });
        try {
          const heard: { id: string | null; at: number }[] = [];
          watch.onChange((leader) => {
            heard.push({ id: leader?.id ?? null, at: hrNow() });
          });
          const afterGrant: number[] = [];
          const afterListener: number[] = [];
          const watchHeard: number[] = [];
          const listenerHeard: number[] = [];
          const afterCause: number[] = [];
          // six processes starting (tsx) on two cores: the first leads within seconds
          await eventually(() => c.runs('run-start').length === 1, { timeoutMs: 60_000, what: 'a leader' });
          await watch.start();
          for (let trial = 0; trial < TRIALS; trial++) {
            const leader = c.runs('run-start')[trial] as Report;
            expect(watch.leader?.id).toBe(leader.id);
            if (mode === 'wait') {
              // every follower queued, so that the grant follows the fault at once
              await eventually(async () => {
                const seen = await LeaderLock.inspect({ connectionString: databaseUrl(), ...c.keys });
                return seen.waiters.length === TRIALS - trial && !seen.pending;
              });
            }
            const faultAt = hrNow();
            const proc = c.procs.get(leader.id);
            if (how === 'SIGKILL') proc?.kill('SIGKILL');
            else proc?.send('stepDown');
            await eventually(() => c.runs('run-start').length === trial + 2, {
              timeoutMs: 10_000,
              intervalMs: 5,
              what: `leader ${trial + 2}`,
            });
            const next = c.runs('run-start')[trial + 1] as Report;
            // over IPC, the grant report may come after the run's start
            const grantOf = () =>
              c.reports.find(
                (r) => r.id === next.id && (r.ev === 'delayed' || r.ev === 'acquired') && r.at >= faultAt,
              );
            const heardOf = () => heard.find((h) => h.id === next.id && h.at >= faultAt);
            const deliveredOf = () => listener.grants.find((g) => g.id === next.id && g.at >= faultAt);
            await eventually(
              () => grantOf() !== undefined && heardOf() !== undefined && deliveredOf() !== undefined,
              {
                what: `${next.id}'s grant report, the watch and the listener hearing it`,
              },
            );
            const grant = grantOf() as Report;
            const at = heardOf()?.at as number;
            afterGrant.push(at - grant.at);
            afterListener.push(at - (deliveredOf()?.at as number));
            watchHeard.push(at - faultAt);
            listenerHeard.push((deliveredOf()?.at as number) - faultAt);
            if (how === 'SIGKILL') {
              expect(grant.ev).toBe('delayed'); // not proven clean: the delay held, the watch heard the grant
              afterCause.push(at - faultAt);
            } else {
              const ended = c.reports.find((r) => r.ev === 'run-end' && r.id === leader.id) as Report;
              afterCause.push(at - ended.at);
              proc?.disconnect(); // it leaves for good (autoReacquire off in the fixture)
            }
          }
          const line = (name: string, xs: number[]): string =>
            `${name} ${fmt(xs)} (p50 ${median(xs).toFixed(1)}, max ${Math.max(...xs).toFixed(1)})`;
          console.log(
            `[watch ${mode} ${how}] heard, ms after: ${line("the successor's grant report", afterGrant)}; ${line('a bare LISTEN', afterListener)}; ` +
              line(
                how === 'SIGKILL' ? 'the SIGKILL' : "the old leader's work returned (before its release)",
                afterCause,
              ),
          );
          // bound: timing/leader-watch-after-grant
          expect(
            Math.max(...afterGrant),
            `the watch heard ${fmt(afterGrant)} ms after the successor's grant report`,
          ).toBeLessThanOrEqual(GRANT_BOUND_MS);
          expectNearBaseline(
            `${mode} ${how}: the watch heard the new leader (ms after the fault), against a bare LISTEN connection`,
            { subject: watchHeard, baseline: listenerHeard },
            { overMs: BUDGET_MS, compare: 'each' },
          );
          // a clean handover in wait mode is a grant at the unlock: the upper bound holds too (p50)
          if (mode === 'wait' && how === 'stepDown')
            // bound: timing/leader-watch-stepdown-median
            expect(median(afterCause)).toBeLessThanOrEqual(BUDGET_MS);
        } finally {
          await watch.close();
        }
      },
      120_000,
    );
  },
);

describe('a watch at rest', () => {
  /** The watch's sessions on the server (by application_name) and their last statement's start. */
  async function sample(admin: Awaited<ReturnType<typeof adminClient>>, name: string) {
    return admin.query<{ pid: number; query_start: Date | null; query: string }>(
      'SELECT pid, query_start, query FROM pg_stat_activity WHERE application_name = $1',
      [name],
    );
  }

  it('holds one connection and runs at most one statement per healthIntervalMs (500 ms, over 3 s with a leader)', async () => {
    const keys = randomKeys();
    const lock = locks.make(keys);
    await lock.start();
    expect(await lock.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
    await using admin = await adminClient(databaseUrl());
    const watch = new LeaderWatch({
      connectionString: databaseUrl(),
      ...keys,
      id: testTag(),
      healthIntervalMs: 500,
    });
    try {
      await watch.start();
      expect(watch.leader?.id).toBe(lock.id);
      const name = `pgleaderlock-watch:${watch.id}`;
      const WINDOW_MS = 3000;
      const starts = new Set<number>();
      const counts = new Set<number>();
      const queries = new Set<string>();
      const t0 = performance.now();
      while (performance.now() - t0 < WINDOW_MS) {
        const rows = await sample(admin, name);
        counts.add(rows.length);
        for (const r of rows) {
          if (r.query_start) starts.add(r.query_start.getTime());
          queries.add(r.query.slice(0, 40));
        }
        await new Promise((r) => setTimeout(r, 20));
      }
      const elapsed = performance.now() - t0;
      // every statement of the session, in order (on the server's clock): at most one per
      // interval means no two of them closer than the interval
      const times = [...starts].sort((a, b) => a - b);
      const gaps = times.slice(1).map((t, i) => t - (times[i] as number));
      console.log(
        `[watch at rest] ${times.length} statements seen in ${elapsed.toFixed(0)} ms (healthIntervalMs 500), gaps ${gaps.map((g) => g.toFixed(0)).join(', ')} ms; sessions seen: ${[...counts].join(', ')}; ${[...queries].join(' | ')}`,
      );
      expect([...counts]).toEqual([1]);
      expect(Math.min(...gaps)).toBeGreaterThanOrEqual(495); // server-side start times; network jitter
      expect(times.length).toBeGreaterThanOrEqual(WINDOW_MS / 500 - 1); // it does read, every interval
      expect([...queries].every((q) => q.startsWith('/* pgleaderlock:leader-watch */'))).toBe(true);
      expect(watch.leader?.id).toBe(lock.id);
    } finally {
      await watch.close();
    }
  });

  it('never holds more than one connection, across the loss of its session and its reconnection', async () => {
    const keys = randomKeys();
    await using admin = await adminClient(databaseUrl());
    const watch = new LeaderWatch({
      connectionString: databaseUrl(),
      ...keys,
      id: testTag(),
      healthIntervalMs: 200,
      retryStrategy: new FixedInterval({ intervalMs: 50 }),
    });
    try {
      await watch.start();
      const name = `pgleaderlock-watch:${watch.id}`;
      const counts: number[] = [];
      const pids = new Set<number>();
      for (let round = 0; round < 3; round++) {
        const [row] = await sample(admin, name);
        if (!row) throw new Error('no watch session');
        await admin.terminate(row.pid);
        const t0 = performance.now();
        while (performance.now() - t0 < 600) {
          const rows = await sample(admin, name);
          counts.push(rows.length);
          for (const r of rows) pids.add(r.pid);
        }
        await eventually(() => watch.connected, { what: 'the reconnection' });
      }
      console.log(
        `[watch] sessions seen in ${counts.length} samples over 3 reconnections: max ${Math.max(...counts)}, ${pids.size} backends`,
      );
      expect(Math.max(...counts)).toBe(1);
      expect(pids.size).toBeGreaterThanOrEqual(3); // it did reconnect, each time on a new backend
    } finally {
      await watch.close();
    }
  });
});
