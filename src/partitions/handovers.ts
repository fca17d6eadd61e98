/**
 * What a worker hears on its name's channel (one LISTEN on the member session) about
 * hand-overs and departures, and what follows from it:
 *  - `released:<id>:<p>,…`: unlocked after their runs returned, so the next owner needs no
 *    takeover delay, until `took:<id>:<p>,…` says another worker holds them again (it may
 *    die holding them);
 *  - `left:<id>`: a clean leave, announced before the member lock goes: its release is no death;
 *  - `died:<id>`: a member's session ended (seen by some worker's ring watch): its
 *    partitions were not handed over, and its share is taken before anything else.
 * What an earlier member session heard is no proof for the next one: `reset()`.
 */

/** The NOTIFY payloads announcing partitions released or taken (each under 8000 bytes). */
export function partitionNotices(
  what: 'released' | 'took',
  id: string,
  partitions: readonly number[],
): string[] {
  const out: string[] = [];
  for (let i = 0; i < partitions.length; i += 1000) {
    out.push(`${what}:${id}:${partitions.slice(i, i + 1000).join(',')}`);
  }
  return out;
}

export class Handovers {
  /** Partitions handed back cleanly by their previous owner. */
  private readonly clean = new Set<number>();
  /** Who last announced taking each partition (to order `released` against `took`). */
  private readonly takenBy = new Map<number, string>();
  /** Members that announced a clean leave. */
  private readonly departed = new Set<string>();
  /** Members reported dead since the last `takeDeaths()`. */
  private readonly deaths = new Set<string>();

  constructor(
    /** Whether `id` was a member at the last reconcile (a death of a non-member is no news). */
    private readonly isMember: (id: string) => boolean,
  ) {}

  reset(): void {
    this.clean.clear();
    this.takenBy.clear();
    this.departed.clear();
    this.deaths.clear();
  }

  /** One notice from the channel. */
  hear(payload: string): void {
    const [what = '', who = '', list = ''] = payload.split(':');
    if (what === 'left') this.departed.add(who);
    if (what === 'died') this.died(who);
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

  /** Just taken by this worker: which need the takeover delay (not handed over cleanly). Clears their marks. */
  delayNeeded(taken: readonly number[]): { clean: number[]; delayed: number[] } {
    const clean = taken.filter((p) => this.clean.has(p));
    const delayed = taken.filter((p) => !this.clean.has(p));
    for (const p of taken) this.clean.delete(p);
    return { clean, delayed };
  }
}
