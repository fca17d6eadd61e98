/**
 * A partition worker's lifecycle: one run from `start()` to the end of its loop, which
 * opens the worker's sessions (sessions.ts), reconciles on every notice and every
 * `healthIntervalMs` (ownership.ts), leaves cleanly on `shutdown()`, and after a lost
 * session revokes every term and connects again: at once, then on `retryStrategy` (the
 * policy `LeaderLock` and `LeaderWatch` share, core/retry.ts) while attempts fail. The phase and the run are data, owned here; `PartitionedLeadership` reads them.
 */
import { type Deferred, deferred, keepAlive, sleep, Wake } from '../core/clock.js';
import { ConnectionError, ShutdownError } from '../core/errors.js';
import type { Lease } from '../core/lease.js';
import { type PeerWatch, splitBrainDelayMs } from '../core/peers.js';
import { pgpoolEvent } from '../core/pgpool.js';
import { RetryCycle } from '../core/retry.js';
import { Vitals } from '../core/vitals.js';
import type { Balance } from './balance.js';
import { refusesToJoin } from './errors.js';
import { drainedNotices } from './handovers.js';
import type { WorkerPhase } from './health.js';
import type { MemberSession } from './member-session.js';
import type { ResolvedPartitionOptions } from './options.js';
import type { Ownership } from './ownership.js';
import { type LostMember, openSessions, type Sessions } from './sessions.js';
import type { keysOf } from './sql.js';
import type { Terms } from './terms.js';
import type { RingWatch } from './watch.js';

/** One run of the worker, from `start()` to the end of its loop. */
interface Run {
  /** Settles when the loop has ended (everything handed back or lost, both sessions closed). */
  done: Promise<void>;
  /** What `start()` returns: resolved at the first reconcile or when the run ends, rejected on a refusal. */
  readonly joined: Promise<void>;
  /** Until the first reconcile: how to settle `joined`. A refusal ends the run while joining. */
  joining: Deferred<void> | null;
  /** `shutdown()` was called: leave at the next step, then end. */
  stopping: boolean;
  /** Aborted with `stopping`: a connection under way is abandoned at once. */
  readonly stopped: AbortController;
}

type Phase =
  | { kind: 'stopped' }
  | { kind: 'connecting' }
  | { kind: 'running'; member: MemberSession; watch: RingWatch; peers: PeerWatch | null }
  | { kind: 'stopping'; member: MemberSession; watch: RingWatch };

/** What the lifecycle works with, owned by the worker. */
export interface WorkerParts {
  readonly o: ResolvedPartitionOptions;
  readonly keys: ReturnType<typeof keysOf>;
  readonly terms: Terms;
  readonly ownership: Ownership;
  readonly lease: Lease;
  readonly balance: Balance;
}

export class WorkerLifecycle {
  private phase: Phase = { kind: 'stopped' };
  private run: Run | null = null;
  /** Woken by news (a request, a notice, a death, a shutdown); armed before each wait (core/clock.ts). */
  private readonly waker = new Wake(() => this.vitals?.progress());
  /** Statements sent on both sessions (`stats()`). */
  statements = 0;
  /** health(): the loop's pulse (one per run), whether start() was called, and why the last session failed. */
  vitals: Vitals | null = null;
  started = false;
  lastFailure: Error | null = null;
  /** The member session lost last, until the next one opens (its proof of drain). */
  private lostMember: LostMember | null = null;
  /** A pgpool-II front was logged (once per worker). */
  private pgpoolSeen = false;
  // a start() during a shutdown: runs once that is over, unless a shutdown() follows (as LeaderLock)
  private queued: Deferred<void> | null = null;

  constructor(private readonly w: WorkerParts) {}

  /** Where the loop is, for `health()`. */
  get workerPhase(): WorkerPhase {
    const run = this.run;
    const p = this.phase;
    if (!run) return 'stopped';
    if (run.stopping) return 'stopping';
    return p.kind === 'running' && !p.member.dead ? 'running' : 'connecting';
  }

  /** A run is under way (started, not yet over). */
  get running(): boolean {
    return this.run !== null;
  }

  /** While running: why the ring watch's session is down, if it is. */
  get watchDown(): Error | null {
    return this.phase.kind === 'running' ? this.phase.watch.down : null;
  }

  /** The lease ran out unrenewed: end the member session, and with it every term. */
  lapsed(): void {
    const p = this.phase;
    const lapsed = new ConnectionError(
      'the lease ran out before an ownership check succeeded (a frozen process, or a server that did not answer); every term ends',
    );
    if (p.kind === 'running' || p.kind === 'stopping') p.member.destroy(lapsed);
  }

  start(): Promise<void> {
    const current = this.run;
    if (current?.stopping) return this.startAfter(current);
    if (current) return current.joined;
    const joining = deferred<void>();
    const run: Run = {
      done: Promise.resolve(),
      joined: joining.promise,
      joining,
      stopping: false,
      stopped: new AbortController(),
    };
    this.run = run;
    this.started = true;
    this.lastFailure = null;
    const vitals = new Vitals(this.w.o.clock);
    this.vitals = vitals;
    vitals.start();
    // a started worker keeps the process alive until it stops, as a started LeaderLock does
    // (the keep-alive rule, core/clock.ts): its retry timers alone would not (unless `unref`)
    const release = keepAlive(!this.w.o.unref);
    run.done = this.loop(run).finally(() => {
      vitals.stop();
      release();
    });
    return run.joined;
  }

  private startAfter(stopping: Run): Promise<void> {
    if (this.queued) return this.queued.promise;
    const queued = deferred<void>();
    this.queued = queued;
    void stopping.done.then(() => {
      if (this.queued !== queued) return; // a shutdown() came after it
      this.queued = null;
      this.start().then(queued.resolve, queued.reject);
    });
    return queued.promise;
  }

  async stop(timeoutMs: number): Promise<void> {
    // a start() queued behind the shutdown under way never runs (it resolves, as one whose run ended)
    this.queued?.resolve();
    this.queued = null;
    const run = this.run;
    if (!run) return;
    run.stopping = true;
    run.stopped.abort();
    this.waker.wake();
    const timer = new AbortController(); // no timer left behind once the run is over
    const finished = await Promise.race([
      run.done.then(() => true),
      sleep(this.w.o.clock, timeoutMs, timer.signal).then(() => false),
    ]);
    timer.abort();
    if (finished) return;
    // past the timeout: close both sessions, and the server frees what they hold (the others
    // then take it after the takeover delay); runs still winding down are left to finish
    this.w.terms.log('warn', 'shutdown_timeout', { timeoutMs });
    const p = this.phase as Phase;
    if (p.kind === 'running' || p.kind === 'stopping') {
      p.member.destroy(new ConnectionError(`shutdown did not complete within ${timeoutMs} ms`));
      await p.watch.close();
    }
    this.w.balance.stopped();
  }

  /**
   * Another primary is up beside this worker's (an old primary after a promotion): its
   * workers may still run the partitions this one takes until their peer watch sees the
   * promotion (one health interval plus a probe) and their work stops (the takeover delay).
   * Every take waits that long, clean hand-overs included (core/peers.ts
   * `splitBrainDelayMs`; docs/partitions.md, "Primary failover"); 0 when no other primary is up.
   */
  splitDelayMs(): number {
    const p = this.phase;
    const { takeoverDelayMs, healthIntervalMs } = this.w.o;
    return p.kind === 'running' && p.peers?.otherPrimary
      ? splitBrainDelayMs(takeoverDelayMs, healthIntervalMs)
      : 0;
  }

  private async loop(run: Run): Promise<void> {
    const { o, terms, lease, balance } = this.w;
    // the reconnect policy both elections share (core/retry.ts): a start's first attempt and
    // the first reconnect after a session that served go at once, the rest on retryStrategy
    const retry = new RetryCycle(o.retryStrategy, () => o.clock.now(), { atOnceAfterLoss: true });
    retry.goingAtOnce();
    // the ring watches of lost sessions, still closing: the next session does not wait for them
    let closing: Promise<unknown> = Promise.resolve();
    while (!run.stopping) {
      this.phase = { kind: 'connecting' };
      let session: Sessions | null = null;
      const served = { reconciled: false };
      let ended: Error | null = null;
      try {
        session = await this.open(run.stopped.signal, retry.connectTimeoutMs(o.queryTimeoutMs));
        await this.serve(session, run, served);
      } catch (err) {
        if (run.stopping && err instanceof ShutdownError) {
          // shut down while reconnecting: nothing failed
        } else if (run.joining && refusesToJoin(err)) {
          run.joining.reject(err);
          run.joining = null;
          run.stopping = true;
        } else {
          // what ended the session (a promotion, a lapsed lease, a timeout), not the
          // "connection terminated" of a statement it cut short
          const failure = session?.member.dead ?? (err as Error);
          this.lastFailure = failure;
          ended = failure;
          terms.error(failure);
        }
      }
      lease.set(null);
      await terms.revokeAll('lost');
      if (session) {
        session.peers?.stop();
        session.member.destroy();
        closing = Promise.all([closing, session.watch.close()]);
      }
      if (run.stopping) break;
      // a session that reconciled and then ended: connect again at once (its proof of drain
      // is due); otherwise wait the strategy's delay (by default jittered, so that workers
      // that lost the server together do not return in lockstep)
      if (served.reconciled) retry.reset();
      retry.lastError = ended ?? new ConnectionError('the session ended');
      const next = retry.next();
      if ('giveUp' in next) {
        this.lastFailure = next.giveUp;
        terms.error(next.giveUp);
        run.joining?.reject(next.giveUp);
        run.joining = null;
        break;
      }
      if (next.delayMs > 0) await sleep(o.clock, next.delayMs, this.waker.arm());
    }
    await closing;
    // the runs of terms lost just before the stop (revoked at the session's death, not awaited there)
    await terms.settled();
    this.phase = { kind: 'stopped' };
    balance.stopped();
    run.joining?.resolve();
    run.joining = null;
    if (this.run === run) this.run = null;
  }

  private open(signal: AbortSignal, connectTimeoutMs: number): Promise<Sessions> {
    return openSessions(this.w.o, this.w.keys, {
      signal,
      connectTimeoutMs,
      ownership: this.w.ownership,
      terms: this.w.terms,
      wake: () => this.waker.wake(),
      report: (err) => this.w.terms.error(err),
      stopping: () => this.run?.stopping === true,
      countStatement: () => {
        this.statements += 1;
      },
      opened: (s) => {
        this.phase = { kind: 'running', ...s };
        this.lostMember = null;
      },
      lost: (member) => {
        this.lostMember = member;
      },
      drained: (host) => this.drained(host),
      pgpool: (front) => {
        if (this.pgpoolSeen) return;
        this.pgpoolSeen = true;
        const { level, fields } = pgpoolEvent(front);
        this.w.terms.log(level, 'pgpool', fields);
      },
    });
  }

  /**
   * Proof of drain (handovers.ts, docs/safety.md): after the member session was lost, the
   * next one first says which of its partitions' runs have all returned; on the same server
   * only (a drain announced on another host proves nothing there). Partitions with a run
   * still going are left out: their next owner waits the full takeover delay.
   */
  private drained(host: string): readonly string[] {
    const lost = this.lostMember;
    if (!lost) return [];
    const { terms, o } = this.w;
    const returned = lost.host === host ? lost.partitions.filter((p) => !terms.running(p)) : [];
    terms.log('info', 'proof_of_drain', {
      partitions: returned,
      host,
      lostHost: lost.host,
      lostPid: lost.pid,
    });
    return drainedNotices(o.id, lost, returned);
  }

  private async serve({ member, watch }: Sessions, run: Run, served: { reconciled: boolean }): Promise<void> {
    const { o, ownership, balance } = this.w;
    for (;;) {
      if (member.dead) throw member.dead;
      if (run.stopping) {
        this.phase = { kind: 'stopping', member, watch };
        return ownership.leave(member);
      }
      const woken = this.waker.arm();
      if (ownership.handovers.anyDeaths) await ownership.takeOver(member);
      const next = await ownership.reconcile(member, run.joining !== null);
      served.reconciled = true;
      watch.watch(next ? next.slot : null);
      balance.check();
      run.joining?.resolve();
      run.joining = null;
      if (woken.aborted) continue;
      await sleep(o.clock, o.healthIntervalMs, woken);
    }
  }
}
