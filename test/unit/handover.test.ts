/** The proof of a clean handover and the proof of drain (src/core/handover.ts), event by event. */
import { describe, expect, it } from 'vitest';
import { drainedPayload, HandoverLog, parseEvent, payload } from '../../src/core/handover.js';

const ev = (text: string) => {
  const e = parseEvent(text);
  if (!e) throw new Error(`unparsed: ${text}`);
  return e;
};
/** The backend pid each session's `acquired` names (the drained events below name the same). */
const PIDS: Record<string, number> = { sa: 101, sc: 102, 'sa-old': 100, sb: 103, sx: 104, me: 1 };
const acquired = (id: string, s: string, pid: number | null = PIDS[s] ?? null) =>
  ev(payload('acquired', id, s, 0, pid));
const released = (id: string, s: string) => ev(payload('released', id, s));
const drained = (id: string, s: string, lost: string, pid: number) =>
  ev(drainedPayload(id, s, { session: lost, pid }));

/** A log for session `me`, with `atConnect` the holder's backend pid when it connected. */
function log(atConnect: number | null = null) {
  return new HandoverLog('me', () => atConnect);
}

describe('proof of drain', () => {
  it('the previous holder (seen acquiring) announcing its lost session drained is proof', () => {
    const l = log();
    l.see(acquired('a', 'sa'));
    l.see(acquired('b', 'me'));
    expect(l.takeProof().clean).toBe(false); // not a clean release
    expect(l.previousDrained()).toBe(false);
    l.see(drained('a', 'sa2', 'sa', 101));
    expect(l.previousDrained()).toBe(true);
  });

  it('a drained that arrived before the grant event still counts (the race between the two commits)', () => {
    const l = log();
    l.see(acquired('a', 'sa'));
    l.see(drained('a', 'sa2', 'sa', 101));
    l.see(acquired('b', 'me'));
    expect(l.takeProof().clean).toBe(false); // a drained is no release
    expect(l.previousDrained()).toBe(true);
  });

  it('no acquired seen since connect: the holder at connect is named by its backend pid', () => {
    const l = log(4242);
    l.see(acquired('b', 'me'));
    expect(l.previousDrained()).toBe(false);
    l.see(drained('a', 'sa2', 'whatever', 4243)); // another backend
    expect(l.previousDrained()).toBe(false);
    l.see(drained('a', 'sa2', 'whatever', 4242));
    expect(l.previousDrained()).toBe(true);
  });

  it('proves nothing: a drained of an earlier term of the same candidate (an older session)', () => {
    const l = log();
    l.see(acquired('a', 'sa-old'));
    l.see(acquired('a', 'sa')); // a took the lock again on a new session
    l.see(drained('a', 'sa2', 'sa-old', 100)); // stale: for the older session
    l.see(acquired('b', 'me'));
    expect(l.previousDrained()).toBe(false);
  });

  it('proves nothing: a drained naming a session that was not the previous holder', () => {
    const l = log();
    l.see(acquired('a', 'sa'));
    l.see(acquired('c', 'sc')); // c held after a
    l.see(acquired('b', 'me'));
    l.see(drained('a', 'sa2', 'sa', 101));
    expect(l.previousDrained()).toBe(false);
    l.see(drained('c', 'sc2', 'sc', 102));
    expect(l.previousDrained()).toBe(true);
  });

  it('proves nothing: nothing seen and nobody holding at connect (a server restart, the first holder)', () => {
    const l = log(null);
    l.see(acquired('b', 'me'));
    l.see(drained('a', 'sa2', 'sa', 101));
    expect(l.previousDrained()).toBe(false);
  });

  it('a duplicated event changes nothing', () => {
    const l = log();
    l.see(acquired('a', 'sa'));
    l.see(acquired('b', 'me'));
    const d = drained('a', 'sa2', 'sa', 101);
    l.see(d);
    l.see(d);
    expect(l.previousDrained()).toBe(true);
    const other = log();
    other.see(acquired('a', 'sa'));
    other.see(acquired('a', 'sa'));
    other.see(acquired('b', 'me'));
    expect(other.previousDrained()).toBe(false);
  });

  it("proves nothing: a drained naming the previous holder's token on another backend (two processes that drew the same token from alike seeded `random`s)", () => {
    const l = log();
    l.see(acquired('a', 'tok', 201));
    l.see(acquired('b', 'me'));
    l.see(drained('c', 'c2', 'tok', 202)); // c's lost session had drawn the same token
    expect(l.previousDrained()).toBe(false);
    l.see(drained('a', 'a2', 'tok', 201)); // a's own
    expect(l.previousDrained()).toBe(true);
  });

  it("proves nothing: an `acquired` that names no backend (an older version's event)", () => {
    const l = log();
    l.see(acquired('a', 'sa', null));
    l.see(acquired('b', 'me'));
    l.see(drained('a', 'sa2', 'sa', 101));
    expect(l.previousDrained()).toBe(false);
  });

  it('an `acquired` event carries the backend pid it names, and one without it parses with none', () => {
    expect(parseEvent(payload('acquired', 'a', 'sa', 3, 4242))).toEqual({
      kind: 'acquired',
      id: 'a',
      session: 'sa',
      priority: 3,
      pid: 4242,
    });
    expect(parseEvent('{"e":"acquired","id":"a","s":"sa","p":3}')).toMatchObject({ pid: null });
    expect(parseEvent('{"e":"acquired","id":"a","s":"sa","p":3,"b":"7"}')).toMatchObject({ pid: null });
  });

  it('malformed payloads are dropped (parseEvent returns null)', () => {
    for (const text of [
      '{',
      '{"e":"drained","id":"a","s":"x"}', // no lost session
      '{"e":"drained","id":"a","s":"x","lost":"sa"}', // no pid
      '{"e":"drained","id":"a","s":"x","lost":"","pid":1}', // empty session
      '{"e":"drained","id":"a","s":"x","lost":"sa","pid":"1"}',
      '{"e":"other","id":"a","s":"x"}',
      '{"e":"released","id":1,"s":"x"}',
    ]) {
      expect(parseEvent(text), text).toBeNull();
    }
  });

  it('a clean release stays the proof it was, drained events or not', () => {
    const l = log();
    l.see(acquired('a', 'sa'));
    l.see(released('a', 'sa'));
    l.see(drained('z', 'sz2', 'sz', 7));
    l.see(acquired('b', 'me'));
    expect(l.takeProof().clean).toBe(true);
  });
});

describe('a handover’s successor heard taking the lock (tookOver)', () => {
  it('true only for an `acquired` heard after this session’s own last `released`; another session’s release does not count as ours', () => {
    const l = new HandoverLog('me', () => null);
    l.see(acquired('b', 'sb')); // before any release of ours
    expect(l.tookOver('b')).toBe(false);
    l.see(released('x', 'sx')); // another session's release
    l.see(acquired('b', 'sb'));
    expect(l.tookOver('b')).toBe(false);
    l.see(released('me', 'me'));
    expect(l.tookOver('b')).toBe(false);
    l.see(acquired('b', 'sb'));
    l.see(released('b', 'sb')); // it handed on already
    expect(l.tookOver('b')).toBe(true);
    expect(l.tookOver('c')).toBe(false);
    l.see(released('me', 'me')); // a later release of ours starts afresh
    expect(l.tookOver('b')).toBe(false);
  });
});
