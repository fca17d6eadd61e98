/**
 * The invariants, checked after every step against the simulated server's ground truth:
 *  - `isLeader` only while the server grants the key to that candidate, or, after the key
 *    was taken from it at once (terminate, restart, reset, crash), within its lease, or,
 *    after a silent loss (a directed `unlockAll`: pg_advisory_unlock_all behind its back,
 *    outside the lease's model), until its next check's deadline;
 *  - no term open past its lease's end (the lapse ends it), but in a frozen process;
 *  - never two open terms, never two running `runWhileLeader` bodies (a body runs from its
 *    start until it returns), except for a process that cannot hear its loss: while it is
 *    frozen (its term must end as it thaws, its work within the drain after), or after its
 *    lock was taken at once while its connection was blackholed (until its next check's
 *    deadline and the drain): the lease covers those, the takeover delay does not
 *    (docs/safety.md); after a silent loss the terms are checked (the delay covers it);
 *  - after the last fault, a leader within the bound, and no leaderless stretch after it;
 *  - after shutdown(), no open connection and no timer left.
 * With a standby and a promotion (failover.ts) all of these hold across both servers (a
 * candidate leads where a server grants it the key), and (docs/safety.md, "Primary
 * failover"): no term is open on a standby; a term on an old primary ends within
 * PEER_BOUND_MS plus a round trip of the newer primary becoming reachable (of its thaw, for
 * a process frozen meanwhile); never two open terms or bodies, the old primary kept running
 * included; after the last fault, a leader on the newest primary within the bound.
 * Through a pooler in session mode all of these hold as on a direct connection. Through one
 * that shares backends (transaction or statement mode; `shared`) the server's holder is a
 * pooled backend, not a candidate, and instead (docs/safety.md, "Poolers"):
 *  - never two open terms or bodies (as above); a lone candidate never opens a term;
 *  - every refusal is `ERR_PGLEADERLOCK_UNSAFE` naming the pooler mode and the way out;
 *  - after the last fault, every running candidate is refused again within the bound, or has
 *    stopped on a refusal found before its first session (core/errors.ts `endsTheRun`: a
 *    LeaderLock stops, a partition worker's start() rejects), and none is leader then (a
 *    candidate that slipped through is caught by its own check);
 *  - after shutdown(), nothing is left held on the server (unless a candidate crashed).
 */

import type { Candidate } from './candidate.js';
import type { Cluster } from './failover.js';
import { KEY_ID, type Profile } from './profile.js';
import { type Backend, INSTANT, type ReleaseCause, type SimServer } from './server.js';
import { checkWatches, type SimWatch, watchLeaks } from './watches.js';
import type { World } from './world.js';

/** The way out every pooler refusal names (docs/safety.md, "Poolers"). */
const ADVICE = 'connect directly to PostgreSQL, or through the pooler in session mode';

interface Body {
  cand: Candidate;
  start: number;
}

export class Checker {
  readonly violations: string[] = [];
  server!: SimServer;
  /** Every server (the first: `server`); with a standby, the cluster and how soon a leader sees a promotion. */
  servers: SimServer[] = [];
  cluster: Cluster | null = null;
  peerSeenMs = 0;
  /** LeaderWatch observers (watches.ts), and when the key last changed hands on any server. */
  watches: SimWatch[] = [];
  private holderSince = 0;
  private watchesOk = true;
  private readonly bodies = new Set<Body>();
  private live: { quiet: number; boundMs: number; holdMs: number } | null = null;
  /** Candidates connect through a pooler that shares backends. */
  shared = false;

  constructor(
    private readonly world: World,
    private readonly profile: Profile,
    private readonly cands: Candidate[],
  ) {}

  get done(): boolean {
    return this.violations.length > 0;
  }

  fail(what: string): void {
    const line = `t=${this.world.now.toFixed(3)} ${what}`;
    this.world.log(`VIOLATION ${what}`);
    if (this.violations.length < 5) this.violations.push(line);
  }

  private owner(b: Backend | null): Candidate | undefined {
    return b ? this.cands.find((c) => c.name === b.owner && !c.crashed) : undefined;
  }

  holderChanged(holder: Backend | null, cause: ReleaseCause | null, server: SimServer = this.server): void {
    const prevBackend = this.current.get(server) ?? null;
    this.holderSince = this.world.now;
    this.current.set(server, holder);
    const granted = this.owner(holder);
    if (granted) granted.lostUnheard = false;
    if (holder || !prevBackend || !cause) return;
    // the key left a backend: remember how, for its candidate
    const prev = this.owner(prevBackend);
    if (!prev) return;
    prev.lastLoss = { at: this.world.now, cause };
    // taken at once while its connection is blackholed: it hears of it at its next check's
    // deadline (after it thaws, if frozen), its work stops within the drain; the lease covers it
    if (INSTANT.has(cause) && prevBackend.link.state === 'blackhole') {
      prev.lostUnheard = true;
      prev.excusedUntil = Math.max(prev.excusedUntil, this.world.now + this.checkMs());
    }
  }

  /** A check's period and deadline, and the drain after it. */
  private checkMs(): number {
    const p = this.profile;
    return p.healthIntervalMs + p.queryTimeoutMs + p.drainMaxMs + 1;
  }
  private readonly current = new Map<SimServer, Backend | null>();

  bodyStart(cand: Candidate): Body {
    const b = { cand, start: this.world.now };
    this.bodies.add(b);
    return b;
  }

  bodyEnd(b: Body): void {
    this.bodies.delete(b);
  }

  /** An error reported to `onError`: a refusal must name the pooler and the way out, and only happen behind one. */
  reported(c: Candidate, e: Error): void {
    if ((e as { code?: unknown }).code !== 'ERR_PGLEADERLOCK_UNSAFE') return;
    // the split-brain guard ends a term on an old primary with this code (docs/safety.md)
    if (this.cluster && e.message.includes('a standby was promoted')) return;
    const pooled = this.profile.pooler !== null;
    const named = pooled && e.message.includes(ADVICE);
    const allowed = this.shared || e.message.includes('could not be checked');
    if (!named || !allowed)
      this.fail(
        `${c.name}: ERR_PGLEADERLOCK_UNSAFE ${this.shared ? 'without the documented advice' : `with ${pooled ? 'a session-mode pooler' : 'a direct connection'}`}: ${e.message}`,
      );
    c.refusedAt = this.world.now;
  }

  crashed(c: Candidate): void {
    for (const b of this.bodies) if (b.cand === c) this.bodies.delete(b);
  }

  frozen(c: Candidate): void {
    c.excusedUntil = Number.POSITIVE_INFINITY;
  }

  thawed(c: Candidate): void {
    // thawed, its timers run first and it reads what came: a lapsed lease or a loss it can
    // read ends the term at once, the work stops within the drain; a loss it cannot hear
    // (blackholed) shows at its next check's deadline; a promotion it could not see while
    // frozen, within its peer watch's bound (the term), and the drain (the work)
    const held = this.servers.find((s) => this.owner(s.holderOf(KEY_ID)) === c);
    const unseen = held && this.cluster?.superseded(held) ? this.peerSeenMs + this.profile.drainMaxMs : 0;
    c.thawedAt = this.world.now;
    c.excusedUntil =
      this.world.now + Math.max(unseen, c.lostUnheard ? this.checkMs() : this.profile.drainMaxMs + 1);
  }

  /**
   * From `quiet` (the last fault or operation) on: a leader within `boundMs`, leading then
   * for `holdMs` without a break (a group that keeps handing over, or never settles, fails).
   */
  liveness(quiet: number, boundMs: number, holdMs: number): void {
    this.live = { quiet, boundMs, holdMs };
  }

  check(): void {
    const now = this.world.now;
    const hs = this.servers.map((s) => s.holderOf(KEY_ID));
    const holders = hs.map((x) => this.owner(x));
    // the leader the quiet phase waits for: on the newest primary
    const newest = this.cluster ? this.servers.indexOf(this.cluster.newest() ?? this.server) : 0;
    const h = hs[newest] ?? null;
    const holder = holders[newest];
    const leaders: Candidate[] = [];
    const terms: Candidate[] = [];
    for (const c of this.cands) {
      if (!c.live) continue;
      const lock = c.lock;
      if (!lock) continue;
      const term = lock.term;
      if (this.shared && this.cands.length === 1 && ((term && !term.signal.aborted) || lock.isLeader)) {
        this.fail(`${c.name}, a lone candidate, leads through a ${this.profile.pooler?.mode}-mode pooler`);
        return;
      }
      if (term && !term.signal.aborted) {
        if (term.id !== c.termId) {
          c.termId = term.id;
          c.termOpenedAt = now;
        }
        if (now > c.excusedUntil) terms.push(c);
        if (this.cluster && this.oldTerm(c, holders, now)) return;
        if (this.lapsedTerm(c, now)) return;
      }
      if (!lock.isLeader) continue;
      leaders.push(c);
      if (holders.includes(c) || this.shared) continue;
      const lease = lock.safety?.leaseMs ?? 0;
      const loss = c.lastLoss;
      // taken silently (pg_advisory_unlock_all behind its back): outside the lease's model, it
      // reads true until its next check finds the key gone (docs/safety.md); its term and work
      // are still checked: the next holder's takeover delay must outlast them
      if (loss?.cause === 'unlock-all' && now < loss.at + this.checkMs()) continue;
      if (!loss || !INSTANT.has(loss.cause) || now >= loss.at + lease) {
        this.fail(
          `${c.name} isLeader while the server grants the key to ${h ? h.owner : 'nobody'} (lost ${loss ? `${(now - loss.at).toFixed(1)} ms ago by ${loss.cause}` : 'never held'}, lease ${lease} ms)`,
        );
        return;
      }
    }
    if (terms.length > 1) {
      this.fail(
        `two open terms: ${terms.map((c) => `${c.name} term ${c.termId} opened t=${c.termOpenedAt.toFixed(3)}`).join(', ')}`,
      );
      return;
    }
    const running = new Set<Candidate>();
    // two bodies at least, or none can overlap
    for (const b of this.bodies.size > 1 ? this.bodies : [])
      if (now > b.cand.excusedUntil && b.cand.live) running.add(b.cand);
    if (running.size > 1) {
      this.fail(`two runWhileLeader bodies running: ${[...running].map((c) => c.name).join(', ')}`);
      return;
    }
    const live = this.live;
    if (!live || now < live.quiet) return;
    if (this.watches.length > 0) {
      const maxDelay = this.profile.net.baseMs + this.profile.net.spikeMs;
      const since = Math.max(live.quiet, this.holderSince);
      const r = checkWatches(this.watches, now, since, maxDelay, (s) => this.idHolding(s));
      if (r.failure) {
        this.fail(r.failure);
        return;
      }
      this.watchesOk = r.ok;
    }
    const someone = this.cands.some(
      (c) => (c.starting && !c.crashed) || (c.live && c.lock?.state !== 'stopped'),
    );
    const led = leaders.length > 0 && holder !== undefined && leaders.includes(holder);
    if (!someone) {
      this.stable = this.watchesOk; // nobody is meant to lead
      return;
    }
    if (this.shared) {
      // refused again since the quiet point, each running candidate, and nobody leading
      const refused = this.cands.every(
        (c) => (!c.live && !c.starting) || c.lock?.state === 'stopped' || c.refusedAt >= live.quiet,
      );
      if (refused && leaders.length === 0) this.stable = true;
      return;
    }
    if (!led) {
      this.ledSince = null;
      return;
    }
    this.ledSince ??= now;
    if (now - this.ledSince >= live.holdMs) this.stable = this.watchesOk;
  }

  /**
   * A term ends when its lease runs out unrenewed (docs/safety.md: leader work is suspended;
   * the lapse timer fires at the lease's end): none is open past `leaseExpiresAt`, except in
   * a frozen process (its timers run as it thaws, first). True when it failed.
   */
  private lapsedTerm(c: Candidate, now: number): boolean {
    const until = c.lock?.leaseExpiresAt ?? null;
    if (until === null || now <= until || c.proc.frozen || now <= c.thawedAt) return false;
    this.fail(
      `${c.name}'s term ${c.termId} is still open ${(now - until).toFixed(3)} ms after its lease ran out (t=${until.toFixed(3)}): no lapse`,
    );
    return true;
  }

  /**
   * A failover's claims about an open term (docs/safety.md, "Primary failover"): never on a
   * standby; on an old primary, not past PEER_BOUND_MS plus a round trip of the newer
   * primary becoming reachable (or of the candidate's thaw). True when it failed.
   */
  private oldTerm(c: Candidate, holders: (Candidate | undefined)[], now: number): boolean {
    // the server its term is on (term.host: `connect[i]`); it may also still hold the key on
    // the other, from a session it has not yet heard is gone
    const on = /^connect\[(\d+)\]$/.exec(c.lock?.term?.host ?? '')?.[1];
    const i = on === undefined ? holders.indexOf(c) : Number(on);
    const s = this.servers[i];
    if (!s || !this.cluster) return false;
    if (s.recovery) {
      this.fail(`${c.name} has an open term on server ${i}, a standby`);
      return true;
    }
    if (!this.cluster.superseded(s) || now <= c.excusedUntil) return false;
    const since = Math.max(this.cluster.newestSince, c.thawedAt);
    if (now <= since + this.peerSeenMs) return false;
    this.fail(
      `${c.name}'s term on server ${i} (timeline ${s.timeline}) is still open ${(now - since).toFixed(1)} ms after a newer primary became reachable (bound ${this.peerSeenMs.toFixed(1)} ms: PEER_BOUND_MS plus a round trip)`,
    );
    return true;
  }

  /** The id of the candidate whose session holds the key on `s` (a crashed one's included). */
  private idHolding(s: SimServer): { id: string | null; b: Backend | null } {
    const b = s.holderOf(KEY_ID);
    const i = b ? /^c(\d+)\./.exec(b.owner)?.[1] : undefined;
    return { id: i === undefined ? null : (this.cands[Number(i)]?.id ?? null), b };
  }

  /** A fault lasts until `t` (a freeze on a grant): the quiet phase starts no earlier. */
  faultUntil(t: number): void {
    if (this.live && t > this.live.quiet) {
      this.live.quiet = t;
      this.ledSince = null;
      this.stable = false;
    }
  }

  get quiet(): number {
    return this.live?.quiet ?? 0;
  }

  /** Converged: a leader has led for the window without a break (or nobody is running). */
  stable = false;
  private ledSince: number | null = null;

  /** The quiet phase ended (at quiet + bound + hold) without a stable leader. */
  endOfLiveness(): void {
    const live = this.live;
    if (!live || this.stable) return;
    const states = this.cands.map((c) => `${c.name}:${c.live ? c.lock?.state : 'gone'}`).join(' ');
    const h = this.server.holderOf(KEY_ID);
    this.fail(
      `liveness: no leader that held for ${live.holdMs} ms within ${live.boundMs.toFixed(0)} ms of the last fault (t=${live.quiet.toFixed(3)}) [holder ${h ? `${h.owner} pid ${h.pid}` : 'none'}; ${states}]`,
    );
  }

  /** After every shutdown(): no connection of a live candidate left open, no timer pending on its clock. */
  leaks(): void {
    for (const c of this.cands) {
      if (!c.live) continue;
      const open = c.clients.filter((x) => !x.ended);
      if (open.length > 0) this.fail(`${c.name}: ${open.length} connection(s) left open after shutdown()`);
      const timers = c.proc.clock.pending;
      if (timers > 0) this.fail(`${c.name}: ${timers} timer(s) left after shutdown()`);
      if (c.lock?.state !== 'stopped') this.fail(`${c.name}: state ${c.lock?.state} after shutdown()`);
    }
    for (const w of watchLeaks(this.watches)) this.fail(w);
    if (this.bodies.size > 0)
      this.fail(`${this.bodies.size} runWhileLeader body(ies) still running after shutdown()`);
    const h = this.server.holderOf(KEY_ID);
    if (this.shared && h && !this.cands.some((c) => c.generation > 0 || c.crashed))
      this.fail(`the key is left held on pooled backend ${h.pid} after every candidate shut down`);
    void this.profile;
  }
}
