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
import { EarlyStreams, earlyTimersFor } from './early.js';
import {
  Cluster,
  FAILOVER_SPIKE_MS,
  failoverRandom,
  partitionFailoverFor,
  partitionPeerSeenMs,
} from './failover.js';
import { swallow } from './lock-steps.js';
import { connector, type Front } from './net.js';
import { isLive, PartitionChecker, type Worker, workerName } from './partition-checker.js';
import {
  drawPartitionPlan,
  drawPartitionProfile,
  type PartitionOutcome,
  type PartitionProfile,
  partitionLivenessBounds,
  partitionPooler,
} from './partition-profile.js';
import { partitionSteps } from './partition-steps.js';
import { Pooler, sharesBackends } from './pooler.js';
import { Random } from './random.js';
import { type Backend, type ReleaseCause, SimServer } from './server.js';
import { Proc, World } from './world.js';

const NAME = 'sim-partitions';
export async function runPartitionScenario(
  seed: number,
  o: { trace: boolean; drop?: ReadonlySet<number>; earlyTimers?: boolean },
): Promise<PartitionOutcome> {
  const root = new Random(seed);
  const drawn = drawPartitionProfile(root.fork());
  const pooled = { ...drawn, pooler: partitionPooler(seed, drawn.workers) };
  // a standby and a promotion in some scenarios (failover.ts), the key only where drawn
  const failover = partitionFailoverFor(seed, pooled.pooler !== null, drawn.workers);
  const failed: PartitionProfile = failover
    ? {
        ...pooled,
        failover,
        net: { ...pooled.net, spikeMs: Math.min(pooled.net.spikeMs, FAILOVER_SPIKE_MS) },
      }
    : pooled;
  // timers that fire early (early.ts), the key only where drawn
  const early = earlyTimersFor(seed, o.earlyTimers);
  const profile: PartitionProfile = early ? { ...failed, earlyTimers: early } : failed;
  const drawnPlan = drawPartitionPlan(root.fork(), profile);
  const fullPlan = failover ? [...drawnPlan, ...failover.kicks].sort((x, y) => x.at - y.at) : drawnPlan;
  const plan = o.drop ? fullPlan.filter((_, i) => !o.drop?.has(i)) : fullPlan;
  const netRng = root.fork();
  const serverRng = root.fork();
  const libRng = root.fork();
  const world = new World(o.trace, early ? new EarlyStreams(seed, early) : null);
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
  const hooks = (n: number) => {
    const holders = new Map<number, Backend | null>();
    return {
      onHolder: (key: string, holder: Backend | null, cause: ReleaseCause | null) => {
        const at = n === 0 ? '' : ` on server ${n}`;
        world.log(
          () =>
            `server: ${key} ${holder ? `granted to ${holder.owner} pid ${holder.pid}` : `freed (${cause})`}${at}`,
        );
        const [k1, k2] = key.split(':').map(Number);
        if (k1 !== keys.partitions) return;
        const partition = k2 as number;
        const prev = holders.get(partition) ?? null;
        holders.set(partition, holder);
        checker.partitionChanged(partition, prev, holder, cause);
      },
      onGap: (what: string) => checker.fail(`simulator gap: ${what}`),
    };
  };
  const server = new SimServer(world, serverRng, hooks(0));
  const servers = [server];
  const cluster = failover ? new Cluster(world, servers) : null;
  if (failover) {
    const standby = new SimServer(world, failoverRandom(seed), hooks(1), 5000);
    standby.recovery = true;
    servers.push(standby);
  }
  checker.servers = servers;
  checker.cluster = cluster;
  checker.peerSeenMs = partitionPeerSeenMs(p.healthIntervalMs, p.net.baseMs + p.net.spikeMs);
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
    const connectTo = (front: Front) =>
      connector(world, front, netRng, p.net, proc, owner, (client) => {
        w.clients.push(client);
        client.onUnhandled = (err) =>
          checker.fail(
            `${owner}: an 'error' with no listener (the process would crash): ${err.message}; the client ran ${JSON.stringify(client.history)}`,
          );
      });
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
      // with a standby, one hook per server (the hosts of a connection string)
      connect: (cluster ? servers.map(connectTo) : connectTo(pooler ?? server)) as never,
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
      const body = checker.bodyStart(w, partition, term.signal);
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

  const { run } = partitionSteps({
    world,
    workers,
    checker,
    server,
    cluster,
    pooler,
    serverRng,
    partitions: p.partitions,
    build,
  });

  let quietAt = 0;

  for (const s of plan) {
    world.schedule(s.at, null, 'server', () => run(s));
    const end = s.op === 'restart' || s.op === 'freeze' ? s.at + (s.ms ?? 0) : s.at;
    quietAt = Math.max(quietAt, end);
  }
  if (failover) {
    // cut off, a worker on the old primary hears nothing more: its terms end at its next
    // check's deadline, its work within the drain (the lease covers it, docs/partitions.md:
    // a worker that never heard the old primary as one adds no fence)
    const cut = (s: SimServer): void => {
      for (const w of workers) {
        if (!w.clients.some((x) => !x.ended && x.link.server === s)) continue;
        w.lostUnheard = true;
        w.excusedUntil = Math.max(w.excusedUntil, world.now + checkMs);
      }
    };
    cluster?.schedule(failover, (t) => checker.faultUntil(t), cut);
    quietAt = Math.max(quietAt, failover.at);
  }
  const { bound, hold } = partitionLivenessBounds(p);
  checker.liveness(quietAt, bound, hold);
  const end = (): number => checker.quiet + bound + hold;
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
            swallow(world, `${workerName(w)} shutdown`)(e);
          },
        );
      });
    }
    for (const w of workers) for (const s of w.stopping) void s.then(() => {});
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
