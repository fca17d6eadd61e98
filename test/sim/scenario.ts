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
import { connector, type NetProfile, type SimClient } from './net.js';
import {
  describePartitionProfile,
  isPartitionSeed,
  type PartitionProfile,
  type PartitionStep,
  runPartitionScenario,
} from './partition-scenario.js';
import { Random } from './random.js';
import { SimServer } from './server.js';
import { Proc, World } from './world.js';

export const KEY = { key1: 7, key2: -9 };
export const KEY_ID = `${KEY.key1}:${KEY.key2}`;

export interface Profile {
  mode: 'wait' | 'poll';
  candidates: { id: string; priority: number }[];
  healthIntervalMs: number;
  queryTimeoutMs: number;
  waitSliceMs: number;
  closeTimeoutMs: number;
  takeoverDelayMs: number;
  retry: { kind: 'exponential' | 'jitter'; baseMs: number; maxMs: number };
  net: NetProfile;
  drainMaxMs: number;
  chaosMs: number;
}

export type Step =
  | {
      at: number;
      op:
        | 'start'
        | 'stepDown'
        | 'shutdown'
        | 'crash'
        | 'freeze'
        | 'freezeOnGrant'
        | 'blackhole'
        | 'reset'
        | 'terminate';
      who: number;
      ms?: number;
      /** freezeOnGrant: its lock connection is blackholed as it thaws. */
      thenBlackhole?: boolean;
    }
  | { at: number; op: 'handoverTo'; who: number; to: number }
  | { at: number; op: 'restart'; ms: number };

/** The seed of scenario `index` of a run with base seed `base` (each scenario replays alone from it). */
export function scenarioSeed(base: number, index: number): number {
  return new Random((base ^ Math.imul(index + 1, 0x9e3779b9)) >>> 0).int(0, 2 ** 32 - 1);
}

/** A scenario's profile in one line (its candidates: id, its bytes in application_name, priority). */
export function describeProfile(seed: number, o: Options = {}): string {
  if (isPartitionSeed(seed) && !o.lockOnly) return describePartitionProfile(seed);
  const p = drawProfile(new Random(seed).fork(), o);
  const ids = p.candidates.map((c) => {
    const bytes = Buffer.byteLength(`pgleaderlock:${c.id}`);
    const verbatim = bytes <= 63 && /^[ -~]*$/.test(c.id);
    return `${JSON.stringify(c.id)} p=${c.priority}${verbatim ? '' : ` (application_name cannot carry it: ${bytes} bytes)`}`;
  });
  return `${p.mode} mode, health ${p.healthIntervalMs} ms, query ${p.queryTimeoutMs} ms, slice ${p.waitSliceMs} ms, takeover delay ${p.takeoverDelayMs} ms; ${ids.join(', ')}`;
}

export interface Outcome {
  seed: number;
  violations: string[];
  steps: number;
  simMs: number;
  trace: string[] | null;
  plan: Step[] | PartitionStep[];
  profile: Profile | PartitionProfile;
}

/** Ids as deployments make them: short, longer than application_name's 63 bytes, non-ASCII. */
function idFor(rng: Random, i: number, kind: 'short' | 'long' | 'nonascii'): string {
  if (kind === 'short') return `c${i}`;
  if (kind === 'long')
    return `billing-scheduler-deployment-7f9c8d6b5-x2k9p-candidate-${i}`.padEnd(rng.int(57, 70), 'z');
  return rng.pick([`höher-priorität-${i}`, `кандидат-${i}`, `候補-${i}`]);
}

/** What a run may draw: `verbatimIds` keeps to ids that application_name carries as they are (issue 35 open). */
export interface Options {
  verbatimIds?: boolean;
  /** Only LeaderLock scenarios (no partition scenario for the seeds that would draw one). */
  lockOnly?: boolean;
}

export function drawProfile(rng: Random, o: Options = {}): Profile {
  const n = rng.int(1, 4);
  const drawn = rng.pick([
    ['short'],
    ['short'],
    ['short', 'long'],
    ['short', 'nonascii'],
    ['long', 'nonascii', 'short'],
  ] as const);
  const idKinds = o.verbatimIds ? (['short'] as const) : drawn;
  const priorities = rng.chance(0.5);
  const candidates = Array.from({ length: n }, (_, i) => ({
    id: idFor(rng, i, rng.pick(idKinds)),
    priority: priorities ? rng.int(0, 3) : 0,
  }));
  const healthIntervalMs = rng.pick([100, 200, 500]);
  const queryTimeoutMs = rng.pick([150, 300, 500]);
  const spikeP = rng.pick([0, 0, 0.002, 0.02]);
  const net: NetProfile = {
    baseMs: rng.pick([0.3, 1, 3]),
    spikeP,
    spikeMs: spikeP === 0 ? 0 : rng.pick([10, 30, Math.floor(queryTimeoutMs / 3)]),
  };
  const drainMaxMs = rng.pick([0, 5, 30]);
  const maxDelay = net.baseMs + net.spikeMs;
  // docs/safety.md: set it to how long the work takes to stop after its abort, plus detection
  const takeoverDelayMs = Math.ceil(drainMaxMs + 2 * maxDelay + 20) + rng.pick([0, 0, 200]);
  return {
    mode: rng.pick(['wait', 'poll'] as const),
    candidates,
    healthIntervalMs,
    queryTimeoutMs,
    waitSliceMs: rng.pick([300, 1000, 3000]),
    closeTimeoutMs: rng.pick([100, 300]),
    takeoverDelayMs,
    retry: {
      kind: rng.pick(['exponential', 'jitter'] as const),
      baseMs: rng.pick([20, 100, 300]),
      maxMs: rng.pick([500, 1500]),
    },
    net,
    drainMaxMs,
    chaosMs: rng.int(500, 4000),
  };
}

export function drawPlan(rng: Random, p: Profile): Step[] {
  const n = p.candidates.length;
  const steps: Step[] = [];
  for (let i = 0; i < n; i++) steps.push({ at: rng.between(0, 300), op: 'start', who: i });
  const release = 2 * (p.healthIntervalMs + p.queryTimeoutMs);
  const faults = rng.pick([0, 1, 3, 6]);
  const all = ['terminate', 'restart', 'freeze', 'freezeOnGrant', 'blackhole', 'reset', 'crash'] as const;
  const kinds = all.filter(() => rng.chance(0.6));
  for (let k = 0; k < faults && kinds.length > 0; k++) {
    const at = rng.between(200, p.chaosMs);
    const who = rng.int(-1, n - 1); // -1: whoever leads then
    const kind = rng.pick(kinds);
    if (kind === 'restart') steps.push({ at, op: 'restart', ms: rng.pick([20, 300, 1500]) });
    else if (kind === 'freeze' || kind === 'freezeOnGrant') {
      // freezeOnGrant: the process freezes as the server grants it the key, before it reads the grant
      const ms = rng.pick([50, release / 2, release * 1.5]);
      if (kind === 'freeze') steps.push({ at, op: kind, who, ms });
      else steps.push({ at, op: kind, who: rng.int(0, n - 1), ms, thenBlackhole: rng.chance(0.5) });
    } else steps.push({ at, op: kind, who });
    if (kind === 'crash' && rng.chance(0.6))
      steps.push({ at: at + rng.between(50, 2000), op: 'start', who: who });
  }
  const ops = rng.pick([0, 2, 5]);
  for (let k = 0; k < ops; k++) {
    const at = rng.between(300, p.chaosMs);
    const who = rng.int(-1, n - 1);
    const op = rng.pick(['stepDown', 'stepDown', 'handoverTo', 'shutdown'] as const);
    if (op === 'handoverTo') steps.push({ at, op, who, to: rng.int(0, n - 1) });
    else if (op === 'shutdown') {
      steps.push({ at, op, who, ms: rng.pick([0, 0, 50]) });
      if (rng.chance(0.7)) steps.push({ at: at + rng.between(10, 1500), op: 'start', who });
    } else steps.push({ at, op, who, ms: rng.pick([0, 0, 30]) });
  }
  return steps.sort((a, b) => a.at - b.at);
}

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
  lastLoss: { at: number; cause: string } | null = null;
  /** Its key was taken at once while its connection was blackholed, and it has not been granted since. */
  lostUnheard = false;
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
  const profile = drawProfile(root.fork(), o);
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
        const link = holder?.link;
        freeze(c, c.freezeOnGrant, c.thenBlackhole ? () => link?.blackhole() : null);
        c.freezeOnGrant = 0;
      }
    },
    onGap: (what) => checker.fail(`simulator gap: ${what}`),
  });
  checker.server = server;
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
      connect: connector(world, server, netRng, profile.net, proc, owner, (client) => {
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
    lock.onError((e) => world.log(() => `${owner} onError ${e.name}: ${e.message}`));
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
        const b = lockLink(c)?.link.backend;
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
