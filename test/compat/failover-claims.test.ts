/**
 * Claims of docs/safety.md, "Primary failover (several hosts)", that failover.test.ts and
 * failover-edges.test.ts leave out, each against a real replicated cluster
 * (test/harness/cluster.ts):
 * - `takeoverDelayMs: 0` still leaves 350 ms (PEER_BOUND_MS) when another host is still a
 *   primary (a promotion beside an old primary that runs);
 * - a VIP listed beside its members counts as a second primary on the same timeline, and
 *   every acquisition holds `takeoverDelayMs + 350` ms;
 * - a primary whose machine vanishes (packets dropped) is noticed by a waiting follower at
 *   its wait's deadline, `waitSliceMs + queryTimeoutMs` after the wait began (the slice is
 *   `waitSliceMs` ± 10 %; poll mode: its next attempt plus `queryTimeoutMs`), which then
 *   finds the promoted server;
 * - a leader keeps one connection per other host and asks each every 100 ms; followers keep
 *   none.
 * Grants are timed by the `acquired` event that the granting statement itself commits on the
 * key's channel (docs/safety.md, "The proof of a clean handover"), heard by a LISTEN of the
 * test's own. Budgets that depend on load are relative to a bare connection (SCRAM and one
 * statement) measured in the same test.
 */
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { channelFor } from '../../src/core/keys.js';
import { FixedInterval, LeaderLock, type LeaderLockOptions } from '../../src/index.js';
import { expectNearBaseline } from '../harness/baseline.js';
import { type ClusterNode, promoteNow, startCluster } from '../harness/cluster.js';
import {
  type AdminClient,
  adminClient,
  assertNoSessions,
  eventually,
  lockHolders,
  randomKeys,
  testTag,
} from '../harness/db.js';
import { type FaultProxy, startFaultProxy } from '../harness/fault-proxy.js';
import { TEST_PASSWORD } from '../harness/pg-server.js';
import { median } from '../harness/stats.js';
import { TIMER_EARLY_MS } from '../harness/timers.js';

/** PEER_BOUND_MS (src/core/peers.ts): one peer interval (100 ms) and one probe deadline (250 ms). */
const PEER_BOUND_MS = 350;

type Keys = { key1: number; key2: number };
type Options = Partial<LeaderLockOptions> & Keys;

/** One run of leader work (performance.now()); it stops at its term's abort. */
interface Run {
  readonly id: string;
  readonly host: string;
  readonly start: number;
  end: number | null;
}

interface Reported {
  readonly perf: number;
  readonly error: Error;
}

/** Candidates of one test; all shut down after it (and checked for leaks where a test says so). */
function useCandidates() {
  const locks: LeaderLock[] = [];
  const runs: Run[] = [];
  /** `onTakeoverFence` delays, per lock id. */
  const fences = new Map<string, number[]>();
  /** What each lock reported to onError, with when (`perf`: performance.now()). */
  const errors = new Map<string, Reported[]>();
  let tag = testTag();
  afterEach(async () => {
    await Promise.all(locks.splice(0).map((l) => l.shutdown({ timeoutMs: 5000 })));
    runs.length = 0;
    fences.clear();
    errors.clear();
    tag = testTag();
  });
  return {
    runs,
    get tag() {
      return tag;
    },
    add(options: Options): LeaderLock {
      const lock = new LeaderLock({ id: `${tag}-${locks.length}`, ...options });
      fences.set(lock.id, []);
      errors.set(lock.id, []);
      lock.onError((error) => {
        errors.get(lock.id)?.push({ perf: performance.now(), error });
      });
      lock.onTakeoverFence(({ delayMs }) => {
        fences.get(lock.id)?.push(delayMs);
      });
      lock.runWhileLeader(async (term) => {
        const run: Run = { id: lock.id, host: term.host, start: performance.now(), end: null };
        runs.push(run);
        await new Promise((resolve) => term.signal.addEventListener('abort', resolve, { once: true }));
        run.end = performance.now();
      });
      locks.push(lock);
      void lock.start();
      return lock;
    },
    fences(lock: LeaderLock): number[] {
      return fences.get(lock.id) ?? [];
    },
    errors(lock: LeaderLock): Reported[] {
      return errors.get(lock.id) ?? [];
    },
    /** The first run of `lock`, once it has started. */
    async firstRun(lock: LeaderLock, what: string, timeoutMs = 15_000): Promise<Run> {
      await eventually(() => runs.some((r) => r.id === lock.id), { timeoutMs, intervalMs: 2, what }).catch(
        (err: Error) => {
          const said = (errors.get(lock.id) ?? []).map((e) => e.error.message);
          throw new Error(`${err.message}; ${lock.id} is ${lock.state}, errors: ${JSON.stringify(said)}`);
        },
      );
      return runs.find((r) => r.id === lock.id) as Run;
    },
  };
}

const hostOf = (node: { port: number }): string => `127.0.0.1:${node.port}`;

/** The baseline for budgets: a new connection (SCRAM) and one statement on `node`, median of 3. */
async function bareConnectMs(node: ClusterNode): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < 3; i++) {
    const t = performance.now();
    await node.query('SELECT 1');
    samples.push(performance.now() - t);
  }
  return median(samples);
}

/**
 * The peer probe's own work done by bare clients: a fresh connection to each of `nodes` in
 * parallel, each running one statement (median of 3), measured right after the case it is
 * the baseline of, so that it sees the same load.
 */
async function bareProbeMs(nodes: readonly ClusterNode[]): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < 3; i++) {
    const t = performance.now();
    await Promise.all(nodes.map((node) => node.query('SELECT pg_is_in_recovery()')));
    samples.push(performance.now() - t);
  }
  return median(samples);
}

/**
 * When each candidate was granted `keys` on `node`: the `acquired` event its granting
 * statement commits on the key's channel, heard by a LISTEN (performance.now(), first per id).
 */
async function listenGrants(node: ClusterNode, keys: Keys) {
  const client = new pg.Client({ connectionString: node.url, application_name: 'pgleaderlock-test-grants' });
  client.on('error', () => {});
  await client.connect();
  const grants = new Map<string, number>();
  client.on('notification', (msg) => {
    const at = performance.now();
    try {
      const event = JSON.parse(msg.payload ?? '') as { e?: unknown; id?: unknown };
      if (event.e === 'acquired' && typeof event.id === 'string' && !grants.has(event.id)) {
        grants.set(event.id, at);
      }
    } catch {
      // not ours
    }
  });
  await client.query(`LISTEN ${client.escapeIdentifier(channelFor(keys.key1, keys.key2))}`);
  return {
    /** When `lock` was granted, or throws if no grant was heard. */
    of(lock: LeaderLock): number {
      const at = grants.get(lock.id);
      if (at === undefined) throw new Error(`no grant heard for ${lock.id} on ${node.name}`);
      return at;
    },
    [Symbol.asyncDispose]: () => client.end().catch(() => {}),
  };
}

function disposable(proxy: FaultProxy): FaultProxy & AsyncDisposable {
  return Object.assign(proxy, { [Symbol.asyncDispose]: () => proxy.close() });
}

describe('primary failover claims', () => {
  const c = useCandidates();

  it('takeoverDelayMs: 0, promoted while the old primary runs: the new leader holds the lock 350 ms after its grant (not sooner, nor much later), and its work starts after the old work stopped', async () => {
    await using cluster = await startCluster();
    const [p, s] = [cluster.primary, cluster.standbys[0] as ClusterNode];
    const keys = randomKeys();
    const options: Options = { connectionString: cluster.url(), ...keys, takeoverDelayMs: 0 };
    // the old leader stops once it has seen the promotion (it could otherwise win on s first)
    const old = c.add({ ...options, autoReacquire: false });
    const oldRun = await c.firstRun(old, 'a leader on the old primary');
    expect(oldRun.host).toBe(hostOf(p));
    expect(c.fences(old)).toEqual([]); // takeoverDelayMs 0 and one primary: no delay at all

    await promoteNow(s);
    await using grants = await listenGrants(s, keys); // LISTEN is refused during recovery
    const fresh = c.add(options);
    const run = await c.firstRun(fresh, 'the new leader on the promoted server');
    const connectMs = await bareConnectMs(s);
    const held = run.start - grants.of(fresh);
    // after the grant: one probe of the other host (a new connection and a statement), the
    // delay, its closing ownership check (a round trip), and 100 ms of timers and callbacks
    const budget = PEER_BOUND_MS + 2 * connectMs + 100;
    console.log(
      `[failover claims] takeoverDelayMs 0 beside an old primary: term opened ${held.toFixed(0)} ms after the grant (budget ${PEER_BOUND_MS}–${budget.toFixed(0)} ms; bare connect ${connectMs.toFixed(0)} ms)`,
    );
    expect(run.host).toBe(hostOf(s));
    expect(c.fences(fresh)).toEqual([PEER_BOUND_MS]);
    expect(held).toBeGreaterThanOrEqual(PEER_BOUND_MS - TIMER_EARLY_MS);
    // the baseline: the delay plus two bare connections (connect, SCRAM, a statement)
    expectNearBaseline(
      'the term opened after the grant, against the 350 ms bound plus two bare connections',
      { subject: held, baseline: PEER_BOUND_MS + 2 * connectMs },
      { overMs: 100 },
    );
    expect(oldRun.end).not.toBeNull();
    expect(run.start).toBeGreaterThan(oldRun.end as number);
  }, 45_000);

  it('a VIP listed beside its members counts as a second primary on the same timeline: every acquisition holds takeoverDelayMs + 350 ms (600 ms), a clean handover included, where the members alone hold 250 ms and 0', async () => {
    await using cluster = await startCluster();
    const [p, s] = [cluster.primary, cluster.standbys[0] as ClusterNode];
    // the VIP: another address for the primary (a TCP forward)
    await using vip = disposable(await startFaultProxy({ host: p.host, port: p.port }));
    const members = cluster.url();
    const withVip = `postgres://postgres:${encodeURIComponent(TEST_PASSWORD)}@127.0.0.1:${vip.port},${hostOf(p)},${hostOf(s)}/postgres`;
    const cases = [
      { label: 'members only', url: members, host: hostOf(p), first: 250, clean: 0, others: [s] },
      {
        label: 'VIP listed first',
        url: withVip,
        host: `127.0.0.1:${vip.port}`,
        first: 600,
        clean: 600,
        others: [p, s],
      },
    ];
    for (const { label, url, host, first, clean, others } of cases) {
      // the baseline before the case too: the larger of before and after absorbs a burst of load
      const probeBefore = await bareProbeMs(others);
      const connectBefore = await bareConnectMs(p);
      const keys = randomKeys();
      await using grants = await listenGrants(p, keys);
      const a = c.add({ connectionString: url, ...keys });
      const aRun = await c.firstRun(a, `the first leader (${label})`);
      const b = c.add({ connectionString: url, ...keys });
      // queued server-side (so it listens on the key's channel: it hears the release)
      await eventually(async () => (await lockHolders(p.url, keys.key1, keys.key2)).some((h) => !h.granted), {
        what: `the follower to queue (${label})`,
      });
      await a.stepDown(); // a clean handover: the release is proven
      const bRun = await c.firstRun(b, `the next leader (${label})`);
      const heldA = aRun.start - grants.of(a);
      const heldB = bRun.start - grants.of(b);
      // the baseline, measured before and after the case (the larger): the probe of the other
      // hosts by bare clients, and the closing check counted as one more bare connection
      const probeMs = Math.max(probeBefore, await bareProbeMs(others));
      const connectMs = Math.max(connectBefore, await bareConnectMs(p));
      console.log(
        `[failover claims] ${label}: first holder's term opened ${heldA.toFixed(0)} ms after its grant, the clean handover's ${heldB.toFixed(0)} ms after it (bare probe of ${others.length} host(s) ${probeMs.toFixed(0)} ms, bare connect ${connectMs.toFixed(0)} ms)`,
      );
      // the first listed among primaries on equal timelines: the VIP
      expect([aRun.host, bRun.host]).toEqual([host, host]);
      expect(c.fences(a)).toEqual([first]);
      expect(c.fences(b)).toEqual(clean === 0 ? [] : [clean]);
      // after a grant: a probe of each other host (new connections, in parallel), the delay,
      // its closing check, and 100 ms of timers and callbacks
      for (const [held, delay] of [
        [heldA, first],
        [heldB, clean],
      ] as const) {
        expect(held).toBeGreaterThanOrEqual(delay - TIMER_EARLY_MS);
        expectNearBaseline(
          `${label}: the term opened after the grant, against its ${delay} ms delay plus a bare probe of the other hosts and a bare connection`,
          { subject: held, baseline: delay + probeMs + connectMs },
          { overMs: 100 },
        );
      }
      await Promise.all([a.shutdown(), b.shutdown()]);
    }
  }, 45_000);
});

describe.each(['wait', 'poll'] as const)('a primary whose machine vanishes (%s mode)', (mode) => {
  const c = useCandidates();
  const SLICE_MS = 1000;
  const QUERY_TIMEOUT_MS = 500;
  /** Poll mode: the retry strategy's interval, the time between two attempts. */
  const POLL_MS = 200;
  /** Wait mode: the back-off after an error, so that the promoted server is found at once. */
  const BACKOFF_MS = 50;

  it(mode === 'wait'
    ? 'a waiting follower notices at its wait deadline, waitSliceMs (± 10 %) + queryTimeoutMs after the slice began, then leads on the promoted server'
    : 'a polling follower notices at its next attempt plus queryTimeoutMs, then leads on the promoted server', async () => {
    await using cluster = await startCluster();
    const [p, s] = [cluster.primary, cluster.standbys[0] as ClusterNode];
    // the follower reaches the primary's machine through a proxy that will drop every packet
    await using proxy = disposable(await startFaultProxy({ host: p.host, port: p.port }));
    await using admin = await adminClient(p.url);
    const keys = randomKeys();
    // the lock is held on the primary by a client of the test's own, which stays up
    await using holder = await adminClient(p.url);
    await holder.query('SELECT pg_advisory_lock($1::int4, $2::int4)', [keys.key1, keys.key2]);
    const url = `postgres://postgres:${encodeURIComponent(TEST_PASSWORD)}@127.0.0.1:${proxy.port},${hostOf(s)}/postgres`;
    const follower = c.add({
      connectionString: url,
      ...keys,
      acquireMode: mode,
      waitSliceMs: SLICE_MS,
      queryTimeoutMs: QUERY_TIMEOUT_MS,
      takeoverDelayMs: 0,
      retryStrategy: new FixedInterval({ intervalMs: mode === 'wait' ? BACKOFF_MS : POLL_MS }),
    });
    const backend = (): Promise<BackendRow[]> => backendsOf(admin, `pgleaderlock:${follower.id}`);
    let cutAt: number;
    let sliceStart = Number.NaN;
    if (mode === 'wait') {
      // cut right after a slice begins: the first wait seen, then the next one
      let seen: number | null = null;
      await eventually(
        async () => {
          const [row] = (await backend()).filter((r) => r.waiting);
          if (!row) return false;
          seen ??= row.queryStart;
          return row.queryStart !== seen;
        },
        { timeoutMs: 10_000, intervalMs: 1, what: 'the follower to begin a new wait slice' },
      );
      proxy.blackhole();
      cutAt = performance.now();
      const [row] = await backend();
      expect(row?.query).toContain('pg_advisory_lock(');
      sliceStart = row?.startedAt ?? Number.NaN;
    } else {
      await eventually(async () => (await backend()).length === 1 && c.errors(follower).length === 0, {
        what: 'the follower polling on the primary',
      });
      await new Promise((r) => setTimeout(r, 2 * POLL_MS)); // a few attempts answered
      proxy.blackhole();
      cutAt = performance.now();
    }
    await promoteNow(s);

    await eventually(() => c.errors(follower).length > 0, {
      timeoutMs: 10_000,
      intervalMs: 2,
      what: 'the follower to notice',
    });
    const [noticed] = c.errors(follower);
    expect(noticed?.error).toMatchObject({ code: 'ERR_PGLEADERLOCK_QUERY_TIMEOUT' });
    const noticedAt = noticed?.perf as number;
    const run = await c.firstRun(follower, 'the follower to lead on the promoted server');
    const ledAfter = run.start - (noticed?.perf as number);
    const connectMs = await bareConnectMs(s);
    // after the deadline: the back-off, a survey (the promoted server answers, the vanished
    // host gets 250 ms more), the session's connections, the grant's probe of the vanished
    // host (250 ms), no delay: 4 bare connections and 150 ms of timers and callbacks
    const leadBudget = (mode === 'wait' ? BACKOFF_MS : POLL_MS) + 250 + 250 + 4 * connectMs + 150;
    expect(run.host).toBe(hostOf(s));
    if (mode === 'wait') {
      const waited = noticedAt - sliceStart;
      console.log(
        `[failover claims] vanished primary, wait mode: noticed ${waited.toFixed(0)} ms after the slice began (${(noticedAt - cutAt).toFixed(0)} ms after the cut; bound ${0.9 * SLICE_MS + QUERY_TIMEOUT_MS}–${1.1 * SLICE_MS + QUERY_TIMEOUT_MS} ms), led on the promoted server ${ledAfter.toFixed(0)} ms later (budget ${leadBudget.toFixed(0)} ms)`,
      );
      // the slice is waitSliceMs ± 10 % (session.ts); 5 ms for the two clocks' readings,
      // 100 ms for a late timer on a loaded machine
      expect(waited).toBeGreaterThanOrEqual(0.9 * SLICE_MS + QUERY_TIMEOUT_MS - 5);
      // bound: compat/failover-claims-vanished-wait
      expect(waited).toBeLessThanOrEqual(1.1 * SLICE_MS + QUERY_TIMEOUT_MS + 100);
    } else {
      const waited = noticedAt - cutAt;
      console.log(
        `[failover claims] vanished primary, poll mode: noticed ${waited.toFixed(0)} ms after the cut (bound ${QUERY_TIMEOUT_MS}–${POLL_MS + QUERY_TIMEOUT_MS} ms), led on the promoted server ${ledAfter.toFixed(0)} ms later (budget ${leadBudget.toFixed(0)} ms)`,
      );
      // an attempt sent just before the cut may have lost its answer: 20 ms
      expect(waited).toBeGreaterThanOrEqual(QUERY_TIMEOUT_MS - 20);
      // bound: compat/failover-claims-vanished-poll
      expect(waited).toBeLessThanOrEqual(POLL_MS + QUERY_TIMEOUT_MS + 100);
    }
    expectNearBaseline(
      `${mode} mode: led on the promoted server after the deadline, against its timers plus four bare connections`,
      { subject: ledAfter, baseline: leadBudget - 150 },
      { overMs: 150 },
    );
  }, 45_000);
});

interface BackendRow {
  pid: number;
  query: string;
  /** The server's `query_start` (to tell one statement from the next). */
  queryStart: number;
  /**
   * When that statement started, on this process's monotonic clock (performance.now()):
   * how long ago on the server's clock (two readings milliseconds apart), taken from before
   * this query was sent, so never later than the start. Not the server's wall-clock time
   * against this process's: the machine's wall clock steps (docs/testing.md).
   */
  startedAt: number;
  waiting: boolean;
}

/** Backends whose application_name is `app`: what each ran last, since when, whether it waits on a lock. */
async function backendsOf(admin: AdminClient, app: string): Promise<BackendRow[]> {
  const sent = performance.now();
  const rows = await admin.query<{
    pid: number;
    query: string;
    query_start: Date | null;
    age: number | null;
    waiting: boolean;
  }>(
    `SELECT pid, query, query_start, extract(epoch FROM clock_timestamp() - query_start) * 1000 AS age,
       wait_event_type IS NOT DISTINCT FROM 'Lock' AS waiting
       FROM pg_stat_activity WHERE application_name = $1`,
    [app],
  );
  return rows.map((r) => ({
    pid: r.pid,
    query: r.query,
    queryStart: r.query_start?.getTime() ?? Number.NaN,
    startedAt: r.age === null ? Number.NaN : sent - Number(r.age),
    waiting: r.waiting,
  }));
}

/** How the peer watch's statements begin (src/core/peers.ts). */
const PEER_STATEMENT = '/* pgleaderlock:peer */';

/** What `app`-prefixed backends did on each node during a window. */
interface Seen {
  /** Per node (index), per application_name: the most backends at once, and their pids. */
  readonly most: Map<string, number>[];
  readonly pids: Map<string, Map<number, string>>[];
  /** Per node, per application_name: distinct start times of peer-watch statements. */
  readonly peerStatements: Map<string, Set<number>>[];
}

/** Sample `pg_stat_activity` on every node every few milliseconds for `windowMs`. */
async function watchBackends(
  admins: readonly AdminClient[],
  prefix: string,
  windowMs: number,
): Promise<Seen> {
  const seen: Seen = {
    most: admins.map(() => new Map()),
    pids: admins.map(() => new Map()),
    peerStatements: admins.map(() => new Map()),
  };
  const until = performance.now() + windowMs;
  while (performance.now() < until) {
    await Promise.all(
      admins.map(async (admin, i) => {
        const rows = await admin.query<{ app: string; pid: number; query: string; query_start: Date | null }>(
          `SELECT application_name AS app, pid, query, query_start FROM pg_stat_activity
            WHERE application_name LIKE $1`,
          [`${prefix}%`],
        );
        const count = new Map<string, number>();
        for (const r of rows) {
          count.set(r.app, (count.get(r.app) ?? 0) + 1);
          const pids = seen.pids[i] as Map<string, Map<number, string>>;
          const mine = pids.get(r.app) ?? new Map<number, string>();
          if (!mine.has(r.pid)) mine.set(r.pid, r.query.slice(0, 40)); // what it ran first
          pids.set(r.app, mine);
          if (r.query.startsWith(PEER_STATEMENT) && r.query_start) {
            const starts = seen.peerStatements[i] as Map<string, Set<number>>;
            starts.set(r.app, (starts.get(r.app) ?? new Set()).add(r.query_start.getTime()));
          }
        }
        const most = seen.most[i] as Map<string, number>;
        for (const [app, n] of count) most.set(app, Math.max(most.get(app) ?? 0, n));
      }),
    );
    await new Promise((r) => setTimeout(r, 5));
  }
  return seen;
}

describe.each(['wait', 'poll'] as const)('the peer watch (%s mode)', (mode) => {
  const c = useCandidates();
  const WINDOW_MS = 1500;

  it('a leader keeps one connection per other host, asked every 100 ms; followers keep none on the other hosts, and a leader that steps down closes its own', async () => {
    await using cluster = await startCluster({ standbys: 2 });
    const [p, ...standbys] = cluster.nodes as [ClusterNode, ...ClusterNode[]];
    const keys = randomKeys();
    const options: Options = {
      connectionString: cluster.url(),
      ...keys,
      acquireMode: mode,
      takeoverDelayMs: 0,
      // poll mode: an attempt every 100 ms, to show that attempts reuse the follower's session
      ...(mode === 'poll' ? { retryStrategy: new FixedInterval({ intervalMs: 100 }) } : {}),
    };
    const admins = await Promise.all(cluster.nodes.map((n) => adminClient(n.url)));
    try {
      const first = c.add(options);
      await c.firstRun(first, 'a leader');
      const followers = [c.add(options), c.add(options)];
      const app = (lock: LeaderLock): string => `pgleaderlock:${lock.id}`;
      const settled = async (leader: LeaderLock, others: LeaderLock[]): Promise<void> => {
        await eventually(
          async () => {
            const [onPrimary, ...onStandbys] = await Promise.all(
              admins.map((a) =>
                a.query<{ app: string; query: string }>(
                  'SELECT application_name AS app, query FROM pg_stat_activity WHERE application_name LIKE $1',
                  [`pgleaderlock:${c.tag}%`],
                ),
              ),
            );
            const apps = (rows: { app: string }[] | undefined) => (rows ?? []).map((r) => r.app).sort();
            // on each standby, the leader's watch connection alone (it has run a probe): not
            // the grant's probe connection, closed before the term opened
            return (
              leader.isLeader &&
              others.every((l) => l.state === 'acquiring' || l.state === 'follower') &&
              JSON.stringify(apps(onPrimary)) === JSON.stringify([leader, ...others].map(app).sort()) &&
              onStandbys.every(
                (rows) =>
                  rows.length === 1 &&
                  rows[0]?.app === app(leader) &&
                  rows[0].query.startsWith(PEER_STATEMENT),
              )
            );
          },
          {
            timeoutMs: 10_000,
            what: `one session each on ${p.name}, and only ${leader.id}'s on the standbys`,
          },
        );
      };
      const check = (seen: Seen, leader: LeaderLock, others: LeaderLock[]): void => {
        for (const lock of [leader, ...others]) {
          expect(seen.most[0]?.get(app(lock)), `${lock.id} on ${p.name}`).toBe(1);
          const pids = seen.pids[0]?.get(app(lock));
          expect(pids?.size, `${lock.id}'s backends on ${p.name}: ${JSON.stringify([...(pids ?? [])])}`).toBe(
            1,
          );
        }
        standbys.forEach((node, k) => {
          const i = k + 1;
          const pids = seen.pids[i]?.get(app(leader));
          expect(
            pids?.size,
            `the leader's backends on ${node.name}: ${JSON.stringify([...(pids ?? [])])}`,
          ).toBe(1);
          for (const lock of others)
            expect(seen.most[i]?.get(app(lock)), `${lock.id} on ${node.name}`).toBeUndefined();
          // one probe per interval (100 ms) after the round before it: 15 in 1.5 s when idle
          const probes = seen.peerStatements[i]?.get(app(leader))?.size ?? 0;
          expect(probes, `the leader's probes of ${node.name} in ${WINDOW_MS} ms`).toBeGreaterThanOrEqual(
            Math.floor((0.6 * WINDOW_MS) / 100),
          );
          expect(probes).toBeLessThanOrEqual(WINDOW_MS / 100 + 1);
        });
      };

      await settled(first, followers);
      const before = await watchBackends(admins, `pgleaderlock:${c.tag}`, WINDOW_MS);
      check(before, first, followers);

      await first.stepDown();
      await eventually(() => followers.some((l) => l.isLeader), { what: 'the next leader' });
      const next = followers.find((l) => l.isLeader) as LeaderLock;
      const rest = [first, ...followers.filter((l) => l !== next)];
      await settled(next, rest);
      const after = await watchBackends(admins, `pgleaderlock:${c.tag}`, WINDOW_MS);
      check(after, next, rest);
      console.log(
        `[failover claims] peer watch (${mode}): leader's probes per standby in ${WINDOW_MS} ms: ` +
          `${standbys.map((_, k) => before.peerStatements[k + 1]?.get(app(first))?.size).join(', ')} (first leader), ` +
          `${standbys.map((_, k) => after.peerStatements[k + 1]?.get(app(next))?.size).join(', ')} (next)`,
      );
      await Promise.all([first, ...followers].map((l) => l.shutdown()));
      for (const node of cluster.nodes) await assertNoSessions(c.tag, node.url);
    } finally {
      await Promise.all(admins.map((a) => a[Symbol.asyncDispose]()));
    }
  }, 60_000);
});
