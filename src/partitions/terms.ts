/**
 * The partitions a worker holds, each with its term: opened (after the takeover delay when
 * the previous owner did not hand it over cleanly), its `runForEach` runs started, and on
 * revocation its signal aborted and its runs drained (up to `drainTimeoutMs`) before the
 * caller releases the lock. The one owner of "which partitions are mine" in a worker.
 */
import type { Callbacks } from '../core/callbacks.js';
import { publish } from '../core/channels.js';
import { type Clock, sleep } from '../core/clock.js';
import { EventLog } from '../core/event-log.js';
import type { Logger } from '../core/logger.js';
import type { LeaderWorkHandle } from '../core/runner.js';
import { PartitionRuns, type PartitionWork } from './runs.js';
import type { PartitionTerm } from './term.js';

export type { PartitionTerm };

/** Why a partition was revoked. */
export type RevokeReason = 'rebalance' | 'lost' | 'shutdown';

/** Where a held partition is on its way to an open term. */
type Stage =
  /** Fencing: its epoch row is held by a fenced write still open (a previous owner's); no epoch yet. */
  | { readonly kind: 'awaiting-epoch' }
  /** Under the takeover delay: the term opens when the timer fires, or at a proof of drain. */
  | { readonly kind: 'delayed'; readonly timer: unknown; readonly epoch: bigint | null }
  /**
   * Due to open while the lease had run out (a frozen worker woke: its delay timers fire
   * before its lease timer): not opened; the next ownership check that renews the lease
   * opens it, if the session survived.
   */
  | { readonly kind: 'lapsed'; readonly epoch: bigint | null }
  | { readonly kind: 'open'; readonly term: PartitionTerm };

interface Entry {
  readonly partition: number;
  readonly controller: AbortController;
  stage: Stage;
}

/** The callbacks of a partition worker (`onAssigned`, `onRevoked`, `onError`): each under `callbackTimeoutMs`. */
export interface PartitionCallbackMap {
  /** May be async (awaited under the deadline); its return value is ignored. */
  assigned: (partition: number, term: PartitionTerm) => void;
  /** May be async (awaited under the deadline); its return value is ignored. */
  revoked: (partition: number, reason: RevokeReason) => void;
  /** May be async; its return value is ignored. */
  error: (error: Error) => void;
}

export class Terms {
  private readonly held = new Map<number, Entry>();
  /** Log lines and errors (event-log.ts). */
  readonly events: EventLog<PartitionCallbackMap>;
  /** The runs of `runForEach`, per partition (runs.ts). */
  private readonly runs: PartitionRuns;
  private nextId = 1;
  /** Every term this worker opened (fenced() accepts only these). */
  private readonly mine = new WeakSet<PartitionTerm>();
  private readonly count = { acquisitions: 0, revocations: 0, losses: 0 };
  private readonly revokedBy: Record<RevokeReason, number> = { rebalance: 0, lost: 0, shutdown: 0 };

  constructor(
    /** The worker's name and id, for diagnostics_channel messages. */
    private readonly who: { name: string; id: string },
    private readonly drainTimeoutMs: number,
    logger: Logger,
    private readonly clock: Clock,
    private readonly callbacks: Callbacks<PartitionCallbackMap>,
    /** The lease behind `owned`: no term opens, and `owned` is empty, while it is not valid. */
    private readonly lease: { valid(): boolean },
    /** A term opened (after its takeover delay, if any). */
    private readonly opened: () => void = () => {},
  ) {
    this.events = new EventLog(logger, who, callbacks);
    this.runs = new PartitionRuns(
      (_term, err) => this.error(err instanceof Error ? err : new Error(String(err))),
      () => this.clock.now(),
      (term, signal) => {
        const run = { ...term, signal };
        this.mine.add(run);
        return run;
      },
    );
  }

  owned(): Set<number> {
    const out = new Set<number>();
    if (!this.lease.valid()) return out;
    for (const e of this.held.values()) if (e.stage.kind === 'open') out.add(e.partition);
    return out;
  }

  /** This worker's open term of `partition` (whatever the lease), if any. */
  termOf(partition: number): PartitionTerm | null {
    const stage = this.held.get(partition)?.stage;
    return stage?.kind === 'open' ? stage.term : null;
  }

  /** Whether `term` is one this worker opened (any object is accepted; anything else is false). */
  issued(term: unknown): boolean {
    return typeof term === 'object' && term !== null && this.mine.has(term as PartitionTerm);
  }

  /** Held partitions whose epoch could not be bumped yet (a fenced write holds the row). */
  awaitingEpoch(): number[] {
    return [...this.held.values()].filter((e) => e.stage.kind === 'awaiting-epoch').map((e) => e.partition);
  }

  /** Every partition held, delayed ones included. */
  partitions(): number[] {
    return [...this.held.keys()];
  }

  counts(): {
    acquisitions: number;
    revocations: number;
    losses: number;
    revocationsByReason: Record<RevokeReason, number>;
  } {
    return { ...this.count, revocationsByReason: { ...this.revokedBy } };
  }

  /** An error: logged, kept as the last error, passed to onError. */
  error(error: Error): void {
    this.events.error(error);
  }

  /** A log line of the worker's (membership, its session). */
  log(level: 'info' | 'warn', event: string, fields: Record<string, unknown> = {}): void {
    this.events.log(level, event, fields);
  }

  /**
   * The run of a revoked term still going the longest past `limitMs` after its term ended:
   * which partition, for how long (`health()`). Null if none.
   */
  stuckRun(limitMs: number): { partition: number; ms: number } | null {
    const worst = this.runs.overdue();
    return worst && worst.ms > limitMs ? { partition: worst.partition, ms: worst.ms } : null;
  }

  /** `runForEach`: run `fn` in every open term of every partition. */
  addWork(fn: PartitionWork): LeaderWorkHandle {
    return this.runs.add(fn, (p) => this.termOf(p));
  }

  /**
   * Taken: open each partition's term now, or after `delayMs`. With fencing (`epochs` not
   * null) a partition missing from `epochs` waits for `epochArrived` instead.
   */
  open(partitions: readonly number[], delayMs: number, epochs: ReadonlyMap<number, bigint> | null): void {
    if (partitions.length) this.log('info', 'partitions_taken', { partitions: sorted(partitions), delayMs });
    const waiting: number[] = [];
    for (const partition of partitions) {
      const e: Entry = {
        partition,
        controller: new AbortController(),
        stage: { kind: 'awaiting-epoch' },
      };
      this.held.set(partition, e);
      const epoch = epochs === null ? null : epochs.get(partition);
      if (epoch === undefined) waiting.push(partition);
      else this.advance(e, delayMs, epoch);
    }
    if (waiting.length) this.log('warn', 'partitions_awaiting_epoch', { partitions: sorted(waiting) });
  }

  /** The epoch of a partition that was awaiting it: its term opens after `delayMs`. */
  epochArrived(partition: number, epoch: bigint, delayMs: number): void {
    const e = this.held.get(partition);
    if (e?.stage.kind === 'awaiting-epoch') this.advance(e, delayMs, epoch);
  }

  private advance(e: Entry, delayMs: number, epoch: bigint | null): void {
    if (delayMs <= 0) {
      this.begin(e, epoch);
      return;
    }
    const timer = this.clock.setTimeout(() => {
      if (this.held.get(e.partition) === e && e.stage.kind === 'delayed') this.begin(e, epoch);
    }, delayMs);
    e.stage = { kind: 'delayed', timer, epoch };
  }

  /**
   * A proof of drain from their previous holder (handovers.ts) ends these partitions'
   * takeover delays: their terms open now (if the lease is valid, as any other).
   */
  endDelay(partitions: readonly number[]): void {
    const ended: Entry[] = [];
    for (const p of partitions) {
      const e = this.held.get(p);
      if (e?.stage.kind !== 'delayed') continue; // opened already, or no longer held
      this.clock.clearTimeout(e.stage.timer);
      ended.push(e);
    }
    if (ended.length === 0) return;
    this.log('info', 'takeover_delay_ended', { partitions: sorted(ended.map((e) => e.partition)) });
    for (const e of ended) if (e.stage.kind === 'delayed') this.begin(e, e.stage.epoch);
  }

  /** The partitions whose term is open (a session's loss: what its proof of drain may name). */
  openPartitions(): number[] {
    return [...this.held.values()].filter((e) => e.stage.kind === 'open').map((e) => e.partition);
  }

  /** Whether a run of `partition` is still going in this process (a revoked term's included). */
  running(partition: number): boolean {
    return this.runs.busy(partition);
  }

  /** After an ownership check renewed the lease: open the terms that came due while it had run out. */
  reopenLapsed(): void {
    for (const e of this.held.values()) if (e.stage.kind === 'lapsed') this.begin(e, e.stage.epoch);
  }

  private begin(e: Entry, epoch: bigint | null): void {
    if (!this.lease.valid()) {
      e.stage = { kind: 'lapsed', epoch };
      return;
    }
    const term: PartitionTerm = {
      id: this.nextId++,
      partition: e.partition,
      acquiredAt: new Date(),
      signal: e.controller.signal,
      epoch,
    };
    e.stage = { kind: 'open', term };
    this.mine.add(term);
    this.count.acquisitions += 1;
    publish('partitionAssigned', { ...this.who, partition: e.partition, termId: term.id });
    this.callbacks.emit('assigned', e.partition, term);
    this.runs.start(term);
    this.opened();
  }

  /**
   * End these partitions' terms at once, then wait (up to drainTimeoutMs) for their runs to
   * return: the caller releases the locks after this resolves. Resolves with the partitions
   * whose runs all returned in time (a clean hand-over).
   */
  async revoke(partitions: readonly number[], reason: RevokeReason): Promise<number[]> {
    const drained: number[] = [];
    const drains: Promise<unknown>[] = [];
    const ended = partitions.filter((p) => this.held.has(p));
    if (ended.length)
      this.log(reason === 'lost' ? 'warn' : 'info', 'partitions_revoked', {
        reason,
        partitions: sorted(ended),
      });
    for (const p of partitions) {
      const e = this.held.get(p);
      if (!e) continue;
      this.held.delete(p);
      if (e.stage.kind === 'delayed') this.clock.clearTimeout(e.stage.timer);
      e.controller.abort(new Error(`partition ${p} ${reason === 'lost' ? 'lost' : 'revoked'} (${reason})`));
      // not open yet (under its takeover delay, or its epoch row held by an open write): the previous
      // owner's work may still run, so handing it on is no clean hand-over (the next owner
      // waits the delay too)
      if (e.stage.kind !== 'open') continue;
      if (!this.runs.busy(p)) drained.push(p);
      else drains.push(this.runs.idle(p).then(() => drained.push(p)));
      this.count.revocations += 1;
      this.revokedBy[reason] += 1;
      if (reason === 'lost') this.count.losses += 1;
      publish('partitionRevoked', { ...this.who, partition: p, reason });
      this.callbacks.emit('revoked', p, reason);
    }
    if (drains.length === 0) return drained;
    // the drain timeout's timer goes as soon as the runs have returned (none left behind)
    const returned = new AbortController();
    await Promise.race([
      Promise.all(drains).finally(() => returned.abort()),
      sleep(this.clock, this.drainTimeoutMs, returned.signal),
    ]);
    return [...drained];
  }

  revokeAll(reason: RevokeReason): Promise<number[]> {
    return this.revoke([...this.held.keys()], reason);
  }

  /**
   * Every run has returned (those of terms revoked earlier included), or `drainTimeoutMs`
   * passed: a lost session's terms are revoked at once, without waiting, so a shutdown right
   * after waits here.
   */
  async settled(): Promise<void> {
    const returned = new AbortController();
    await Promise.race([
      this.runs.allIdle().finally(() => returned.abort()),
      sleep(this.clock, this.drainTimeoutMs, returned.signal),
    ]);
  }
}

function sorted(partitions: readonly number[]): number[] {
  return [...partitions].sort((a, b) => a - b);
}
