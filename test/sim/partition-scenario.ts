/**
 * A partition scenario: real `PartitionedLeadership` workers (src/partitions, unchanged) on
 * the simulated server, through their `connect`, `clock` and `random` options. A seed
 * draws the profile (1–4 workers, the partition count, timings, network, which faults),
 * then a plan over a chaos phase: workers joining late, leaving (`shutdown`) and joining
 * again, crashing and restarting, freezing; a member session terminated, reset or
 * blackholed; a server restart. The checker (partition-checker.ts) watches every step;
 * then a quiet phase in which every partition must be owned and the shares balanced; then
 * every worker shuts down and must leave nothing.
 */
import { PartitionedLeadership } from '../../src/partitions/partitioned.js';
import { keysOf } from '../../src/partitions/sql.js';
import type { PartitionTerm } from '../../src/partitions/terms.js';
import { connector, type NetProfile, type SimClient } from './net.js';
import { isLive, PartitionChecker, type Worker, workerName } from './partition-checker.js';
import { Pooler, type PoolerProfile, poolerFor, sharesBackends } from './pooler.js';
import { Random } from './random.js';
import { type Backend, SimServer } from './server.js';
import { Proc, World } from './world.js';

const NAME = 'sim-partitions';
export interface PartitionProfile {
  kind: 'partitions';
  workers: number;
  partitions: number;
  healthIntervalMs: number;
  queryTimeoutMs: number;
  closeTimeoutMs: number;
  takeoverDelayMs: number;
  watchSliceMs: number;
  drainTimeoutMs: number;
  net: NetProfile;
  drainMaxMs: number;
  chaosMs: number;
  pooler?: PoolerProfile | null; // null: workers connect directly
}

export type PartitionStep =
  | {
      at: number;
      op: 'start' | 'shutdown' | 'crash' | 'freeze' | 'blackhole' | 'reset' | 'terminate';
      who: number;
      ms?: number;
    }
  | { at: number; op: 'restart'; ms: number };

/** One scenario in five is a partition scenario (the seed decides, so a replay knows). */
export function isPartitionSeed(seed: number): boolean {
  return seed % 5 === 0;
}

export function drawPartitionProfile(rng: Random): PartitionProfile {
  const workers = rng.int(1, 4);
  const partitions = rng.pick([1, 2, 3, 5, 8, 16]);
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
  return {
    kind: 'partitions',
    workers,
    partitions,
    healthIntervalMs,
    queryTimeoutMs,
    closeTimeoutMs: rng.pick([100, 300]),
    // docs/safety.md: how long the work takes to stop after its abort, plus detection
    takeoverDelayMs: Math.ceil(drainMaxMs + 2 * maxDelay + 20) + rng.pick([0, 0, 200]),
    watchSliceMs: rng.pick([300, 1000, 3000]),
    drainTimeoutMs: rng.pick([500, 2000]),
    net,
    drainMaxMs,
    chaosMs: rng.int(500, 4000),
  };
}

export function drawPartitionPlan(rng: Random, p: PartitionProfile): PartitionStep[] {
  const n = p.workers;
  const steps: PartitionStep[] = [];
  // most join at once, some later (a join moves partitions)
  for (let i = 0; i < n; i++)
    steps.push({
      at: rng.chance(0.7) ? rng.between(0, 300) : rng.between(300, p.chaosMs),
      op: 'start',
      who: i,
    });
  const release = 2 * (p.healthIntervalMs + p.queryTimeoutMs);
  const faults = rng.pick([0, 1, 3, 6]);
  const all = ['terminate', 'restart', 'freeze', 'blackhole', 'reset', 'crash'] as const;
  const kinds = all.filter(() => rng.chance(0.6));
  for (let k = 0; k < faults && kinds.length > 0; k++) {
    const at = rng.between(200, p.chaosMs);
    const who = rng.int(0, n - 1);
    const kind = rng.pick(kinds);
    if (kind === 'restart') steps.push({ at, op: 'restart', ms: rng.pick([20, 300, 1500]) });
    else if (kind === 'freeze')
      steps.push({ at, op: kind, who, ms: rng.pick([50, release / 2, release * 1.5]) });
    else steps.push({ at, op: kind, who });
    if (kind === 'crash' && rng.chance(0.6)) steps.push({ at: at + rng.between(50, 2000), op: 'start', who });
  }
  const leaves = rng.pick([0, 1, 2]);
  for (let k = 0; k < leaves; k++) {
    const at = rng.between(300, p.chaosMs);
    const who = rng.int(0, n - 1);
    steps.push({ at, op: 'shutdown', who, ms: rng.pick([0, 0, 50]) });
    if (rng.chance(0.7)) steps.push({ at: at + rng.between(10, 1500), op: 'start', who });
  }
  return steps.sort((a, b) => a.at - b.at);
}

/** Workers' pooler (room for each worker's member and watch sessions); a start() refused is no member. */
function partitionPooler(seed: number, workers: number): PoolerProfile | null {
  return poolerFor(seed, 2 * workers);
}

export function describePartitionProfile(seed: number): string {
  const p = drawPartitionProfile(new Random(seed).fork());
  const pool = partitionPooler(seed, p.workers);
  const via = pool
    ? `through a ${pool.mode}-mode pooler (${pool.choice}, pool ${pool.size}, ${pool.warm} warm); `
    : '';
  return `${via}partitions: ${p.workers} worker(s), ${p.partitions} partition(s), health ${p.healthIntervalMs} ms, query ${p.queryTimeoutMs} ms, takeover delay ${p.takeoverDelayMs} ms, watch slice ${p.watchSliceMs} ms`;
}

export interface PartitionOutcome {
  seed: number;
  violations: string[];
  steps: number;
  simMs: number;
  trace: string[] | null;
  plan: PartitionStep[];
  profile: PartitionProfile;
}

export async function runPartitionScenario(
  seed: number,
  o: { trace: boolean; drop?: ReadonlySet<number> },
): Promise<PartitionOutcome> {
  const root = new Random(seed);
  const drawn = drawPartitionProfile(root.fork());
  const profile = { ...drawn, pooler: partitionPooler(seed, drawn.workers) };
  const fullPlan = drawPartitionPlan(root.fork(), profile);
  const plan = o.drop ? fullPlan.filter((_, i) => !o.drop?.has(i)) : fullPlan;
  const netRng = root.fork();
  const serverRng = root.fork();
  const libRng = root.fork();
  const world = new World(o.trace);
  const keys = keysOf(NAME);
  const p = profile;
  const workers: Worker[] = Array.from({ length: p.workers }, (_, index) => ({
    index,
    id: `w${index}`,
    proc: new Proc(world, `w${index}`),
    pl: null,
    clients: [],
    crashed: false,
    starting: false,
    generation: 0,
    excusedUntil: -1,
    lostUnheard: false,
    stopping: [],
    lastLoss: new Map(),
    member: false,
    frozenStep: -1,
  }));
  const checkMs = p.healthIntervalMs + p.queryTimeoutMs + p.drainMaxMs + 1;
  const checker = new PartitionChecker(world, keys.partitions, p.partitions, checkMs, p.drainMaxMs, workers);
  const holders = new Map<number, Backend | null>();
  const server = new SimServer(world, serverRng, {
    onHolder: (key, holder, cause) => {
      world.log(
        () =>
          `server: ${key} ${holder ? `granted to ${holder.owner} pid ${holder.pid}` : `freed (${cause})`}`,
      );
      const [k1, k2] = key.split(':').map(Number);
      if (k1 !== keys.partitions) return;
      const partition = k2 as number;
      const prev = holders.get(partition) ?? null;
      holders.set(partition, holder);
      checker.partitionChanged(partition, prev, holder, cause);
    },
    onGap: (what) => checker.fail(`simulator gap: ${what}`),
  });
  checker.server = server;
  const pooler = profile.pooler ? new Pooler(world, server, profile.pooler) : null;
  checker.shared = sharesBackends(profile.pooler ?? null);
  world.log(() => `profile ${JSON.stringify(profile)}`);
  plan.forEach((s, i) => {
    world.log(() => `plan[${i}] ${JSON.stringify(s)}`);
  });

  const build = (w: Worker): PartitionedLeadership => {
    const proc = w.proc;
    const owner = workerName(w);
    const pl = new PartitionedLeadership({
      name: NAME,
      partitions: p.partitions,
      id: w.id,
      healthIntervalMs: p.healthIntervalMs,
      queryTimeoutMs: p.queryTimeoutMs,
      closeTimeoutMs: p.closeTimeoutMs,
      takeoverDelayMs: p.takeoverDelayMs,
      watchSliceMs: p.watchSliceMs,
      drainTimeoutMs: p.drainTimeoutMs,
      callbackTimeoutMs: 5000,
      connect: connector(world, pooler ?? server, netRng, p.net, proc, owner, (client) => {
        w.clients.push(client);
        client.onUnhandled = (err) =>
          checker.fail(
            `${owner}: an 'error' with no listener (the process would crash): ${err.message}; the client ran ${JSON.stringify(client.history)}`,
          );
      }) as never,
      clock: proc.clock,
      random: () => libRng.next(),
      unref: true,
      logger: {
        debug: () => {},
        info: (f) => world.log(() => `${owner} info ${JSON.stringify(f)}`),
        warn: (f) => world.log(() => `${owner} warn ${JSON.stringify(f)}`),
        error: (f) => world.log(() => `${owner} error ${JSON.stringify(f)}`),
      },
    });
    pl.onError((e) => world.log(() => `${owner} onError ${e.name}: ${e.message}`));
    pl.runForEach(async (partition: number, term: PartitionTerm) => {
      const body = checker.bodyStart(w, partition);
      world.log(() => `${owner} body start p${partition} term ${term.id}`);
      await new Promise<void>((resolve) => {
        if (term.signal.aborted) resolve();
        else term.signal.addEventListener('abort', () => resolve(), { once: true });
      });
      const drain = libRng.between(0, p.drainMaxMs);
      await new Promise<void>((resolve) => proc.clock.setTimeout(resolve, drain));
      checker.bodyEnd(body);
      world.log(() => `${owner} body end p${partition} term ${term.id}`);
    });
    return pl;
  };

  const swallow = (what: string) => (e: unknown) =>
    world.log(() => `${what} rejected: ${e instanceof Error ? e.message : String(e)}`);
  /** The member session's connection (its backend shows `#p<P>`), else the newest open one. */
  const memberLink = (w: Worker): SimClient | undefined => {
    const open = [...w.clients].reverse().filter((x) => !x.ended);
    return open.find((x) => x.link.backend?.appName.endsWith(`#p${p.partitions}`)) ?? open[0];
  };
  const freeze = (w: Worker, ms: number): void => {
    if (w.proc.frozen || w.crashed) return;
    world.log(`${workerName(w)} frozen for ${ms} ms`);
    w.proc.frozen = true;
    checker.frozen(w);
    const proc = w.proc;
    world.schedule(ms, null, 'server', () => {
      world.thaw(proc);
      if (w.proc === proc) checker.thawed(w);
      world.log(`${workerName(w)} thawed`);
    });
  };

  let quietAt = 0;
  const run = (s: PartitionStep): void => {
    world.log(() => `do ${JSON.stringify(s)}`);
    if (s.op === 'restart') {
      server.stop();
      world.schedule(s.ms, null, 'server', () => {
        server.start();
        world.log('server up');
      });
      return;
    }
    const w = workers[s.who];
    if (!w) return;
    const inProc = (fn: () => void): void => {
      world.schedule(0, w.proc, 'io', fn);
    };
    switch (s.op) {
      case 'start':
        if (w.crashed) {
          w.crashed = false;
          w.generation++;
          w.proc = new Proc(world, workerName(w));
          w.clients = [];
          w.pl = null;
          w.excusedUntil = -1;
          w.lostUnheard = false;
        }
        w.starting = true;
        inProc(() => {
          w.starting = false;
          w.member = true;
          w.pl ??= build(w);
          w.pl.start().catch((e: unknown) => {
            // refused: no member. Only behind a pooler that shares backends: elsewhere a start()
            // never rejects so (a pooler check that could not be completed is retried)
            if ((e as { code?: unknown })?.code === 'ERR_PGLEADERLOCK_UNSAFE') {
              w.member = false;
              if (!checker.shared)
                checker.fail(
                  `${workerName(w)}: start() rejected with ERR_PGLEADERLOCK_UNSAFE ${pooler ? 'through a session-mode pooler' : 'on a direct connection'}: ${(e as Error).message}`,
                );
            }
            swallow(`${workerName(w)} start`)(e);
          });
        });
        return;
      case 'shutdown':
        inProc(() => {
          if (!w.pl) return;
          w.member = false;
          w.stopping.push(
            w.pl.shutdown(s.ms ? { timeoutMs: s.ms } : {}).catch(swallow(`${workerName(w)} shutdown`)),
          );
        });
        return;
      case 'crash':
        if (w.crashed || !w.pl) return;
        w.crashed = true;
        w.member = false;
        w.starting = false;
        w.proc.dead = true;
        checker.crashed(w);
        for (const x of w.clients) if (!x.ended) x.link.clientGone('crash');
        return;
      case 'freeze':
        freeze(w, s.ms ?? 0);
        return;
      case 'blackhole':
        memberLink(w)?.link.blackhole();
        return;
      case 'reset':
        memberLink(w)?.link.reset();
        return;
      case 'terminate': {
        const h = memberLink(w)?.link.backend;
        const b = pooler ? pooler.backendFor(h, '', serverRng) : h;
        if (b) server.terminate(b.pid);
        return;
      }
    }
  };

  for (const s of plan) {
    world.schedule(s.at, null, 'server', () => run(s));
    const end = s.op === 'restart' || s.op === 'freeze' ? s.at + (s.ms ?? 0) : s.at;
    quietAt = Math.max(quietAt, end);
  }
  const maxDelay = p.net.baseMs + p.net.spikeMs;
  const release = 2 * (p.healthIntervalMs + p.queryTimeoutMs);
  // a lost session's locks end within `release`; the reconnect backs off to at most 5 s;
  // a join or leave moves partitions within a few checks (each run drained first)
  const bound =
    release +
    p.takeoverDelayMs +
    p.queryTimeoutMs +
    p.closeTimeoutMs +
    5000 +
    3 * p.healthIntervalMs +
    p.drainMaxMs +
    60 * maxDelay +
    100;
  const hold = Math.max(3 * p.healthIntervalMs, 500);
  checker.liveness(quietAt, bound, hold);
  const end = (): number => checker.quiet + bound + hold;
  while (!checker.done && !checker.stable && (await world.step(end()))) checker.check();
  if (!checker.done && !checker.stable) {
    world.now = Math.max(world.now, end());
    checker.check();
    checker.endOfLiveness();
  }
  if (!checker.done) {
    let open = 0;
    for (const w of workers) {
      if (!isLive(w)) continue;
      const pl = w.pl as PartitionedLeadership;
      open++;
      world.schedule(0, w.proc, 'io', () => {
        w.member = false;
        pl.shutdown().then(
          () => open--,
          (e) => {
            open--;
            swallow(`${workerName(w)} shutdown`)(e);
          },
        );
      });
    }
    for (const w of workers) for (const s of w.stopping) void s.then(() => {});
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
