/**
 * Claims of docs/partitions.md checked at unit level:
 *  - "Sizing": when the lock table is full (SQLSTATE 53200) the worker gives back what the
 *    failed take got, reports `ERR_PGLEADERLOCK_LOCK_TABLE_FULL`, and waits 2 ×
 *    `healthIntervalMs` before the next take, doubling up to 60 s, reset once a take
 *    succeeds. The ownership protocol (src/partitions/ownership.ts) runs against a fake
 *    member session that answers its statements like a server whose lock table holds
 *    `capacity` more entries, on a manual clock.
 *  - "Limits": the assignment of 1,024 partitions over 8 workers takes 3–7 ms.
 */
import { describe, expect, it } from 'vitest';
import { Callbacks } from '../../src/core/callbacks.js';
import { sqlStateOf } from '../../src/core/errors.js';
import { Lease } from '../../src/core/lease.js';
import { assign, bestFirst } from '../../src/partitions/assign.js';
import type { MemberSession } from '../../src/partitions/member-session.js';
import { resolvePartitionOptions } from '../../src/partitions/options.js';
import { FULL_BACKOFF_MAX_MS, Ownership } from '../../src/partitions/ownership.js';
import { GIVE, keysOf, memberAppName, RECONCILE, slotOf, TAKE } from '../../src/partitions/sql.js';
import { type PartitionCallbackMap, Terms } from '../../src/partitions/terms.js';
import { FakeClock } from './fakes.js';

const quiet = { debug() {}, info() {}, warn() {}, error() {} };

/**
 * The statements of one worker's member session, answered as a server would whose lock table
 * has room for `capacity` more entries: a take gets free partitions in order until the table
 * is full, then fails with 53200, keeping what it got (session locks ignore the rollback).
 */
class FakeMemberSession {
  readonly token = 'tok';
  readonly pid = 11;
  readonly timeline = 1;
  readonly safety = { leaseMs: Number.POSITIVE_INFINITY };
  /** Partitions this session holds. */
  readonly held = new Set<number>();
  /** Partitions another session holds (a try-lock on them returns false). */
  others = new Set<number>();
  capacity = 0;
  /** When each take statement ran (clock time). */
  readonly takes: number[] = [];
  reconciles = 0;

  constructor(
    private readonly clock: FakeClock,
    private readonly id: string,
    private readonly partitions: number,
  ) {}

  query(text: string, values: unknown[] = []): Promise<unknown[]> {
    if (text === RECONCILE) {
      this.reconciles += 1;
      const member = {
        app: memberAppName(this.id, this.partitions),
        slot: String(slotOf(this.id)),
        pid: this.pid,
      };
      return Promise.resolve([
        { members: [member], held: [...this.held].sort((a, b) => a - b), pid: this.pid, same: true },
      ]);
    }
    if (text === TAKE) {
      this.takes.push(this.clock.now());
      const taken: number[] = [];
      for (const p of values[1] as number[]) {
        if (this.others.has(p) || this.held.has(p)) continue;
        if (this.capacity === 0) {
          const err = Object.assign(new Error('out of shared memory'), {
            code: '53200',
            hint: 'You might need to increase "max_locks_per_transaction".',
          });
          return Promise.reject(err);
        }
        this.capacity -= 1;
        this.held.add(p);
        taken.push(p);
      }
      return Promise.resolve([{ taken: taken.length ? taken : null, pid: this.pid, same: true }]);
    }
    if (text === GIVE) {
      for (const p of values[1] as number[]) {
        if (this.held.delete(p)) this.capacity += 1;
      }
      return Promise.resolve([{ released: 0 }]);
    }
    throw new Error(`unexpected statement: ${text.slice(0, 60)}`);
  }

  verify(): Promise<void> {
    return Promise.resolve();
  }
  notify(): Promise<unknown> {
    return Promise.resolve([]);
  }
  script(): Promise<void> {
    return Promise.resolve();
  }
}

/** One worker's ownership protocol, alone in its group, on the fake session and clock. */
function worker(healthIntervalMs: number) {
  const clock = new FakeClock();
  const o = resolvePartitionOptions({
    name: 'full-table',
    partitions: 8,
    id: 'w1',
    connectionString: 'postgres://u@h/db',
    clock,
    healthIntervalMs,
    takeoverDelayMs: 0,
  });
  const callbacks = new Callbacks<PartitionCallbackMap>(quiet, clock, o.callbackTimeoutMs);
  const lease = new Lease(clock, () => {});
  const terms = new Terms({ name: o.name, id: o.id }, o.drainTimeoutMs, quiet, clock, callbacks, lease);
  const errors: Error[] = [];
  const ownership = new Ownership(
    o,
    keysOf(o.name),
    terms,
    lease,
    (e) => errors.push(e),
    () => 0,
  );
  const fake = new FakeMemberSession(clock, o.id, o.partitions);
  const session = fake as unknown as MemberSession;
  /** Reconcile every `healthIntervalMs` (as the worker's loop does) until `until` on the clock. */
  const runUntil = async (until: number): Promise<void> => {
    while (clock.now() < until) {
      await ownership.reconcile(session, false);
      await clock.advance(healthIntervalMs);
    }
  };
  return { clock, fake, errors, terms, runUntil };
}

/** The seconds each report announces ("Next attempt in N s"). */
const announced = (errors: readonly Error[]): number[] =>
  errors.map((e) => Number(/Next attempt in (\d+) s/.exec(e.message)?.[1] ?? Number.NaN));

describe('lock table full (SQLSTATE 53200): the back-off of takes', () => {
  it('waits 2 × healthIntervalMs, doubling to 60 s (one take per back-off, none between), giving back what each failed take got', async () => {
    const w = worker(1000);
    w.fake.capacity = 3; // room for 3 of the 8: each take gets 3, then fails
    await w.runUntil(250_000);
    // reconciles went on every second (the lease renewed); takes only once each back-off ended
    expect(w.fake.reconciles).toBe(250);
    expect(w.fake.takes).toEqual([0, 2000, 6000, 14_000, 30_000, 62_000, 122_000, 182_000, 242_000]);
    const gaps = w.fake.takes.slice(1).map((t, i) => t - (w.fake.takes[i] as number));
    expect(gaps).toEqual([2000, 4000, 8000, 16_000, 32_000, 60_000, 60_000, 60_000]);
    expect(Math.max(...gaps)).toBe(FULL_BACKOFF_MAX_MS);
    expect(w.errors.map((e) => (e as Error & { code?: string }).code)).toEqual(
      Array(9).fill('ERR_PGLEADERLOCK_LOCK_TABLE_FULL'),
    );
    expect(w.errors.every((e) => sqlStateOf(e.cause) === '53200')).toBe(true);
    expect(announced(w.errors)).toEqual([2, 4, 8, 16, 32, 60, 60, 60, 60]);
    // each failed take's 3 locks were given back: nothing held, the table's room restored
    expect(w.fake.held.size).toBe(0);
    expect(w.fake.capacity).toBe(3);
    expect(w.terms.partitions()).toEqual([]);
  });

  it('starts from 2 × healthIntervalMs whatever the interval (300 ms: 600, 1200, 2400 …)', async () => {
    const w = worker(300);
    await w.runUntil(10_000);
    const gaps = w.fake.takes.slice(1).map((t, i) => t - (w.fake.takes[i] as number));
    expect(gaps).toEqual([600, 1200, 2400, 4800]);
  });

  it('resets once a take succeeds: the next full table waits 2 × healthIntervalMs again, not the doubled back-off', async () => {
    const w = worker(1000);
    await w.runUntil(200_000); // full: back-off at its 60 s cap (the last take at 182 s)
    expect(w.fake.takes.at(-1)).toBe(182_000);
    expect(announced(w.errors).at(-1)).toBe(60);
    // room for 4; the other 4 partitions held by another session (a try-lock returns false)
    w.fake.capacity = 4;
    w.fake.others = new Set([4, 5, 6, 7]);
    await w.runUntil(243_000);
    expect(w.fake.takes.at(-1)).toBe(242_000); // the capped back-off ended: a take that succeeds
    expect([...w.fake.held].sort()).toEqual([0, 1, 2, 3]);
    await w.clock.advance(0);
    expect(w.terms.partitions().sort()).toEqual([0, 1, 2, 3]);
    const reports = w.errors.length;
    // the other session lets go of 4–7 while the table is full again: the next take fails
    w.fake.others = new Set();
    await w.runUntil(250_000);
    expect(w.fake.takes.filter((t) => t > 242_000)).toEqual([243_000, 245_000, 249_000]);
    expect(announced(w.errors.slice(reports))).toEqual([2, 4, 8]);
    expect([...w.fake.held].sort()).toEqual([0, 1, 2, 3]); // what the failed takes got was given back
  });
});

describe('assignment beyond 2²¹ pairs (partitions × members)', () => {
  it('the order: the higher score first, then the lower index, also past 2²¹ pairs', () => {
    const scores = Uint32Array.from({ length: 3000 }, (_, k) => (k * 2654435761) % 977); // many ties
    const expected = [...scores.keys()].sort(
      (a, b) => (scores[b] as number) - (scores[a] as number) || a - b,
    );
    expect([...bestFirst(scores)]).toEqual(expected);
    const big = Uint32Array.from({ length: 2 ** 21 + 5 }, (_, k) => (k % 7) * 2 ** 29); // 3 low bits' worth of ties
    const order = bestFirst(big);
    expect([...order.slice(0, 3)]).toEqual([6, 13, 20]); // the top score (6 · 2²⁹), lowest indices first
    expect(order[order.length - 1]).toBe(2 ** 21 + 4 - ((2 ** 21 + 4) % 7)); // the last index scoring 0
  });

  it('4,096 partitions over 512 members (2²¹ pairs): balanced, 8 each, every partition once', () => {
    const members = Array.from({ length: 512 }, (_, i) => `worker-${i}`);
    const out = assign(members, 4096);
    const all = [...out.values()].flat().sort((a, b) => a - b);
    expect(all).toEqual(Array.from({ length: 4096 }, (_, p) => p));
    expect(new Set([...out.values()].map((l) => l.length))).toEqual(new Set([8]));
  });
});
