/**
 * One scenario: a seed draws the run's profile (swarm testing: how many candidates, which
 * mode, timings, ids, priorities, which faults and how often, how slow the network), then a
 * plan of operations and faults over a chaos phase; real `LeaderLock` instances run it on
 * the simulated server, the checker (checker.ts) watching every step; then a quiet phase
 * in which a leader must come and stay, then every lock is shut down and must leave nothing.
 */

import { DecorrelatedJitter, ExponentialBackoff, type RetryStrategy } from '../../src/core/retry.js';
import type { Term } from '../../src/core/term.js';
import { LeaderLock } from '../../src/leader/leader-lock.js';
import { Checker } from './checker.js';
import { connector, type SimClient } from './net.js';
import { isPartitionSeed, runPartitionScenario } from './partition-scenario.js';
import { clientLink, Pooler, poolerFor, sharesBackends } from './pooler.js';
import { drawPlan, drawProfile, KEY, KEY_ID, type Options, type Outcome, type Step } from './profile.js';
import { Random } from './random.js';
import { type ReleaseCause, SimServer } from './server.js';
import { Proc, World } from './world.js';

export {
  describeProfile,
  drawPlan,
  drawProfile,
  KEY,
  KEY_ID,
  type Options,
  type Outcome,
  type Profile,
  type Step,
  scenarioSeed,
} from './profile.js';

/** A simulated process running one candidate (a crash and a restart make a new one with the same id). */
export class Candidate {
  proc: Proc;
  lock: LeaderLock | null = null;
  clients: SimClient[] = [];
  /** Crashed (its process is gone); a 'start' after it makes a new process. */
  crashed = false;
  /** Past shutdowns to wait for before the end. */
  readonly stopping: Promise<unknown>[] = [];
  /** The lock's term as last seen, and when it opened. */
  termId = 0;
  termOpenedAt = 0;
  /** Until then its terms and bodies are excused (a freeze, or an instant loss it could not hear). */
  excusedUntil = -1;
  lastLoss: { at: number; cause: ReleaseCause } | null = null;
  /** Its key was taken at once while its connection was blackholed, and it has not been granted since. */
  lostUnheard = false;
  /** When it last reported ERR_PGLEADERLOCK_UNSAFE (a pooler refusal). */
  refusedAt = Number.NEGATIVE_INFINITY;
  /** A start is on its way to the process (it runs there when the process next runs). */
  starting = false;
  /** Armed by a freezeOnGrant step: freeze this long when next granted the key. */
  freezeOnGrant = 0;
  thenBlackhole = false;
  generation = 0;

  constructor(
    readonly index: number,
    readonly id: string,
    readonly priority: number,
    world: World,
  ) {
    this.proc = new Proc(world, `c${index}`);
  }

  get name(): string {
    return `c${this.index}.${this.generation}`;
  }

  get live(): boolean {
    return !this.crashed && this.lock !== null && !this.proc.dead;
  }
}

export async function runScenario(
  seed: number,
  o: Options & { trace: boolean; drop?: ReadonlySet<number> } = { trace: false },
): Promise<Outcome> {
  // one seed in five runs PartitionedLeadership workers instead (partition-scenario.ts)
  if (isPartitionSeed(seed) && !o.lockOnly) return runPartitionScenario(seed, o);
  const root = new Random(seed);
  const drawn = drawProfile(root.fork(), o);
  const profile = { ...drawn, pooler: poolerFor(seed, drawn.candidates.length) };
  const fullPlan = drawPlan(root.fork(), profile);
  const plan = o.drop ? fullPlan.filter((_, i) => !o.drop?.has(i)) : fullPlan;
  const netRng = root.fork();
  const serverRng = root.fork();
  const libRng = root.fork();
  const pickRng = root.fork();
  const world = new World(o.trace);
  const cands = profile.candidates.map((c, i) => new Candidate(i, c.id, c.priority, world));
  const checker = new Checker(world, profile, cands);
  const server = new SimServer(world, serverRng, {
    onHolder: (key, holder, cause) => {
      world.log(
        () =>
          `server: ${key} ${holder ? `granted to ${holder.owner} pid ${holder.pid}` : `freed (${cause})`}`,
      );
      if (key !== KEY_ID) return;
      checker.holderChanged(holder, cause);
      // an armed freezeOnGrant: frozen now, before the process reads its grant; maybe
      // blackholed as it thaws (it reads the grant, then hears nothing more)
      const c = holder ? cands.find((x) => x.name === holder.owner && !x.crashed) : undefined;
      if (c && c.freezeOnGrant > 0) {
        const link = holder ? clientLink(holder) : null;
        freeze(c, c.freezeOnGrant, c.thenBlackhole ? () => link?.blackhole() : null);
        c.freezeOnGrant = 0;
      }
    },
    onGap: (what) => checker.fail(`simulator gap: ${what}`),
  });
  checker.server = server;
  // the pooler in the path, if any (pooler.ts); through a sharing one, the lock must refuse
  const pooler = profile.pooler ? new Pooler(world, server, profile.pooler) : null;
  checker.shared = sharesBackends(profile.pooler);
  world.log(() => `profile ${JSON.stringify(profile)}`);
  plan.forEach((s, i) => {
    world.log(() => `plan[${i}] ${JSON.stringify(s)}`);
  });

  const retry = (): RetryStrategy =>
    profile.retry.kind === 'exponential'
      ? new ExponentialBackoff({
          baseMs: profile.retry.baseMs,
          maxMs: profile.retry.maxMs,
          random: () => libRng.next(),
        })
      : new DecorrelatedJitter({
          baseMs: profile.retry.baseMs,
          maxMs: profile.retry.maxMs,
          random: () => libRng.next(),
        });

  const build = (c: Candidate): LeaderLock => {
    const proc = c.proc;
    const owner = c.name;
    const lock = new LeaderLock({
      ...KEY,
      id: c.id,
      priority: c.priority,
      acquireMode: profile.mode,
      waitSliceMs: profile.waitSliceMs,
      healthIntervalMs: profile.healthIntervalMs,
      queryTimeoutMs: profile.queryTimeoutMs,
      closeTimeoutMs: profile.closeTimeoutMs,
      takeoverDelayMs: profile.takeoverDelayMs,
      callbackTimeoutMs: 5000,
      retryStrategy: retry(),
      connect: connector(world, pooler ?? server, netRng, profile.net, proc, owner, (client) => {
        c.clients.push(client);
        client.onUnhandled = (err) =>
          checker.fail(
            `${owner}: an 'error' with no listener (the process would crash): ${err.message}; the client ran ${JSON.stringify(client.history)}, its listeners: ${client.eventNames().join(',')}`,
          );
      }) as never,
      clock: proc.clock,
      random: () => libRng.next(),
      unref: true,
      logger: {
        debug: () => {},
        info: () => {},
        warn: (f) => world.log(() => `${owner} warn ${JSON.stringify(f)}`),
        error: (f) => {
          world.log(() => `${owner} error ${JSON.stringify(f)}`);
          if (f.event === 'lifecycle_failed') checker.fail(`${owner}: lifecycle_failed ${JSON.stringify(f)}`);
        },
      },
    });
    lock.onStateChange((from, to) => world.log(() => `${owner} ${from}->${to}`));
    lock.onError((e) => {
      world.log(() => `${owner} onError ${e.name}: ${e.message}`);
      checker.reported(c, e);
    });
    lock.runWhileLeader(async (term: Term) => {
      const body = checker.bodyStart(c);
      world.log(() => `${owner} body start term ${term.id}`);
      await new Promise<void>((resolve) => {
        if (term.signal.aborted) resolve();
        else term.signal.addEventListener('abort', () => resolve(), { once: true });
      });
      const drain = libRng.between(0, profile.drainMaxMs);
      await new Promise<void>((resolve) => proc.clock.setTimeout(resolve, drain));
      checker.bodyEnd(body);
      world.log(() => `${owner} body end term ${term.id}`);
    });
    return lock;
  };

  const target = (who: number): Candidate | undefined => {
    if (who >= 0) return cands[who];
    const h = server.holderOf(KEY_ID);
    return cands.find((c) => h && c.name === h.owner) ?? pickRng.pick(cands);
  };
  const lockLink = (c: Candidate): SimClient | undefined => [...c.clients].reverse().find((x) => !x.ended);
  const swallow = (what: string) => (e: unknown) =>
    world.log(() => `${what} rejected: ${e instanceof Error ? e.message : String(e)}`);

  const freeze = (c: Candidate, ms: number, onThaw: (() => void) | null = null): void => {
    if (c.proc.frozen || c.crashed) return;
    world.log(`${c.name} frozen for ${ms} ms`);
    c.proc.frozen = true;
    checker.frozen(c);
    const proc = c.proc;
    checker.faultUntil(world.now + ms);
    world.schedule(ms, null, 'server', () => {
      world.thaw(proc);
      checker.thawed(c);
      onThaw?.();
      world.log(`${c.name} thawed`);
    });
  };

  let quietAt = 0;
  const run = (s: Step): void => {
    world.log(() => `do ${JSON.stringify(s)}`);
    if (s.op === 'restart') {
      server.stop();
      world.schedule(s.ms, null, 'server', () => {
        server.start();
        world.log('server up');
      });
      return;
    }
    const c = target(s.who);
    if (!c) return;
    // an operation runs in the candidate's process: held while it is frozen
    const inProc = (fn: () => void): void => {
      world.schedule(0, c.proc, 'io', fn);
    };
    switch (s.op) {
      case 'start':
        if (c.crashed) {
          c.crashed = false;
          c.generation++;
          c.proc = new Proc(world, c.name);
          c.clients = [];
          c.lock = null;
        }
        c.starting = true;
        inProc(() => {
          c.starting = false;
          c.lock ??= build(c);
          c.lock.start().catch(swallow(`${c.name} start`));
        });
        return;
      case 'stepDown':
        inProc(() => {
          c.lock?.stepDown(s.ms ? { timeoutMs: s.ms } : {}).catch(swallow(`${c.name} stepDown`));
        });
        return;
      case 'shutdown':
        inProc(() => {
          if (c.lock)
            c.stopping.push(
              c.lock.shutdown(s.ms ? { timeoutMs: s.ms } : {}).catch(swallow(`${c.name} shutdown`)),
            );
        });
        return;
      case 'handoverTo': {
        const to = cands[s.to];
        inProc(() => {
          if (to) c.lock?.handoverTo(to.id, { timeoutMs: 1000 }).catch(swallow(`${c.name} handoverTo`));
        });
        return;
      }
      case 'crash':
        if (c.crashed || !c.lock) return;
        c.crashed = true;
        c.starting = false; // a start held by its frozen process dies with it
        c.proc.dead = true;
        checker.crashed(c);
        for (const x of c.clients) if (!x.ended) x.link.clientGone('crash');
        return;
      case 'freeze':
        freeze(c, s.ms ?? 0);
        return;
      case 'freezeOnGrant':
        c.freezeOnGrant = s.ms ?? 0;
        c.thenBlackhole = s.thenBlackhole === true;
        return;
      case 'blackhole':
        lockLink(c)?.link.blackhole();
        return;
      case 'reset':
        lockLink(c)?.link.reset();
        return;
      case 'terminate': {
        const handle = lockLink(c)?.link.backend;
        const b = pooler ? pooler.backendFor(handle, KEY_ID, pickRng) : handle;
        if (b) server.terminate(b.pid);
        return;
      }
    }
  };

  for (const s of plan) {
    world.schedule(s.at, null, 'server', () => run(s));
    const end = s.op === 'restart' || s.op === 'freeze' ? s.at + (s.ms ?? 0) : s.at;
    // an armed freezeOnGrant fires at the next grant (the quiet phase waits for it to end, below)
    quietAt = Math.max(quietAt, end);
  }
  // quiet: no more faults or operations; a leader must come within the bound and stay
  const p = profile;
  const maxDelay = p.net.baseMs + p.net.spikeMs;
  const release = 2 * (p.healthIntervalMs + p.queryTimeoutMs);
  const bound =
    release +
    p.takeoverDelayMs +
    (p.mode === 'wait' ? 1.1 * p.waitSliceMs : 0) +
    p.queryTimeoutMs +
    p.closeTimeoutMs +
    p.retry.maxMs +
    p.healthIntervalMs +
    40 * maxDelay +
    100;
  const hold = Math.max(3 * p.healthIntervalMs, p.mode === 'wait' ? 1.5 * p.waitSliceMs : 0, 500);
  checker.liveness(quietAt, bound, hold);
  world.schedule(quietAt, null, 'server', () => {
    for (const c of cands) c.freezeOnGrant = 0; // disarmed: no fault after the quiet point
  });
  const end = (): number => checker.quiet + bound + hold;
  while (!checker.done && !checker.stable && (await world.step(end()))) checker.check();
  if (!checker.done && !checker.stable) {
    world.now = Math.max(world.now, end());
    checker.check();
    checker.endOfLiveness();
  }
  // shut everything down; nothing may be left
  if (!checker.done) {
    let open = 0;
    for (const c of cands) {
      if (!c.live) continue;
      const lock = c.lock as LeaderLock;
      open++;
      world.schedule(0, c.proc, 'io', () => {
        lock.shutdown().then(
          () => open--,
          (e) => {
            open--;
            swallow(`${c.name} shutdown`)(e);
          },
        );
      });
    }
    for (const c of cands) for (const s of c.stopping) void s.then(() => {});
    const limit = world.now + 60_000;
    while (open > 0 && !checker.done && (await world.step(limit))) checker.check();
    if (open > 0 && !checker.done) checker.fail('shutdown() did not resolve within 60 s of simulated time');
    if (!checker.done) checker.leaks();
  }
  return {
    seed,
    violations: checker.violations,
    steps: world.steps,
    simMs: world.now,
    trace: world.trace,
    plan: fullPlan,
    profile,
  };
}
