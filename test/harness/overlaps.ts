/**
 * The one overlap detector of the test suite: leadership intervals, leader-work runs and
 * partition runs are all spans of time owned by someone (`owner`), optionally of one thing
 * (`key`: a partition). Two spans of different owners on the same key that share any
 * instant are an overlap: the safety claims say there is none.
 */

export interface Span {
  /** Where the span began (ms, one clock for all spans compared). */
  readonly start: number;
  /** Where it ended; null while it is still going (it lasts forever, then). */
  readonly end: number | null;
}

export interface Overlap<S extends Span> {
  /** The span that started first. */
  readonly a: S;
  /** The one that started while `a` went on. */
  readonly b: S;
  /** When `b` started. */
  readonly at: number;
  /** How long both went on (Infinity while both are still going). */
  readonly ms: number;
}

/**
 * Every pair of spans with different owners and the same key that overlap in time. A span
 * that ended before it started (a lease that ran out before its work began) never ran and is
 * left out.
 */
export function overlapsOf<S extends Span>(
  spans: readonly S[],
  owner: (s: S) => unknown,
  key: (s: S) => unknown = () => 0,
): Overlap<S>[] {
  const endOf = (s: S): number => s.end ?? Number.POSITIVE_INFINITY;
  const byKey = new Map<unknown, S[]>();
  for (const s of spans) {
    if (endOf(s) <= s.start) continue;
    const k = key(s);
    byKey.set(k, [...(byKey.get(k) ?? []), s]);
  }
  const out: Overlap<S>[] = [];
  for (const group of byKey.values()) {
    group.sort((x, y) => x.start - y.start);
    let active: S[] = [];
    for (const b of group) {
      active = active.filter((a) => endOf(a) > b.start);
      for (const a of active) {
        if (owner(a) !== owner(b))
          out.push({ a, b, at: b.start, ms: Math.min(endOf(a), endOf(b)) - b.start });
      }
      active.push(b);
    }
  }
  return out;
}
