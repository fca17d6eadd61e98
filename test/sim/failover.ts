/**
 * A primary and a hot standby behind the candidates' host list (the `connect` option as a
 * list: one hook per server, surveyed as the hosts of a connection string), and a promotion,
 * in a fraction of the scenarios drawn from a stream of their own (the other seeds run as
 * they did before failovers were modelled; SIM_FAILOVER=off runs every seed on one server).
 * The standby answers `pg_is_in_recovery()` true, grants advisory locks as PostgreSQL does
 * (they are not WAL-logged) and refuses LISTEN and NOTIFY (25006). The promotion puts it on
 * timeline 2; the old primary is either stopped for good (it crashed, or the failover tool
 * fenced it; the promotion comes `gapMs` later) or kept running beside it (split brain:
 * a network partition, or a tool that has not fenced it yet) to the end of the run.
 */
import { PEER_BOUND_MS, PEER_TIMEOUT_MS, splitBrainDelayMs } from '../../src/core/peers.js';
import { SURVEY_GRACE_MS } from '../../src/core/primary.js';
import { PRIMARY_POLL_MS } from '../../src/core/standby-watch.js';
import { Random } from './random.js';
import type { SimServer } from './server.js';
import type { World } from './world.js';

export interface FailoverProfile {
  /** When the standby is promoted. */
  at: number;
  /** The old primary after the promotion: stopped for good, or kept running beside the new one. */
  oldPrimary: 'stopped' | 'running';
  /** Stopped: how long before the promotion it stopped. */
  gapMs: number;
  /**
   * Connections reset around the promotion (the candidate's lock session): a follower that
   * reconnects then surveys the hosts and may be granted the key on the new primary while
   * the old leader still leads on the old one (the split-brain delay's case). Most reset
   * a follower's (`who` FOLLOWER).
   */
  kicks: { at: number; op: 'reset'; who: number }[];
  /**
   * Kept running, it becomes unreachable at the promotion without a reset (a network
   * partition): every connection to it is blackholed, a new one never answers. Drawn from a
   * stream of its own, the key only where drawn (SIM_FAILOVER_BLACKHOLE=off: none).
   */
  unreachable?: true;
}

/** Half the failovers that keep the old primary running make it unreachable too. */
function withBlackhole(seed: number, f: FailoverProfile | null): FailoverProfile | null {
  if (f === null || f.oldPrimary !== 'running') return f;
  if (process.env.SIM_FAILOVER_BLACKHOLE === 'off') return f;
  return new Random((seed ^ 0xb1ac_401e) >>> 0).chance(0.5) ? { ...f, unreachable: true } : f;
}

/** One LeaderLock scenario in five without a pooler gets a standby and a promotion. */
export function failoverFor(seed: number, pooled: boolean, candidates = 1): FailoverProfile | null {
  if (process.env.SIM_FAILOVER === 'off' || pooled) return null;
  const rng = new Random((seed ^ 0xfa11_0e75) >>> 0);
  if (!rng.chance(0.2)) return null;
  return withBlackhole(
    seed,
    drawFailover(rng, () => (rng.chance(0.7) ? FOLLOWER : rng.int(0, candidates - 1))),
  );
}

/**
 * One partition scenario in four without a pooler gets a standby and a promotion (a stream
 * of its own, drawn only for partition seeds: the lock scenarios' seeds run as before;
 * SIM_FAILOVER=off or SIM_PARTITION_FAILOVER=off runs every partition seed on one server).
 * Its resets hit a worker's member session.
 */
export function partitionFailoverFor(seed: number, pooled: boolean, workers: number): FailoverProfile | null {
  if (process.env.SIM_FAILOVER === 'off' || process.env.SIM_PARTITION_FAILOVER === 'off' || pooled)
    return null;
  const rng = new Random((seed ^ 0x9a27_f0e7) >>> 0);
  if (!rng.chance(0.25)) return null;
  return withBlackhole(
    seed,
    drawFailover(rng, () => rng.int(0, workers - 1)),
  );
}

function drawFailover(rng: Random, who: () => number): FailoverProfile {
  const oldPrimary = rng.pick(['stopped', 'running'] as const);
  const at = rng.between(300, 3000);
  const kicks = Array.from({ length: rng.pick([0, 1, 2, 3]) }, () => ({
    at: at + rng.between(-200, 100),
    op: 'reset' as const,
    who: who(),
  }));
  return { at, oldPrimary, gapMs: oldPrimary === 'stopped' ? rng.pick([0, 0, 100, 1000]) : 0, kicks };
}

/** A step's `who` for a candidate that does not hold the key (any if all do not). */
export const FOLLOWER = -2;

/** The failover scenarios' own random stream (the standby's choices). */
export function failoverRandom(seed: number): Random {
  return new Random((seed ^ 0x57a7_db1e) >>> 0);
}

/**
 * In a failover scenario the network's spikes are capped at 30 ms: the bound on seeing a
 * promotion is for "a host the leader can reach" (docs/safety.md), a peer probe answering
 * (connection and statement: four messages) within its 250 ms deadline.
 */
export const FAILOVER_SPIKE_MS = 30;

/** The servers, which one is the newest primary, and since when it is reachable. */
export class Cluster {
  /** Stopped for good (the failover tool fenced it). */
  fenced: SimServer | null = null;
  /** Since when the newest primary has been up (its promotion, or its restart after it). */
  newestSince = Number.POSITIVE_INFINITY;

  constructor(
    private readonly world: World,
    readonly servers: readonly SimServer[],
  ) {}

  /** The primary on the newest timeline that is not fenced (null: none). */
  newest(): SimServer | null {
    let best: SimServer | null = null;
    for (const s of this.servers) {
      if (s.recovery || s === this.fenced) continue;
      if (!best || s.timeline > best.timeline) best = s;
    }
    return best;
  }

  /** Whether a newer primary than `s` is up (a leader on `s` must end its term). */
  superseded(s: SimServer): boolean {
    const n = this.newest();
    return n !== null && n !== s && n.up && n.timeline > s.timeline;
  }

  /** A restart fault: of the newest primary. */
  restart(ms: number): void {
    const s = this.newest();
    if (!s) return;
    s.stop();
    this.world.schedule(ms, null, 'server', () => {
      if (s === this.fenced) return;
      s.start();
      if (s === this.newest() && this.newestSince !== Number.POSITIVE_INFINITY)
        this.newestSince = this.world.now;
      this.world.log(`server ${this.servers.indexOf(s)} up`);
    });
  }

  /** The promotion fault as drawn: the old primary stopped `gapMs` before, or kept running. */
  schedule(
    f: FailoverProfile,
    onFault: (until: number) => void,
    onCut: (s: SimServer) => void = () => {},
  ): void {
    const [old, standby] = this.servers as [SimServer, SimServer];
    if (f.oldPrimary === 'stopped') {
      this.world.schedule(Math.max(0, f.at - f.gapMs), null, 'server', () => {
        this.world.log('do failover: the old primary stops for good');
        this.fenced = old;
        old.stop();
      });
    }
    this.world.schedule(f.at, null, 'server', () => {
      this.world.log(`do failover: the standby is promoted (the old primary ${f.oldPrimary})`);
      if (f.unreachable) {
        this.world.log('do failover: the old primary is unreachable from now on (no reset)');
        old.unreachable = true;
        for (const b of [...old.backends.values()]) (b.link as { blackhole?: () => void }).blackhole?.();
        onCut(old);
      }
      standby.promote(old.timeline + 1);
      if (standby.up) this.newestSince = this.world.now;
      onFault(this.world.now);
    });
  }
}

/**
 * How long after the newest primary became reachable a leader on an older one may still
 * hold an open term (docs/safety.md, "The guard against two primaries": a promotion of a
 * host the leader can reach is seen within PEER_BOUND_MS plus a round trip, and the term
 * ends at once). The round trip: a probe's statement there and back on the run's network.
 */
export function peerSeenMs(maxDelayMs: number): number {
  return PEER_BOUND_MS + 2 * maxDelayMs + 1;
}

/**
 * What a failover adds to the liveness bound after the quiet point (the docs give no
 * bound here, only measurements): the split-brain delay, the standbys' poll, a survey's
 * grace and the grant's probe of the other hosts, and the old leader's sight of the
 * promotion.
 */
export function failoverBoundMs(takeoverDelayMs: number, maxDelayMs: number): number {
  return (
    splitBrainDelayMs(takeoverDelayMs, 100) +
    PRIMARY_POLL_MS +
    SURVEY_GRACE_MS +
    PEER_TIMEOUT_MS +
    peerSeenMs(maxDelayMs)
  );
}

/**
 * A partition worker's bound on seeing a promotion of a host it can reach
 * (docs/partitions.md, "Primary failover"): its peer watch asks once per
 * `healthIntervalMs`, a probe waits PEER_TIMEOUT_MS at most, plus a round trip; its
 * ownership session then closes at once (every term ends).
 */
export function partitionPeerSeenMs(healthIntervalMs: number, maxDelayMs: number): number {
  return healthIntervalMs + PEER_TIMEOUT_MS + 2 * maxDelayMs + 1;
}

/** What a failover adds to a partition scenario's liveness bound (as failoverBoundMs, its watch's round `healthIntervalMs`). */
export function partitionFailoverBoundMs(
  takeoverDelayMs: number,
  healthIntervalMs: number,
  maxDelayMs: number,
): number {
  return (
    splitBrainDelayMs(takeoverDelayMs, healthIntervalMs) +
    PRIMARY_POLL_MS +
    SURVEY_GRACE_MS +
    PEER_TIMEOUT_MS +
    partitionPeerSeenMs(healthIntervalMs, maxDelayMs)
  );
}
