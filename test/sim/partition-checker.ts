/**
 * The invariants of a partition scenario (partition-scenario.ts), checked after every step
 * against the simulated server's ground truth (which member session holds each
 * partition's lock):
 *  - never two running `runForEach` bodies for one partition (a body runs from its start
 *    until it returns), except for a worker that cannot hear its loss: while it is frozen
 *    (its terms end as it thaws, its work within the drain after), or after its partition
 *    was taken at once while its connection was blackholed (until its next check's
 *    deadline and the drain): the lease covers those (docs/partitions.md);
 *  - `owned` holds a partition only while the server grants it to that worker's member
 *    session, or, after the lock was taken at once, until its lease ends;
 *  - after the last fault: every partition owned by exactly one worker, each worker owning
 *    ⌊P/N⌋ or ⌈P/N⌉, held for a window without a break, within the bound;
 *  - after shutdown(): no connection, timer or body left.
 * Through a pooler in session mode all of these hold as on a direct connection. Through one
 * that shares backends (`shared`: transaction or statement mode), the server's holder is a
 * pooled backend: never two bodies for one partition, a lone worker never owns a partition
 * or runs a body, and after the last fault no worker owns any (docs/partitions.md, "Poolers").
 */

import type { PartitionedLeadership } from '../../src/partitions/partitioned.js';
import type { Cluster } from './failover.js';
import type { SimClient } from './net.js';
import { type Backend, INSTANT, type ReleaseCause, type SimServer } from './server.js';
import type { Proc, World } from './world.js';

export interface Worker {
  readonly index: number;
  readonly id: string;
  proc: Proc;
  pl: PartitionedLeadership | null;
  clients: SimClient[];
  crashed: boolean;
  starting: boolean;
  generation: number;
  /** Until then its bodies are excused (frozen, or a loss it could not hear). */
  excusedUntil: number;
  lostUnheard: boolean;
  readonly stopping: Promise<unknown>[];
  /** The last time the server took a partition from it at once, by partition. */
  readonly lastLoss: Map<number, { at: number; cause: ReleaseCause }>;
  /** Whether it is started and not shut down (what the quiet phase expects to be a member). */
  member: boolean;
  /** The step it last froze at: a freeze excuses only the bodies that started before it. */
  frozenStep: number;
  /** When it last thawed (a promotion it could not see while frozen is seen within the bound after). */
  thawedAt?: number;
}

const names = new Map<number, string>();

/** `w<index>.<generation>` (one string per name, not one at each of the checker's many looks). */
export function workerName(w: Worker): string {
  const key = w.index * 65536 + w.generation;
  let name = names.get(key);
  if (name === undefined) {
    name = `w${w.index}.${w.generation}`;
    names.set(key, name);
  }
  return name;
}

export function isLive(w: Worker): boolean {
  return !w.crashed && w.pl !== null && !w.proc.dead;
}

interface Body {
  w: Worker;
  partition: number;
  /** The step it started at. */
  step: number;
  /** Its term's signal (aborted: the term ended, the body winds down). */
  signal: AbortSignal;
}

export class PartitionChecker {
  readonly violations: string[] = [];
  server!: SimServer;
  /** Every server (the first: `server`); with a standby, the cluster and a worker's bound on seeing a promotion. */
  servers: SimServer[] = [];
  cluster: Cluster | null = null;
  peerSeenMs = 0;
  private readonly bodies = new Set<Body>();
  private live: { quiet: number; boundMs: number; holdMs: number } | null = null;
  stable = false;
  /** Workers connect through a pooler that shares backends. */
  shared = false;
  private okSince: number | null = null;

  constructor(
    private readonly world: World,
    private readonly partitionsKey: number,
    private readonly partitions: number,
    private readonly checkMs: number,
    private readonly drainMs: number,
    private readonly workers: Worker[],
  ) {}

  get done(): boolean {
    return this.violations.length > 0;
  }

  fail(what: string): void {
    this.world.log(`VIOLATION ${what}`);
    if (this.violations.length < 5) this.violations.push(`t=${this.world.now.toFixed(3)} ${what}`);
  }

  private ownerOf(b: Backend | null): Worker | undefined {
    return b ? this.workers.find((w) => workerName(w) === b.owner && !w.crashed) : undefined;
  }

  /** The server moved a partition's lock (holder null: freed, with its cause). */
  partitionChanged(
    partition: number,
    prev: Backend | null,
    holder: Backend | null,
    cause: ReleaseCause | null,
  ): void {
    const granted = this.ownerOf(holder);
    if (granted) granted.lostUnheard = false;
    if (holder || !prev || !cause) return;
    const w = this.ownerOf(prev);
    if (!w) return;
    w.lastLoss.set(partition, { at: this.world.now, cause });
    if (INSTANT.has(cause) && prev.link.state === 'blackhole') {
      w.lostUnheard = true;
      w.excusedUntil = Math.max(w.excusedUntil, this.world.now + this.checkMs);
    }
  }

  bodyStart(w: Worker, partition: number, signal: AbortSignal): Body {
    const b = { w, partition, step: this.world.steps, signal };
    this.bodies.add(b);
    return b;
  }

  bodyEnd(b: Body): void {
    this.bodies.delete(b);
  }

  crashed(w: Worker): void {
    for (const b of this.bodies) if (b.w === w) this.bodies.delete(b);
  }

  frozen(w: Worker): void {
    w.excusedUntil = Number.POSITIVE_INFINITY;
    w.frozenStep = this.world.steps;
  }

  thawed(w: Worker): void {
    w.excusedUntil = this.world.now + (w.lostUnheard ? this.checkMs : this.drainMs + 1);
    w.thawedAt = this.world.now;
    if (!this.cluster) return;
    // a promotion it could not see while frozen: seen within its peer watch's bound (its
    // terms end), its work stops within the drain after
    const on = this.serverOf(w);
    if (on && this.cluster.superseded(on))
      w.excusedUntil = Math.max(w.excusedUntil, this.world.now + this.peerSeenMs + this.drainMs + 1);
  }

  /**
   * Every term ends when the worker's lease runs out unrenewed (docs/partitions.md: past
   * `leaseExpiresAt` every term ends; the lapse timer fires at the lease's end): no body's
   * term is open past it, except in a frozen worker (its timers run as it thaws, first).
   * True when it failed.
   */
  private lapsedTerm(now: number): boolean {
    for (const b of this.bodies) {
      const w = b.w;
      if (b.signal.aborted || !isLive(w) || w.proc.frozen || now <= (w.thawedAt ?? Number.NEGATIVE_INFINITY))
        continue;
      const until = w.pl?.leaseExpiresAt ?? null;
      if (until === null || now <= until) continue;
      this.fail(
        `${workerName(w)}'s term of partition ${b.partition} is still open ${(now - until).toFixed(3)} ms after its lease ran out (t=${until.toFixed(3)}): no lapse`,
      );
      return true;
    }
    return false;
  }

  /** The server that grants `w` a partition it owns (with one server: that one, if any). */
  private serverOf(w: Worker): SimServer | undefined {
    const name = workerName(w);
    for (const p of w.pl?.owned ?? []) {
      const s = this.servers.find((x) => this.holderOn(x, p)?.owner === name);
      if (s) return s;
    }
    return undefined;
  }

  liveness(quiet: number, boundMs: number, holdMs: number): void {
    this.live = { quiet, boundMs, holdMs };
  }

  faultUntil(t: number): void {
    if (this.live && t > this.live.quiet) {
      this.live.quiet = t;
      this.okSince = null;
      this.stable = false;
    }
  }

  get quiet(): number {
    return this.live?.quiet ?? 0;
  }

  /** Who holds partition `p` on the newest primary (the only server without a standby). */
  private holder(p: number): Backend | null {
    return this.holderOn(this.cluster?.newest() ?? this.server, p);
  }

  private holderOn(s: SimServer, p: number): Backend | null {
    let key = this.keys[p];
    if (key === undefined) {
      key = `${this.partitionsKey}:${p}`;
      this.keys[p] = key;
    }
    return s.holderOf(key);
  }
  /** Each partition's lock key as the server names it. */
  private readonly keys: string[] = [];

  check(): void {
    const now = this.world.now;
    // owned only while granted (or within the lease after an instant loss)
    for (const w of this.workers) {
      if (!isLive(w)) continue;
      const pl = w.pl as PartitionedLeadership;
      if (this.shared && this.workers.length === 1 && (pl.owned.size > 0 || this.bodies.size > 0)) {
        this.fail(`${workerName(w)}, a lone worker, owns a partition through a pooler that shares backends`);
        return;
      }
      if (now <= w.excusedUntil || this.shared) continue;
      for (const p of pl.owned) {
        const h = this.holder(p);
        if (h && h.owner === workerName(w)) continue;
        if (this.cluster && this.grantedElsewhere(w, p, now)) continue;
        if (this.done) return;
        const loss = w.lastLoss.get(p);
        const lease = pl.leaseExpiresAt ?? Number.NEGATIVE_INFINITY;
        if (loss && INSTANT.has(loss.cause) && now <= lease) continue;
        this.fail(
          `${workerName(w)} owns partition ${p} while the server grants it to ${h ? h.owner : 'nobody'} (lost ${loss ? `${(now - loss.at).toFixed(1)} ms ago by ${loss.cause}` : 'never held'}, lease until ${lease})`,
        );
        return;
      }
    }
    if (this.cluster && this.twoOwners(now)) return;
    if (this.lapsedTerm(now)) return;
    const running = new Map<number, Set<Worker>>();
    // two bodies at least, or none can overlap
    for (const b of this.bodies.size > 1 ? this.bodies : []) {
      // excused: a loss it cannot hear; or, after a freeze, a run that started before it (a
      // term that opens as the process thaws is no run the freeze kept from hearing its loss)
      // or, also a run that started at the thaw, its partition taken at once (terminate,
      // restart, reset) while it was frozen, within its lease: the documented lease window
      const loss = b.w.lastLoss.get(b.partition);
      const inLease =
        loss !== undefined &&
        INSTANT.has(loss.cause) &&
        now <= (b.w.pl?.leaseExpiresAt ?? Number.NEGATIVE_INFINITY);
      const excused = now <= b.w.excusedUntil && (b.w.lostUnheard || b.step <= b.w.frozenStep || inLease);
      if (excused || !isLive(b.w)) continue;
      const set = running.get(b.partition) ?? new Set<Worker>();
      set.add(b.w);
      running.set(b.partition, set);
    }
    for (const [p, set] of running) {
      if (set.size > 1) {
        this.fail(`two runForEach bodies running for partition ${p}: ${[...set].map(workerName).join(', ')}`);
        return;
      }
    }
    const live = this.live;
    if (!live || now < live.quiet) return;
    const members = this.workers.filter((w) => (w.starting && !w.crashed) || (isLive(w) && w.member));
    if (this.shared) {
      this.stable = this.workers.every(
        (w) =>
          !(w.starting && !w.crashed) && (!isLive(w) || (w.pl as PartitionedLeadership).owned.size === 0),
      );
      return;
    }
    if (members.length === 0) {
      this.stable = true;
      return;
    }
    if (!this.balanced(members)) {
      this.okSince = null;
      return;
    }
    this.okSince ??= now;
    if (now - this.okSince >= live.holdMs) this.stable = true;
  }

  /**
   * With a standby (docs/partitions.md, "Primary failover"): `w` owns `p` where a server
   * other than the newest primary grants it; true while that is allowed: on an old primary
   * until PEER_BOUND (its watch's round `healthIntervalMs`, a probe deadline) and a round trip
   * after the newer primary became reachable (or after its thaw). A failure is reported.
   */
  private grantedElsewhere(w: Worker, p: number, now: number): boolean {
    const cluster = this.cluster as Cluster;
    const name = workerName(w);
    // the server where a session it still has open holds it (not one it gave up, left
    // holding the lock on a cut-off server until keepalive ends it there)
    const i = this.servers.findIndex((s) => {
      const h = this.holderOn(s, p);
      return h?.owner === name && w.clients.some((x) => !x.ended && x.link.backend === h);
    });
    const s = this.servers[i];
    if (!s) return false;
    if (s.recovery) {
      this.fail(`${name} owns partition ${p} on server ${i}, a standby`);
      return false;
    }
    if (!cluster.superseded(s)) return true;
    const since = Math.max(cluster.newestSince, w.thawedAt ?? Number.NEGATIVE_INFINITY);
    if (now <= since + this.peerSeenMs) return true;
    this.fail(
      `${name} still owns partition ${p} on server ${i} (timeline ${s.timeline}) ${(now - since).toFixed(1)} ms after a newer primary became reachable (bound ${this.peerSeenMs.toFixed(1)} ms: its peer watch's round, a probe deadline, a round trip)`,
    );
    return false;
  }

  /** Never two workers owning one partition, across servers (each may hold it on its own). True when it failed. */
  private twoOwners(now: number): boolean {
    const owners = new Map<number, Worker>();
    for (const w of this.workers) {
      if (!isLive(w) || now <= w.excusedUntil) continue;
      for (const p of (w.pl as PartitionedLeadership).owned) {
        const other = owners.get(p);
        if (!other) {
          owners.set(p, w);
          continue;
        }
        this.fail(`partition ${p} owned by two workers at once: ${workerName(other)}, ${workerName(w)}`);
        return true;
      }
    }
    return false;
  }

  /** Every partition owned by one member (and held by it on the newest primary), each member within one of even. */
  private balanced(members: Worker[]): boolean {
    if (members.some((w) => !isLive(w))) return false;
    const lo = Math.floor(this.partitions / members.length);
    const hi = Math.ceil(this.partitions / members.length);
    const seen = new Set<number>();
    for (const w of members) {
      const owned = (w.pl as PartitionedLeadership).owned;
      if (owned.size < lo || owned.size > hi) return false;
      for (const p of owned) {
        if (seen.has(p) || this.holder(p)?.owner !== workerName(w)) return false;
        seen.add(p);
      }
    }
    return seen.size === this.partitions;
  }

  endOfLiveness(): void {
    const live = this.live;
    if (!live || this.stable) return;
    const states = this.workers
      .map(
        (w) =>
          `${workerName(w)}:${isLive(w) ? `owns[${[...(w.pl?.owned ?? [])].join(',')}]${w.member ? '' : ' (stopped)'}` : 'gone'}`,
      )
      .join(' ');
    this.fail(
      `liveness: partitions not all owned and balanced for ${live.holdMs} ms within ${live.boundMs.toFixed(0)} ms of the last fault (t=${live.quiet.toFixed(3)}) [${states}]`,
    );
  }

  leaks(): void {
    for (const w of this.workers) {
      if (!isLive(w)) continue;
      const open = w.clients.filter((x) => !x.ended);
      if (open.length > 0)
        this.fail(`${workerName(w)}: ${open.length} connection(s) left open after shutdown()`);
      const timers = w.proc.clock.pending;
      if (timers > 0) this.fail(`${workerName(w)}: ${timers} timer(s) left after shutdown()`);
      if ((w.pl?.owned.size ?? 0) > 0) this.fail(`${workerName(w)}: owns partitions after shutdown()`);
    }
    if (this.bodies.size > 0)
      this.fail(`${this.bodies.size} runForEach body(ies) still running after shutdown()`);
  }
}
