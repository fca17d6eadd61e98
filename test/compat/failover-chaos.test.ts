/**
 * Chaos across primary failovers, under load (`npm run test:compat`; more rounds with
 * `PGLEADERLOCK_FAILOVER_ROUNDS=60 npx vitest run --project compat test/compat/failover-chaos.test.ts`).
 *
 * A primary and a streaming standby, each behind a host name the candidates list: a TCP
 * forwarder standing in for a DNS name or a VIP, so that a new server can take a dead one's
 * name. Four candidates (fencing on, default timings) lead in turn; the leader's work writes
 * a row every 5 ms on the server it leads on and takes 100 ms to stop after its term ends.
 * Each round, alternately:
 *  - crash: SIGKILL the primary, then promote the standby;
 *  - split: promote the standby while the primary runs, and stop the old primary only a
 *    second after the new leader started (a failover tool that fences the old primary late).
 * Then a new standby, cloned from the new primary, takes the old primary's name. After
 * each round: a leader on the new primary, and never two runs of leader work at once.
 */

import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { LeaderLock, type Term } from '../../src/index.js';
import { type ClusterNode, startCluster } from '../harness/cluster.js';
import { eventually, randomKeys, testTag } from '../harness/db.js';
import { type FaultProxy, startFaultProxy } from '../harness/fault-proxy.js';
import { overlapsOf } from '../harness/overlaps.js';
import { TEST_PASSWORD } from '../harness/pg-server.js';

// 20 per acquire mode: the README's "0 overlaps in 20 split-brain rounds" is 10 per mode
const ROUNDS = Number(process.env.PGLEADERLOCK_FAILOVER_ROUNDS ?? 20);
const WORK_STOP_MS = 100;
const CANDIDATES = 4;

interface Run {
  readonly id: string;
  readonly host: string;
  readonly start: number;
  /** When the work stopped writing (WORK_STOP_MS after the term ended). */
  end: number | null;
  writes: number;
}

/** Leader work: a row every 5 ms on the leader's server until WORK_STOP_MS after the term ends. */
async function work(term: Term, run: Run, url: (host: string) => string): Promise<void> {
  const client = new pg.Client({ connectionString: url(term.host) });
  client.on('error', () => {});
  let stopAt = Number.POSITIVE_INFINITY;
  term.signal.addEventListener('abort', () => {
    stopAt = performance.now() + WORK_STOP_MS;
  });
  try {
    await client.connect();
    while (performance.now() < stopAt) {
      await client.query('INSERT INTO chaos_writes (epoch) VALUES ($1)', [String(term.epoch)]);
      run.writes += 1;
      await new Promise((r) => setTimeout(r, 5));
    }
  } catch {
    // the server went away: the work stops when the term's signal says so
    while (performance.now() < stopAt) await new Promise((r) => setTimeout(r, 5));
  } finally {
    run.end = performance.now();
    await client.end().catch(() => {});
  }
}

function overlaps(runs: readonly Run[]): string[] {
  return overlapsOf(runs, (r) => r.id).map(
    ({ a, b }) =>
      `${a.id}@${a.host} until ${a.end?.toFixed(0)} and ${b.id}@${b.host} from ${b.start.toFixed(0)}`,
  );
}

const locks: LeaderLock[] = [];
const proxies: FaultProxy[] = [];
afterEach(async () => {
  await Promise.all(locks.splice(0).map((l) => l.shutdown({ timeoutMs: 5000 })));
  await Promise.all(proxies.splice(0).map((p) => p.close()));
});

describe.each(['wait', 'poll'] as const)('failover chaos (%s mode)', (mode) => {
  it(
    `${ROUNDS} failovers under load, crash and split alternately: a leader on the new primary after each, never two runs at once`,
    async () => {
      await using cluster = await startCluster();
      let primary = cluster.primary;
      let standby = cluster.standbys[0] as ClusterNode;
      await primary.query('CREATE TABLE chaos_writes (epoch bigint, at timestamptz DEFAULT now())');
      // the host names: one forwarder per server
      const slot = new Map<ClusterNode, FaultProxy>();
      for (const node of [primary, standby]) {
        const proxy = await startFaultProxy({ host: node.host, port: node.port });
        proxies.push(proxy);
        slot.set(node, proxy);
      }
      const names = proxies.map((p) => `127.0.0.1:${p.port}`);
      const url = (hosts: string) => `postgres://postgres:${TEST_PASSWORD}@${hosts}/postgres`;
      const nameOf = (node: ClusterNode) => `127.0.0.1:${(slot.get(node) as FaultProxy).port}`;

      const runs: Run[] = [];
      const keys = randomKeys();
      const tag = testTag();
      for (let i = 0; i < CANDIDATES; i++) {
        const lock = new LeaderLock({
          connectionString: url(names.join(',')),
          ...keys,
          id: `${tag}-${i}`,
          acquireMode: mode,
          fencing: true,
        });
        lock.onError(() => {});
        lock.runWhileLeader(async (term) => {
          const run: Run = { id: lock.id, host: term.host, start: performance.now(), end: null, writes: 0 };
          runs.push(run);
          await work(term, run, url);
        });
        locks.push(lock);
        void lock.start();
      }

      const rows: string[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        const kind = round % 2 === 0 ? 'crash' : 'split';
        await eventually(
          () => runs.some((r) => r.end === null && r.host === nameOf(primary) && r.writes > 0),
          {
            timeoutMs: 15_000,
            what: `a leader writing on ${primary.name}`,
          },
        );
        if (kind === 'crash') await primary.kill();
        await standby.promote();
        const promotedAt = performance.now();
        await eventually(() => runs.some((r) => r.host === nameOf(standby) && r.start > promotedAt), {
          timeoutMs: 15_000,
          intervalMs: 2,
          what: `a leader on the promoted ${standby.name} (round ${round + 1}, ${kind})`,
        });
        const next = runs.find((r) => r.host === nameOf(standby) && r.start > promotedAt) as Run;
        const oldRuns = runs.filter((r) => r.host === nameOf(primary));
        const oldEnd = Math.max(...oldRuns.map((r) => r.end ?? Number.POSITIVE_INFINITY));
        if (kind === 'split') {
          await new Promise((r) => setTimeout(r, 1000));
          await primary.kill(); // fenced late by the failover tool
        }
        rows.push(
          `| ${round + 1} | ${kind} | ${(oldEnd - promotedAt).toFixed(0)} | ${(next.start - promotedAt).toFixed(0)} | ${(next.start - oldEnd).toFixed(0)} |`,
        );
        expect(overlaps(runs)).toEqual([]);
        // the old primary's name now points at a new standby of the new primary
        const fresh = await cluster.addStandby({ from: standby });
        const name = slot.get(primary) as FaultProxy;
        name.retarget({ host: fresh.host, port: fresh.port });
        slot.delete(primary);
        slot.set(fresh, name);
        primary = standby;
        standby = fresh;
      }
      console.log(
        [
          `[failover chaos ${mode}] ${ROUNDS} rounds, ${runs.length} runs, ${runs.reduce((n, r) => n + r.writes, 0)} writes`,
          '| round | fault | old work stopped (ms after promotion) | new leader started (ms after promotion) | margin (ms) |',
          '|---|---|---|---|---|',
          ...rows,
        ].join('\n'),
      );
      expect(overlaps(runs)).toEqual([]);
    },
    ROUNDS * 10_000,
  ); // about 2–3 s a round when the machine is quiet (95–140 s for 20 beside other work)
});
