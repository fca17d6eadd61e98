/**
 * `PartitionedLeadership`: one owner per partition among many workers, two connections per
 * worker whatever the partition count. Design and safety argument: docs/partitions.md.
 *
 * Each worker holds, on its ownership session (owner.ts), a member lock and the locks of the
 * partitions it owns; membership is read from `pg_locks`. A reconcile (ownership.ts: on
 * start, on every membership notice, and every `healthIntervalMs`) reads the members and
 * this session's locks in one statement, renews the lease, computes the assignment
 * (assign.ts), hands back partitions no longer ours (their runs drained first), and takes
 * the free ones that are. Deaths are seen by the ring watch (watch.ts) within
 * milliseconds. This module is the worker's lifecycle: the public API, its two sessions,
 * and reconnecting after a session ends.
 */
import type pg from 'pg';
import { type Deferred, deferred, sleep, systemClock } from '../clock.js';
import { ConnectionError } from '../errors.js';
import { FencedError, fencedWrite } from '../fencing.js';
import { PEER_TIMEOUT_MS, type PeerWatch } from '../peers.js';
import { show } from '../validate.js';
import { PartitionMismatchError } from './errors.js';
import { inspectPartitions, type PartitionInspection, type PartitionInspectOptions } from './inspect.js';
import { Lease } from './lease.js';
import {
  type PartitionedLeadershipOptions,
  type ResolvedPartitionOptions,
  resolvePartitionOptions,
} from './options.js';
import { Owner } from './owner.js';
import { Ownership } from './ownership.js';
import { keysOf, slotOf } from './sql.js';
import { type PartitionTerm, type RevokeReason, Terms } from './terms.js';
import { Watcher } from './watch.js';

export { PartitionMismatchError } from './errors.js';
export type { PartitionInspection, PartitionInspectOptions } from './inspect.js';
export type { PartitionTerm, RevokeReason } from './terms.js';
export type PartitionWork = (partition: number, term: PartitionTerm) => Promise<void> | void;

export interface PartitionStats {
  owned: number;
  members: number;
  acquisitions: number;
  revocations: number;
  losses: number;
  reconciles: number;
  /** Statements sent on both sessions. */
  statements: number;
}

/** One run of the worker, from `start()` to the end of its loop. */
interface Run {
  /** Settles when the loop has ended (everything handed back or lost, both sessions closed). */
  done: Promise<void>;
  /** What `start()` returns: resolved at the first reconcile or when the run ends, rejected on a refusal. */
  readonly joined: Promise<void>;
  /** Until the first reconcile: how to settle `joined`. A mismatched count is refused while joining. */
  joining: Deferred<void> | null;
  /** `shutdown()` was called: leave at the next step, then end. */
  stopping: boolean;
}

/** A worker's connections while it is a member: ownership, ring watch, and the peer watch (several hosts). */
interface Sessions {
  readonly owner: Owner;
  readonly watcher: Watcher;
  readonly peers: PeerWatch | null;
}

type Phase =
  | { kind: 'stopped' }
  | { kind: 'connecting' }
  | { kind: 'running'; owner: Owner; watcher: Watcher; peers: PeerWatch | null }
  | { kind: 'stopping'; owner: Owner };

export class PartitionedLeadership implements AsyncDisposable {
  private readonly o: ResolvedPartitionOptions;
  private readonly keys: ReturnType<typeof keysOf>;
  private readonly terms: Terms;
  private phase: Phase = { kind: 'stopped' };
  private readonly lease: Lease;
  private readonly ownership: Ownership;
  private run: Run | null = null;
  /** Aborted by `wake()`: a notice, a death, a shutdown; `arm()` renews it. */
  private interrupt = new AbortController();
  private balanceWaiters = new Set<(balanced: boolean) => void>();
  private statements = 0;

  constructor(options: PartitionedLeadershipOptions) {
    this.o = resolvePartitionOptions(options);
    this.keys = keysOf(this.o.name);
    this.terms = new Terms({ name: this.o.name, id: this.o.id }, this.o.drainTimeoutMs, this.o.logger, () =>
      this.checkBalance(),
    );
    this.lease = new Lease(this.terms, () => {
      const p = this.phase;
      const lapsed = new ConnectionError(
        'the lease ran out before an ownership check succeeded (a frozen process, or a server that did not answer); every term ends',
      );
      if (p.kind === 'running' || p.kind === 'stopping') p.owner.destroy(lapsed);
    });
    this.ownership = new Ownership(
      this.o,
      this.keys,
      this.terms,
      this.lease,
      (err) => this.report(err),
      () => this.splitFenceMs(),
    );
    this.o.signal?.addEventListener('abort', () => void this.shutdown(), { once: true });
  }

  /** The members of `name` and the owner of each partition, without joining (informational). */
  static inspect(options: PartitionInspectOptions): Promise<PartitionInspection> {
    return inspectPartitions(options);
  }

  get id(): string {
    return this.o.id;
  }

  /** The partitions this worker owns now (terms open, lease current). */
  get owned(): ReadonlySet<number> {
    return this.terms.owned();
  }

  /**
   * When the lease behind `owned` ends (or ended), on `performance.now()`; null before the
   * first ownership check. Each successful check (every `healthIntervalMs`) pushes it
   * forward; past it `owned` is empty and every term ends. After a lost session or a
   * shutdown it keeps the last lease's end, as `LeaderLock.leaseExpiresAt` does.
   */
  get leaseExpiresAt(): number | null {
    return this.terms.leaseUntil ?? this.lease.last;
  }

  /** The member ids seen at the last reconcile, sorted. */
  get memberIds(): readonly string[] {
    return this.ownership.members.map((m) => m.id);
  }

  stats(): PartitionStats {
    return {
      owned: this.owned.size,
      members: this.ownership.members.length,
      ...this.terms.counts(),
      reconciles: this.ownership.reconciles,
      statements: this.statements,
    };
  }

  /** Run `fn` for each partition while owned; its term's signal aborts when the partition is revoked or lost. */
  runForEach(fn: PartitionWork): { stop(): Promise<void> } {
    if (typeof fn !== 'function') throw new TypeError(`runForEach needs a function, received ${typeof fn}`);
    return this.terms.addWork(fn);
  }

  /**
   * Fencing (`fencing: true`): run `fn(client)` in a transaction on `client` (a connection
   * of yours to the same database, not the worker's, not inside a transaction already) that
   * commits only if `term` is still this partition's current epoch. The epoch row stays
   * share-locked until commit, so the next owner's bump waits for the write; a write from a
   * superseded term is refused with a `FencedError` (docs/partitions.md, "Fencing").
   */
  async fenced<T>(
    client: pg.ClientBase,
    term: PartitionTerm,
    fn: (client: pg.ClientBase) => Promise<T>,
  ): Promise<T> {
    const table = this.o.fencingTable;
    if (table === null) throw new FencedError('fencing is not enabled: pass fencing: true');
    if (typeof (client as { query?: unknown } | null)?.query !== 'function') {
      throw new TypeError(`fenced needs a pg client as its first argument, received ${show(client)}`);
    }
    if (!this.terms.issued(term)) {
      throw new TypeError(
        `fenced needs a term this worker issued (from runForEach or onAssigned), received ${show(term)}`,
      );
    }
    if (typeof fn !== 'function') throw new TypeError(`fenced needs a function, received ${show(fn)}`);
    if (!this.owned.has(term.partition)) {
      throw new FencedError(`fenced write refused: partition ${term.partition} is not owned by this worker`);
    }
    return fencedWrite(client, table, { key1: this.keys.partitions, key2: term.partition }, term, fn);
  }

  onAssigned(fn: (partition: number, term: PartitionTerm) => void, options?: { signal?: AbortSignal }): void {
    this.terms.on('assigned', fn, options?.signal);
  }

  onRevoked(fn: (partition: number, reason: RevokeReason) => void, options?: { signal?: AbortSignal }): void {
    this.terms.on('revoked', fn, options?.signal);
  }

  onError(fn: (error: Error) => void, options?: { signal?: AbortSignal }): void {
    this.terms.on('error', fn, options?.signal);
  }

  /**
   * Join. Resolves once this worker is a member (its first reconcile done); rejects if the
   * workers already running this name have another partition count. Connection failures are
   * reported to onError and retried.
   */
  start(): Promise<void> {
    const current = this.run;
    if (current?.stopping) return current.done.then(() => this.start()); // after the shutdown under way
    if (current) return current.joined;
    const joining = deferred<void>();
    const run: Run = { done: Promise.resolve(), joined: joining.promise, joining, stopping: false };
    this.run = run;
    run.done = this.loop(run);
    return run.joined;
  }

  /** Resolves true once this worker owns exactly its share for the current membership. */
  async waitForBalance({ timeoutMs = 30_000 }: { timeoutMs?: number } = {}): Promise<boolean> {
    if (this.ownership.balanced(this.owned)) return true;
    // resolved by checkBalance() after a reconcile or when a fenced term opens
    return new Promise<boolean>((resolve) => {
      const done = (balanced: boolean): void => {
        clearTimeout(timer);
        this.balanceWaiters.delete(done);
        resolve(balanced);
      };
      const timer = setTimeout(() => {
        this.balanceWaiters.delete(done);
        resolve(false);
      }, timeoutMs);
      timer.unref();
      this.balanceWaiters.add(done);
    });
  }

  /** Hand every partition back (runs drained), leave, close both sessions. Idempotent. */
  async shutdown({ timeoutMs = 30_000 }: { timeoutMs?: number } = {}): Promise<void> {
    const run = this.run;
    if (!run) return;
    run.stopping = true;
    this.wake();
    const finished = await Promise.race([
      run.done.then(() => true),
      sleep(systemClock, timeoutMs).then(() => false),
    ]);
    if (finished) return;
    // past the timeout: close the session, and the server frees what it holds (the others
    // then take it under the fence); runs still winding down are left to finish
    const p = this.phase as Phase;
    if (p.kind === 'running' || p.kind === 'stopping') p.owner.destroy();
    for (const w of [...this.balanceWaiters]) w(false);
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.shutdown();
  }

  private wake(): void {
    this.interrupt.abort();
  }

  /** A signal the next wake() aborts: check what woke the loop after calling this, then wait on it. */
  private arm(): AbortSignal {
    if (this.interrupt.signal.aborted) this.interrupt = new AbortController();
    return this.interrupt.signal;
  }

  private report(error: Error): void {
    this.terms.error(error);
  }

  private async loop(run: Run): Promise<void> {
    let delay = 100;
    while (!run.stopping) {
      this.phase = { kind: 'connecting' };
      let session: Sessions | null = null;
      try {
        session = await this.open();
        delay = 100;
        await this.serve(session.owner, run);
      } catch (err) {
        if (err instanceof PartitionMismatchError && run.joining) {
          run.joining.reject(err);
          run.joining = null;
          run.stopping = true;
        } else {
          // what ended the session (a promotion, a lapsed lease, a timeout), not the
          // "connection terminated" of a statement it cut short
          this.report(session?.owner.dead ?? (err as Error));
        }
      }
      this.lease.set(null);
      await this.terms.revokeAll('lost');
      if (session) {
        session.peers?.stop();
        session.owner.destroy();
        await session.watcher.close();
      }
      if (run.stopping) break;
      await sleep(systemClock, delay, this.arm());
      delay = Math.min(delay * 2, 5000);
    }
    this.phase = { kind: 'stopped' };
    for (const w of [...this.balanceWaiters]) w(false);
    run.joining?.resolve();
    run.joining = null;
    if (this.run === run) this.run = null;
  }

  private async open(): Promise<Sessions> {
    const count = (): void => {
      this.statements += 1;
    };
    const owner = await Owner.open({
      endpoints: this.o.endpoints,
      membersKey: this.keys.members,
      slot: slotOf(this.o.id),
      channel: this.keys.channel,
      appName: `pgleaderlock:${this.o.id}#p${this.o.partitions}`,
      serverReleaseMs: this.o.serverReleaseMs,
      healthIntervalMs: this.o.healthIntervalMs,
      queryTimeoutMs: this.o.queryTimeoutMs,
      fencingTable: this.o.fencingTable,
      onStatement: count,
    });
    const watcher = new Watcher({
      // the watch session goes to the same server as the ownership session
      connect: () => owner.endpoint.connect(),
      appName: `pgleaderlock:${this.o.id}#watch`,
      membersKey: this.keys.members,
      sliceMs: this.o.watchSliceMs,
      queryTimeoutMs: this.o.queryTimeoutMs,
      settings: owner.watchSettings,
      onDeath: (slot) => {
        const gone = this.ownership.members.find((m) => m.slot === slot);
        if (gone && this.ownership.handoffs.died(gone.id))
          this.terms.log('warn', 'member_died', { member: gone.id });
        void owner.notify(`died:${gone?.id ?? slot}`).catch(() => {});
        this.wake();
      },
      onError: (err) => this.report(err),
      onStatement: count,
    });
    const peers = owner.watchPeers(this.o.healthIntervalMs);
    this.phase = { kind: 'running', owner, watcher, peers };
    owner.onDeath((err) => {
      if (!this.run?.stopping) this.terms.log('warn', 'session_lost', { error: err.message });
      void this.terms.revokeAll('lost'); // at once, before the loop runs
      this.wake();
    });
    this.ownership.handoffs.reset(); // what earlier sessions heard is no proof for this one
    owner.onNotify((payload) => {
      this.ownership.handoffs.hear(payload);
      this.wake();
    });
    try {
      await owner.notify(`joined:${this.o.id}`);
    } catch (err) {
      owner.destroy();
      await watcher.close();
      throw err;
    }
    peers?.start();
    return { owner, watcher, peers };
  }

  /**
   * Another primary is up beside this worker's (an old primary after a promotion): its
   * workers may still run the partitions this one takes until their peer watch sees the
   * promotion, within one health interval plus a probe. Takes wait that long on top of the
   * takeover fence, clean hand-overs included (docs/partitions.md, "Primary failover").
   */
  private splitFenceMs(): number {
    const p = this.phase;
    return p.kind === 'running' && p.peers?.otherPrimary ? this.o.healthIntervalMs + PEER_TIMEOUT_MS : 0;
  }

  private async serve(owner: Owner, run: Run): Promise<void> {
    for (;;) {
      if (owner.dead) throw owner.dead;
      if (run.stopping) {
        this.phase = { kind: 'stopping', owner };
        return this.ownership.leave(owner);
      }
      const woken = this.arm();
      if (this.ownership.handoffs.anyDeaths) await this.ownership.takeOver(owner);
      const next = await this.ownership.reconcile(owner, run.joining !== null);
      if (this.phase.kind === 'running') this.phase.watcher.watch(next ? next.slot : null);
      this.checkBalance();
      run.joining?.resolve();
      run.joining = null;
      if (woken.aborted) continue;
      await sleep(systemClock, this.o.healthIntervalMs, woken);
    }
  }

  private checkBalance(): void {
    if (this.ownership.balanced(this.owned)) for (const w of [...this.balanceWaiters]) w(true);
  }
}
