/** The suite's one overlap detector (test/harness/overlaps.ts): the checks of every safety test rest on it. */
import { describe, expect, it } from 'vitest';
import { overlapsOf } from '../harness/overlaps.js';

const span = (id: string, start: number, end: number | null, p = 0) => ({ id, start, end, p });

describe('overlapsOf', () => {
  it('finds two owners sharing an instant, with when and for how long; touching ends are no overlap', () => {
    const found = overlapsOf([span('a', 0, 10), span('b', 5, 20), span('c', 20, 30)], (s) => s.id);
    expect(found.map((o) => [o.a.id, o.b.id, o.at, o.ms])).toEqual([['a', 'b', 5, 5]]);
  });

  it('one owner never overlaps itself; an open span lasts forever; a span that ended before it began never ran', () => {
    const spans = [
      span('a', 0, 10),
      span('a', 5, 8),
      span('b', 100, null),
      span('c', 200, 300),
      span('d', 250, 240),
    ];
    const found = overlapsOf(spans, (s) => s.id);
    expect(found.map((o) => [o.a.id, o.b.id, o.ms])).toEqual([['b', 'c', 100]]);
  });

  it('spans of different keys (partitions) never overlap each other', () => {
    const spans = [span('a', 0, 10, 1), span('b', 0, 10, 2), span('c', 5, 6, 1)];
    const found = overlapsOf(
      spans,
      (s) => s.id,
      (s) => s.p,
    );
    expect(found.map((o) => [o.a.id, o.b.id, o.a.p])).toEqual([['a', 'c', 1]]);
  });
});
