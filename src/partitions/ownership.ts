/**
 * The ownership protocol of one worker, on its member session (member-session.ts): membership
 * read from `pg_locks`, the assignment (assign.ts), hand-backs drained before the unlock,
 * takes under the takeover delay unless handed over cleanly (handovers.ts), fencing epochs
 * (epochs.ts), the lease (core/lease.ts), and a clean leave. The worker's lifecycle (sessions,
 * retries, the public API) is partitioned.ts.
 */
import { sqlStateOf } from '../core/errors.js';
import type { Lease } from '../core/lease.js';
import { termDelayMs } from '../core/peers.js';
import { assign } from './assign.js';
import { bumpPartitionsSql, epochsOf } from './epochs.js';
import { lockTableFull, PartitionMismatchError } from './errors.js';
import { Handovers, partitionNotices } from './handovers.js';
import type { MemberSession } from './member-session.js';
import type { ResolvedPartitionOptions } from './options.js';
import {
  GIVE,
  giveScript,
  type keysOf,
  type MemberRow,
  parseMember,
  RECONCILE,
  slotOf,
  TAKE,
} from './sql.js';

/** The longest wait between two attempts to take partitions while the lock table is full. */
export const FULL_BACKOFF_MAX_MS = 60_000;

import type { Terms } from './terms.js';

export class Ownership {
  /** The members at the last reconcile (this partition count), sorted by id. */
  members: MemberRow[] = [];
  readonly handovers = new Handovers(
    (id) => this.members.some((m) => m.id === id),
    (partitions) => this.terms.endDelay(partitions),
  );
  reconciles = 0;
  /** This worker's share at the last reconcile. */
  private share: ReadonlySet<number> = new Set();
  private readonly mismatchReported = new Set<string>();

  /** After SQLSTATE 53200: no take before `until`; the back-off doubles from 2 × healthIntervalMs. */
  private full = { until: 0, backoffMs: 0 };

  constructor(
    private readonly o: ResolvedPartitionOptions,
    private readonly keys: ReturnType<typeof keysOf>,
    private readonly terms: Terms,
    private readonly lease: Lease,
    private readonly report: (error: Error) => void,
    /** While another primary is up, every take's whole delay, clean or not (core/peers.ts `splitBrainDelayMs`); else 0. */
    private readonly splitDelayMs: () => number,
  ) {}

  /**
   * One reconcile: read the members and this session's locks (renewing the lease), compute
   * the assignment, hand back what is no longer ours (runs drained first), take the free
   * partitions that are. `joining`: a mismatched partition count is refused (thrown), not
   * reported. Returns the member to watch (the one after this worker), or null.
   */
  async reconcile(session: MemberSession, joining: boolean): Promise<MemberRow | null> {
    const sentAt = this.o.clock.now();
    const [row] = await session.query<{
      members: { app: string | null; slot: string; pid: number }[];
      held: number[];
      pid: number;
      same: boolean;
    }>(RECONCILE, [this.keys.members, this.keys.partitions, session.token]);
    await session.verify(row);
    this.reconciles += 1;
    this.lease.set(sentAt + session.safety.leaseMs);
    const all = (row?.members ?? [])
      .map((m) => parseMember(m.app, Number(m.slot), m.pid))
      .filter((m): m is MemberRow => m !== null);
    const same = all.filter((m) => m.partitions === this.o.partitions);
    this.handovers.membersAtJoin(all); // the previous holders of what no `took` was heard for
    for (const m of all) {
      if (m.partitions === this.o.partitions || this.mismatchReported.has(m.id)) continue;
      const err = new PartitionMismatchError(this.o.name, m.id, m.partitions, this.o.partitions);
      if (joining) throw err; // joining a group that runs another count: refuse
      this.mismatchReported.add(m.id);
      this.report(err);
    }
    const before = this.members.map((m) => m.id).join(',');
    this.members = same.sort((a, b) => (a.id < b.id ? -1 : 1));
    const ids = this.members.map((m) => m.id);
    if (ids.join(',') !== before) this.terms.log('info', 'members_changed', { members: ids });
    const mine = new Set(assign(ids, this.o.partitions).get(this.o.id) ?? []);
    const heldHere = new Set(row?.held ?? []);
    // the server's word on what we hold: a partition we believe owned but do not hold was lost
    const lost = this.terms.partitions().filter((p) => !heldHere.has(p));
    if (lost.length) await this.terms.revoke(lost, 'lost');
    const give = [...heldHere].filter((p) => !mine.has(p));
    if (give.length) {
      // drained before the locks go, the lease renewed meanwhile
      const drained = await this.renewing(session, this.terms.revoke(give, 'rebalance'));
      await this.give(session, give, drained);
    }
    this.terms.reopenLapsed(); // still held and still ours, and the lease is current again
    // held here but not opened: taken by a statement that then failed (53200 part-way): run them
    const known = new Set(this.terms.partitions());
    const adopt = [...heldHere].filter((p) => mine.has(p) && !known.has(p));
    if (adopt.length) {
      const epochs = await this.bump(session, adopt);
      this.terms.open(adopt, termDelayMs(this.o.takeoverDelayMs, false, this.splitDelayMs()), epochs);
    }
    // fencing: held, but their epoch rows were held by an open fenced write (a previous
    // owner's, so delayed as a take-over): try again
    const waiting = this.terms.awaitingEpoch();
    if (waiting.length) {
      for (const [p, epoch] of (await this.bump(session, waiting)) ?? []) {
        this.terms.epochArrived(p, epoch, termDelayMs(this.o.takeoverDelayMs, false, this.splitDelayMs()));
      }
    }
    const take = [...mine].filter((p) => !heldHere.has(p));
    await this.take(session, take, ids.length);
    this.share = mine;
    // watch the member after us
    const me = ids.indexOf(this.o.id);
    return me >= 0 && ids.length > 1 ? (this.members[(me + 1) % ids.length] ?? null) : null;
  }

  /**
   * The fast path after a death: the membership is known without asking (the last one
   * minus the dead), so take this worker's new share at once, one statement; the full
   * reconcile follows (it also hands back what moved between survivors).
   */
  async takeOver(session: MemberSession): Promise<void> {
    const dead = this.handovers.takeDeaths();
    const ids = this.members.map((m) => m.id).filter((id) => !dead.has(id));
    if (!ids.includes(this.o.id)) return;
    const mine = assign(ids, this.o.partitions).get(this.o.id) ?? [];
    const held = new Set(this.terms.partitions());
    await this.take(
      session,
      mine.filter((p) => !held.has(p)),
      ids.length,
    );
  }

  /** Try-lock `take`; open the terms of those taken (after the takeover delay unless handed over cleanly). */
  private async take(session: MemberSession, take: number[], members: number): Promise<void> {
    if (take.length === 0) return;
    // the lock table was full: each attempt fills it again for every client of the server,
    // so ask again only after a back-off (docs/partitions.md, "Sizing")
    if (this.o.clock.now() < this.full.until) return;
    try {
      const [got] = await session.query<{ taken: number[] | null; pid: number; same: boolean }>(TAKE, [
        this.keys.partitions,
        take,
        session.token,
      ]);
      await session.verify(got);
      this.full = { until: 0, backoffMs: 0 };
      const taken = got?.taken ?? [];
      if (taken.length === 0) return;
      const split = this.splitDelayMs(); // another primary up: nothing heard here proves it stopped
      const { clean, delayed } = this.handovers.delayNeeded(taken, split === 0);
      await this.announceTaken(session, taken);
      const epochs = await this.bump(session, taken);
      this.terms.open(clean, termDelayMs(this.o.takeoverDelayMs, true, split), epochs);
      this.terms.open(delayed, termDelayMs(this.o.takeoverDelayMs, false, split), epochs);
    } catch (err) {
      if (sqlStateOf(err) !== '53200') throw err;
      // the statement failed part-way; the locks it got stay held (session locks ignore the
      // rollback): give them back, or the full table fails every statement after this one
      await session.query(GIVE, [this.keys.partitions, take, session.token]).catch(() => {});
      const backoffMs = Math.min(
        FULL_BACKOFF_MAX_MS,
        Math.max(2 * this.full.backoffMs, 2 * this.o.healthIntervalMs),
      );
      this.full = { until: this.o.clock.now() + backoffMs, backoffMs };
      this.report(lockTableFull(this.o.partitions, members, backoffMs, err));
    }
  }

  /** Owning exactly this worker's share, every term open. */
  balanced(owned: ReadonlySet<number>): boolean {
    return (
      this.share.size === owned.size &&
      [...this.share].every((p) => owned.has(p)) &&
      this.members.some((m) => m.id === this.o.id)
    );
  }

  /** Wait for a drain, the lease renewed meanwhile while every partition still run is held. */
  private renewing<T>(session: MemberSession, drain: Promise<T>): Promise<T> {
    return this.lease.renewWhile(drain, this.o.healthIntervalMs, async () => {
      const sentAt = this.o.clock.now();
      const [row] = await session.query<{ held: number[]; pid: number; same: boolean }>(RECONCILE, [
        this.keys.members,
        this.keys.partitions,
        session.token,
      ]);
      await session.verify(row);
      const held = new Set(row?.held ?? []);
      return this.terms.partitions().every((p) => held.has(p)) ? sentAt + session.safety.leaseMs : null;
    });
  }

  /**
   * With fencing: bump the epochs of partitions just taken (their locks held), before their
   * terms open; a partition whose row a fenced write holds is left out (epochs.ts).
   */
  private async bump(session: MemberSession, partitions: number[]): Promise<Map<number, bigint> | null> {
    const table = this.o.fencingTable;
    if (table === null) return null;
    const rows = await session.query<{ partition: number; epoch: string }>(bumpPartitionsSql(table), [
      this.keys.partitions,
      partitions,
      this.o.id,
      session.timeline,
    ]);
    return epochsOf(rows);
  }

  /** Unlock `give`, announcing `drained` (those whose runs returned) as released first (sql.ts `giveScript`). */
  private give(session: MemberSession, give: readonly number[], drained: readonly number[]): Promise<void> {
    return session.script(
      giveScript({
        partitionsKey: this.keys.partitions,
        token: session.token,
        channel: this.keys.channel,
        released: partitionNotices('released', this.o.id, drained),
        freed: `freed:${this.o.id}`,
        give,
      }),
    );
  }

  /** Tell the others which partitions were taken (NOTIFY payloads stay under 8000 bytes). */
  private async announceTaken(session: MemberSession, partitions: readonly number[]): Promise<void> {
    for (const notice of partitionNotices('took', this.o.id, partitions, {
      token: session.token,
      pid: session.pid,
    })) {
      await session.notify(notice);
    }
  }

  /** A clean leave: drain every run, hand every partition back, announce it, give up membership, end the session. */
  async leave(session: MemberSession): Promise<void> {
    let drained: number[] = [];
    try {
      drained = await this.renewing(session, this.terms.revokeAll('shutdown'));
      const [row] = await session.query<{ held: number[]; pid: number; same: boolean }>(RECONCILE, [
        this.keys.members,
        this.keys.partitions,
        session.token,
      ]);
      await session.verify(row);
      const held = row?.held ?? [];
      if (held.length) await this.give(session, held, drained);
      // announced before the member lock goes: its release is then no death
      await session.notify(`left:${this.o.id}`);
      await session.query('SELECT pg_advisory_unlock($1, $2)', [this.keys.members, slotOf(this.o.id)]);
    } catch (err) {
      this.report(err as Error); // the session's end frees whatever is left
    }
    this.lease.set(null);
    await session.end();
  }
}
