/**
 * `LeaderWatch`: who holds a `LeaderLock`'s key, for processes that only need to know
 * (route to the leader, show it), without taking or queueing for the lock. One connection,
 * LISTENing on the key's channel: every grant is announced there by the granting statement
 * and every clean release before its unlock (handover.ts), so a change is heard within
 * milliseconds. A holder that dies sends nothing, so the holder is also read from
 * `pg_locks` every `healthIntervalMs` (one statement, the watch's only cost at rest).
 */
import { Callbacks, type ErrorCallback, type ListenerOptions } from '../core/callbacks.js';
import { type Deferred, deferred, keepAlive, sleepInSteps, Wake } from '../core/clock.js';
import { ConnectionError, describe, PgLeaderLockError } from '../core/errors.js';
import { EventLog } from '../core/event-log.js';
import type { HandoverEvent } from '../core/handover.js';
import { keysFromName } from '../core/keys.js';
import { RetryCycle } from '../core/retry.js';
import { type LeaderWatchOptions, type ResolvedWatchOptions, resolveWatchOptions } from './options.js';
import { openWatchSession, readHolder, type WatchSession } from './session.js';
import { LeaderView, type WatchedLeader } from './view.js';

/** Called with the new leader (null: nobody leads, or the watch lost its connection). */
export type LeaderChangeCallback = (leader: WatchedLeader | null) => void | Promise<void>;

interface WatchCallbackMap {
  change: LeaderChangeCallback;
  error: ErrorCallback;
}

/** One `start()` until its close: its stop signal, its connection, its end. */
interface Run {
  readonly stop: AbortController;
  /** Woken by the stop and by the death of the run's connection (core/clock.ts). */
  readonly waker: Wake;
  readonly started: Deferred<void>;
  session: WatchSession | null;
  done: Promise<void>;
  closing: Promise<void> | null;
}

function asError(err: unknown): PgLeaderLockError {
  if (err instanceof PgLeaderLockError) return err;
  return new ConnectionError(`connection lost: ${describe(err)}`, { cause: err });
}

/**
 * Who leads a `LeaderLock` election (`key1`/`key2` or `name`), heard within milliseconds of
 * each grant and clean release, on one connection, without taking or queueing for the lock.
 *
 * ```ts
 * await using watch = new LeaderWatch({ connectionString, name: 'billing-scheduler' });
 * watch.onChange((leader) => console.log(leader ? `${leader.id} leads` : 'nobody leads'));
 * await watch.start();
 * ```
 *
 * `leader` is the lock's holder, from the moment its grant is announced: a holder that could
 * not prove a clean handover holds the lock for its `takeoverDelayMs` before its term opens
 * (its `state` reads `'pending'` meanwhile), and it is the leader here from its grant. A
 * holder that dies without a successor (SIGKILL, a terminated session) sends nothing: it is
 * reported gone at the next read of `pg_locks`, within `healthIntervalMs` plus that
 * statement's time. While the watch's connection is down, `leader` is null and
 * `connected` false (it knows nothing then); it reconnects on `retryStrategy` (the first
 * attempt at once) and reads the holder again. docs/choosing-the-leader.md.
 */
export class LeaderWatch implements AsyncDisposable {
  private readonly o: ResolvedWatchOptions;
  private readonly callbacks: Callbacks<WatchCallbackMap>;
  private readonly events: EventLog<WatchCallbackMap>;
  private readonly view = new LeaderView();
  private run: Run | null = null;
  private isConnected = false;

  constructor(options: LeaderWatchOptions) {
    this.o = resolveWatchOptions(options);
    const label = `watch ${this.o.key1},${this.o.key2}`;
    this.callbacks = new Callbacks<WatchCallbackMap>(
      this.o.logger,
      this.o.clock,
      this.o.callbackTimeoutMs,
      label,
    );
    this.events = new EventLog(this.o.logger, { key1: this.o.key1, key2: this.o.key2 }, this.callbacks);
  }

  /** Lock keys for a name, as `LeaderLock.keysFromName`. */
  static keysFromName(name: string): [key1: number, key2: number] {
    return keysFromName(name);
  }

  /** The watched lock's first key. */
  get key1(): number {
    return this.o.key1;
  }
  /** The watched lock's second key. */
  get key2(): number {
    return this.o.key2;
  }

  /** This watch's id (in `pg_stat_activity.application_name` as `pgleaderlock-watch:<id>`). */
  get id(): string {
    return this.o.id;
  }

  /**
   * The holder of the lock, `{ id, since }` (see {@link WatchedLeader}), or null: nobody
   * holds it, or the watch is not connected (see `connected`), not started, or closed.
   */
  get leader(): WatchedLeader | null {
    return this.view.leader;
  }

  /**
   * True while the watch is connected and has read the holder on this connection: then a
   * null `leader` means that nobody holds the lock. False before `start()` resolves, while
   * reconnecting, and after `close()`.
   */
  get connected(): boolean {
    return this.isConnected;
  }

  /**
   * Register a callback for every change of `leader`, with the new value: the holder found
   * at start, each new holder, null when the holder is gone or the connection lost. Runs on
   * the same queue and deadline as `LeaderLock`'s callbacks; a throw goes to `onError`.
   * `{ signal }` unregisters it when the signal aborts. Returns `fn`.
   */
  onChange<F extends LeaderChangeCallback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('change', fn, options);
  }

  /** Register a callback for errors: a lost connection, a failed reconnection, a callback that threw. Returns `fn`. */
  onError<F extends ErrorCallback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('error', fn, options);
  }

  /**
   * Connect, LISTEN, read the holder; resolves once `leader` is known (or when `close()`
   * comes first). Rejects if that first connection fails (the watch is then stopped: call
   * `start()` again); after that, connection losses are retried on `retryStrategy`.
   * Idempotent; called during a `close()` it starts again after it. Does nothing if the
   * `signal` option is already aborted. A started watch keeps the process alive until
   * `close()` (see `unref`).
   */
  start(): Promise<void> {
    if (this.o.signal?.aborted) return Promise.resolve();
    const current = this.run;
    if (current?.closing) return current.closing.then(() => this.start());
    if (current) return current.started.promise;
    const run: Run = {
      stop: new AbortController(),
      waker: new Wake(),
      started: deferred<void>(),
      session: null,
      done: Promise.resolve(),
      closing: null,
    };
    this.run = run;
    run.done = this.loop(run).catch((err: unknown) => {
      this.events.error(new PgLeaderLockError(`internal error: ${describe(err)}`, { cause: err }));
    });
    return run.started.promise;
  }

  /**
   * Stop: close the connection (gracefully, within `closeTimeoutMs`), leaving no timer or
   * listener. Resolves once closed and every callback queued so far has run (not waited for
   * from inside one of this watch's callbacks). `leader` then reads null; no callback is
   * called for that. Idempotent; concurrent calls share the close.
   */
  close(): Promise<void> {
    const run = this.run;
    if (!run) return Promise.resolve();
    run.closing ??= (async () => {
      run.stop.abort();
      run.waker.wake();
      await run.session?.conn.close();
      await run.done;
      if (this.run === run) this.run = null;
      if (!this.callbacks.inCallback()) await this.callbacks.drained();
    })();
    return run.closing;
  }

  /** `await using watch = new LeaderWatch(…)`: closes at scope exit. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  private async loop(run: Run): Promise<void> {
    const { clock, signal } = this.o;
    // a started watch keeps the process alive until it closes (unless `unref`)
    const release = keepAlive(!this.o.unref);
    const onAbort = (): void => void this.close();
    signal?.addEventListener('abort', onAbort, { once: true });
    // after a loss the first reconnect goes at once, then the strategy paces (as LeaderLock's)
    const retry = new RetryCycle(this.o.retryStrategy, () => clock.now(), { atOnceAfterLoss: true });
    let ever = false;
    try {
      while (!run.stop.signal.aborted) {
        try {
          // LISTEN in place; a stop abandons a connection under way at once (it rejects)
          const session = await openWatchSession(
            this.o,
            (event) => this.heard(run, event),
            run.stop.signal,
            retry.connectTimeoutMs(this.o.queryTimeoutMs),
          );
          run.session = session; // closed by the `finally` below if a close() came meanwhile
          if (run.stop.signal.aborted) break;
          await this.refresh(session);
          this.isConnected = true;
          this.events.log('info', 'watch_connected', { host: session.host, leader: this.leader?.id ?? null });
          ever = true;
          run.started.resolve();
          await this.follow(run, session, () => retry.reset());
        } catch (err) {
          run.session?.conn.destroy();
          run.session = null;
          if (run.stop.signal.aborted) break;
          const error = asError(err);
          if (!ever) {
            this.events.log('warn', 'watch_start_failed', { err: error });
            run.started.reject(error);
            break;
          }
          this.lost(error);
          retry.lastError = error;
          const next = retry.next();
          if ('giveUp' in next) {
            this.events.error(next.giveUp);
            break;
          }
          this.events.log('info', 'watch_reconnect', { attempt: retry.attempt, delayMs: next.delayMs });
          await sleepInSteps(clock, next.delayMs, run.stop.signal);
        }
      }
    } finally {
      await run.session?.conn.close();
      run.session = null;
      release();
      signal?.removeEventListener('abort', onAbort);
      this.isConnected = false;
      this.view.clear();
      run.started.resolve(); // closed before the first read: start() resolves
      if (this.run === run && !run.closing) this.run = null; // ended on its own
    }
  }

  /** Until the stop (returns) or the connection's failure (throws): read the holder every `healthIntervalMs`. */
  private async follow(run: Run, session: WatchSession, healthy: () => void): Promise<void> {
    const { conn } = session;
    const off = conn.onDeath(() => run.waker.wake());
    try {
      for (;;) {
        const woken = run.waker.arm();
        if (!run.stop.signal.aborted && !conn.dead)
          await sleepInSteps(this.o.clock, this.o.healthIntervalMs, woken);
        if (run.stop.signal.aborted) return;
        if (conn.dead) throw conn.cause ?? new ConnectionError('connection lost');
        await this.refresh(session);
        healthy();
      }
    } finally {
      off();
    }
  }

  /**
   * Read the holder and apply it, unless an event was applied while the read ran (its
   * answer may predate the event): then read again, up to three times in all; if events
   * keep coming, they are fresher than any read.
   */
  private async refresh(session: WatchSession): Promise<void> {
    for (let i = 0; i < 3; i++) {
      const seq = this.view.seq;
      const holder = await readHolder(session, this.o);
      if (this.view.seq !== seq) continue;
      const before = this.view.leader;
      if (this.view.read(holder)) this.changed(before);
      return;
    }
  }

  private heard(run: Run, event: HandoverEvent): void {
    if (this.run !== run || run.stop.signal.aborted) return;
    const before = this.view.leader;
    if (this.view.event(event, new Date())) this.changed(before);
  }

  private changed(before: WatchedLeader | null): void {
    const leader = this.view.leader;
    this.events.log('info', 'leader_change', { from: before?.id ?? null, to: leader?.id ?? null });
    this.callbacks.emit('change', leader);
  }

  /** The connection failed: nothing is known until the holder is read on a new one. */
  private lost(error: PgLeaderLockError): void {
    const event = this.isConnected ? 'watch_connection_lost' : 'watch_reconnect_failed';
    this.isConnected = false;
    this.events.log('warn', event, { err: error });
    const before = this.view.leader;
    if (this.view.clear()) this.changed(before);
    this.events.error(error);
  }
}
