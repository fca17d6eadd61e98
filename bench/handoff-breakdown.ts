/**
 * Where a graceful handoff's time goes (part of `npm run bench`): a leader's `stepDown()`
 * to the waiting follower's `onAcquired`, split at what each side does, from the lock's
 * `diagnostics_channel` state events and the statements on its own clients (through
 * `connect`); next to two bare-`pg` references measured in the same loop: the physical
 * limit (an unlock granting a waiter) and the same two statements carrying the events a
 * handoff must commit (the holder's `released` event committed before its unlock, the
 * waiter's `acquired` event committed with its grant: handover.ts).
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import pg from 'pg';
import { CHANNELS, LeaderLock, type StateMessage } from '../src/index.js';
import { randomKeys } from '../test/harness/db.js';
import { interceptingConnect, statementName } from '../test/harness/intercept.js';

type Keys = { key1: number; key2: number };
type Stamps = Map<string, number>;

/** The phases, in order; each is the time from the stamp before it. */
export const PHASES = [
  ['leader: stepDown() → term ended (state releasing)', 'call', 'L releasing'],
  ['leader: term ended → release sent (runs returned, callbacks)', 'L releasing', 'L send release'],
  ['leader: release round trip (released event committed, then unlock)', 'L send release', 'L done release'],
  [
    'follower: release sent → grant received (its acquired event committed with it)',
    'L send release',
    'F done wait-lock',
  ],
  [
    'follower: grant received → term open (events read, takeover check, lease)',
    'F done wait-lock',
    'F leader',
  ],
  ['follower: term open → onAcquired', 'F leader', 'F onAcquired'],
  ['total: stepDown() → onAcquired', 'call', 'F onAcquired'],
] as const;

/** A `connect` for a lock that stamps each named statement's send and completion. */
function stamping(url: string, who: string, stamps: Stamps) {
  return interceptingConnect(url, (args, send) => {
    const name = statementName(args);
    stamps.set(`${who} send ${name}`, performance.now());
    const out = send(...args);
    if (out instanceof Promise) {
      void out.then(
        () => stamps.set(`${who} done ${name}`, performance.now()),
        () => {},
      );
    }
    return out;
  });
}

async function lockRows(admin: pg.Client, keys: Keys): Promise<number> {
  const { rows } = await admin.query(
    `SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::int4::oid AND objid = $2::int4::oid AND objsubid = 2`,
    [keys.key1, keys.key2],
  );
  return rows.length;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One stepDown handoff, stamped. */
async function handoffOnce(url: string, admin: pg.Client): Promise<Stamps> {
  const keys = randomKeys();
  const stamps: Stamps = new Map();
  const ids = { L: `bd-l-${keys.key2}`, F: `bd-f-${keys.key2}` };
  const onState = (m: unknown) => {
    const s = m as StateMessage;
    const who = s.id === ids.L ? 'L' : s.id === ids.F ? 'F' : null;
    if (who && !stamps.has(`${who} ${s.to}`)) stamps.set(`${who} ${s.to}`, performance.now());
  };
  const common = { ...keys, healthIntervalMs: 1000, queryTimeoutMs: 1000 };
  const leader = new LeaderLock({
    ...common,
    id: ids.L,
    autoReacquire: false,
    connect: stamping(url, 'L', stamps),
  });
  const follower = new LeaderLock({ ...common, id: ids.F, connect: stamping(url, 'F', stamps) });
  await leader.start();
  await leader.waitForLeadership();
  const acquired = new Promise<void>((resolve) =>
    follower.onAcquired(() => {
      stamps.set('F onAcquired', performance.now());
      resolve();
    }),
  );
  await follower.start();
  while ((await lockRows(admin, keys)) < 2) await sleep(2);
  await sleep(5);
  stamps.clear();
  diagnosticsChannel.subscribe(CHANNELS.state, onState);
  try {
    stamps.set('call', performance.now());
    void leader.stepDown();
    await acquired;
  } finally {
    diagnosticsChannel.unsubscribe(CHANNELS.state, onState);
  }
  await Promise.all([leader.shutdown(), follower.shutdown()]);
  return stamps;
}

/**
 * Bare `pg` clients: from the holder sending its statement to the waiter's returning.
 * `events`: the holder commits a NOTIFY before its unlock, and the waiter's statement
 * commits one with its grant, as a handoff's do.
 */
async function bareOnce(url: string, admin: pg.Client, events: boolean): Promise<number> {
  const k = randomKeys();
  const connect = async () => {
    const c = new pg.Client({ connectionString: url });
    c.on('error', () => {});
    await c.connect();
    if (events) await c.query('LISTEN pgleaderlock_bench');
    return c;
  };
  const holder = await connect();
  const waiter = await connect();
  await holder.query('SELECT pg_advisory_lock($1, $2)', [k.key1, k.key2]);
  const wait = events
    ? `SELECT (SELECT true FROM pg_advisory_lock(${k.key1}, ${k.key2}) w), (SELECT count(*) FROM pg_notify('pgleaderlock_bench', 'acquired'))`
    : `SELECT pg_advisory_lock(${k.key1}, ${k.key2})`;
  const granted = waiter.query(wait).then(() => performance.now());
  while ((await lockRows(admin, k)) < 2) await sleep(2);
  const release = events
    ? `BEGIN; SELECT pg_notify('pgleaderlock_bench', 'released'); COMMIT; SELECT pg_advisory_unlock(${k.key1}, ${k.key2})`
    : `SELECT pg_advisory_unlock(${k.key1}, ${k.key2})`;
  const t0 = performance.now();
  await holder.query(release);
  const took = (await granted) - t0;
  await Promise.all([holder.end(), waiter.end()]);
  return took;
}

export interface Breakdown {
  /** Per phase (PHASES order): the times of each trial, ms. */
  phases: number[][];
  limit: number[];
  withEvents: number[];
}

/** `trials` stamped handoffs, each after one trial of each bare reference. */
export async function handoffBreakdown(url: string, trials: number): Promise<Breakdown> {
  const admin = new pg.Client({ connectionString: url });
  admin.on('error', () => {});
  await admin.connect();
  const phases: number[][] = PHASES.map(() => []);
  const limit: number[] = [];
  const withEvents: number[] = [];
  try {
    for (let i = 0; i < trials; i++) {
      limit.push(await bareOnce(url, admin, false));
      withEvents.push(await bareOnce(url, admin, true));
      const s = await handoffOnce(url, admin);
      PHASES.forEach(([, from, to], j) => {
        const a = s.get(from);
        const b = s.get(to);
        if (a !== undefined && b !== undefined) phases[j]?.push(b - a);
      });
    }
  } finally {
    await admin.end();
  }
  return { phases, limit, withEvents };
}
