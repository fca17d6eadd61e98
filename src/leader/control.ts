/**
 * Starting and stopping the lifecycle, for the public class: one run (a `Lifecycle`) at a
 * time, `start()` single-flight, and the waits that `shutdown()`, `stepDown()` and
 * `waitForLeadership()` make, each bounded by its caller's deadline. A call made from
 * inside one of the lock's own callbacks does not wait for the callback queue it is part
 * of (that is what would deadlock `onLost(() => lock.shutdown())`).
 */

import { ShutdownError } from '../core/errors.js';
import type { LockCallbacks } from '../core/lock-callbacks.js';
import { assessHealth, type LockHealth } from '../core/lock-health.js';
import type { ResolvedOptions } from '../core/lock-options.js';
import type { Runners } from '../core/runner.js';
import type { Safety } from '../core/safety.js';
import { LockState, type SpecState } from '../core/state.js';
import type { Term } from '../core/term.js';
import { LeadershipWaiters, within } from '../core/waiting.js';
import type { Input } from './fsm.js';
import type { TermIds } from './leadership.js';
import { Lifecycle } from './lifecycle.js';
import type { Counters } from './stats.js';
import { handoverError } from './succession.js';

interface Run {
  readonly lifecycle: Lifecycle;
  readonly ended: Promise<void>;
}

export interface ControlDeps {
  readonly o: ResolvedOptions;
  readonly callbacks: LockCallbacks;
  readonly runners: Runners<Term>;
  readonly termIds: TermIds;
  readonly counters: Counters;
  /** Every state change of every run. */
  changed(from: SpecState, to: SpecState, input: Input['type']): void;
}

export class Control {
  private run: Run | null = null;
  private starting: Promise<void> | null = null;
  private lastSafety: Safety | null = null;
  private lastLeaseEnd: number | null = null;
  /** The last run ended without shutdown() (retry exhausted, a loss without autoReacquire, an internal error): why. */
  private endedOnItsOwn: Error | null = null;
  /** waitForLeadership calls in progress: told `true` when a term opens, `false` when a run ends. */
  private readonly waiters: LeadershipWaiters;

  constructor(private readonly d: ControlDeps) {
    this.waiters = new LeadershipWaiters(d.o.clock);
  }

  get stoppedOnItsOwn(): Error | null {
    const lifecycle = this.run?.lifecycle;
    if (!lifecycle) return this.endedOnItsOwn;
    // STOPPED with no shutdown asked for: true from the transition on, not only once the
    // loop's last effects (closing the session) are over
    if (lifecycle.state === 'stopped' && !lifecycle.stopping) {
      return this.d.counters.lastError ?? new Error('the lock stopped without shutdown()');
    }
    return null;
  }

  get lifecycle(): Lifecycle | null {
    return this.run?.lifecycle ?? null;
  }

  get safety(): Safety | null {
    return this.run?.lifecycle.safety ?? this.lastSafety;
  }

  /** The current or last lease end, also after the lock stopped (null before the first acquisition). */
  get leaseExpiresAt(): number | null {
    return this.run?.lifecycle.leaseExpiresAt ?? this.lastLeaseEnd;
  }

  /** `lock.health()` (health.ts): the run's vitals, its callbacks' and its work's deadlines. */
  health(): LockHealth {
    const lifecycle = this.run?.lifecycle ?? null;
    return assessHealth({
      state: lifecycle?.state ?? LockState.STOPPED,
      isLeader: lifecycle?.isLeader ?? false,
      running: lifecycle !== null,
      stopping: lifecycle?.stopping ?? false,
      stoppedOnItsOwn: this.stoppedOnItsOwn,
      quietMs: lifecycle?.vitals.quietMs ?? null,
      quietBoundMs: lifecycle?.quietBoundMs ?? 0,
      blockedMs: lifecycle?.vitals.blockedMs ?? null,
      hungCallback: this.d.callbacks.hung(),
      overdueRun: this.d.runners.overdue(),
      callbackTimeoutMs: this.d.o.callbackTimeoutMs,
      failing: lifecycle?.failing ?? null,
    });
  }

  /** Running, or about to (a start waiting for an earlier stop). */
  get active(): boolean {
    return this.run !== null || this.starting !== null;
  }

  start(): Promise<void> {
    if (this.d.o.signal?.aborted) return Promise.resolve();
    if (this.starting) return this.starting;
    if (this.run && !this.run.lifecycle.stopping) return Promise.resolve();
    this.starting = (async () => {
      // called during a shutdown: start again once that shutdown is over
      while (this.run) await this.run.ended;
      if (!this.d.o.signal?.aborted) this.launch();
    })().finally(() => {
      this.starting = null;
    });
    return this.starting;
  }

  private launch(): void {
    const { o } = this.d;
    const lifecycle = new Lifecycle(
      o,
      this.d.callbacks,
      {
        changed: (from, to, input) => this.d.changed(from, to, input),
        termOpened: (term) => this.termOpened(term),
        renewed: () => {
          if (this.waiters.size > 0 && lifecycle.isLeader) this.waiters.tell(true);
        },
      },
      this.d.runners,
      this.d.termIds,
      this.d.counters,
    );
    const signal = o.signal;
    const onAbort = (): void => {
      this.shutdown(undefined).catch(() => {});
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    const run: Run = {
      lifecycle,
      ended: lifecycle.run().then(() => {
        signal?.removeEventListener('abort', onAbort);
        this.endedOnItsOwn = lifecycle.stopping
          ? null
          : (this.d.counters.lastError ?? new Error('the lock stopped without shutdown()'));
        this.lastSafety = lifecycle.safety ?? this.lastSafety;
        this.lastLeaseEnd = lifecycle.leaseExpiresAt ?? this.lastLeaseEnd;
        if (this.run === run) this.run = null;
        this.waiters.tell(false);
      }),
    };
    this.run = run;
  }

  private termOpened(term: Term): void {
    this.d.runners.start(term);
    this.waiters.tell(true);
  }

  /**
   * Stop: release if leader, close, and wait for the loop, then for every run of every
   * term, then for the callbacks queued so far; all within `timeoutMs`.
   */
  async shutdown(timeoutMs: number | undefined): Promise<void> {
    const { clock } = this.d.o;
    const deadline = timeoutMs === undefined ? null : clock.now() + timeoutMs;
    const inCallback = this.d.callbacks.inCallback();
    if (this.starting) await this.starting; // a start waiting for an earlier stop: let it launch, then stop it
    const run = this.run;
    if (run) {
      run.lifecycle.stop(deadline);
      if (!(await this.within(run.ended, deadline))) {
        const error = new ShutdownError(
          `shutdown did not finish within ${timeoutMs} ms; the session was closed by force`,
        );
        if (!run.lifecycle.forceClose(error)) this.report(error);
        await run.ended;
      }
    }
    if (!(await this.within(this.d.runners.idle(), deadline))) {
      this.report(
        new ShutdownError(
          `shutdown: leader work (runWhileLeader) was still running after ${timeoutMs} ms; its signal had aborted`,
        ),
      );
    }
    if (!inCallback) await this.within(this.d.callbacks.drained(), deadline);
  }

  /** Step down if leader: resolves when the release is over (and its callbacks ran), within `timeoutMs`. */
  async stepDown(timeoutMs: number | undefined): Promise<void> {
    const lifecycle = this.run?.lifecycle;
    if (lifecycle?.state !== 'leader') return;
    const { clock } = this.d.o;
    const deadline = timeoutMs === undefined ? null : clock.now() + timeoutMs;
    const inCallback = this.d.callbacks.inCallback();
    await lifecycle.stepDown(deadline);
    if (!inCallback) await this.within(this.d.callbacks.drained(), deadline);
  }

  /** Hand over to the waiting candidate `id` (lifecycle.ts `handoverTo`). */
  async handoverTo(id: string, timeoutMs: number): Promise<void> {
    const lifecycle = this.run?.lifecycle;
    if (!lifecycle) throw handoverError(`cannot hand over to "${id}": the lock is not started`);
    await lifecycle.handoverTo(id, timeoutMs);
  }

  /** True once a term opens (at once if leader), false when the run ends or after `timeoutMs`. */
  waitForLeadership(timeoutMs: number | undefined, signal: AbortSignal | undefined): Promise<boolean> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.run?.lifecycle.isLeader) return Promise.resolve(true);
    if (!this.active) return Promise.resolve(false);
    return this.waiters.wait(timeoutMs, signal);
  }

  private report(error: ShutdownError): void {
    this.d.o.logger.warn({ event: 'shutdown_timeout', err: error }, 'shutdown_timeout');
    this.d.counters.lastError = error;
    this.d.callbacks.emit('error', error);
  }

  private within(work: Promise<void>, deadline: number | null): Promise<boolean> {
    return within(this.d.o.clock, work, deadline);
  }
}
