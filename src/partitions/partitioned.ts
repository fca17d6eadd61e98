/**
 * `PartitionedLeadership`: one owner per partition among many workers, two connections per
 * worker whatever the partition count. Design and safety argument: docs/partitions.md.
 *
 * Each worker holds, on its member session (member-session.ts), a member lock and the locks of the
 * partitions it owns; membership is read from `pg_locks`. A reconcile (ownership.ts: on
 * start, on every membership notice, and every `healthIntervalMs`) reads the members and
 * this session's locks in one statement, renews the lease, computes the assignment
 * (assign.ts), hands back partitions no longer ours (their runs drained first), and takes
 * the free ones that are. Deaths are seen by the ring watch (watch.ts) within
 * milliseconds. This module is the worker's lifecycle: the public API, its two sessions,
 * and reconnecting after a session ends.
 */
import type pg from 'pg';
import { Callbacks, type ListenerOptions } from '../core/callbacks.js';
import { type Deferred, deferred, sleep } from '../core/clock.js';
import { ConnectionError } from '../core/errors.js';
import { Lease } from '../core/lease.js';
import { PEER_TIMEOUT_MS, type PeerWatch } from '../core/peers.js';
import type { LeaderWorkHandle } from '../core/runner.js';
import { rejecting, timeoutOf } from '../core/validate.js';
import { hungCallback, Vitals } from '../core/vitals.js';
import { Balance } from './balance.js';
import { fencedPartitionWrite } from './epochs.js';
import { PartitionMismatchError } from './errors.js';
import {
  assessPartitionHealth,
  type PartitionHealth,
  type PartitionStats,
  quietBoundMs,
  stuckRun,
  type WorkerPhase,
} from './health.js';
import { inspectPartitions, type PartitionInspection, type PartitionInspectOptions } from './inspect.js';
import type { MemberSession } from './member-session.js';
import {
  type PartitionedLeadershipOptions,
  type ResolvedPartitionOptions,
  resolvePartitionOptions,
} from './options.js';
import { Ownership } from './ownership.js';
import type { PartitionWork } from './runs.js';
import { openSessions, type Sessions } from './sessions.js';
import { keysOf } from './sql.js';
import { type PartitionCallbackMap, type PartitionTerm, Terms } from './terms.js';
import type { RingWatch } from './watch.js';

export { PartitionMismatchError } from './errors.js';
export type { PartitionHealth, PartitionStats } from './health.js';
export type { PartitionInspection, PartitionInspectOptions } from './inspect.js';
export type { PartitionWork } from './runs.js';
export type { PartitionTerm, RevokeReason } from './terms.js';

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

type Phase =
  | { kind: 'stopped' }
  | { kind: 'connecting' }
  | { kind: 'running'; member: MemberSession; watch: RingWatch; peers: PeerWatch | null }
  | { kind: 'stopping'; member: MemberSession; watch: RingWatch };

export class PartitionedLeadership implements AsyncDisposable {
  private readonly o: ResolvedPartitionOptions;
  private readonly keys: ReturnType<typeof keysOf>;
  private readonly terms: Terms;
  private readonly callbacks: Callbacks<PartitionCallbackMap>;
  private phase: Phase = { kind: 'stopped' };
  private readonly lease: Lease;
  private readonly ownership: Ownership;
  private readonly balance: Balance;
  private run: Run | null = null;
  /** Aborted by `wake()`: a notice, a death, a shutdown; `arm()` renews it. */
  private interrupt = new AbortController();
  private statements = 0;
  /** health(): the loop's pulse (one per run), whether start() was called, and why the last session failed. */
  private vitals: Vitals | null = null;
  private started = false;
  private lastFailure: Error | null = null;

  constructor(options: PartitionedLeadershipOptions) {
    this.o = resolvePartitionOptions(options);
    this.keys = keysOf(this.o.name);
    this.callbacks = new Callbacks<PartitionCallbackMap>(
      this.o.logger,
      this.o.clock,
      this.o.callbackTimeoutMs,
    );
    this.lease = new Lease(this.o.clock, () => {
      const p = this.phase;
      const lapsed = new ConnectionError(
        'the lease ran out before an ownership check succeeded (a frozen process, or a server that did not answer); every term ends',
      );
      if (p.kind === 'running' || p.kind === 'stopping') p.member.destroy(lapsed);
    });
    this.terms = new Terms(
      { name: this.o.name, id: this.o.id },
      this.o.drainTimeoutMs,
      this.o.logger,
      this.o.clock,
      this.callbacks,
      this.lease,
      () => this.balance.check(),
    );
    this.ownership = new Ownership(
      this.o,
      this.keys,
      this.terms,
      this.lease,
      (err) => this.report(err),
      () => this.splitDelayMs(),
    );
    this.balance = new Balance(
      this.o.clock,
      () => this.ownership.balanced(this.owned),
      () => this.callbacks.drained(),
      () => this.callbacks.inCallback(),
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

  /** The name the workers share. */
  get name(): string {
    return this.o.name;
  }

  /** The partitions this worker owns now (terms open, lease current). */
  get owned(): ReadonlySet<number> {
    return this.terms.owned();
  }

  /**
   * When the lease behind `owned` ends (or ended), on the worker's clock; null before the
   * first ownership check. Each check (every `healthIntervalMs`) pushes it forward; past it
   * `owned` is empty and every term ends. Kept after a loss or a shutdown, as
   * `LeaderLock.leaseExpiresAt` is.
   */
  get leaseExpiresAt(): number | null {
    return this.lease.until ?? this.lease.last;
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

  /**
   * For liveness and readiness probes (docs/observability.md, "Probes"). `live` is false
   * when the worker is wedged (its loop stopped making progress, a callback has not
   * returned past `callbackTimeoutMs`, the event loop was blocked for 2 s or more); `ready`
   * is true for a live worker that is a member on an open ownership session, whether it
   * owns partitions or not. `reasons` says why either is false.
   */
  health(): PartitionHealth {
    const run = this.run;
    const p = this.phase;
    const phase: WorkerPhase = !run
      ? 'stopped'
      : run.stopping
        ? 'stopping'
        : p.kind === 'running' && !p.member.dead
          ? 'running'
          : 'connecting';
    const hung = this.callbacks.hung();
    const stuck = this.terms.stuckRun(this.o.callbackTimeoutMs);
    return assessPartitionHealth({
      started: this.started,
      phase,
      lastError: this.lastFailure,
      hung: [
        ...(hung ? [hungCallback(hung, this.o.callbackTimeoutMs)] : []),
        ...(stuck ? [stuckRun(stuck)] : []),
      ],
      loopBlockedMs: this.vitals?.blockedMs ?? null,
      quietMs: run ? (this.vitals?.quietMs ?? null) : null,
      quietBoundMs: quietBoundMs(this.o),
      owned: this.owned.size,
      members: this.ownership.members.length,
      watchDown: p.kind === 'running' ? p.watch.down : null,
    });
  }

  /**
   * Run `fn` for each partition while owned; its term's signal aborts when the partition is
   * revoked or lost, or the handle is stopped. One run at a time per partition and
   * registration: a partition's next run starts only after the previous one has settled.
   * The handle is `runWhileLeader`'s: `stop()` aborts the current runs and resolves when
   * they have settled.
   */
  runForEach(fn: PartitionWork): LeaderWorkHandle {
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
  fenced<T>(
    client: pg.ClientBase,
    term: PartitionTerm,
    fn: (client: pg.ClientBase) => Promise<T>,
  ): Promise<T> {
    return fencedPartitionWrite(
      { table: this.o.fencingTable, key: this.keys.partitions, terms: this.terms, owned: this.owned },
      client,
      term,
      fn,
    );
  }

  /**
   * Called when a partition's term opens. Callbacks run one at a time, in order, each under
   * `callbackTimeoutMs`: one that has not settled by then is reported to `onError` (and
   * makes `health()` not live while it hangs); the worker never waits for them.
   */
  onAssigned(
    fn: PartitionCallbackMap['assigned'],
    options?: ListenerOptions,
  ): PartitionCallbackMap['assigned'] {
    return this.callbacks.add('assigned', fn, options);
  }

  /** Called when a partition's term ends (its signal has aborted), with the reason. */
  onRevoked(fn: PartitionCallbackMap['revoked'], options?: ListenerOptions): PartitionCallbackMap['revoked'] {
    return this.callbacks.add('revoked', fn, options);
  }

  /** Called with every error the worker meets (it never throws them at you). */
  onError(fn: PartitionCallbackMap['error'], options?: ListenerOptions): PartitionCallbackMap['error'] {
    return this.callbacks.add('error', fn, options);
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
    this.started = true;
    this.lastFailure = null;
    const vitals = new Vitals(this.o.clock);
    this.vitals = vitals;
    vitals.start();
    run.done = this.loop(run).finally(() => vitals.stop());
    return run.joined;
  }

  /**
   * Resolves true once this worker owns exactly its share for the current membership, and
   * the callbacks of the terms it opened have run (or passed `callbackTimeoutMs`); false
   * after `timeoutMs`, or when the worker stops.
   */
  waitForBalance(options: { timeoutMs?: number } = {}): Promise<boolean> {
    return rejecting(() => this.balance.wait(timeoutOf('waitForBalance', options) ?? 30_000));
  }

  /** Hand every partition back (runs drained), leave, close both sessions. Idempotent. */
  shutdown(options: { timeoutMs?: number } = {}): Promise<void> {
    return rejecting(() => this.stop(timeoutOf('shutdown', options) ?? 30_000));
  }

  private async stop(timeoutMs: number): Promise<void> {
    const run = this.run;
    if (!run) return;
    run.stopping = true;
    this.wake();
    const timer = new AbortController(); // no timer left behind once the run is over
    const finished = await Promise.race([
      run.done.then(() => true),
      sleep(this.o.clock, timeoutMs, timer.signal).then(() => false),
    ]);
    timer.abort();
    if (finished) return;
    // past the timeout: close both sessions, and the server frees what they hold (the others
    // then take it after the takeover delay); runs still winding down are left to finish
    this.terms.log('warn', 'shutdown_timeout', { timeoutMs });
    const p = this.phase as Phase;
    if (p.kind === 'running' || p.kind === 'stopping') {
      p.member.destroy(new ConnectionError(`shutdown did not complete within ${timeoutMs} ms`));
      await p.watch.close();
    }
    this.balance.stopped();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.shutdown();
  }

  private wake(): void {
    this.interrupt.abort();
  }

  /** A signal the next wake() aborts: check what woke the loop after calling this, then wait on it. */
  private arm(): AbortSignal {
    this.vitals?.progress();
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
        await this.serve(session, run);
      } catch (err) {
        if (run.joining && refusesToJoin(err)) {
          run.joining.reject(err);
          run.joining = null;
          run.stopping = true;
        } else {
          // what ended the session (a promotion, a lapsed lease, a timeout), not the
          // "connection terminated" of a statement it cut short
          const failure = session?.member.dead ?? (err as Error);
          this.lastFailure = failure;
          this.report(failure);
        }
      }
      this.lease.set(null);
      await this.terms.revokeAll('lost');
      if (session) {
        session.peers?.stop();
        session.member.destroy();
        await session.watch.close();
      }
      if (run.stopping) break;
      await sleep(this.o.clock, delay, this.arm());
      delay = Math.min(delay * 2, 5000);
    }
    this.phase = { kind: 'stopped' };
    this.balance.stopped();
    run.joining?.resolve();
    run.joining = null;
    if (this.run === run) this.run = null;
  }

  private open(): Promise<Sessions> {
    return openSessions(this.o, this.keys, {
      ownership: this.ownership,
      terms: this.terms,
      wake: () => this.wake(),
      report: (err) => this.report(err),
      stopping: () => this.run?.stopping === true,
      countStatement: () => {
        this.statements += 1;
      },
      opened: (s) => {
        this.phase = { kind: 'running', ...s };
      },
    });
  }

  /**
   * Another primary is up beside this worker's (an old primary after a promotion): its
   * workers may still run the partitions this one takes until their peer watch sees the
   * promotion, within one health interval plus a probe. Takes wait that long on top of the
   * takeover delay, clean hand-overs included (docs/partitions.md, "Primary failover").
   */
  private splitDelayMs(): number {
    const p = this.phase;
    return p.kind === 'running' && p.peers?.otherPrimary ? this.o.healthIntervalMs + PEER_TIMEOUT_MS : 0;
  }

  private async serve({ member, watch }: Sessions, run: Run): Promise<void> {
    for (;;) {
      if (member.dead) throw member.dead;
      if (run.stopping) {
        this.phase = { kind: 'stopping', member, watch };
        return this.ownership.leave(member);
      }
      const woken = this.arm();
      if (this.ownership.handovers.anyDeaths) await this.ownership.takeOver(member);
      const next = await this.ownership.reconcile(member, run.joining !== null);
      watch.watch(next ? next.slot : null);
      this.balance.check();
      run.joining?.resolve();
      run.joining = null;
      if (woken.aborted) continue;
      await sleep(this.o.clock, this.o.healthIntervalMs, woken);
    }
  }
}

/**
 * Errors that end a join instead of being retried: another partition count, or a refusal
 * (a pooler that shares backends, a hot standby): `start()` rejects with them.
 */
function refusesToJoin(err: unknown): boolean {
  return (
    err instanceof PartitionMismatchError || (err as { code?: unknown })?.code === 'ERR_PGLEADERLOCK_UNSAFE'
  );
}
