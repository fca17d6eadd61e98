/**
 * What a worker hears on its name's channel (one LISTEN on the member session) about
 * hand-overs and departures, and what follows from it:
 *  - `released:<id>:<p>,…`: unlocked after their runs returned, so the next owner needs no
 *    takeover delay, until `took:<id>:<p>,…` says another worker holds them again (it may
 *    die holding them);
 *  - `left:<id>`: a clean leave, announced before the member lock goes: its release is no death;
 *  - `died:<id>`: a member's session ended (seen by some worker's ring watch): its
 *    partitions were not handed over, and its share is taken before anything else;
 *  - `drained:<id>:<p>,…:<token>:<pid>`: the proof of drain (docs/safety.md). A worker whose
 *    member session (marker `token`, backend `pid`) ended uncleanly says, from its next
 *    session and before it takes anything, that its runs of those partitions have returned.
 *    A take under the takeover delay whose previous holder is exactly that session opens
 *    at once.
 * A take's previous holder is the session whose `took:<id>:<p>,…:<token>:<pid>` was heard last for
 * that partition; with none heard since this session started listening, whichever member
 * held it then (the members of the first reconcile, by id and backend pid): any later take
 * would have been heard. What an earlier member session heard is no proof for the next
 * one: `reset()`.
 */

/** The NOTIFY payloads announcing partitions released or taken (each under 8000 bytes); a take names its session's marker. */
export function partitionNotices(
  what: 'released' | 'took',
  id: string,
  partitions: readonly number[],
  /** A take names its session: marker token and backend pid (a `drained` must name both: tokens drawn from alike seeded `random`s collide). */
  session?: { token: string; pid: number },
): string[] {
  const by = session === undefined ? '' : `:${session.token}:${session.pid}`;
  return chunks(partitions).map((list) => `${what}:${id}:${list}${by}`);
}

/** The proof of drain of a lost member session: its partitions whose runs have returned. */
export function drainedNotices(
  id: string,
  lost: { token: string; pid: number },
  partitions: readonly number[],
): string[] {
  return chunks(partitions).map((list) => `drained:${id}:${list}:${lost.token}:${lost.pid}`);
}

function chunks(partitions: readonly number[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < partitions.length; i += 1000) out.push(partitions.slice(i, i + 1000).join(','));
  return out;
}

/** Who held a partition before this worker took it, as far as this member session knows. */
type Previous =
  /** The session whose `took` was heard last, by its marker. */
  | { readonly kind: 'session'; readonly id: string; readonly token: string; readonly pid: number }
  /** No `took` heard since this session listened: the member that held it at the first reconcile. */
  | { readonly kind: 'member-at-join' };

/** A `drained` notice heard. */
interface Drained {
  readonly id: string;
  readonly token: string;
  readonly pid: number;
  readonly partitions: ReadonlySet<number>;
}

export class Handovers {
  /** Partitions handed back cleanly by their previous owner. */
  private readonly clean = new Set<number>();
  /** Who last announced taking each partition (to order `released` against `took`, and as the previous holder). */
  private readonly takenBy = new Map<number, { id: string; token: string | null; pid: number | null }>();
  /** Members that announced a clean leave. */
  private readonly departed = new Set<string>();
  /** Members reported dead since the last `takeDeaths()`. */
  private readonly deaths = new Set<string>();
  /** The members at this session's first reconcile: id → backend pid. */
  private atJoin: ReadonlyMap<string, number> | null = null;
  /** The last `drained` notices heard (a few). */
  private readonly drained: Drained[] = [];
  /** Partitions under the takeover delay that a `drained` of their previous holder ends. */
  private readonly awaiting = new Map<number, Previous>();

  constructor(
    /** Whether `id` was a member at the last reconcile (a death of a non-member is no news). */
    private readonly isMember: (id: string) => boolean,
    /** A proof of drain arrived for these partitions, taken under the takeover delay: open them now. */
    private readonly proven: (partitions: number[]) => void = () => {},
  ) {}

  reset(): void {
    this.clean.clear();
    this.takenBy.clear();
    this.departed.clear();
    this.deaths.clear();
    this.atJoin = null;
    this.drained.length = 0;
    this.awaiting.clear();
  }

  /** The members read by this session's first reconcile (later calls change nothing). */
  membersAtJoin(members: readonly { id: string; pid: number }[]): void {
    this.atJoin ??= new Map(members.map((m) => [m.id, m.pid]));
  }

  /** One notice from the channel. Malformed ones are ignored. */
  hear(payload: string): void {
    const [what = '', who = '', list = '', token, pid] = payload.split(':');
    if (what === 'left') this.departed.add(who);
    if (what === 'died') this.died(who);
    const ps = list ? list.split(',').map(Number).filter(Number.isInteger) : [];
    if (what === 'drained') {
      if (token && pid !== undefined && /^\d+$/.test(pid) && ps.length) {
        this.drainedHeard({ id: who, token, pid: Number(pid), partitions: new Set(ps) });
      }
      return;
    }
    for (const p of ps) {
      if (what === 'took') {
        this.takenBy.set(p, {
          id: who,
          token: token || null,
          pid: pid !== undefined && /^\d+$/.test(pid) ? Number(pid) : null,
        });
        this.clean.delete(p);
      } else if (what === 'released' && (this.takenBy.get(p)?.id ?? who) === who) {
        // a `took` by another that arrived first means it holds p now: no clean mark. Its
        // holder since is unknown (a take with no notice never opens a term): no proof of drain
        this.takenBy.set(p, { id: who, token: null, pid: null });
        this.clean.add(p);
      }
    }
  }

  private drainedHeard(d: Drained): void {
    this.drained.push(d);
    if (this.drained.length > 64) this.drained.shift();
    const ended: number[] = [];
    for (const [p, previous] of this.awaiting) {
      if (this.proves(d, p, previous)) ended.push(p);
    }
    for (const p of ended) this.awaiting.delete(p);
    if (ended.length) this.proven(ended);
  }

  /** Whether `d` is the proof of drain of partition `p`'s previous holder. */
  private proves(d: Drained, p: number, previous: Previous): boolean {
    if (!d.partitions.has(p)) return false;
    if (previous.kind === 'session')
      return d.id === previous.id && d.token === previous.token && d.pid === previous.pid;
    return this.atJoin?.get(d.id) === d.pid;
  }

  /**
   * A member's session ended: unless it announced a clean leave, its partitions were not
   * handed over. True when that counts as a death.
   */
  died(id: string): boolean {
    if (this.departed.has(id) || !this.isMember(id)) return false;
    this.deaths.add(id);
    return true;
  }

  /** The members reported dead since the last call (empty: none). */
  takeDeaths(): ReadonlySet<string> {
    const dead = new Set(this.deaths);
    this.deaths.clear();
    return dead;
  }

  get anyDeaths(): boolean {
    return this.deaths.size > 0;
  }

  /**
   * Just taken by this worker: which need the takeover delay. Clean: handed over cleanly, or
   * their previous holder's proof of drain was already heard. Delayed: the others; a proof
   * of drain heard later ends their delay (the `proven` callback). `proofs` false (another
   * primary is up): a drain heard on this server proves nothing, so none is looked for.
   */
  delayNeeded(taken: readonly number[], proofs = true): { clean: number[]; delayed: number[] } {
    const clean: number[] = [];
    const delayed: number[] = [];
    for (const p of taken) {
      this.awaiting.delete(p); // what an earlier take of p waited for proves nothing now
      const previous = proofs ? this.previousOf(p) : null;
      if (this.clean.has(p) || (previous && this.drained.some((d) => this.proves(d, p, previous)))) {
        clean.push(p);
      } else {
        delayed.push(p);
        if (previous) this.awaiting.set(p, previous);
      }
      this.clean.delete(p);
    }
    return { clean, delayed };
  }

  private previousOf(p: number): Previous | null {
    const taken = this.takenBy.get(p);
    if (taken)
      return taken.token && taken.pid !== null
        ? { kind: 'session', id: taken.id, token: taken.token, pid: taken.pid }
        : null;
    return this.atJoin ? { kind: 'member-at-join' } : null;
  }
}
