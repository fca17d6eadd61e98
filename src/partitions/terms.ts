/**
 * The partitions a worker holds, each with its term: opened (after the takeover fence when
 * the previous owner did not hand it over cleanly), its `runForEach` runs started, and on
 * revocation its signal aborted and its runs drained (up to `drainTimeoutMs`) before the
 * caller releases the lock. The one owner of "which partitions are mine" in a worker.
 */
import type { Logger } from '../logger.js';
import { publish } from '../observe.js';

export interface PartitionTerm {
  /** 1, 2, 3, … within this worker, across partitions. */
  readonly id: number;
  readonly partition: number;
  readonly acquiredAt: Date;
  /** Aborts the moment the partition is revoked, lost, or the worker shuts down. */
  readonly signal: AbortSignal;
  /** With fencing: this partition's epoch for this term (strictly greater than any earlier owner's); else null. */
  readonly epoch: bigint | null;
}

type Work = (partition: number, term: PartitionTerm) => Promise<void> | void;

/** Why a partition was revoked. */
export type RevokeReason = 'rebalance' | 'lost' | 'shutdown';

/** Where a held partition is on its way to an open term. */
type Stage =
  /** Fencing: its epoch row is held by a fenced write still open (a previous owner's); no epoch yet. */
  | { readonly kind: 'awaiting-epoch' }
  /** Under the takeover fence: the term opens when the timer fires. */
  | { readonly kind: 'fenced'; readonly timer: NodeJS.Timeout }
  /**
   * Due to open while the lease had run out (a frozen worker woke: its fence timers fire
   * before its lease timer): not opened; the next ownership check that renews the lease
   * opens it, if the session survived.
   */
  | { readonly kind: 'lapsed'; readonly epoch: bigint | null }
  | { readonly kind: 'open'; readonly term: PartitionTerm };

interface Entry {
  readonly partition: number;
  readonly controller: AbortController;
  stage: Stage;
  readonly runs: Set<Promise<void>>;
}

type Handlers = {
  assigned: (partition: number, term: PartitionTerm) => void;
  revoked: (partition: number, reason: RevokeReason) => void;
  error: (error: Error) => void;
};

export class Terms {
  /** The lease behind `owned`, on performance.now(); null: no lease. */
  leaseUntil: number | null = null;
  private readonly held = new Map<number, Entry>();
  private readonly works = new Set<Work>();
  private readonly handlers: { [K in keyof Handlers]: Set<Handlers[K]> } = {
    assigned: new Set(),
    revoked: new Set(),
    error: new Set(),
  };
  private nextId = 1;
  /** Every term this worker opened (fenced() accepts only these). */
  private readonly mine = new WeakSet<PartitionTerm>();
  private readonly count = { acquisitions: 0, revocations: 0, losses: 0 };

  constructor(
    /** The worker's name and id, for diagnostics_channel messages. */
    private readonly who: { name: string; id: string },
    private readonly drainTimeoutMs: number,
    private readonly logger: Logger,
    /** A term opened (after its fence, if any). */
    private readonly opened: () => void = () => {},
  ) {}

  owned(): Set<number> {
    const out = new Set<number>();
    if (this.leaseUntil === null || performance.now() >= this.leaseUntil) return out;
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

  /** Every partition held, fenced ones included. */
  partitions(): number[] {
    return [...this.held.keys()];
  }

  counts(): { acquisitions: number; revocations: number; losses: number } {
    return { ...this.count };
  }

  on<K extends keyof Handlers>(event: K, fn: Handlers[K], signal?: AbortSignal): void {
    if (typeof fn !== 'function') throw new TypeError(`on${event} needs a function, received ${typeof fn}`);
    const set = this.handlers[event] as Set<Handlers[K]>;
    set.add(fn);
    signal?.addEventListener('abort', () => set.delete(fn), { once: true });
  }

  emit<K extends keyof Handlers>(event: K, ...args: Parameters<Handlers[K]>): void {
    for (const fn of this.handlers[event] as Set<(...a: unknown[]) => unknown>) {
      try {
        const r = fn(...args);
        if (r instanceof Promise) r.catch((err: unknown) => this.callbackFailed(event, err));
      } catch (err) {
        this.callbackFailed(event, err);
      }
    }
  }

  /** An error: logged, published to onError. */
  error(error: Error): void {
    const code = (error as { code?: unknown }).code;
    this.logger.error({ event: 'error', ...this.who, code, error: error.message }, 'error');
    this.emit('error', error);
  }

  /** A log line of the worker's (membership, its session). */
  log(level: 'info' | 'warn', event: string, fields: Record<string, unknown> = {}): void {
    this.logger[level]({ event, ...this.who, ...fields }, event);
  }

  private callbackFailed(event: string, err: unknown): void {
    if (event === 'error')
      this.logger.error({ event: 'callback_error', ...this.who, error: String(err) }, 'callback_error');
    else this.error(err instanceof Error ? err : new Error(String(err)));
  }

  addWork(fn: Work): { stop(): Promise<void> } {
    this.works.add(fn);
    for (const e of this.held.values()) this.startRun(e, fn);
    return {
      stop: async () => {
        this.works.delete(fn);
      },
    };
  }

  /**
   * Taken: open each partition's term now, or after `fenceMs`. With fencing (`epochs` not
   * null) a partition missing from `epochs` waits for `epochArrived` instead.
   */
  open(partitions: readonly number[], fenceMs: number, epochs: ReadonlyMap<number, bigint> | null): void {
    if (partitions.length) this.log('info', 'partitions_taken', { partitions: sorted(partitions), fenceMs });
    const waiting: number[] = [];
    for (const partition of partitions) {
      const e: Entry = {
        partition,
        controller: new AbortController(),
        stage: { kind: 'awaiting-epoch' },
        runs: new Set(),
      };
      this.held.set(partition, e);
      const epoch = epochs === null ? null : epochs.get(partition);
      if (epoch === undefined) waiting.push(partition);
      else this.advance(e, fenceMs, epoch);
    }
    if (waiting.length) this.log('warn', 'partitions_awaiting_epoch', { partitions: sorted(waiting) });
  }

  /** The epoch of a partition that was awaiting it: its term opens after `fenceMs`. */
  epochArrived(partition: number, epoch: bigint, fenceMs: number): void {
    const e = this.held.get(partition);
    if (e?.stage.kind === 'awaiting-epoch') this.advance(e, fenceMs, epoch);
  }

  private advance(e: Entry, fenceMs: number, epoch: bigint | null): void {
    if (fenceMs <= 0) {
      this.begin(e, epoch);
      return;
    }
    const timer = setTimeout(() => {
      if (this.held.get(e.partition) === e && e.stage.kind === 'fenced') this.begin(e, epoch);
    }, fenceMs);
    e.stage = { kind: 'fenced', timer };
  }

  /** After an ownership check renewed the lease: open the terms that came due while it had run out. */
  reopenLapsed(): void {
    for (const e of this.held.values()) if (e.stage.kind === 'lapsed') this.begin(e, e.stage.epoch);
  }

  private begin(e: Entry, epoch: bigint | null): void {
    if (this.leaseUntil === null || performance.now() >= this.leaseUntil) {
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
    this.emit('assigned', e.partition, term);
    for (const fn of this.works) this.startRun(e, fn);
    this.opened();
  }

  private startRun(e: Entry, fn: Work): void {
    if (e.stage.kind !== 'open') return;
    const term = e.stage.term;
    if (term.signal.aborted) return;
    const run = (async () => {
      try {
        await fn(e.partition, term);
      } catch (err) {
        if (!term.signal.aborted || err !== term.signal.reason) {
          this.error(err instanceof Error ? err : new Error(String(err)));
        }
      }
    })();
    e.runs.add(run);
    void run.finally(() => e.runs.delete(run));
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
      if (e.stage.kind === 'fenced') clearTimeout(e.stage.timer);
      e.controller.abort(new Error(`partition ${p} ${reason === 'lost' ? 'lost' : 'revoked'} (${reason})`));
      // not open yet (under its fence, or its epoch row held by an open write): the previous
      // owner's work may still run, so handing it on is no clean hand-over (the next owner
      // must fence too)
      if (e.stage.kind !== 'open') continue;
      if (e.runs.size === 0) {
        drained.push(p);
      } else {
        drains.push(Promise.allSettled([...e.runs]).then(() => drained.push(p)));
      }
      this.count.revocations += 1;
      if (reason === 'lost') this.count.losses += 1;
      publish('partitionRevoked', { ...this.who, partition: p, reason });
      this.emit('revoked', p, reason);
    }
    if (drains.length === 0) return drained;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(drains),
      new Promise((r) => {
        timer = setTimeout(r, this.drainTimeoutMs);
      }),
    ]);
    clearTimeout(timer);
    return [...drained];
  }

  revokeAll(reason: RevokeReason): Promise<number[]> {
    return this.revoke([...this.held.keys()], reason);
  }
}

function sorted(partitions: readonly number[]): number[] {
  return [...partitions].sort((a, b) => a - b);
}
