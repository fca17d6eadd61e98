/**
 * One scenario: a seed draws the run's profile (swarm testing: how many candidates, which
 * mode, timings, ids, priorities, which faults and how often, how slow the network), then a
 * plan of operations and faults over a chaos phase; real `LeaderLock` instances run it on
 * the simulated server, the checker (checker.ts) watching every step; then a quiet phase
 * in which a leader must come and stay, then every lock is shut down and must leave nothing.
 */

import type { RetryStrategy } from '../../src/core/retry.js';
import type { Term } from '../../src/core/term.js';
import { LeaderLock } from '../../src/leader/leader-lock.js';
import { Candidate } from './candidate.js';
import { Checker } from './checker.js';
import { EarlyStreams, earlyTimersFor } from './early.js';
import { Cluster, FAILOVER_SPIKE_MS, failoverFor, failoverRandom, peerSeenMs } from './failover.js';
import { lockSteps, swallow } from './lock-steps.js';
import { connector, type Front } from './net.js';
import { isPartitionSeed } from './partition-profile.js';
import { runPartitionScenario } from './partition-scenario.js';
import { clientLink, Pooler, poolerFor, sharesBackends } from './pooler.js';
import {
  drawPlan,
  drawProfile,
  KEY,
  KEY_ID,
  livenessBounds,
  type Options,
  type Outcome,
  type Profile,
  retryFor,
} from './profile.js';
import { Random } from './random.js';
import { type Backend, type ReleaseCause, SimServer } from './server.js';
import { closeWatches, startWatches, watchesFor } from './watches.js';
import { World } from './world.js';

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

/**
 * Run the scenario of `seed`. Errors carry no stack while it runs: nothing in the run reads
 * one (reports and traces give the message), and capturing them (the library's errors, an
 * aborted signal's DOMException) was a tenth of the run's time.
 */
export async function runScenario(
  seed: number,
  o: Options & { trace: boolean; drop?: ReadonlySet<number> } = { trace: false },
): Promise<Outcome> {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return await runOne(seed, o);
  } finally {
    Error.stackTraceLimit = limit;
  }
}

async function runOne(
  seed: number,
  o: Options & { trace: boolean; drop?: ReadonlySet<number> },
): Promise<Outcome> {
  // one seed in five runs PartitionedLeadership workers instead (partition-scenario.ts)
  if (isPartitionSeed(seed) && !o.lockOnly) return runPartitionScenario(seed, o);
  const root = new Random(seed);
  const drawn = drawProfile(root.fork(), o);
  // a directed scenario (o.fixed) has no failover and no watches; a pooler only if its profile names one
  const pooled = { ...drawn, pooler: o.fixed ? null : poolerFor(seed, drawn.candidates.length) };
  // a standby and a promotion in some scenarios (failover.ts): the key only where drawn, so
  // that the other seeds' traces stay as they were
  const failover = o.fixed ? null : failoverFor(seed, pooled.pooler !== null, drawn.candidates.length);
  const failed = failover
    ? {
        ...pooled,
        failover,
        net: { ...pooled.net, spikeMs: Math.min(pooled.net.spikeMs, FAILOVER_SPIKE_MS) },
      }
    : pooled;
  // timers that fire early (early.ts), the key only where drawn
  const early = earlyTimersFor(seed, o.earlyTimers);
  const timed = early ? { ...failed, earlyTimers: early } : failed;
  const profile: Profile = o.fixed?.profile ? { ...timed, ...o.fixed.profile } : timed;
  const planRng = root.fork();
  const drawnPlan = o.fixed?.plan ? [...o.fixed.plan] : drawPlan(planRng, profile);
  const fullPlan = failover ? [...drawnPlan, ...failover.kicks].sort((x, y) => x.at - y.at) : drawnPlan;
  const plan = o.drop ? fullPlan.filter((_, i) => !o.drop?.has(i)) : fullPlan;
  const netRng = root.fork();
  const serverRng = root.fork();
  const libRng = root.fork();
  const pickRng = root.fork();
  const world = new World(o.trace, early ? new EarlyStreams(seed, early) : null);
  const cands = profile.candidates.map((c, i) => new Candidate(i, c.id, c.priority, world));
  const checker = new Checker(world, profile, cands);
  const hooks = (n: number) => ({
    onHolder: (key: string, holder: Backend | null, cause: ReleaseCause | null) => {
      const at = n === 0 ? '' : ` on server ${n}`;
      world.log(
        () =>
          `server: ${key} ${holder ? `granted to ${holder.owner} pid ${holder.pid}` : `freed (${cause})`}${at}`,
      );
      if (key !== KEY_ID) return;
      checker.holderChanged(holder, cause, servers[n]);
      // an armed freezeOnGrant: frozen now, before the process reads its grant; maybe
      // blackholed as it thaws (it reads the grant, then hears nothing more)
      const c = holder ? cands.find((x) => x.name === holder.owner && !x.crashed) : undefined;
      if (c && c.freezeOnGrant > 0) {
        const link = holder ? clientLink(holder) : null;
        freeze(c, c.freezeOnGrant, c.thenBlackhole ? () => link?.blackhole() : null);
        c.freezeOnGrant = 0;
      }
    },
    onGap: (what: string) => checker.fail(`simulator gap: ${what}`),
  });
  const servers: SimServer[] = [];
  const server = new SimServer(world, serverRng, hooks(0));
  servers.push(server);
  const cluster = failover ? new Cluster(world, servers) : null;
  if (failover) {
    const standby = new SimServer(world, failoverRandom(seed), hooks(1), 5000);
    standby.recovery = true;
    servers.push(standby);
  }
  checker.server = server;
  checker.servers = servers;
  checker.cluster = cluster;
  const maxDelay = profile.net.baseMs + profile.net.spikeMs;
  checker.peerSeenMs = peerSeenMs(maxDelay);
  const wp = o.fixed ? (o.fixed.watches ?? []) : watchesFor(seed, profile.pooler !== null);
  if (wp.length > 0) world.log(() => `watches ${JSON.stringify(wp)}`);
  checker.watches = startWatches(world, wp, servers, profile.net, failoverRandom(seed ^ 1), (w) =>
    checker.fail(w),
  );
  // the pooler in the path, if any (pooler.ts); through a sharing one, the lock must refuse
  const pooler = profile.pooler ? new Pooler(world, server, profile.pooler) : null;
  checker.shared = sharesBackends(profile.pooler);
  world.log(() => `profile ${JSON.stringify(profile)}`);
  plan.forEach((s, i) => {
    world.log(() => `plan[${i}] ${JSON.stringify(s)}`);
  });

  const retry = (): RetryStrategy => retryFor(profile, libRng);

  const build = (c: Candidate): LeaderLock => {
    const proc = c.proc;
    const owner = c.name;
    const connectTo = (front: Front) =>
      connector(world, front, netRng, profile.net, proc, owner, (client) => {
        c.clients.push(client);
        client.onUnhandled = (err) =>
          checker.fail(
            `${owner}: an 'error' with no listener (the process would crash): ${err.message}; the client ran ${JSON.stringify(client.history)}, its listeners: ${client.eventNames().join(',')}`,
          );
      });
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
      connect: (cluster ? servers.map(connectTo) : connectTo(pooler ?? server)) as never,
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

  const { run, freeze } = lockSteps({
    world,
    cands,
    checker,
    server,
    servers,
    cluster,
    pooler,
    pickRng,
    build,
  });

  let quietAt = 0;
  for (const s of plan) {
    world.schedule(s.at, null, 'server', () => run(s));
    const end = s.op === 'restart' || s.op === 'freeze' || s.op === 'partition' ? s.at + (s.ms ?? 0) : s.at;
    // an armed freezeOnGrant fires at the next grant (the quiet phase waits for it to end, below)
    quietAt = Math.max(quietAt, end);
  }
  if (failover) {
    cluster?.schedule(failover, (t) => checker.faultUntil(t));
    quietAt = Math.max(quietAt, failover.at);
  }
  // a directed scenario's readiness, logged as it changes (claims.test.ts)
  const sampleMs = o.fixed?.sampleReadyMs;
  if (sampleMs !== undefined) {
    const last = new Map<Candidate, boolean>();
    const leading = new Map<Candidate, boolean>();
    const sample = (): void => {
      for (const c of cands) {
        if (!c.lock || c.crashed) continue;
        const ready = c.lock.health().ready;
        if (last.get(c) !== ready) world.log(() => `${c.name} ready ${ready}`);
        last.set(c, ready);
        // isLeader as a caller reads it (a getter on the process's clock: read in a freeze too)
        const isLeader = c.lock.isLeader;
        if ((leading.get(c) ?? false) !== isLeader) world.log(() => `${c.name} isLeader ${isLeader}`);
        leading.set(c, isLeader);
      }
      if (world.now < quietAt + 10_000) world.schedule(sampleMs, null, 'server', sample);
    };
    world.schedule(0, null, 'server', sample);
  }
  // quiet: no more faults or operations; a leader must come within the bound and stay
  const { bound, hold } = livenessBounds(profile, failover !== null);
  checker.liveness(quietAt, bound, hold);
  world.schedule(quietAt, null, 'server', () => {
    for (const c of cands) c.freezeOnGrant = 0; // disarmed: no fault after the quiet point
  });
  const watchMs = Math.max(0, ...checker.watches.map((w) => w.boundMs(maxDelay)));
  const end = (): number => checker.quiet + Math.max(bound, watchMs) + hold;
  await world.run(
    end,
    () => !checker.done && !checker.stable,
    () => checker.check(),
  );
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
            swallow(world, `${c.name} shutdown`)(e);
          },
        );
      });
    }
    open += closeWatches(world, checker.watches, () => open--);
    for (const c of cands) for (const s of c.stopping) void s.then(() => {});
    const limit = world.now + 60_000;
    await world.run(
      () => limit,
      () => open > 0 && !checker.done,
      () => checker.check(),
    );
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
