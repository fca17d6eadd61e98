/**
 * `PartitionedLeadership`: one owner per partition among many workers, two connections per
 * worker whatever the partition count. Design and safety argument: docs/partitions.md.
 *
 * Each worker holds, on its ownership session (owner.ts), a member lock and the locks of the
 * partitions it owns; membership is read from `pg_locks`. A reconcile (on start, on every
 * membership notice, and every `healthIntervalMs`) reads the members and this session's
 * locks in one statement, renews the lease, computes the assignment (assign.ts), hands
 * back partitions no longer ours (their runs drained first), and takes the free ones that
 * are. Deaths are seen by the ring watch (watch.ts) within milliseconds.
 */
import { sleep, systemClock } from '../clock.js';
import { PgLeaderLockError, sqlStateOf } from '../errors.js';
import { assign } from './assign.js';
import { inspectPartitions, type PartitionInspection, type PartitionInspectOptions } from './inspect.js';
import {
  type PartitionedLeadershipOptions,
  type ResolvedPartitionOptions,
  resolvePartitionOptions,
} from './options.js';
import { Owner } from './owner.js';
import { GIVE, keysOf, type MemberRow, parseMember, RECONCILE, slotOf, TAKE } from './sql.js';
import { type PartitionTerm, type RevokeReason, Terms } from './terms.js';
import { Watcher } from './watch.js';

export type { PartitionInspection, PartitionInspectOptions } from './inspect.js';
export type { PartitionTerm, RevokeReason } from './terms.js';
export type PartitionWork = (partition: number, term: PartitionTerm) => Promise<void> | void;

export interface PartitionStats {
  owned: number;
  members: number;
  acquisitions: number;
  revocations: number;
  losses: number;
  reconciles: number;
  /** Statements sent on both sessions. */
  statements: number;
}

type Phase =
  | { kind: 'stopped' }
  | { kind: 'connecting' }
  | { kind: 'running'; owner: Owner; watcher: Watcher }
  | { kind: 'stopping'; owner: Owner };

export class PartitionedLeadership implements AsyncDisposable {
  private readonly o: ResolvedPartitionOptions;
  private readonly keys: ReturnType<typeof keysOf>;
  private readonly terms: Terms;
  private phase: Phase = { kind: 'stopped' };
  private members: MemberRow[] = [];
  private assignment = new Map<string, number[]>();
  /** Partitions handed over cleanly by their previous owner (no takeover fence needed). */
  private readonly clean = new Set<number>();
  /** Who last announced taking each partition (to order `released` against `took`). */
  private readonly takenBy = new Map<number, string>();
  /** Members that announced a clean leave: their member lock's release is no death. */
  private readonly departed = new Set<string>();
  /** Members reported dead since the last reconcile: their share is taken before anything else. */
  private readonly deaths = new Set<string>();
  private kick: (() => void) | null = null;
  private dirty = false;
  private loopDone: Promise<void> | null = null;
  private stopRequested = false;
  private balanceWaiters = new Set<(balanced: boolean) => void>();
  /** This worker's share at the last reconcile. */
  private share: ReadonlySet<number> = new Set();
  private leaseTimer: NodeJS.Timeout | null = null;
  private mismatchReported = new Set<string>();
  private readonly counters = { reconciles: 0, statements: 0 };
  private started: { resolve: () => void; reject: (e: Error) => void } | null = null;

  constructor(options: PartitionedLeadershipOptions) {
    this.o = resolvePartitionOptions(options);
    this.keys = keysOf(this.o.name);
    this.terms = new Terms({ name: this.o.name, id: this.o.id }, this.o.drainTimeoutMs, this.o.logger, () =>
      this.checkBalance(),
    );
    this.o.signal?.addEventListener('abort', () => void this.shutdown(), { once: true });
  }

  /** The members of `name` and the owner of each partition, without joining (informational). */
  static inspect(options: PartitionInspectOptions): Promise<PartitionInspection> {
    return inspectPartitions(options);
  }

  get id(): string {
    return this.o.id;
  }

  /** The partitions this worker owns now (terms open, lease current). */
  get owned(): ReadonlySet<number> {
    return this.terms.owned();
  }

  /**
   * When the lease behind `owned` ends (or ended), on `performance.now()`; null while no
   * ownership check has succeeded on the current session. Each successful check (every
   * `healthIntervalMs`) pushes it forward; past it `owned` is empty and every term ends.
   */
  get leaseExpiresAt(): number | null {
    return this.terms.leaseUntil;
  }

  /** The member ids seen at the last reconcile, sorted. */
  get memberIds(): readonly string[] {
    return this.members.map((m) => m.id);
  }

  stats(): PartitionStats {
    return {
      owned: this.owned.size,
      members: this.members.length,
      ...this.terms.counts(),
      reconciles: this.counters.reconciles,
      statements: this.counters.statements,
    };
  }

  /** Run `fn` for each partition while owned; its term's signal aborts when the partition is revoked or lost. */
  runForEach(fn: PartitionWork): { stop(): Promise<void> } {
    if (typeof fn !== 'function') throw new TypeError(`runForEach needs a function, received ${typeof fn}`);
    return this.terms.addWork(fn);
  }

  onAssigned(fn: (partition: number, term: PartitionTerm) => void, options?: { signal?: AbortSignal }): void {
    this.terms.on('assigned', fn, options?.signal);
  }

  onRevoked(fn: (partition: number, reason: RevokeReason) => void, options?: { signal?: AbortSignal }): void {
    this.terms.on('revoked', fn, options?.signal);
  }

  onError(fn: (error: Error) => void, options?: { signal?: AbortSignal }): void {
    this.terms.on('error', fn, options?.signal);
  }

  /**
   * Join. Resolves once this worker is a member (its first reconcile done); rejects if the
   * workers already running this name have another partition count. Connection failures are
   * reported to onError and retried.
   */
  start(): Promise<void> {
    if (this.loopDone) return Promise.resolve();
    this.stopRequested = false;
    const joined = new Promise<void>((resolve, reject) => {
      this.started = { resolve, reject };
    });
    this.loopDone = this.loop();
    return joined;
  }

  /** Resolves true once this worker owns exactly its share for the current membership. */
  async waitForBalance({ timeoutMs = 30_000 }: { timeoutMs?: number } = {}): Promise<boolean> {
    if (this.balanced) return true;
    // resolved by checkBalance() after a reconcile or when a fenced term opens
    return new Promise<boolean>((resolve) => {
      const done = (balanced: boolean): void => {
        clearTimeout(timer);
        this.balanceWaiters.delete(done);
        resolve(balanced);
      };
      const timer = setTimeout(() => {
        this.balanceWaiters.delete(done);
        resolve(false);
      }, timeoutMs);
      timer.unref();
      this.balanceWaiters.add(done);
    });
  }

  /** Hand every partition back (runs drained), leave, close both sessions. Idempotent. */
  async shutdown({ timeoutMs = 30_000 }: { timeoutMs?: number } = {}): Promise<void> {
    this.stopRequested = true;
    this.wake();
    const done = this.loopDone;
    if (!done) return;
    const finished = await Promise.race([
      done.then(() => true),
      sleep(systemClock, timeoutMs).then(() => false),
    ]);
    if (finished) return;
    // past the timeout: close the session, and the server frees what it holds (the others
    // then take it under the fence); runs still winding down are left to finish
    const p = this.phase as Phase;
    if (p.kind === 'running' || p.kind === 'stopping') p.owner.destroy();
    for (const w of [...this.balanceWaiters]) w(false);
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.shutdown();
  }

  private wake(): void {
    this.dirty = true;
    this.kick?.();
  }

  private report(error: Error): void {
    this.terms.emit('error', error);
  }

  private async loop(): Promise<void> {
    let delay = 100;
    while (!this.stopRequested) {
      this.phase = { kind: 'connecting' };
      let session: { owner: Owner; watcher: Watcher } | null = null;
      try {
        session = await this.open();
        delay = 100;
        await this.serve(session.owner);
      } catch (err) {
        if (err instanceof PartitionMismatchError && this.started) {
          this.started.reject(err);
          this.started = null;
          this.stopRequested = true;
        } else {
          this.report(err as Error);
        }
      }
      this.leaseLapse(null);
      await this.terms.revokeAll('lost');
      if (session) {
        session.owner.destroy();
        await session.watcher.close();
      }
      if (this.stopRequested) break;
      await this.pause(delay);
      delay = Math.min(delay * 2, 5000);
    }
    this.phase = { kind: 'stopped' };
    for (const w of [...this.balanceWaiters]) w(false);
    this.started?.resolve();
    this.started = null;
    this.loopDone = null;
  }

  private async pause(ms: number): Promise<void> {
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, ms);
      this.kick = () => {
        clearTimeout(t);
        resolve();
      };
    });
    this.kick = null;
  }

  private async open(): Promise<{ owner: Owner; watcher: Watcher }> {
    const count = (): void => {
      this.counters.statements += 1;
    };
    const owner = await Owner.open({
      endpoints: this.o.endpoints,
      membersKey: this.keys.members,
      slot: slotOf(this.o.id),
      channel: this.keys.channel,
      appName: `pgleaderlock:${this.o.id}#p${this.o.partitions}`,
      serverReleaseMs: this.o.serverReleaseMs,
      healthIntervalMs: this.o.healthIntervalMs,
      queryTimeoutMs: this.o.queryTimeoutMs,
      onStatement: count,
    });
    const watcher = new Watcher({
      // the watch session goes to the same server as the ownership session
      connect: () => owner.endpoint.connect(),
      appName: `pgleaderlock:${this.o.id}#watch`,
      membersKey: this.keys.members,
      sliceMs: this.o.watchSliceMs,
      queryTimeoutMs: this.o.queryTimeoutMs,
      settings: owner.watchSettings,
      onDeath: (slot) => {
        const gone = this.members.find((m) => m.slot === slot);
        if (gone) this.died(gone.id);
        void owner.notify(`died:${gone?.id ?? slot}`).catch(() => {});
        this.wake();
      },
      onError: (err) => this.report(err),
      onStatement: count,
    });
    this.phase = { kind: 'running', owner, watcher };
    owner.onDeath(() => {
      void this.terms.revokeAll('lost'); // at once, before the loop runs
      this.wake();
    });
    // what earlier sessions heard is no proof for this one
    this.clean.clear();
    this.takenBy.clear();
    this.departed.clear();
    this.deaths.clear();
    owner.onNotify((payload) => {
      const [what = '', who = '', list = ''] = payload.split(':');
      if (what === 'left') this.departed.add(who);
      if (what === 'died') this.died(who);
      // `released:<id>:<p>,…`: unlocked after their runs returned: no fence needed, until
      // `took:<id>:<p>,…` says another worker holds them again (it may die holding them)
      const ps = list ? list.split(',').map(Number) : [];
      for (const p of ps) {
        if (what === 'took') {
          this.takenBy.set(p, who);
          this.clean.delete(p);
        } else if (what === 'released' && (this.takenBy.get(p) ?? who) === who) {
          // a `took` by another that arrived first means it holds p now: no clean mark
          this.takenBy.delete(p);
          this.clean.add(p);
        }
      }
      this.wake();
    });
    try {
      await owner.notify(`joined:${this.o.id}`);
    } catch (err) {
      owner.destroy();
      await watcher.close();
      throw err;
    }
    return { owner, watcher };
  }

  /** A member's session ended: unless it announced a clean leave, its partitions were not handed over. */
  private died(id: string): void {
    if (this.departed.has(id) || !this.members.some((m) => m.id === id)) return;
    this.deaths.add(id);
  }

  private async serve(owner: Owner): Promise<void> {
    for (;;) {
      if (owner.dead) throw owner.dead;
      if (this.stopRequested) return this.leave(owner);
      this.dirty = false;
      if (this.deaths.size) await this.takeOver(owner);
      await this.reconcile(owner);
      if (this.started) {
        this.started.resolve();
        this.started = null;
      }
      if (this.dirty) continue;
      await this.pause(this.o.healthIntervalMs);
    }
  }

  private async reconcile(owner: Owner): Promise<void> {
    const sentAt = performance.now();
    const [row] = await owner.query<{
      members: { app: string | null; slot: string; pid: number }[];
      held: number[];
    }>(RECONCILE, [this.keys.members, this.keys.partitions]);
    this.counters.reconciles += 1;
    this.leaseLapse(sentAt + owner.safety.leaseMs);
    const all = (row?.members ?? [])
      .map((m) => parseMember(m.app, Number(m.slot), m.pid))
      .filter((m): m is MemberRow => m !== null);
    const same = all.filter((m) => m.partitions === this.o.partitions);
    for (const m of all) {
      if (m.partitions === this.o.partitions || this.mismatchReported.has(m.id)) continue;
      const err = new PartitionMismatchError(this.o.name, m.id, m.partitions, this.o.partitions);
      if (this.started) throw err; // joining a group that runs another count: refuse
      this.mismatchReported.add(m.id);
      this.report(err);
    }
    this.members = same.sort((a, b) => (a.id < b.id ? -1 : 1));
    const ids = this.members.map((m) => m.id);
    this.assignment = assign(ids, this.o.partitions);
    const mine = new Set(this.assignment.get(this.o.id) ?? []);
    const heldHere = new Set(row?.held ?? []);
    // the server's word on what we hold: a partition we believe owned but do not hold was lost
    for (const p of this.terms.partitions()) if (!heldHere.has(p)) await this.terms.revoke([p], 'lost');
    const give = [...heldHere].filter((p) => !mine.has(p));
    if (give.length) {
      // drained before the locks go, the lease renewed meanwhile
      const drained = await this.renewing(owner, this.terms.revoke(give, 'rebalance'));
      await owner.query(GIVE, [this.keys.partitions, give]);
      await this.announce(owner, 'released', drained);
    }
    // held here but not opened: taken by a statement that then failed (53200 part-way): run them
    const known = new Set(this.terms.partitions());
    const adopt = [...heldHere].filter((p) => mine.has(p) && !known.has(p));
    this.terms.open(adopt, this.o.takeoverDelayMs);
    const take = [...mine].filter((p) => !heldHere.has(p));
    await this.take(owner, take, ids.length);
    // watch the member after us
    const me = ids.indexOf(this.o.id);
    const next = me >= 0 && ids.length > 1 ? this.members[(me + 1) % ids.length] : undefined;
    if (this.phase.kind === 'running') this.phase.watcher.watch(next ? next.slot : null);
    this.share = mine;
    this.checkBalance();
  }

  /**
   * The fast path after a death: the membership is known without asking (the last one
   * minus the dead), so take this worker's new share at once, one statement; the full
   * reconcile follows (it also hands back what moved between survivors).
   */
  private async takeOver(owner: Owner): Promise<void> {
    const dead = new Set(this.deaths);
    this.deaths.clear();
    const ids = this.members.map((m) => m.id).filter((id) => !dead.has(id));
    if (!ids.includes(this.o.id)) return;
    const mine = assign(ids, this.o.partitions).get(this.o.id) ?? [];
    const held = new Set(this.terms.partitions());
    await this.take(
      owner,
      mine.filter((p) => !held.has(p)),
      ids.length,
    );
  }

  /** Try-lock `take`; open the terms of those taken (fenced unless handed over cleanly). */
  private async take(owner: Owner, take: number[], members: number): Promise<void> {
    if (take.length === 0) return;
    try {
      const [got] = await owner.query<{ taken: number[] | null }>(TAKE, [this.keys.partitions, take]);
      const taken = got?.taken ?? [];
      const fenced = taken.filter((p) => !this.clean.has(p));
      for (const p of taken) this.clean.delete(p);
      if (taken.length) await this.announce(owner, 'took', taken);
      this.terms.open(
        taken.filter((p) => !fenced.includes(p)),
        0,
      );
      this.terms.open(fenced, this.o.takeoverDelayMs);
    } catch (err) {
      if (sqlStateOf(err) !== '53200') throw err;
      // the statement failed part-way; the locks it got stay held (session locks ignore the
      // rollback): give them back, or the full table fails every statement after this one
      await owner.query(GIVE, [this.keys.partitions, take]).catch(() => {});
      this.report(lockTableFull(this.o.partitions, members, err));
    }
  }

  /** Owning exactly this worker's share, every term open. */
  private get balanced(): boolean {
    const owned = this.owned;
    return (
      this.share.size === owned.size &&
      [...this.share].every((p) => owned.has(p)) &&
      this.members.some((m) => m.id === this.o.id)
    );
  }

  private checkBalance(): void {
    if (this.balanced) for (const w of [...this.balanceWaiters]) w(true);
  }

  /**
   * Wait for a drain (runs winding down), with an ownership check every healthIntervalMs
   * meanwhile: it renews the lease while every partition still run is held, and keeps the
   * session from the server's idle_session_timeout.
   */
  private async renewing<T>(owner: Owner, drain: Promise<T>): Promise<T> {
    const done = drain.then((value) => ({ value }));
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const tick = new Promise<null>((resolve) => {
        timer = setTimeout(() => resolve(null), this.o.healthIntervalMs);
      });
      const first = await Promise.race([done, tick]);
      clearTimeout(timer);
      if (first) return first.value;
      const sentAt = performance.now();
      const [row] = await owner.query<{ held: number[] }>(RECONCILE, [
        this.keys.members,
        this.keys.partitions,
      ]);
      const held = new Set(row?.held ?? []);
      if (this.terms.partitions().every((p) => held.has(p))) this.leaseLapse(sentAt + owner.safety.leaseMs);
    }
  }

  /** Arm the lease: past `until`, every term ends and the session is closed (a frozen worker). */
  private leaseLapse(until: number | null): void {
    if (this.leaseTimer) clearTimeout(this.leaseTimer);
    this.leaseTimer = null;
    this.terms.leaseUntil = until;
    if (until === null || !Number.isFinite(until)) return; // a server that never drops a dead session: no lapse
    this.leaseTimer = setTimeout(
      () => {
        this.leaseTimer = null;
        const p = this.phase;
        if (p.kind === 'running' || p.kind === 'stopping') p.owner.destroy();
      },
      Math.max(0, until - performance.now()),
    );
    this.leaseTimer.unref();
  }

  /** Tell the others which partitions were handed back cleanly, or taken (NOTIFY payloads stay under 8000 bytes). */
  private async announce(
    owner: Owner,
    what: 'released' | 'took',
    partitions: readonly number[],
  ): Promise<void> {
    for (let i = 0; i < partitions.length; i += 1000) {
      await owner.notify(`${what}:${this.o.id}:${partitions.slice(i, i + 1000).join(',')}`);
    }
  }

  private async leave(owner: Owner): Promise<void> {
    this.phase = { kind: 'stopping', owner };
    let drained: number[] = [];
    try {
      drained = await this.renewing(owner, this.terms.revokeAll('shutdown'));
      const held =
        (await owner.query<{ held: number[] }>(RECONCILE, [this.keys.members, this.keys.partitions]))[0]
          ?.held ?? [];
      if (held.length) await owner.query(GIVE, [this.keys.partitions, held]);
      await this.announce(owner, 'released', drained);
      // announced before the member lock goes: its release is then no death
      await owner.notify(`left:${this.o.id}`);
      await owner.query('SELECT pg_advisory_unlock($1, $2)', [this.keys.members, slotOf(this.o.id)]);
    } catch (err) {
      this.report(err as Error); // the session's end frees whatever is left
    }
    this.leaseLapse(null);
    await owner.end();
  }
}

/** Workers of one name were started with different partition counts. */
export class PartitionMismatchError extends PgLeaderLockError {
  override name = 'PartitionMismatchError';
  constructor(name: string, otherId: string, theirs: number, ours: number) {
    super(
      `partition count mismatch for ${JSON.stringify(name)}: worker ${otherId} runs with partitions ${theirs}, this one with ${ours}; every worker of a name must use the same count (stop them all to change it)`,
      { code: 'ERR_PGLEADERLOCK_PARTITION_MISMATCH' },
    );
  }
}

function lockTableFull(partitions: number, workers: number, cause: unknown): PgLeaderLockError {
  return new PgLeaderLockError(
    `PostgreSQL's lock table is full (SQLSTATE 53200) taking partition locks: ${partitions} partitions over ${workers} worker(s) need ${partitions} advisory locks plus one per worker, and the server's shared lock table holds about max_locks_per_transaction × (max_connections + max_prepared_transactions) for everything; raise max_locks_per_transaction (docs/partitions.md, "Sizing")`,
    { code: 'ERR_PGLEADERLOCK_LOCK_TABLE_FULL', cause },
  );
}
