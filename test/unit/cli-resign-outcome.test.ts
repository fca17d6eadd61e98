/**
 * What `pgleaderlock resign` names as the next holder, from the events it hears on the key's
 * channel (src/cli/request.ts). In poll mode a resign hands over to a known candidate; a
 * waiter granted on the way gives the lock back before its term opens (a yield), and must
 * not be named.
 */
import { describe, expect, it } from 'vitest';
import { resignOutcome } from '../../src/cli/request.js';
import type { Directive, HandoverEvent } from '../../src/core/handover.js';
import type { Found } from '../../src/core/primary.js';
import type { Candidate } from '../../src/leader/inspect.js';

const leader = { id: 'a', pid: 1 } as Candidate;
const found = {} as Found; // only read when the leader does not release
const keys = { key1: 1, key2: 2 };

/** A channel that gives `events` in order, each `atMs` after the request, then nothing. */
function channel(events: [HandoverEvent, number][]) {
  const heard = events.map(([event, atMs]) => ({ event, atMs }));
  return { next: async () => heard.shift() ?? null };
}

const toB: Directive = { to: 'b', back: null, until: Date.now() + 5000, backUntil: Date.now() + 10_000 };
const released = (id: string, directive: Directive | null): HandoverEvent => ({
  kind: 'released',
  id,
  session: `s-${id}`,
  directive,
});
/** The outcome of a resign that heard `events`. */
const outcome = (events: [HandoverEvent, number][]) =>
  resignOutcome(channel(events), found, keys, leader, Number.POSITIVE_INFINITY, 15_000);
const acquired = (id: string): HandoverEvent => ({
  kind: 'acquired',
  id,
  session: `s-${id}`,
  priority: 0,
  pid: null,
});

describe('resign: the next holder it names', () => {
  it('a waiter granted on the way that yields is not named; the successor the release named is', async () => {
    const o = await outcome([
      [released('a', toB), 4],
      [acquired('c'), 6],
      [released('c', toB), 7], // c yields
      [acquired('b'), 9],
    ]);
    expect(o.ok).toBe(true);
    expect(o.fields).toMatchObject({ resigned: 'a', next: 'b', nextMs: 9, releasedMs: 4 });
  });

  it('a waiter granted on the way that does not yield (the named one is gone) is named', async () => {
    const o = await outcome([
      [released('a', toB), 4],
      [acquired('c'), 6],
    ]);
    expect(o.fields).toMatchObject({ next: 'c', nextMs: 6 });
  });

  it('a plain release (wait mode): the first holder after it is named', async () => {
    const o = await outcome([
      [released('a', null), 4],
      [acquired('c'), 6],
      [acquired('b'), 9],
    ]);
    expect(o.fields).toMatchObject({ next: 'c', nextMs: 6 });
  });
});
