/**
 * LeaderWatch's bookkeeping (src/watch/view.ts): which events and reads change `leader`.
 * The integration and timing tests (test/integration/leader-watch.test.ts,
 * test/timing/leader-watch.test.ts) show the same against real PostgreSQL.
 */
import { describe, expect, it } from 'vitest';
import { parseEvent } from '../../src/core/handover.js';
import { applicationName } from '../../src/core/identity.js';
import { LeaderView } from '../../src/watch/view.js';

const at = (ms: number): Date => new Date(ms);
const ev = (text: string) => {
  const e = parseEvent(text);
  if (!e) throw new Error(`unparsed: ${text}`);
  return e;
};
const acquired = (id: string, s = `s-${id}`) => ev(JSON.stringify({ e: 'acquired', id, s }));
const released = (id: string, s = `s-${id}`) => ev(JSON.stringify({ e: 'released', id, s }));

describe('LeaderView', () => {
  it('a grant makes its holder the leader, since the moment heard; its release ends it', () => {
    const v = new LeaderView();
    expect(v.event(acquired('a'), at(10))).toBe(true);
    expect(v.leader).toEqual({ id: 'a', since: at(10) });
    expect(v.event(released('a'), at(20))).toBe(true);
    expect(v.leader).toBeNull();
  });

  it('a read already showing the holder is not changed by its grant heard after; the session is learnt', () => {
    const v = new LeaderView();
    expect(v.read({ id: 'a', name: 'pgleaderlock:a', since: at(1) })).toBe(true);
    expect(v.event(acquired('a', 's1'), at(10))).toBe(false);
    expect(v.leader).toEqual({ id: 'a', since: at(1) });
    // the same candidate granted again in a new session (its old one was lost silently): a change
    expect(v.event(acquired('a', 's2'), at(30))).toBe(true);
    expect(v.leader?.since).toEqual(at(30));
  });

  it("a release that is not the current holder's changes nothing (a read showed the next holder first)", () => {
    const v = new LeaderView();
    v.read({ id: 'b', name: 'pgleaderlock:b', since: at(1) });
    expect(v.event(released('a'), at(2))).toBe(false);
    expect(v.leader?.id).toBe('b');
    v.event(acquired('b', 'sb'), at(3));
    expect(v.event(released('b', 'other'), at(4))).toBe(false);
    expect(v.event(released('b', 'sb'), at(5))).toBe(true);
  });

  it('a read finds the holder gone (it died, nothing was sent), or another one', () => {
    const v = new LeaderView();
    v.event(acquired('a'), at(1));
    expect(v.read({ id: 'a', name: 'pgleaderlock:a', since: at(0) })).toBe(false);
    expect(v.read({ id: 'b', name: 'pgleaderlock:b', since: at(5) })).toBe(true);
    expect(v.leader).toEqual({ id: 'b', since: at(5) });
    expect(v.read(null)).toBe(true);
    expect(v.read(null)).toBe(false);
  });

  it('an id that application_name cannot carry (long, non-ASCII) is the same candidate when read back by its name', () => {
    for (const id of [`c-${'x'.repeat(80)}`, 'höher-priorität', 'кандидат-1']) {
      const name = applicationName(id);
      expect(name).not.toBe(`pgleaderlock:${id}`);
      const v = new LeaderView();
      v.event(acquired(id), at(1));
      expect(v.read({ id, name, since: at(0) })).toBe(false);
      expect(v.leader?.id).toBe(id);
      // another candidate whose id starts the same way is another candidate
      expect(v.read({ id: `${id}2`, name: applicationName(`${id}2`), since: at(2) })).toBe(true);
      expect(v.leader?.id).toBe(`${id}2`);
    }
  });

  it('events that change no holder (drained, waiting, requests, unknown kinds) change nothing and count nothing', () => {
    const v = new LeaderView();
    v.event(acquired('a'), at(1));
    const seq = v.seq;
    for (const text of [
      JSON.stringify({ e: 'drained', id: 'b', s: 'sb', lost: 'sx', pid: 5 }),
      JSON.stringify({ e: 'waiting', id: 'b', s: 'sb', p: 1 }),
      JSON.stringify({ e: 'resign' }),
      JSON.stringify({ e: 'handover', to: 'b' }),
    ]) {
      const e = parseEvent(text);
      if (e) expect(v.event(e, at(2))).toBe(false);
    }
    expect(parseEvent(JSON.stringify({ e: 'something-new', id: 'b', s: 'sb' }))).toBeNull();
    expect(v.leader?.id).toBe('a');
    expect(v.seq).toBe(seq);
  });

  it('clear() forgets the leader and says whether there was one', () => {
    const v = new LeaderView();
    expect(v.clear()).toBe(false);
    v.event(acquired('a'), at(1));
    expect(v.clear()).toBe(true);
    expect(v.leader).toBeNull();
  });
});
