/**
 * The model tests' world: real `LeaderLock` instances on the deterministic simulation
 * (test/sim: its world, server, network, candidates and invariant checker, reused as they
 * are), no faults but the ones a command makes, every call made inside its candidate's
 * simulated process, and simulated time driven until the call settles.
 */

import { ExponentialBackoff } from '../../src/core/retry.js';
import type { Term } from '../../src/core/term.js';
import { LeaderLock } from '../../src/leader/leader-lock.js';
import { Candidate } from '../sim/candidate.js';
import { Checker } from '../sim/checker.js';
import { connector } from '../sim/net.js';
import { livenessBounds } from '../sim/profile.js';
import { Random } from '../sim/random.js';
import { drawProfile, KEY, KEY_ID, type Profile } from '../sim/scenario.js';
import { SimServer } from '../sim/server.js';
import { World } from '../sim/world.js';

export interface Settled<T> {
  done: boolean;
  value?: T;
  error?: unknown;
  /** Simulated ms from the call to its settling. */
  tookMs: number;
}

export class SimGroup {
  readonly world = new World(false);
  readonly profile: Profile;
  readonly server: SimServer;
  readonly checker: Checker;
  readonly cands: Candidate[];
  private readonly libRng: Random;

  constructor(seed: number, priorities: readonly number[], mode: 'wait' | 'poll') {
    const root = new Random(seed);
    const drawn = drawProfile(root.fork(), { verbatimIds: false });
    // the drawn timings and network; the candidates and mode from the test
    this.profile = {
      ...drawn,
      mode,
      candidates: priorities.map((priority, i) => ({ id: `c${i}-${['a', 'ü', '候補'][i % 3]}`, priority })),
    };
    const netRng = root.fork();
    const serverRng = root.fork();
    this.libRng = root.fork();
    this.cands = this.profile.candidates.map((c, i) => new Candidate(i, c.id, c.priority, this.world));
    this.checker = new Checker(this.world, this.profile, this.cands);
    this.server = new SimServer(this.world, serverRng, {
      onHolder: (key, holder, cause) => {
        if (key === KEY_ID) this.checker.holderChanged(holder, cause);
      },
      onGap: (what) => this.checker.fail(`simulator gap: ${what}`),
    });
    this.checker.server = this.server;
    this.checker.servers = [this.server];
    for (const c of this.cands) c.lock = this.build(c, netRng);
  }

  private build(c: Candidate, netRng: Random): LeaderLock {
    const p = this.profile;
    const lock = new LeaderLock({
      ...KEY,
      id: c.id,
      priority: c.priority,
      acquireMode: p.mode,
      waitSliceMs: p.waitSliceMs,
      healthIntervalMs: p.healthIntervalMs,
      queryTimeoutMs: p.queryTimeoutMs,
      closeTimeoutMs: p.closeTimeoutMs,
      takeoverDelayMs: p.takeoverDelayMs,
      callbackTimeoutMs: 5000,
      retryStrategy: new ExponentialBackoff({ baseMs: p.retry.baseMs, maxMs: p.retry.maxMs }),
      connect: connector(this.world, this.server, netRng, p.net, c.proc, c.name, (client) => {
        c.clients.push(client);
        client.onUnhandled = (err) =>
          this.checker.fail(`${c.name}: an 'error' with no listener: ${err.message}`);
      }) as never,
      clock: c.proc.clock,
      random: () => this.libRng.next(),
      unref: true,
      logger: {
        debug: () => {},
        info: () => {},
        warn: () => {},
        error: (f) => {
          if (f.event === 'lifecycle_failed') this.checker.fail(`${c.name}: lifecycle_failed`);
        },
      },
    });
    lock.onError(() => {});
    lock.runWhileLeader(async (term: Term) => {
      const body = this.checker.bodyStart(c);
      await new Promise<void>((resolve) => {
        if (term.signal.aborted) resolve();
        else term.signal.addEventListener('abort', () => resolve(), { once: true });
      });
      const drain = this.libRng.between(0, p.drainMaxMs);
      await new Promise<void>((resolve) => c.proc.clock.setTimeout(resolve, drain));
      this.checker.bodyEnd(body);
    });
    return lock;
  }

  lock(i: number): LeaderLock {
    return this.cands[i]?.lock as LeaderLock;
  }

  /** Call `fn` inside candidate `i`'s process, then run simulated time until it settles (at most `maxMs`). */
  async call<T>(i: number, fn: (lock: LeaderLock) => Promise<T>, maxMs = 120_000): Promise<Settled<T>> {
    const c = this.cands[i] as Candidate;
    const r: Settled<T> = { done: false, tookMs: 0 };
    const started = this.world.now;
    this.world.schedule(0, c.proc, 'io', () => {
      fn(c.lock as LeaderLock).then(
        (value) => {
          r.done = true;
          r.value = value;
          r.tookMs = this.world.now - started;
        },
        (error: unknown) => {
          r.done = true;
          r.error = error;
          r.tookMs = this.world.now - started;
        },
      );
    });
    await this.run(() => r.done, maxMs);
    return r;
  }

  /** Run events (the invariants checked after each) until `until()` or `ms` of simulated time pass. */
  async run(until: () => boolean, ms: number): Promise<void> {
    const end = this.world.now + ms;
    while (!until() && !this.checker.done && (await this.world.step(end))) this.checker.check();
    if (!until() && !this.checker.done) this.world.now = Math.max(this.world.now, end);
  }

  /** How long after the last change a leader must be there (the simulation's own bound, test/sim/profile.ts). */
  get boundMs(): number {
    return livenessBounds(this.profile, false).bound;
  }

  /** The candidate the server grants the key to, if any. */
  holder(): number | null {
    const h = this.server.holderOf(KEY_ID);
    const c = h ? this.cands.find((x) => x.name === h.owner) : undefined;
    return c ? c.index : null;
  }

  leaders(): number[] {
    return this.cands.filter((c) => c.lock?.isLeader).map((c) => c.index);
  }
}
